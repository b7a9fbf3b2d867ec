// test_cache_db.cpp -- fa::cache::Db: schema creation, cubin / tuning round trips, checksum mismatch, staleness and
// pruning, listing, export / import, default path logic, threads sharing one Db. Every test uses a fresh temporary
// directory and random data.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cache_db/cache_db.h"
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
  e.gpu_name = "Test GPU " + std::to_string(rng()() % 1000);
  e.sm_count = 100 + static_cast<int>(rng()() % 50);
  e.driver_version = 12000 + static_cast<int>(rng()() % 1000);
  e.library_version = "0.1." + std::to_string(rng()() % 10);
  e.nvrtc_version = "13." + std::to_string(rng()() % 5);
  e.templates_hash = rng()();
  e.generator_version = 1 + static_cast<int>(rng()() % 5);
  return e;
}

// Raw SQLite access, independent of the module under test.
std::string raw_text(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  std::string v = "<error>";
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr) == SQLITE_OK) {
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW) {
      const unsigned char* t = sqlite3_column_text(st, 0);
      v = t != nullptr ? reinterpret_cast<const char*>(t) : "";
    }
    sqlite3_finalize(st);
  }
  sqlite3_close(db);
  return v;
}

// Overwrites the blob of one cubin row (size and checksum columns untouched).
bool raw_set_blob(const std::string& path, const std::string& key, const std::vector<uint8_t>& blob) {
  sqlite3* db = nullptr;
  bool ok = false;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr) == SQLITE_OK) {
    sqlite3_busy_timeout(db, 5000);
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db, "UPDATE cubins SET cubin = ?1 WHERE compile_key = ?2", -1, &st, nullptr) == SQLITE_OK) {
      sqlite3_bind_blob(st, 1, blob.data(), static_cast<int>(blob.size()), SQLITE_TRANSIENT);
      sqlite3_bind_text(st, 2, key.c_str(), -1, SQLITE_TRANSIENT);
      ok = sqlite3_step(st) == SQLITE_DONE && sqlite3_changes(db) == 1;
    }
    sqlite3_finalize(st);
  }
  sqlite3_close(db);
  return ok;
}

void expect_same_cubin(const CubinRow& a, const CubinRow& b) {
  EXPECT_EQ(a.compile_key, b.compile_key);
  EXPECT_EQ(a.compile_hash, b.compile_hash);
  EXPECT_EQ(a.arch, b.arch);
  EXPECT_EQ(a.cubin, b.cubin);
  EXPECT_EQ(a.registers, b.registers);
  EXPECT_EQ(a.spill_bytes, b.spill_bytes);
  EXPECT_EQ(a.smem_bytes, b.smem_bytes);
}

class CacheDbTest : public ::testing::Test {
 protected:
  TempDir dir;
  Env env = make_env();
  Warnings warnings;
};

TEST_F(CacheDbTest, CreatesSchemaV1InNewDirectories) {
  const std::string path = dir.file("a/b/c/cache.sqlite");
  auto db = Db::open(path, env, warnings.fn());
  ASSERT_TRUE(db);
  EXPECT_FALSE(db->in_memory());
  EXPECT_EQ(db->path(), path);
  EXPECT_TRUE(warnings.list.empty()) << warnings.list.front();
  EXPECT_TRUE(fs::exists(path));
  EXPECT_EQ(raw_scalar(path, "PRAGMA user_version"), fa::cache::kSchemaVersion);
  EXPECT_EQ(raw_scalar(path,
                       "SELECT count(*) FROM sqlite_master WHERE type='table' AND name IN "
                       "('cubins','tune_results')"),
            2);
  EXPECT_EQ(raw_text(path, "PRAGMA journal_mode"), "wal");
  // Reopening an existing current-version file changes nothing and warns nothing.
  db.reset();
  auto again = Db::open(path, env, warnings.fn());
  EXPECT_FALSE(again->in_memory());
  EXPECT_TRUE(warnings.list.empty());
}

