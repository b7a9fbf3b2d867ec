// test_cache_db_robustness.cpp -- fa::cache::Db under real conditions: schema migration (v0 files, old layouts,
// a transactional fake v1 -> v2 step, newer files left untouched), several processes writing one file at once, a
// writer killed by SIGKILL mid-transaction, corrupt and truncated files moved aside, a read-only location (a cache in
// it served read-only), an uncreatable directory and a full disk (RLIMIT_FSIZE) degrading to memory. Child processes
// report through their exit status; each test uses a fresh temporary directory and random data.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cache_db/cache_db.h"
#include "cache_db/checksum.h"
#include "cache_db/schema.h"
#include "tests/cpu/cache_db_support.h"

namespace {

namespace fs = std::filesystem;
using fa::cache::CubinRow;
using fa::cache::Db;
using fa::cache::Env;
using fa::cache::TuneRow;
using namespace fa::test::cachedb;

Env make_env() {
  Env e;
  e.gpu_name = "Robust GPU";
  e.sm_count = 66 + static_cast<int>(rng()() % 66);
  e.driver_version = 13000 + static_cast<int>(rng()() % 100);
  e.library_version = "0.1.0";
  e.nvrtc_version = "13.0";
  e.templates_hash = rng()();
  e.generator_version = 1;
  return e;
}

// Waits for a child; returns its exit status, or 1000 + signal number.
int wait_child(pid_t pid) {
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 1000 + WTERMSIG(status);
  return -1;
}

class CacheDbRobustTest : public ::testing::Test {
 protected:
  TempDir dir;
  Env env = make_env();
  Warnings warnings;
};

// ---- migration --------------------------------------------------------------------------------------------------

TEST_F(CacheDbRobustTest, MigratesVersion0FileAndKeepsForeignTables) {
  const std::string path = dir.file("v0.sqlite");
  const int64_t marker = static_cast<int64_t>(rng()() >> 2);
  ASSERT_TRUE(
      raw_exec(path, "CREATE TABLE unrelated(x); INSERT INTO unrelated VALUES(" + std::to_string(marker) + ");"));
  ASSERT_EQ(raw_scalar(path, "PRAGMA user_version"), 0);
  auto db = Db::open(path, env, warnings.fn());
  EXPECT_FALSE(db->in_memory());
  EXPECT_TRUE(warnings.list.empty());
  EXPECT_EQ(raw_scalar(path, "PRAGMA user_version"), 1);
  EXPECT_EQ(raw_scalar(path, "SELECT x FROM unrelated"), marker);
  CubinRow c = make_cubin("after_migration", 777);
  ASSERT_TRUE(db->put_cubin(c));
  EXPECT_EQ(db->get_cubin(c.compile_hash, c.compile_key)->cubin, c.cubin);
}

TEST_F(CacheDbRobustTest, MigratesOldLayoutLackingColumns) {
  const std::string path = dir.file("old.sqlite");
  // A pre-versioned layout: cubins without ptxas info / created_unix, tune_results without the status column.
  ASSERT_TRUE(raw_exec(path,
                       "CREATE TABLE cubins (compile_hash INTEGER NOT NULL, compile_key TEXT NOT NULL, arch INTEGER "
                       "NOT NULL, nvrtc_version TEXT NOT NULL, generator_version INTEGER NOT NULL, templates_hash "
                       "INTEGER NOT NULL, cubin BLOB NOT NULL, cubin_size INTEGER NOT NULL, checksum INTEGER NOT "
                       "NULL, UNIQUE (compile_hash, compile_key, arch, nvrtc_version, generator_version, "
                       "templates_hash));"
                       "CREATE TABLE tune_results (gpu_name TEXT, semantic_key TEXT, bucket TEXT, tunables TEXT, "
                       "median_ms REAL);"
                       "INSERT INTO tune_results VALUES ('g', 's', 'b', 't', 1.0);"));
  CubinRow c = make_cubin("legacy", 1000 + rng()() % 1000);
  {
    sqlite3* raw = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &raw), SQLITE_OK);
    sqlite3_stmt* st = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(raw, "INSERT INTO cubins VALUES (?,?,?,?,?,?,?,?,?)", -1, &st, nullptr), SQLITE_OK);
    sqlite3_bind_int64(st, 1, static_cast<sqlite3_int64>(c.compile_hash));
    sqlite3_bind_text(st, 2, c.compile_key.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_int(st, 3, c.arch);
    sqlite3_bind_text(st, 4, env.nvrtc_version.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_int(st, 5, env.generator_version);
    sqlite3_bind_int64(st, 6, static_cast<sqlite3_int64>(env.templates_hash));
    sqlite3_bind_blob(st, 7, c.cubin.data(), static_cast<int>(c.cubin.size()), SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 8, static_cast<sqlite3_int64>(c.cubin.size()));
    sqlite3_bind_int64(st, 9, static_cast<sqlite3_int64>(fa::cache::blob_checksum(c.cubin.data(), c.cubin.size())));
    ASSERT_EQ(sqlite3_step(st), SQLITE_DONE);
    sqlite3_finalize(st);
    sqlite3_close(raw);
  }
  auto db = Db::open(path, env, warnings.fn());
  EXPECT_FALSE(db->in_memory());
  EXPECT_TRUE(warnings.list.empty());
  EXPECT_EQ(raw_scalar(path, "PRAGMA user_version"), 1);
  // Non-key columns were added with their defaults: the legacy cubin survives.
  auto got = db->get_cubin(c.compile_hash, c.compile_key, c.arch);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->cubin, c.cubin);
  EXPECT_EQ(got->registers, -1);
  EXPECT_EQ(got->smem_bytes, -1);
  // tune_results lacked key / required columns: rebuilt empty, then usable.
  EXPECT_EQ(raw_scalar(path, "SELECT count(*) FROM tune_results"), 0);
  ASSERT_TRUE(db->put_tune_results({{"s", "b", "t", 2.0, "ok"}}));
  EXPECT_EQ(db->best("s", "b")->median_ms, 2.0);
}

