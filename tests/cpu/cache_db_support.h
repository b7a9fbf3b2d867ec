// cache_db_support.h -- helpers shared by the cache_db tests: random rows, a self-cleaning temporary directory, a
// warning collector, raw SQLite access independent of the module under test, and file inspection.
#pragma once

#include <sqlite3.h>
#include <stdlib.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cache_db/cache_db.h"
#include "tests/cpu/temp_dir.h"

namespace fa::test::cachedb {

inline std::mt19937_64& rng() {
  static std::mt19937_64 r{std::random_device{}()};
  return r;
}

inline std::vector<uint8_t> random_blob(size_t n) {
  std::vector<uint8_t> b(n);
  for (auto& x : b) x = static_cast<uint8_t>(rng()() & 0xff);
  return b;
}

// "<prefix><n>", built by appending: `"literal" + std::to_string(n)` inlined into a test body trips GCC 12's
// -Wrestrict false positive (GCC bug 105329, memcpy "may overlap" in basic_string::_M_replace).
inline std::string numbered(const char* prefix, long long n) {
  std::string s = prefix;
  s += std::to_string(n);
  return s;
}

inline cache::CubinRow make_cubin(const std::string& key, size_t size, int arch = 90) {
  cache::CubinRow r;
  r.compile_key = key;
  r.compile_hash = rng()();
  r.arch = arch;
  r.cubin = random_blob(size);
  r.registers = static_cast<int>(rng()() % 255);
  r.spill_bytes = static_cast<int>(rng()() % 64);
  r.smem_bytes = static_cast<int>(rng()() % 200000);
  return r;
}

// A fresh directory under $TMPDIR (tests/cpu/temp_dir.h), removed with everything in it.
class TempDir : public fa::test::TempDir {
 public:
  TempDir() : fa::test::TempDir("cache_db_test") {}
};

struct Warnings {
  std::vector<std::string> list;
  cache::WarnFn fn() {
    return [this](const std::string& m) { list.push_back(m); };
  }
  bool any_contains(const std::string& s) const {
    return std::any_of(list.begin(), list.end(), [&](const std::string& m) { return m.find(s) != std::string::npos; });
  }
};

// The first column of the first row of `sql` on the file (read-write open, no create), or INT64_MIN.
inline int64_t raw_scalar(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  int64_t v = std::numeric_limits<int64_t>::min();
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr) == SQLITE_OK) {
    sqlite3_busy_timeout(db, 5000);
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW) {
      v = sqlite3_column_int64(st, 0);
    }
    sqlite3_finalize(st);
  }
  sqlite3_close(db);
  return v;
}

// Every row of `sql` on the file (read-only open), each row's columns joined by '|' (NULL as "NULL", blobs as their
// byte count and checksum), in the order the query gives.
inline std::vector<std::string> raw_rows(const std::string& path, const std::string& sql) {
  std::vector<std::string> out;
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_busy_timeout(db, 5000);
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) == SQLITE_OK) {
      while (sqlite3_step(st) == SQLITE_ROW) {
        std::string row;
        for (int i = 0; i < sqlite3_column_count(st); ++i) {
          if (i) row += '|';
          switch (sqlite3_column_type(st, i)) {
            case SQLITE_NULL: row += "NULL"; break;
            case SQLITE_BLOB: {
              const auto* b = static_cast<const unsigned char*>(sqlite3_column_blob(st, i));
              const int n = sqlite3_column_bytes(st, i);
              uint64_t h = 1469598103934665603ull;
              for (int k = 0; k < n; ++k) h = (h ^ b[k]) * 1099511628211ull;
              row += "blob" + std::to_string(n) + ":" + std::to_string(h);
              break;
            }
            default: row += reinterpret_cast<const char*>(sqlite3_column_text(st, i));
          }
        }
        out.push_back(row);
      }
    }
    sqlite3_finalize(st);
  }
  sqlite3_close(db);
  return out;
}

inline bool raw_exec(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  bool ok = sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) == SQLITE_OK &&
            sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr) == SQLITE_OK;
  sqlite3_close(db);
  return ok;
}

inline std::vector<char> read_file(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// The <base>.corrupt-* copies in dir (without their -wal / -shm companions).
inline std::vector<std::string> corrupt_copies(const std::string& dir, const std::string& base) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(base + ".corrupt-", 0) == 0 && name.find("-wal") == std::string::npos &&
        name.find("-shm") == std::string::npos) {
      out.push_back(e.path().string());
    }
  }
  return out;
}

}  // namespace fa::test::cachedb