TEST_F(CacheDbTest, CubinRoundTrip) {
  const std::string path = dir.file("cache.sqlite");
  std::vector<CubinRow> rows;
  const size_t sizes[] = {1, 17, 4096, 250000 + rng()() % 1000};
  for (size_t i = 0; i < 4; ++i) rows.push_back(make_cubin(numbered("key_", i), sizes[i], 80 + 10 * int(i % 2)));
  {
    auto db = Db::open(path, env, warnings.fn());
    for (const auto& r : rows) ASSERT_TRUE(db->put_cubin(r)) << db->last_error();
    for (const auto& r : rows) {
      auto got = db->get_cubin(r.compile_hash, r.compile_key);
      ASSERT_TRUE(got.has_value());
      expect_same_cubin(*got, r);
      auto got_arch = db->get_cubin(r.compile_hash, r.compile_key, r.arch);
      ASSERT_TRUE(got_arch.has_value());
      EXPECT_EQ(got_arch->cubin, r.cubin);
      EXPECT_FALSE(db->get_cubin(r.compile_hash, r.compile_key, r.arch + 1).has_value());
      EXPECT_FALSE(db->get_cubin(r.compile_hash ^ 1u, r.compile_key).has_value());
      EXPECT_FALSE(db->get_cubin(r.compile_hash, r.compile_key + "x").has_value());
    }
  }
  // Persisted across connections; replacing a row keeps one row with the new blob.
  auto db = Db::open(path, env, warnings.fn());
  for (const auto& r : rows) {
    auto got = db->get_cubin(r.compile_hash, r.compile_key, r.arch);
    ASSERT_TRUE(got.has_value());
    expect_same_cubin(*got, r);
  }
  CubinRow replaced = rows[2];
  replaced.cubin = random_blob(5000);
  replaced.registers = 77;
  ASSERT_TRUE(db->put_cubin(replaced));
  auto got = db->get_cubin(replaced.compile_hash, replaced.compile_key, replaced.arch);
  ASSERT_TRUE(got.has_value());
  expect_same_cubin(*got, replaced);
  EXPECT_EQ(raw_scalar(path, "SELECT count(*) FROM cubins"), static_cast<int64_t>(rows.size()));
  EXPECT_TRUE(warnings.list.empty());
}

TEST_F(CacheDbTest, TuneResultsKeepEveryCandidateAndBestIsMinOk) {
  const std::string path = dir.file("cache.sqlite");
  const std::string sem = "fwd_mma|fp16|d128|causal", bucket = "sq<=4096|sk<=4096";
  const char* statuses[] = {"ok", "ok", "ok", "spill", "compile_error", "invalid"};
  std::vector<TuneRow> rows;
  for (int i = 0; i < 24; ++i) {
    TuneRow r;
    r.semantic_key = sem;
    r.bucket = bucket;
    r.tunables = numbered("bm", 64 * (1 + i % 4)) + numbered("_w", i);
    r.status = statuses[rng()() % 6];
    r.median_ms = r.status == "compile_error" ? std::numeric_limits<double>::quiet_NaN()
                                              : 0.01 + std::uniform_real_distribution<double>(0.0, 5.0)(rng());
    rows.push_back(r);
  }
  rows[0].status = "ok";     // at least one ok row
  rows[1].status = "spill";  // a faster non-ok row must not win
  rows[1].median_ms = 0.001;
  // Another key in the same file must not interfere.
  TuneRow other = rows[0];
  other.semantic_key = sem + "_other";
  other.median_ms = 0.0001;

  double want = std::numeric_limits<double>::infinity();
  std::string want_tunables;
  for (const auto& r : rows) {
    if (r.status == "ok" && r.median_ms < want) {
      want = r.median_ms;
      want_tunables = r.tunables;
    }
  }
  {
    auto db = Db::open(path, env, warnings.fn());
    ASSERT_TRUE(db->put_tune_results(rows)) << db->last_error();
    ASSERT_TRUE(db->put_tune_results({other}));
  }
  auto db = Db::open(path, env, warnings.fn());
  auto best = db->best(sem, bucket);
  ASSERT_TRUE(best.has_value());
  EXPECT_EQ(best->tunables, want_tunables);
  EXPECT_EQ(best->median_ms, want);
  EXPECT_EQ(best->status, "ok");
  EXPECT_FALSE(db->best(sem, bucket + "x").has_value());

  auto all = db->tune_rows(sem, bucket);
  ASSERT_EQ(all.size(), rows.size());
  std::map<std::string, TuneRow> by_tunables;
  for (const auto& r : all) by_tunables[r.tunables] = r;
  for (const auto& r : rows) {
    ASSERT_EQ(by_tunables.count(r.tunables), 1u);
    const TuneRow& g = by_tunables[r.tunables];
    EXPECT_EQ(g.status, r.status);
    if (std::isnan(r.median_ms)) {
      EXPECT_TRUE(std::isnan(g.median_ms));
    } else {
      EXPECT_EQ(g.median_ms, r.median_ms);
    }
  }
  // Sorted by median, unmeasured last.
  for (size_t i = 1; i < all.size(); ++i) {
    if (!std::isnan(all[i].median_ms)) {
      ASSERT_FALSE(std::isnan(all[i - 1].median_ms));
      EXPECT_LE(all[i - 1].median_ms, all[i].median_ms);
    }
  }

  // replace_existing: the stored candidate set becomes exactly the new one; the other key stays.
  std::vector<TuneRow> fresh(rows.begin(), rows.begin() + 3);
  for (auto& r : fresh) {
    r.status = "ok";
    r.median_ms = 1.0 + std::uniform_real_distribution<double>(0.0, 1.0)(rng());
  }
  ASSERT_TRUE(db->put_tune_results(fresh, true));
  EXPECT_EQ(db->tune_rows(sem, bucket).size(), 3u);
  const auto fresh_best = *std::min_element(
      fresh.begin(), fresh.end(), [](const TuneRow& a, const TuneRow& b) { return a.median_ms < b.median_ms; });
  EXPECT_EQ(db->best(sem, bucket)->tunables, fresh_best.tunables);
  EXPECT_EQ(db->tune_rows(other.semantic_key, bucket).size(), 1u);
  EXPECT_TRUE(warnings.list.empty());
}