TEST_F(CacheDbRobustTest, MigrationMachineryRunsStepsInOneTransaction) {
  using fa::cache::detail::migrate;
  using fa::cache::detail::Migration;
  const std::string path = dir.file("m.sqlite");
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  std::vector<Migration> steps = fa::cache::detail::migrations();
  int applied_1_to_2 = 0;
  steps.push_back({1, "add tune_results.note", [&](sqlite3* d, std::string* err) {
                     ++applied_1_to_2;
                     char* m = nullptr;
                     const int rc = sqlite3_exec(d, "ALTER TABLE tune_results ADD COLUMN note TEXT DEFAULT 'n'",
                                                 nullptr, nullptr, &m);
                     if (m != nullptr) *err = m;
                     sqlite3_free(m);
                     return rc;
                   }});
  auto r1 = migrate(db, steps, 1);
  EXPECT_EQ(r1.rc, SQLITE_OK) << r1.error;
  EXPECT_EQ(r1.found_version, 0);
  EXPECT_EQ(r1.version, 1);
  auto r2 = migrate(db, steps, 2);
  EXPECT_EQ(r2.rc, SQLITE_OK) << r2.error;
  EXPECT_EQ(r2.found_version, 1);
  EXPECT_EQ(r2.version, 2);
  EXPECT_EQ(applied_1_to_2, 1);
  EXPECT_EQ(migrate(db, steps, 2).found_version, 2);  // already there: no step runs
  EXPECT_EQ(applied_1_to_2, 1);
  auto newer = migrate(db, fa::cache::detail::migrations(), 1);
  EXPECT_TRUE(newer.newer);
  EXPECT_EQ(newer.version, 2);
  sqlite3_close(db);
  EXPECT_EQ(raw_scalar(path, "SELECT count(*) FROM pragma_table_info('tune_results') WHERE name='note'"), 1);

  // A failing step rolls back everything, including the work of the steps before it.
  const std::string path2 = dir.file("m2.sqlite");
  ASSERT_EQ(sqlite3_open(path2.c_str(), &db), SQLITE_OK);
  std::vector<Migration> failing = fa::cache::detail::migrations();
  failing.push_back({1, "broken", [](sqlite3*, std::string* err) {
                       *err = "deliberate";
                       return SQLITE_ERROR;
                     }});
  auto bad = migrate(db, failing, 2);
  EXPECT_NE(bad.rc, SQLITE_OK);
  EXPECT_NE(bad.error.find("deliberate"), std::string::npos);
  sqlite3_close(db);
  EXPECT_EQ(raw_scalar(path2, "PRAGMA user_version"), 0);
  EXPECT_EQ(raw_scalar(path2, "SELECT count(*) FROM sqlite_master WHERE name='cubins'"), 0);
}

