// test_fa_tune_files.cpp -- what fa-tune's cache actions leave on disk and what they say (issue 40): --list and
// --export leave no -wal / -shm beside the cache (the default one under $HOME too); --import of a missing or broken
// file, --prune of a missing cache and an option whose value is missing create nothing; an export never takes over a
// file that is not an fa cache; import and export count the rows that were new, updated or already there; a reader
// that goes away mid-listing leaves nothing behind either.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cache_db/cache_db.h"
#include "fa/fa.h"
#include "tests/cpu/context_support.h"
#include "tests/cpu/fa_tune_support.h"
#include "tests/cpu/temp_dir.h"
#include "tuner/cache_store.h"

namespace fa::test {
namespace {

namespace fs = std::filesystem;

// The environment a context of this process writes its rows under (so that fa-tune's exports see them as valid).
cache::Env this_env() {
  fa_context c = make_context(":memory:", FA_TUNE_DEFAULTS_ONLY);
  const cache::Env env = c != nullptr ? tune::context_env(c) : cache::Env{};
  fa_context_destroy(c);
  return env;
}

// A cache file at `path` holding `rows` tuning rows valid for this process, written and closed as a tuning run does.
void write_cache(const std::string& path, int rows, double ms = 1.0) {
  auto db = cache::Db::open(path, this_env());
  std::vector<cache::TuneRow> r;
  for (int i = 0; i < rows; ++i) r.push_back({"sem", "bucket", "t" + std::to_string(i), ms + i, "ok"});
  ASSERT_TRUE(db->put_tune_results(r)) << db->last_error();
}

std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

TEST(FaTuneFiles, ListAndExportLeaveNoSideFiles) {
  const TempDir tmp("tune_files");
  const std::string cache = tmp.file("cache.sqlite"), out = tmp.file("out.sqlite");
  write_cache(cache, 3);
  ASSERT_EQ(entries(tmp.path()), std::vector<std::string>{"cache.sqlite"}) << "the writer left its WAL behind";
  const std::vector<char> before = read_bytes(cache);
  const CliRun list = run_cli({"--list", "--cache", cache});
  ASSERT_EQ(list.rc, 0) << list.err;
  EXPECT_NE(list.out.find("tuning rows: 3"), std::string::npos) << list.out;
  const CliRun ex = run_cli({"--export", out, "--cache", cache});
  ASSERT_EQ(ex.rc, 0) << ex.err;
  EXPECT_EQ(entries(tmp.path()), (std::vector<std::string>{"cache.sqlite", "out.sqlite"}));
  EXPECT_EQ(read_bytes(cache), before);

  // The default cache, $HOME/.cache/fa/cache.sqlite.
  ScopedEnv home("HOME", tmp.path().c_str()), path("FA_CACHE_PATH", nullptr), xdg("XDG_CACHE_HOME", nullptr);
  const std::string default_cache = tmp.path() + "/.cache/fa/cache.sqlite";
  ASSERT_EQ(cache::default_cache_path(), default_cache);
  fs::create_directories(tmp.path() + "/.cache/fa");
  write_cache(default_cache, 2);
  const CliRun dl = run_cli({"--list"});
  ASSERT_EQ(dl.rc, 0) << dl.err;
  EXPECT_NE(dl.out.find("cache " + default_cache), std::string::npos) << dl.out;
  EXPECT_EQ(run_cli({"--export", tmp.file("default_out.sqlite")}).rc, 0);
  EXPECT_EQ(entries(tmp.path() + "/.cache/fa"), std::vector<std::string>{"cache.sqlite"});
  EXPECT_EQ(side_files(tmp.path()), std::vector<std::string>{});
}

TEST(FaTuneFiles, FailedActionsCreateNothing) {
  const TempDir tmp("tune_files");
  const std::string target = tmp.file("f.sqlite"), missing = tmp.file("missing.sqlite"), junk = tmp.file("junk.db");
  { std::ofstream(junk) << std::string(5000, 'j'); }
  for (const std::string& from : {missing, junk}) {
    const CliRun r = run_cli({"--import", from, "--cache", target});
    EXPECT_EQ(r.rc, 1) << r.out << r.err;
    EXPECT_EQ(r.err.rfind("fa-tune: --import: " + from + " is not a valid fa cache: ", 0), 0u) << r.err;
    EXPECT_NE(r.err.find("nothing was imported or created"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(target)) << "a failed import created " << target;
  }
  const CliRun p = run_cli({"--prune", "--cache", missing});
  EXPECT_EQ(p.rc, 1) << p.out;
  EXPECT_EQ(p.err, "fa-tune: --prune: there is no cache file at " + missing + "; nothing to prune, nothing created\n");
  EXPECT_FALSE(fs::exists(missing));

  // A value that is a flag: nothing named after the flag appears where fa-tune runs (its working directory).
  const fs::path here = fs::current_path();
  fs::current_path(tmp.path());
  const CliRun flag = run_cli({"--cache", "a.sqlite", "--export", "--list"});
  const CliRun flag2 = run_cli({"--export", "--cache", "t.sqlite"});
  fs::current_path(here);
  EXPECT_EQ(flag.rc, 2);
  EXPECT_EQ(flag2.rc, 2);
  EXPECT_EQ(flag2.err.find("'t.sqlite'"), std::string::npos) << "complains about the wrong argument: " << flag2.err;
  EXPECT_EQ(entries(tmp.path()), (std::vector<std::string>{"junk.db"}));

  // An export onto a file that is not an fa cache refuses and leaves it as it was (never moved aside as corrupt).
  const std::string cache = tmp.file("cache.sqlite");
  write_cache(cache, 2);
  const std::vector<char> junk_before = read_bytes(junk);
  const CliRun ex = run_cli({"--cache", cache, "--export", junk});
  EXPECT_EQ(ex.rc, 1) << ex.out;
  EXPECT_EQ(ex.err.rfind("fa-tune: export to " + junk + ": it exists and is not a valid fa cache (", 0), 0u) << ex.err;
  EXPECT_EQ(read_bytes(junk), junk_before);
  EXPECT_EQ(side_files(tmp.path()), std::vector<std::string>{});
}

TEST(FaTuneFiles, ImportAndExportCountNewUpdatedAndPresentRows) {
  const TempDir tmp("tune_files");
  const std::string src = tmp.file("src.sqlite"), dst = tmp.file("dst.sqlite"), out = tmp.file("out.sqlite");
  write_cache(src, 3);
  // fa-tune with args succeeds and prints exactly `said`.
  auto says = [](const std::vector<std::string>& args, const std::string& said) {
    const CliRun r = run_cli(args);
    EXPECT_EQ(r.rc, 0) << r.err;
    EXPECT_EQ(r.out, said);
  };
  const std::string into = "imported 3 rows from " + src + " into " + dst + ": ";
  says({"--cache", dst, "--import", src}, into + "3 new, 0 updated, 0 already present\n");
  says({"--cache", dst, "--import", src}, into + "0 new, 0 updated, 3 already present\n");
  write_cache(src, 4, 2.0);  // three rows re-timed, one more
  says({"--cache", dst, "--import", src},
       "imported 4 rows from " + src + " into " + dst + ": 1 new, 3 updated, 0 already present\n");
  says({"--cache", src, "--export", out}, "exported 4 rows of " + src + " into the new file " + out + "\n");
  says({"--cache", dst, "--export", out}, "merged 4 rows of " + dst + " into the existing cache " + out +
                                              " (its other rows are kept): 0 new, 0 updated, 4 already present\n");
  const std::string help = run_cli({"--help"}).out;
  EXPECT_NE(help.find("an existing fa cache they\n                         are merged into"), std::string::npos)
      << help;
}

#ifdef FA_TUNE_EXE
// `fa-tune --list | head`: the reader goes away mid-list; fa-tune exits 141 as a shell reports a broken pipe, having
// closed the cache (a process killed by SIGPIPE would leave the -wal and -shm beside it).
TEST(FaTuneFiles, AReaderThatGoesAwayLeavesNoSideFiles) {
  const TempDir tmp("tune_files");
  const std::string cache = tmp.file("cache.sqlite");
  write_cache(cache, 4000);  // a listing well past a pipe's buffer
  std::FILE* p = popen((std::string(FA_TUNE_EXE) + " --list --cache '" + cache + "'").c_str(), "r");
  ASSERT_NE(p, nullptr);
  char head[64];
  ASSERT_EQ(std::fread(head, 1, sizeof head, p), sizeof head);
  const int status = pclose(p);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 141);
  EXPECT_EQ(entries(tmp.path()), std::vector<std::string>{"cache.sqlite"});
}
#endif

}  // namespace
}  // namespace fa::test