TEST_F(CacheDbTest, ChecksumMismatchIsMissAndDeletesRow) {
  const std::string path = dir.file("cache.sqlite");
  auto db = Db::open(path, env, warnings.fn());
  CubinRow flipped = make_cubin("flip", 3000 + rng()() % 1000);
  CubinRow cut = make_cubin("cut", 3000 + rng()() % 1000);
  CubinRow good = make_cubin("good", 2000);
  for (const auto* r : {&flipped, &cut, &good}) ASSERT_TRUE(db->put_cubin(*r));

  // Damage the blobs behind the module's back: one flipped bit, and a blob cut short.
  std::vector<uint8_t> damaged = flipped.cubin;
  damaged[rng()() % damaged.size()] ^= static_cast<uint8_t>(1u << (rng()() % 8));
  ASSERT_TRUE(raw_set_blob(path, "flip", damaged));
  ASSERT_TRUE(raw_set_blob(path, "cut", std::vector<uint8_t>(cut.cubin.begin(), cut.cubin.begin() + 100)));
  ASSERT_EQ(raw_scalar(path, "SELECT length(cubin) FROM cubins WHERE compile_key='flip'"),
            static_cast<int64_t>(flipped.cubin.size()));

  EXPECT_FALSE(db->get_cubin(flipped.compile_hash, flipped.compile_key).has_value());
  EXPECT_FALSE(db->get_cubin(cut.compile_hash, cut.compile_key).has_value());
  EXPECT_TRUE(warnings.any_contains("checksum"));
  EXPECT_EQ(raw_scalar(path, "SELECT count(*) FROM cubins WHERE compile_key IN ('flip','cut')"), 0);
  auto g = db->get_cubin(good.compile_hash, good.compile_key);
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(g->cubin, good.cubin);
}