TEST_F(CacheDbRobustTest, NewerSchemaIsLeftUntouchedAndUsesMemory) {
  const std::string path = dir.file("newer.sqlite");
  CubinRow c = make_cubin("from_newer", 2048);
  {
    auto db = Db::open(path, env, warnings.fn());
    ASSERT_TRUE(db->put_cubin(c));
  }
  ASSERT_TRUE(raw_exec(path, "PRAGMA user_version = " + std::to_string(fa::cache::kSchemaVersion + 1)));
  const auto before = read_file(path);
  {
    auto db = Db::open(path, env, warnings.fn());
    EXPECT_TRUE(db->in_memory());
    EXPECT_TRUE(warnings.any_contains("newer"));
    EXPECT_FALSE(db->get_cubin(c.compile_hash, c.compile_key).has_value());
    EXPECT_TRUE(db->put_cubin(make_cubin("mem", 10)));  // works, in memory
  }
  EXPECT_EQ(read_file(path), before);
  EXPECT_TRUE(corrupt_copies(dir.path(), "newer.sqlite").empty());
}

// ---- concurrency and crashes -------------------------------------------------------------------------------------

TEST_F(CacheDbRobustTest, ProcessesWritingOneFileLoseAndDuplicateNothing) {
  const std::string path = dir.file("shared.sqlite");  // created by the racing children themselves
  constexpr int kChildren = 4, kDistinct = 40, kShared = 15, kBatch = 8;
  std::vector<std::vector<CubinRow>> own(kChildren);
  for (int c = 0; c < kChildren; ++c) {
    for (int i = 0; i < kDistinct; ++i) {
      own[size_t(c)].push_back(make_cubin(numbered("p", c) + numbered("_", i), 1000 + rng()() % 20000));
    }
  }
  std::vector<CubinRow> shared;
  for (int i = 0; i < kShared; ++i) shared.push_back(make_cubin(numbered("shared_", i), 5000));

  int go[2];
  ASSERT_EQ(pipe(go), 0);
  std::vector<pid_t> pids;
  for (int c = 0; c < kChildren; ++c) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(go[1]);
      char x;
      (void)!read(go[0], &x, 1);  // returns 0 when the parent closes its end: everyone starts together
      int failures = 0;
      auto db = Db::open(path, env, [&](const std::string&) { ++failures; });
      if (db->in_memory()) _exit(2);
      for (int i = 0; i < kDistinct; ++i) {
        const CubinRow& r = own[size_t(c)][size_t(i)];
        if (!db->put_cubin(r)) ++failures;
        if (!db->put_tune_results({{"sem", "b", r.compile_key, double(i), "ok"}})) ++failures;
        const CubinRow& s = shared[size_t(i) % shared.size()];
        if (!db->put_cubin(s)) ++failures;
        if (!db->put_tune_results({{"sem", "b", s.compile_key, 0.5, "ok"}})) ++failures;
        auto g = db->get_cubin(r.compile_hash, r.compile_key);
        if (!g || g->cubin != r.cubin) ++failures;
      }
      std::vector<TuneRow> batch;
      for (int i = 0; i < kBatch; ++i) batch.push_back({"batch", std::to_string(c), numbered("t", i), 1.0, "ok"});
      if (!db->put_tune_results(batch)) ++failures;
      _exit(failures == 0 ? 0 : 1);
    }
    pids.push_back(pid);
  }
  close(go[0]);
  close(go[1]);
  for (pid_t p : pids) EXPECT_EQ(wait_child(p), 0);

  auto db = Db::open(path, env, warnings.fn());
  ASSERT_FALSE(db->in_memory());
  EXPECT_EQ(raw_scalar(path, "SELECT count(*) FROM cubins"), kChildren * kDistinct + kShared);
  EXPECT_EQ(raw_scalar(path,
                       "SELECT count(*) FROM (SELECT compile_key FROM cubins GROUP BY compile_key "
                       "HAVING count(*) > 1)"),
            0);
  EXPECT_EQ(raw_scalar(path, "SELECT count(*) FROM tune_results"),
            kChildren * kDistinct + kShared + kChildren * kBatch);
  for (const auto& v : own) {
    for (const auto& r : v) {
      auto g = db->get_cubin(r.compile_hash, r.compile_key);
      ASSERT_TRUE(g.has_value()) << r.compile_key;
      EXPECT_EQ(g->cubin, r.cubin);
    }
  }
  for (const auto& s : shared) EXPECT_EQ(db->get_cubin(s.compile_hash, s.compile_key)->cubin, s.cubin);
  EXPECT_EQ(db->tune_rows("sem", "b").size(), size_t(kChildren * kDistinct + kShared));
  EXPECT_TRUE(warnings.list.empty());
}

