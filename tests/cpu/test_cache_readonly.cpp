// test_cache_readonly.cpp -- a cache file used read-only (a pre-tuned cache shipped in a read-only image,
// $FA_CACHE_READONLY=1, fa-tune --list): its cubins and tuning rows are served, new rows stay in an in-memory overlay
// that shadows it, and the file is never written, moved aside or migrated -- through fa::cache::Db and through a
// context. (Detection by permissions is in test_cache_db_robustness.cpp, as an unprivileged child process.)
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "cache_db/cache_db.h"
#include "fa/fa.h"
#include "generator/family.h"
#include "runtime/kernel_cache.h"
#include "tests/cpu/cache_db_support.h"
#include "tests/cpu/context_support.h"
#include "tuner/cache_store.h"

namespace {

namespace fs = std::filesystem;
using fa::cache::CubinRow;
using fa::cache::Db;
using fa::cache::Env;
using fa::cache::OpenMode;
using fa::cache::TuneRow;
using namespace fa::test::cachedb;

Env make_env() {
  Env e;
  e.gpu_name = "Shipped GPU";
  e.sm_count = 132;
  e.driver_version = 13000;
  e.library_version = "0.1.0";
  e.nvrtc_version = "13.0";
  e.templates_hash = rng()();
  e.generator_version = 1;
  return e;
}

void make_read_only(const std::string& dir, const std::string& file) {
  fs::permissions(file, fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read,
                  fs::perm_options::replace);
  fs::permissions(dir,
                  fs::perms::owner_read | fs::perms::owner_exec | fs::perms::group_read | fs::perms::group_exec |
                      fs::perms::others_read | fs::perms::others_exec,
                  fs::perm_options::replace);
}

void make_writable(const std::string& dir, const std::string& file) {
  fs::permissions(dir, fs::perms::owner_all, fs::perm_options::add);
  fs::permissions(file, fs::perms::owner_read | fs::perms::owner_write, fs::perm_options::add);
}

TEST(CacheReadOnly, ServesTheFileAndKeepsNewRowsInAnOverlay) {
  TempDir dir;
  const Env env = make_env();
  const std::string file = dir.file("cache.sqlite"), exported = dir.file("exported.sqlite");
  const CubinRow shipped = make_cubin("shipped", 4000);
  {
    auto db = Db::open(file, env);
    ASSERT_TRUE(db->put_cubin(shipped));
    ASSERT_TRUE(db->put_tune_results({{"s1", "b1", "slow", 2.0, "ok"}, {"s1", "b1", "fast", 1.0, "ok"}}));
  }
  const std::vector<char> before = read_file(file);

  Warnings w;
  auto db = Db::open(file, env, w.fn(), OpenMode::kReadOnly);
  EXPECT_TRUE(db->read_only());
  EXPECT_FALSE(db->in_memory());
  EXPECT_EQ(db->path(), file);
  EXPECT_TRUE(w.list.empty()) << w.list.front();  // asked for: no warning
  ASSERT_TRUE(db->get_cubin(shipped.compile_hash, shipped.compile_key));
  EXPECT_EQ(db->get_cubin(shipped.compile_hash, shipped.compile_key)->cubin, shipped.cubin);
  ASSERT_TRUE(db->best("s1", "b1"));
  EXPECT_EQ(db->best("s1", "b1")->tunables, "fast");

  // New rows: accepted, served, and shadowing the file's rows of the same key.
  const CubinRow added = make_cubin("added", 500);
  EXPECT_TRUE(db->put_cubin(added)) << db->last_error();
  ASSERT_TRUE(db->get_cubin(added.compile_hash, added.compile_key));
  EXPECT_EQ(db->get_cubin(added.compile_hash, added.compile_key)->cubin, added.cubin);
  EXPECT_TRUE(db->put_tune_results({{"s1", "b1", "retuned", 3.0, "ok"}}, true));
  EXPECT_EQ(db->best("s1", "b1")->tunables, "retuned");
  EXPECT_EQ(db->tune_rows("s1", "b1").size(), 1u);
  EXPECT_TRUE(db->put_tune_results({{"s2", "b2", "new", 0.5, "ok"}}));
  EXPECT_EQ(db->best("s2", "b2")->tunables, "new");
  EXPECT_EQ(db->list_cubins().size(), 2u);
  EXPECT_EQ(db->list_tune_rows().size(), 4u);  // the file's two, the overlay's two

  EXPECT_EQ(db->prune_stale(), -1);
  EXPECT_NE(db->last_error().find("read-only"), std::string::npos) << db->last_error();
  ASSERT_TRUE(db->export_to(exported)) << db->last_error();
  db.reset();

  EXPECT_EQ(read_file(file), before);
  EXPECT_TRUE(corrupt_copies(dir.path(), "cache.sqlite").empty());
  auto out = Db::open(exported, env);
  EXPECT_TRUE(out->get_cubin(shipped.compile_hash, shipped.compile_key));
  EXPECT_TRUE(out->get_cubin(added.compile_hash, added.compile_key));
  EXPECT_EQ(out->best("s1", "b1")->tunables, "retuned");  // the overlay's rows win in the export too
  auto again = Db::open(file, env);
  EXPECT_FALSE(again->get_cubin(added.compile_hash, added.compile_key));  // nothing reached the file
}

TEST(CacheReadOnly, UnusableFilesAreLeftAsTheyAre) {
  TempDir dir;
  const Env env = make_env();
  const std::string garbage = dir.file("garbage.sqlite"), empty = dir.file("empty.sqlite");
  { std::ofstream(garbage, std::ios::binary) << std::string(8192, 'x'); }
  { std::ofstream(empty, std::ios::binary); }  // a valid, empty database of schema version 0
  for (const std::string& f : {garbage, empty}) {
    const std::vector<char> before = read_file(f);
    Warnings w;
    auto db = Db::open(f, env, w.fn(), OpenMode::kReadOnly);
    EXPECT_TRUE(db->in_memory()) << f;
    EXPECT_FALSE(db->read_only()) << f;
    EXPECT_EQ(w.list.size(), 1u) << f;
    EXPECT_TRUE(w.any_contains(f)) << (w.list.empty() ? "" : w.list.front());
    EXPECT_TRUE(db->put_cubin(make_cubin("mem", 100)));  // the in-memory database works
    db.reset();
    EXPECT_EQ(read_file(f), before) << f;
  }
  EXPECT_TRUE(corrupt_copies(dir.path(), "garbage.sqlite").empty());
  EXPECT_FALSE(fs::exists(dir.file("missing.sqlite")));
  Warnings w;
  auto missing = Db::open(dir.file("missing.sqlite"), env, w.fn(), OpenMode::kReadOnly);
  EXPECT_TRUE(missing->in_memory());
  EXPECT_FALSE(fs::exists(dir.file("missing.sqlite")));  // read-only never creates
}

TEST(CacheReadOnly, AFileThatCannotBeWrittenAtOpenIsServedReadOnly) {
  // RLIMIT_FSIZE (enforced for root too) below the -shm size: the read-write open fails like a full disk, and the
  // file, which passes its checks, is served read-only instead of being dropped. In a child process.
  TempDir dir;
  const Env env = make_env();
  const std::string file = dir.file("cache.sqlite");
  const CubinRow shipped = make_cubin("shipped", 3000);
  {
    auto db = Db::open(file, env);
    ASSERT_TRUE(db->put_cubin(shipped));
  }
  const std::vector<char> before = read_file(file);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    signal(SIGXFSZ, SIG_IGN);
    rlimit lim{1024, RLIM_INFINITY};
    if (setrlimit(RLIMIT_FSIZE, &lim) != 0) _exit(77);
    bool warned = false;
    auto db = Db::open(file, env, [&](const std::string&) { warned = true; });
    int code = 0;
    if (!db->read_only()) code |= 1;
    if (!warned) code |= 2;
    auto got = db->get_cubin(shipped.compile_hash, shipped.compile_key);
    if (!got || got->cubin != shipped.cubin) code |= 4;
    if (!db->put_cubin(make_cubin("mem", 5000))) code |= 8;
    _exit(code);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 77) GTEST_SKIP() << "setrlimit(RLIMIT_FSIZE) not permitted";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "bit 1: not read-only, 2: no warning, 4: shipped row missing, 8: put failed";
  EXPECT_EQ(read_file(file), before);
}