TEST_F(CacheDbTest, StaleRowsAreMissesAndPruneCountsThem) {
  const std::string path = dir.file("cache.sqlite");
  const int n_cubins = 3 + static_cast<int>(rng()() % 5), n_tune = 4 + static_cast<int>(rng()() % 5);
  std::vector<CubinRow> cubins;
  std::vector<TuneRow> tunes;
  for (int i = 0; i < n_cubins; ++i) cubins.push_back(make_cubin(numbered("k", i), 100));
  for (int i = 0; i < n_tune; ++i) tunes.push_back({"sem", "b", numbered("t", i), 1.0 + i, "ok"});
  {
    auto db = Db::open(path, env, warnings.fn());
    for (const auto& c : cubins) ASSERT_TRUE(db->put_cubin(c));
    ASSERT_TRUE(db->put_tune_results(tunes));
  }
  // Driver change: cubins still valid, tuning stale.
  Env new_driver = env;
  new_driver.driver_version += 1;
  // Each of these makes both stale.
  Env new_nvrtc = env, new_templates = env, new_generator = env, new_library = env;
  new_nvrtc.nvrtc_version += ".1";
  new_templates.templates_hash ^= 0x10;
  new_generator.generator_version += 1;
  new_library.library_version += "-dev";
  {
    auto db = Db::open(path, new_driver, warnings.fn());
    EXPECT_TRUE(db->get_cubin(cubins[0].compile_hash, cubins[0].compile_key).has_value());
    EXPECT_FALSE(db->best("sem", "b").has_value());
    EXPECT_TRUE(db->tune_rows("sem", "b").empty());
  }
  {
    auto db = Db::open(path, new_library, warnings.fn());
    EXPECT_TRUE(db->get_cubin(cubins[0].compile_hash, cubins[0].compile_key).has_value());
    EXPECT_FALSE(db->best("sem", "b").has_value());
  }
  for (const Env* e : {&new_nvrtc, &new_templates, &new_generator}) {
    auto db = Db::open(path, *e, warnings.fn());
    for (const auto& c : cubins) EXPECT_FALSE(db->get_cubin(c.compile_hash, c.compile_key).has_value());
    EXPECT_FALSE(db->best("sem", "b").has_value());
  }
  // A different GPU in the same file is not stale, just another key.
  Env other_gpu = env;
  other_gpu.gpu_name += " (other)";
  {
    auto db = Db::open(path, other_gpu, warnings.fn());
    EXPECT_FALSE(db->best("sem", "b").has_value());
    ASSERT_TRUE(db->put_tune_results({{"sem", "b", "tx", 0.5, "ok"}}));
  }
  // Prune under new_driver: all n_tune original rows and the other-GPU row are stale (driver), cubins are not.
  {
    auto db = Db::open(path, new_driver, warnings.fn());
    EXPECT_EQ(db->list_tune_rows(false).size(), 0u);
    EXPECT_EQ(db->list_tune_rows(true).size(), static_cast<size_t>(n_tune + 1));
    EXPECT_EQ(db->list_cubins(false).size(), static_cast<size_t>(n_cubins));
    EXPECT_EQ(db->prune_stale(), n_tune + 1);
    EXPECT_EQ(db->prune_stale(), 0);
  }
  // Prune under new_templates: every cubin goes.
  {
    auto db = Db::open(path, new_templates, warnings.fn());
    auto listed = db->list_cubins(true);
    ASSERT_EQ(listed.size(), static_cast<size_t>(n_cubins));
    for (const auto& s : listed) EXPECT_TRUE(s.stale);
    EXPECT_EQ(db->prune_stale(), n_cubins);
  }
  EXPECT_EQ(raw_scalar(path, "SELECT count(*) FROM cubins"), 0);
  EXPECT_EQ(raw_scalar(path, "SELECT count(*) FROM tune_results"), 0);
}

TEST_F(CacheDbTest, ListingReportsRowsAndEnvironment) {
  auto db = Db::open(dir.file("cache.sqlite"), env, warnings.fn());
  CubinRow c = make_cubin("listed", 1234 + rng()() % 100, 86);
  ASSERT_TRUE(db->put_cubin(c));
  ASSERT_TRUE(db->put_tune_results({{"s1", "b1", "t1", 2.5, "ok"}, {"s1", "b1", "t2", 1.5, "spill"}}));
  auto cs = db->list_cubins();
  ASSERT_EQ(cs.size(), 1u);
  EXPECT_EQ(cs[0].compile_key, "listed");
  EXPECT_EQ(cs[0].compile_hash, c.compile_hash);
  EXPECT_EQ(cs[0].arch, 86);
  EXPECT_EQ(cs[0].size_bytes, static_cast<int64_t>(c.cubin.size()));
  EXPECT_EQ(cs[0].registers, c.registers);
  EXPECT_EQ(cs[0].templates_hash, env.templates_hash);
  EXPECT_FALSE(cs[0].stale);
  auto ts = db->list_tune_rows();
  ASSERT_EQ(ts.size(), 2u);
  for (const auto& t : ts) {
    EXPECT_EQ(t.gpu_name, env.gpu_name);
    EXPECT_EQ(t.sm_count, env.sm_count);
    EXPECT_EQ(t.driver_version, env.driver_version);
    EXPECT_FALSE(t.stale);
  }
  EXPECT_EQ(ts[0].row.tunables, "t2");  // ordered by median within a key
}