// fa-tune --devices: N writers (processes here; threads with a connection each in fa-tune) share the tuning keys of
// one sweep, each key written whole by one of them (replace_existing, as the tuner stores a key) and tuned twice
// (--force), while every one of them compiles the same kernels (cubins of one compile key from several writers) and
// reads the others' keys as they appear. A reader sees a key's candidate set whole or not at all; the file ends up
// holding exactly what one writer doing the whole sweep alone writes.
TEST_F(CacheDbRobustTest, ShardedSweepOfNWritersEqualsOneWriter) {
  constexpr int kWriters = 8, kKeys = 64, kCandidates = 6, kKernels = 20;
  const std::string shared = dir.file("sharded.sqlite"), alone = dir.file("alone.sqlite");
  std::vector<CubinRow> kernels;
  for (int i = 0; i < kKernels; ++i) kernels.push_back(make_cubin(numbered("kernel_", i), 500 + rng()() % 8000));
  auto key_rows = [&](int key, int round) {  // one tuning key's candidate set; the medians of round 1 differ
    std::vector<TuneRow> rows;
    for (int k = 0; k < kCandidates; ++k) {
      const double ms = 1.0 + 0.25 * ((key * 7 + k * 3 + round * 5) % 11);
      rows.push_back({numbered("sem", key % 5), numbered("q", key),
                      kernels[size_t(key + k) % kernels.size()].compile_key, k == kCandidates - 1 ? std::nan("") : ms,
                      k == kCandidates - 1 ? "spill" : "ok"});
    }
    return rows;
  };
  auto write_key = [&](Db* db, int key, int round) {
    bool ok = true;
    for (int k = 0; k < kCandidates; ++k) ok = db->put_cubin(kernels[size_t(key + k) % kernels.size()]) && ok;
    return db->put_tune_results(key_rows(key, round), true) && ok;
  };

  int go[2];
  ASSERT_EQ(pipe(go), 0);
  std::vector<pid_t> pids;
  for (int w = 0; w < kWriters; ++w) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(go[1]);
      char x;
      (void)!read(go[0], &x, 1);
      int code = 0;
      auto db = Db::open(shared, env, [&](const std::string&) { code |= 1; });
      if (db->in_memory()) _exit(2);
      for (int round = 0; round < 2; ++round) {
        for (int key = w; key < kKeys; key += kWriters) {
          if (!write_key(db.get(), key, round)) code |= 4;
          const auto best = db->best(numbered("sem", key % 5), numbered("q", key));
          if (!best) code |= 8;
          // Another writer's key: its candidate set is whole or absent, never half written.
          const int other = (key + 1 + w) % kKeys;
          const size_t seen = db->tune_rows(numbered("sem", other % 5), numbered("q", other)).size();
          if (seen != 0 && seen != size_t(kCandidates)) code |= 16;
        }
      }
      _exit(code);
    }
    pids.push_back(pid);
  }
  close(go[0]);
  close(go[1]);
  for (pid_t p : pids)
    EXPECT_EQ(wait_child(p), 0) << "bit 1: warning, 4: write failed, 8: own key missing, 16: torn read";
  {
    auto db = Db::open(alone, env, warnings.fn());
    for (int key = 0; key < kKeys; ++key) ASSERT_TRUE(write_key(db.get(), key, 1));
  }
  const std::string tune_sql =
      "SELECT gpu_name, sm_count, driver_version, library_version, nvrtc_version, templates_hash, generator_version, "
      "semantic_key, bucket, tunables, median_ms, status FROM tune_results ORDER BY semantic_key, bucket, tunables";
  const std::string cubin_sql =
      "SELECT compile_hash, compile_key, arch, nvrtc_version, generator_version, templates_hash, cubin, cubin_size, "
      "checksum, registers, spill_bytes, smem_bytes FROM cubins ORDER BY compile_key";
  const auto tune_shared = raw_rows(shared, tune_sql), tune_alone = raw_rows(alone, tune_sql);
  EXPECT_EQ(tune_shared.size(), size_t(kKeys * kCandidates));
  EXPECT_EQ(tune_shared, tune_alone);
  const auto cubins_shared = raw_rows(shared, cubin_sql), cubins_alone = raw_rows(alone, cubin_sql);
  EXPECT_EQ(cubins_shared.size(), size_t(kKernels));
  EXPECT_EQ(cubins_shared, cubins_alone);
  auto db = Db::open(shared, env, warnings.fn());
  for (int key = 0; key < kKeys; ++key) {
    const auto best = db->best(numbered("sem", key % 5), numbered("q", key));
    ASSERT_TRUE(best.has_value()) << key;
    double want = INFINITY;
    for (const TuneRow& r : key_rows(key, 1))
      if (r.status == "ok") want = std::min(want, r.median_ms);
    EXPECT_EQ(best->median_ms, want) << key;
  }
  EXPECT_TRUE(warnings.list.empty());
}