// A context on a shipped cache with $FA_CACHE_READONLY=1 (the path a root run, which ignores permissions, takes): a
// kernel compiled into the file earlier is a store hit, tuning rows are found, and a new compile succeeds without
// touching the file.
TEST(CacheReadOnlyContext, ShippedCacheIsServedAndNewKernelsStayInMemory) {
  if (fa::rt::nvrtc_version().empty()) GTEST_SKIP() << "NVRTC unavailable";
  TempDir dir;
  const std::string file = dir.file("cache.sqlite");
  fa::gen::ProblemDesc p;
  p.dtype = fa::gen::kFp16;
  p.head_dim = p.head_dim_v = 64;
  p.seqlen_q = p.seqlen_k = 100;
  auto config = [&](fa_context c, int head_dim) {
    p.head_dim = p.head_dim_v = head_dim;
    const fa::gen::Semantic s = fa::gen::select_forward(p, c->arch);
    return fa::gen::finalize(s, s.family->defaults(s), p);
  };
  fa_context c1 = fa::test::make_context(file, FA_TUNE_DEFAULTS_ONLY);
  ASSERT_NE(c1, nullptr);
  const fa::gen::KernelConfig shipped = config(c1, 64), fresh = config(c1, 128);
  std::shared_ptr<fa::rt::Kernel> k;
  ASSERT_TRUE(c1->kernels->get(shipped, true, &k).ok());
  ASSERT_TRUE(fa::tune::context_db(c1)->put_tune_results({{"sem", "bucket", "w4", 1.0, "ok"}}));
  fa_context_destroy(c1);
  make_read_only(dir.path(), file);
  const std::vector<char> before = read_file(file);

  {
    fa::test::ScopedEnv ro("FA_CACHE_READONLY", "1");
    fa_context c2 = fa::test::make_context(file, FA_TUNE_DEFAULTS_ONLY);
    ASSERT_NE(c2, nullptr);
    fa::cache::Db* db = fa::tune::context_db(c2);
    ASSERT_NE(db, nullptr);
    EXPECT_TRUE(db->read_only());
    EXPECT_EQ(db->path(), file);
    std::shared_ptr<fa::rt::Kernel> hit, compiled;
    ASSERT_TRUE(c2->kernels->get(shipped, false, &hit).ok());  // no compiling allowed: must come from the file
    EXPECT_TRUE(hit->from_store);
    ASSERT_TRUE(db->best("sem", "bucket"));
    EXPECT_EQ(db->best("sem", "bucket")->tunables, "w4");
    const fa::rt::Status st = c2->kernels->get(fresh, true, &compiled);
    EXPECT_TRUE(st.ok()) << st.message;
    EXPECT_EQ(c2->kernels->stats().compiles, 1);
    EXPECT_TRUE(db->get_cubin(compiled->hash, compiled->key));  // kept in the overlay
    fa_context_destroy(c2);
  }
  EXPECT_EQ(read_file(file), before);
  make_writable(dir.path(), file);
  auto db = Db::open(file, fa::cache::Env{});
  EXPECT_EQ(db->list_cubins().size(), 1u);  // only the shipped kernel
}

TEST(CacheReadOnlyContext, BadFaCacheReadonlyValueIsRejected) {
  const std::string err = fa::test::context_create_error("FA_CACHE_READONLY", "yes");
  EXPECT_NE(err.find("FA_CACHE_READONLY"), std::string::npos) << err;
  EXPECT_NE(err.find("0 or 1"), std::string::npos) << err;
  EXPECT_NE(err.find("'yes'"), std::string::npos) << err;
}

}  // namespace
