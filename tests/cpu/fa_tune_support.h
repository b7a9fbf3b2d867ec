// fa_tune_support.h -- helpers shared by the CPU tests of the fa-tune command: a run through run_fa_tune with its
// exit code and both output streams, a file's bytes, line counts, and the SQLite side files left in a folder.
#pragma once

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fa/fa.h"
#include "tuner/fa_tune_cli.h"

namespace fa::test {

struct CliRun {
  int rc = -1;
  std::string out, err;
};

// The whole of f, which is closed.
inline std::string slurp(std::FILE* f) {
  std::string s;
  std::rewind(f);
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
  std::fclose(f);
  return s;
}

// fa-tune with args (stdout and stderr are files, not terminals).
inline CliRun run_cli(const std::vector<std::string>& args) {
  tune::CliHooks h;
  h.context_create = &fa_context_create;
  h.context_destroy = &fa_context_destroy;
  std::FILE* out = std::tmpfile();
  std::FILE* err = std::tmpfile();
  CliRun r;
  r.rc = tune::run_fa_tune(args, h, out, err);
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

inline std::vector<char> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

inline size_t lines(const std::string& s) { return static_cast<size_t>(std::count(s.begin(), s.end(), '\n')); }

// The entries of `dir` (recursively) that SQLite or the cache leave beside a database: -wal, -shm, -journal and
// .corrupt-* files.
inline std::vector<std::string> side_files(const std::string& dir) {
  std::vector<std::string> found;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    for (const char* mark : {"-wal", "-shm", "-journal", ".corrupt-"}) {
      if (name.find(mark) != std::string::npos) found.push_back(it->path().string());
    }
  }
  return found;
}

}  // namespace fa::test