TEST_F(CacheDbRobustTest, WriterKilledMidTransactionLeavesUsableDb) {
  const std::string path = dir.file("killed.sqlite");
  std::vector<CubinRow> committed;
  for (int i = 0; i < 10; ++i) committed.push_back(make_cubin(numbered("committed_", i), 3000));
  {
    auto db = Db::open(path, env, warnings.fn());
    for (const auto& r : committed) ASSERT_TRUE(db->put_cubin(r));
  }
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // A long write transaction through a raw connection, with a tiny page cache so pages spill to disk before commit.
    close(ready[0]);
    sqlite3* db = nullptr;
    if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) _exit(3);
    sqlite3_busy_timeout(db, 5000);
    sqlite3_exec(db, "PRAGMA cache_size = 8", nullptr, nullptr, nullptr);
    if (sqlite3_exec(db, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr) != SQLITE_OK) _exit(4);
    const std::string sql =
        "INSERT INTO cubins (compile_hash, compile_key, arch, nvrtc_version, generator_version, templates_hash, cubin, "
        "cubin_size, checksum) VALUES (random(), 'uncommitted_' || random(), 90, '" +
        env.nvrtc_version + "', " + std::to_string(env.generator_version) + ", 0, randomblob(8000), 8000, 0)";
    for (int i = 0; i < 500; ++i) {
      if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr) != SQLITE_OK) _exit(5);
    }
    (void)!write(ready[1], "x", 1);
    for (;;) pause();
  }
  close(ready[1]);
  char x = 0;
  ASSERT_EQ(read(ready[0], &x, 1), 1);
  close(ready[0]);
  kill(pid, SIGKILL);
  EXPECT_EQ(wait_child(pid), 1000 + SIGKILL);

  auto db = Db::open(path, env, warnings.fn());
  EXPECT_FALSE(db->in_memory());
  EXPECT_TRUE(warnings.list.empty()) << warnings.list.front();
  EXPECT_EQ(raw_scalar(path, "SELECT count(*) FROM cubins"), 10);
  for (const auto& r : committed) EXPECT_EQ(db->get_cubin(r.compile_hash, r.compile_key)->cubin, r.cubin);
  CubinRow after = make_cubin("after_kill", 4000);
  ASSERT_TRUE(db->put_cubin(after));
  EXPECT_EQ(db->get_cubin(after.compile_hash, after.compile_key)->cubin, after.cubin);
}