TEST_F(CacheDbTest, ExportImportRoundTripCopiesOnlyValidRows) {
  const std::string src_path = dir.file("src.sqlite"), out_path = dir.file("out/export.sqlite");
  auto src = Db::open(src_path, env, warnings.fn());
  std::vector<CubinRow> cubins;
  for (int i = 0; i < 5; ++i) cubins.push_back(make_cubin(numbered("c", i), 500 + rng()() % 5000));
  for (const auto& c : cubins) ASSERT_TRUE(src->put_cubin(c));
  std::vector<TuneRow> tunes;
  for (int i = 0; i < 7; ++i) {
    tunes.push_back({numbered("s", i % 2), "b", numbered("t", i),
                     std::uniform_real_distribution<double>(0.1, 3.0)(rng()), i == 3 ? "compile_error" : "ok"});
  }
  ASSERT_TRUE(src->put_tune_results(tunes));
  // One stale tuning row (written under another driver) and one damaged cubin must not travel.
  {
    Env old = env;
    old.driver_version -= 1;
    auto stale = Db::open(src_path, old, warnings.fn());
    ASSERT_TRUE(stale->put_tune_results({{"s0", "b", "stale", 0.01, "ok"}}));
  }
  ASSERT_TRUE(raw_exec(src_path, "UPDATE cubins SET cubin = substr(cubin, 2) WHERE compile_key = 'c4'"));

  ASSERT_TRUE(src->export_to(out_path)) << src->last_error();
  EXPECT_FALSE(src->export_to(src_path));  // not onto itself

  auto dst = Db::open(dir.file("dst.sqlite"), env, warnings.fn());
  const int n = dst->import_from(out_path);
  EXPECT_EQ(n, 4 + 7) << dst->last_error();
  for (int i = 0; i < 4; ++i) {
    auto g = dst->get_cubin(cubins[size_t(i)].compile_hash, cubins[size_t(i)].compile_key);
    ASSERT_TRUE(g.has_value());
    expect_same_cubin(*g, cubins[size_t(i)]);
  }
  EXPECT_FALSE(dst->get_cubin(cubins[4].compile_hash, cubins[4].compile_key).has_value());
  for (const char* s : {"s0", "s1"}) {
    auto a = src->best(s, "b"), b = dst->best(s, "b");
    ASSERT_TRUE(a.has_value());
    ASSERT_TRUE(b.has_value());
    EXPECT_EQ(a->tunables, b->tunables);
    EXPECT_EQ(a->median_ms, b->median_ms);
    EXPECT_EQ(src->tune_rows(s, "b").size(), dst->tune_rows(s, "b").size());
  }
  EXPECT_EQ(dst->list_tune_rows(true).size(), 7u);
  // Importing again replaces, never duplicates.
  EXPECT_EQ(dst->import_from(out_path), 11);
  EXPECT_EQ(dst->list_tune_rows(true).size(), 7u);
  EXPECT_EQ(dst->list_cubins(true).size(), 4u);
  // An importer under another templates hash finds every row stale and imports nothing.
  Env other = env;
  other.templates_hash ^= 1;
  auto dst2 = Db::open(dir.file("dst2.sqlite"), other, warnings.fn());
  EXPECT_EQ(dst2->import_from(out_path), 0);
}