TEST_F(CacheDbRobustTest, WriterKilledAtRandomMomentLeavesOnlyValidRows) {
  const std::string path = dir.file("killed2.sqlite");
  { auto db = Db::open(path, env, warnings.fn()); }
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(ready[0]);
    auto db = Db::open(path, env, {});
    for (int i = 0;; ++i) {
      db->put_cubin(make_cubin(numbered("loop_", i), 200000));
      db->put_tune_results({{"s", "b", numbered("t", i), double(i), "ok"}});
      if (i == 2) (void)!write(ready[1], "x", 1);
    }
  }
  close(ready[1]);
  char x = 0;
  ASSERT_EQ(read(ready[0], &x, 1), 1);
  close(ready[0]);
  std::this_thread::sleep_for(std::chrono::milliseconds(20 + rng()() % 300));
  kill(pid, SIGKILL);
  EXPECT_EQ(wait_child(pid), 1000 + SIGKILL);

  auto db = Db::open(path, env, warnings.fn());
  EXPECT_FALSE(db->in_memory());
  EXPECT_TRUE(warnings.list.empty()) << warnings.list.front();
  const auto listed = db->list_cubins();
  EXPECT_GE(listed.size(), 3u);
  for (const auto& s : listed) {
    auto g = db->get_cubin(s.compile_hash, s.compile_key);
    ASSERT_TRUE(g.has_value()) << s.compile_key;  // every surviving row passes its checksum
    EXPECT_EQ(g->cubin.size(), 200000u);
  }
  EXPECT_TRUE(warnings.list.empty());
  EXPECT_EQ(raw_scalar(path, "SELECT count(*) FROM cubins"), static_cast<int64_t>(listed.size()));
}

// ---- damaged files ------------------------------------------------------------------------------------------------

TEST_F(CacheDbRobustTest, RandomBytesFileIsMovedAsideAndRebuilt) {
  const std::string path = dir.file("cache.sqlite");
  const auto junk = random_blob(4096 * (1 + rng()() % 8) + rng()() % 4096);
  {
    std::ofstream f(path, std::ios::binary);
    f.write(reinterpret_cast<const char*>(junk.data()), static_cast<std::streamsize>(junk.size()));
  }
  auto db = Db::open(path, env, warnings.fn());
  EXPECT_FALSE(db->in_memory());
  ASSERT_EQ(warnings.list.size(), 1u);
  EXPECT_TRUE(warnings.any_contains("moved aside"));
  const auto copies = corrupt_copies(dir.path(), "cache.sqlite");
  ASSERT_EQ(copies.size(), 1u);
  const auto moved = read_file(copies[0]);
  EXPECT_TRUE(std::equal(moved.begin(), moved.end(), junk.begin(), junk.end(),
                         [](char a, uint8_t b) { return static_cast<uint8_t>(a) == b; }));
  EXPECT_EQ(raw_scalar(path, "PRAGMA user_version"), 1);
  CubinRow c = make_cubin("rebuilt", 100);
  ASSERT_TRUE(db->put_cubin(c));
  EXPECT_EQ(db->get_cubin(c.compile_hash, c.compile_key)->cubin, c.cubin);
}

TEST_F(CacheDbRobustTest, TruncatedDbIsMovedAsideAndRebuilt) {
  const std::string path = dir.file("cache.sqlite");
  {
    auto db = Db::open(path, env, warnings.fn());
    for (int i = 0; i < 200; ++i) ASSERT_TRUE(db->put_cubin(make_cubin(numbered("k", i), 6000)));
    std::vector<TuneRow> rows;
    for (int i = 0; i < 500; ++i) rows.push_back({numbered("s", i % 7), "b", numbered("t", i), 1.0, "ok"});
    ASSERT_TRUE(db->put_tune_results(rows));
  }
  ASSERT_FALSE(fs::exists(path + "-wal"));  // the last connection checkpointed and removed the WAL
  const auto size = fs::file_size(path);
  ASSERT_GT(size, 1000000u);
  fs::resize_file(path, size / 2);
  auto db = Db::open(path, env, warnings.fn());
  EXPECT_FALSE(db->in_memory());
  EXPECT_TRUE(warnings.any_contains("moved aside")) << (warnings.list.empty() ? "" : warnings.list.front());
  EXPECT_EQ(corrupt_copies(dir.path(), "cache.sqlite").size(), 1u);
  EXPECT_TRUE(db->list_cubins().empty());
  CubinRow c = make_cubin("rebuilt", 100);
  ASSERT_TRUE(db->put_cubin(c));
  EXPECT_EQ(db->get_cubin(c.compile_hash, c.compile_key)->cubin, c.cubin);
}

TEST_F(CacheDbRobustTest, WarningsAreNeverPrintedByDefault) {
  const std::string path = dir.file("cache.sqlite");
  {
    std::ofstream f(path, std::ios::binary);
    f << "definitely not a database, and long enough to have a header..................................";
  }
  testing::internal::CaptureStderr();
  testing::internal::CaptureStdout();
  auto db = Db::open(path, env);  // no callback
  const std::string err = testing::internal::GetCapturedStderr();
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_FALSE(db->in_memory());
  EXPECT_EQ(err, "");
  EXPECT_EQ(out, "");
  EXPECT_EQ(corrupt_copies(dir.path(), "cache.sqlite").size(), 1u);
}

// ---- unwritable locations -----------------------------------------------------------------------------------------

TEST_F(CacheDbRobustTest, ReadOnlyDirectoryIsServedReadOnlyOrDegradesToMemory) {
  // Root ignores permissions, so a root run drops to nobody in a child process; the child reports by exit status.
  // A read-only directory without a cache degrades to memory; a cache file in one (a WAL file whose -shm cannot be
  // created: the immutable open) is served read-only, its rows found, new rows kept in memory.
  fs::permissions(dir.path(), fs::perms::all, fs::perm_options::replace);
  const std::string ro_empty = dir.file("ro_empty"), ro_existing = dir.file("ro_existing");
  fs::create_directory(ro_empty);
  fs::create_directory(ro_existing);
  const CubinRow shipped = make_cubin("shipped", 100);
  {
    auto db = Db::open(ro_existing + "/cache.sqlite", env, warnings.fn());
    ASSERT_TRUE(db->put_cubin(shipped));
  }
  fs::permissions(ro_existing + "/cache.sqlite", fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read,
                  fs::perm_options::replace);
  const std::vector<char> before = read_file(ro_existing + "/cache.sqlite");
  for (const auto& d : {ro_empty, ro_existing}) {
    fs::permissions(d,
                    fs::perms::owner_read | fs::perms::owner_exec | fs::perms::group_read | fs::perms::group_exec |
                        fs::perms::others_read | fs::perms::others_exec,
                    fs::perm_options::replace);
  }
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0)) _exit(77);
    const std::string probe = ro_empty + "/probe";
    const int fd = ::open(probe.c_str(), O_CREAT | O_WRONLY, 0644);
    if (fd >= 0) _exit(77);  // permissions are not enforced for this user: cannot test
    int code = 0;
    for (const auto& d : {ro_empty, ro_existing}) {
      const bool existing = d == ro_existing;
      bool warned = false;
      auto db = Db::open(d + "/cache.sqlite", env, [&](const std::string&) { warned = true; });
      if (db->in_memory() == existing || db->read_only() != existing) code |= 1;
      if (!warned) code |= 2;
      CubinRow c = make_cubin("mem", 300);
      if (!db->put_cubin(c)) code |= 4;
      auto g = db->get_cubin(c.compile_hash, c.compile_key);
      if (!g || g->cubin != c.cubin) code |= 8;
      auto s = db->get_cubin(shipped.compile_hash, shipped.compile_key);
      if (existing && (!s || s->cubin != shipped.cubin)) code |= 16;
    }
    _exit(code);
  }
  const int code = wait_child(pid);
  if (code == 77) GTEST_SKIP() << "cannot run as an unprivileged user here";
  EXPECT_EQ(code, 0) << "bit 1: wrong mode, 2: no warning, 4: put failed, 8: get failed, 16: shipped row missing";
  EXPECT_FALSE(fs::exists(ro_empty + "/cache.sqlite"));
  EXPECT_TRUE(corrupt_copies(ro_existing, "cache.sqlite").empty());
  EXPECT_EQ(read_file(ro_existing + "/cache.sqlite"), before);
}