TEST_F(CacheDbTest, ImportRejectsWhatIsNotACacheFile) {
  auto db = Db::open(":memory:", env, warnings.fn());
  EXPECT_TRUE(db->in_memory());
  EXPECT_EQ(db->import_from(dir.file("missing.sqlite")), -1);
  EXPECT_FALSE(db->last_error().empty());
  const std::string junk = dir.file("junk.sqlite");
  {
    FILE* f = fopen(junk.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    auto b = random_blob(8192);
    fwrite(b.data(), 1, b.size(), f);
    fclose(f);
  }
  EXPECT_EQ(db->import_from(junk), -1);
  const std::string foreign = dir.file("foreign.sqlite");
  ASSERT_TRUE(raw_exec(foreign, "CREATE TABLE t(x); PRAGMA user_version = 1;"));
  EXPECT_EQ(db->import_from(foreign), -1);
  const std::string newer = dir.file("newer.sqlite");
  ASSERT_TRUE(raw_exec(newer, "PRAGMA user_version = 9;"));
  EXPECT_EQ(db->import_from(newer), -1);
}

TEST_F(CacheDbTest, MemoryDatabaseWorksAndWarnsNothing) {
  auto db = Db::open(":memory:", env, warnings.fn());
  EXPECT_TRUE(db->in_memory());
  CubinRow c = make_cubin("m", 999);
  ASSERT_TRUE(db->put_cubin(c));
  auto g = db->get_cubin(c.compile_hash, c.compile_key);
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(g->cubin, c.cubin);
  EXPECT_TRUE(warnings.list.empty());
}

class ScopedEnvVar {
 public:
  ScopedEnvVar(const char* name, const char* value) : name_(name) {
    const char* old = getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    if (value != nullptr) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnvVar() {
    if (had_) {
      setenv(name_.c_str(), old_.c_str(), 1);
    } else {
      unsetenv(name_.c_str());
    }
  }

 private:
  std::string name_, old_;
  bool had_ = false;
};

TEST_F(CacheDbTest, DefaultPathFollowsEnvironment) {
  const std::string home = dir.file("home"), xdg = dir.file("xdg"), explicit_path = dir.file("explicit/c.db");
  {
    ScopedEnvVar a("FA_CACHE_PATH", explicit_path.c_str()), b("XDG_CACHE_HOME", xdg.c_str()), c("HOME", home.c_str());
    EXPECT_EQ(fa::cache::default_cache_path(), explicit_path);
    // open("") uses it and creates the directories.
    auto db = Db::open("", env, warnings.fn());
    EXPECT_FALSE(db->in_memory());
    EXPECT_EQ(db->path(), explicit_path);
    EXPECT_TRUE(fs::exists(explicit_path));
  }
  {
    ScopedEnvVar a("FA_CACHE_PATH", ""), b("XDG_CACHE_HOME", xdg.c_str()), c("HOME", home.c_str());
    EXPECT_EQ(fa::cache::default_cache_path(), xdg + "/fa/cache.sqlite");
    auto db = Db::open("", env, warnings.fn());
    EXPECT_TRUE(fs::exists(xdg + "/fa/cache.sqlite"));
  }
  {
    ScopedEnvVar a("FA_CACHE_PATH", nullptr), b("XDG_CACHE_HOME", "relative/ignored"), c("HOME", home.c_str());
    EXPECT_EQ(fa::cache::default_cache_path(), home + "/.cache/fa/cache.sqlite");
  }
  {
    ScopedEnvVar a("FA_CACHE_PATH", nullptr), b("XDG_CACHE_HOME", nullptr), c("HOME", home.c_str());
    EXPECT_EQ(fa::cache::default_cache_path(), home + "/.cache/fa/cache.sqlite");
    auto db = Db::open("", env, warnings.fn());
    EXPECT_TRUE(fs::exists(home + "/.cache/fa/cache.sqlite"));
  }
  {
    ScopedEnvVar a("FA_CACHE_PATH", ":memory:");
    EXPECT_EQ(fa::cache::default_cache_path(), ":memory:");
    EXPECT_TRUE(Db::open("", env, warnings.fn())->in_memory());
  }
  EXPECT_TRUE(warnings.list.empty());
}

TEST_F(CacheDbTest, ThreadsShareOneDb) {
  auto db = Db::open(dir.file("cache.sqlite"), env, warnings.fn());
  constexpr int kThreads = 4, kPerThread = 40;
  std::vector<std::vector<CubinRow>> rows(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kPerThread; ++i) {
      rows[size_t(t)].push_back(make_cubin(numbered("t", t) + numbered("_", i), 64 + rng()() % 512));
    }
  }
  std::vector<int> failures(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (const auto& r : rows[size_t(t)]) {
        if (!db->put_cubin(r)) ++failures[size_t(t)];
        if (!db->put_tune_results({{"sem", "b", r.compile_key, double(r.cubin.size()), "ok"}})) ++failures[size_t(t)];
        auto g = db->get_cubin(r.compile_hash, r.compile_key);
        if (!g || g->cubin != r.cubin) ++failures[size_t(t)];
        (void)db->best("sem", "b");
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int f : failures) EXPECT_EQ(f, 0);
  EXPECT_EQ(db->list_cubins().size(), size_t(kThreads * kPerThread));
  EXPECT_EQ(db->tune_rows("sem", "b").size(), size_t(kThreads * kPerThread));
  size_t smallest = SIZE_MAX;
  std::string smallest_key;
  for (const auto& v : rows) {
    for (const auto& r : v) {
      if (r.cubin.size() < smallest || (r.cubin.size() == smallest && r.compile_key < smallest_key)) {
        smallest = r.cubin.size();
        smallest_key = r.compile_key;
      }
    }
  }
  EXPECT_EQ(db->best("sem", "b")->tunables, smallest_key);
  EXPECT_TRUE(warnings.list.empty());
}

}  // namespace