TEST_F(CacheDbRobustTest, UncreatableLocationDegradesToMemory) {
  const std::string file = dir.file("plain_file");
  { std::ofstream(file) << "x"; }
  auto db = Db::open(file + "/sub/cache.sqlite", env, warnings.fn());
  EXPECT_TRUE(db->in_memory());
  EXPECT_EQ(warnings.list.size(), 1u);
  auto db2 = Db::open(dir.path(), env, warnings.fn());  // a directory is not a database file
  EXPECT_TRUE(db2->in_memory());
  EXPECT_EQ(warnings.list.size(), 2u);
  CubinRow c = make_cubin("mem", 64);
  ASSERT_TRUE(db2->put_cubin(c));
  EXPECT_EQ(db2->get_cubin(c.compile_hash, c.compile_key)->cubin, c.cubin);
}

TEST_F(CacheDbRobustTest, FullDiskDegradesOrFailsWritesCleanly) {
  // RLIMIT_FSIZE (enforced for root too) makes writes past the limit fail like a full disk; done in children.
  const std::string fresh = dir.file("fresh.sqlite"), existing = dir.file("existing.sqlite");
  CubinRow kept = make_cubin("kept", 3000);
  {
    auto db = Db::open(existing, env, warnings.fn());
    ASSERT_TRUE(db->put_cubin(kept));
  }
  const auto existing_size = fs::file_size(existing);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    signal(SIGXFSZ, SIG_IGN);
    int code = 0;  // the number of the first failed check
    auto check = [&](bool ok, int n) {
      if (!ok && code == 0) code = n;
    };
    rlimit lim{1024, RLIM_INFINITY};
    if (setrlimit(RLIMIT_FSIZE, &lim) != 0) _exit(77);
    {
      bool warned = false;
      auto db = Db::open(fresh, env, [&](const std::string&) { warned = true; });
      check(db->in_memory(), 1);
      check(warned, 2);
      check(db->put_cubin(make_cubin("mem", 5000)), 3);
    }
    // An existing file stays in use when its -shm (32 KiB) fits; a write that does not fit fails cleanly (false,
    // warning) and the old rows stay readable.
    lim.rlim_cur = std::max<rlim_t>(static_cast<rlim_t>(existing_size), 65536) + 8192;
    if (setrlimit(RLIMIT_FSIZE, &lim) != 0) _exit(77);
    {
      bool warned = false;
      auto db = Db::open(existing, env, [&](const std::string&) { warned = true; });
      check(!db->in_memory(), 4);
      check(!warned, 5);
      check(!db->put_cubin(make_cubin("too_big", 1 << 20)), 6);
      check(warned, 7);
      auto g = db->get_cubin(kept.compile_hash, kept.compile_key);
      check(g && g->cubin == kept.cubin, 8);
      check(db->put_cubin(make_cubin("small", 100)), 9);  // the connection recovers once writes fit
    }
    _exit(code);
  }
  const int code = wait_child(pid);
  if (code == 77) GTEST_SKIP() << "setrlimit(RLIMIT_FSIZE) not permitted";
  EXPECT_EQ(code, 0) << "number of the first failed check in the child";
  EXPECT_FALSE(fs::exists(fresh) && fs::file_size(fresh) > 1024);
  auto db = Db::open(existing, env, warnings.fn());
  EXPECT_FALSE(db->in_memory());
  EXPECT_EQ(db->get_cubin(kept.compile_hash, kept.compile_key)->cubin, kept.cubin);
  EXPECT_EQ(db->list_cubins().size(), 2u);  // kept + small, never too_big
  EXPECT_EQ(raw_scalar(existing, "SELECT count(*) FROM cubins WHERE compile_key = 'too_big'"), 0);
}

}  // namespace
