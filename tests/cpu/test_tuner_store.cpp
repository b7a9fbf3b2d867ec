// test_tuner_store.cpp -- the CubinStore adapter over cache_db: a cubin compiled once is loaded by a fresh
// KernelCache (new Db on the same file) without an NVRTC call, with its ptxas info and the CTA's shared memory; the
// context's store opens the requested file.
#include <gtest/gtest.h>
#include <unistd.h>

#include "cache_db/cache_db.h"
#include "fa/fa.h"
#include "generator/family.h"
#include "runtime/kernel_cache.h"
#include "tests/cpu/context_support.h"
#include "tuner/cache_store.h"

using namespace fa;

TEST(TunerStore, CubinRoundTripWithoutNvrtc) {
  if (rt::nvrtc_version().empty()) GTEST_SKIP() << "NVRTC unavailable";
  const test::TempDir tmp("store_test");
  const std::string path = tmp.file("cache.sqlite");
  fa_context_options o;
  fa_context_options_init(&o);
  o.cache_path = path.c_str();
  fa_context c = nullptr;
  ASSERT_EQ(fa_context_create(&o, &c), FA_OK) << fa_last_error();
  ASSERT_NE(tune::context_db(c), nullptr);
  EXPECT_EQ(tune::context_db(c)->path(), path);
  EXPECT_FALSE(tune::context_db(c)->in_memory());

  gen::ProblemDesc p;
  p.dtype = gen::kFp16;
  p.head_dim = p.head_dim_v = 64;
  p.seqlen_q = p.seqlen_k = 100;
  p.aligned16 = false;  // the reference family
  gen::Semantic s = gen::select_forward(p, c->arch);
  ASSERT_EQ(s.family, gen::find_family("fwd_ref"));
  const gen::KernelConfig cfg = gen::finalize(s, s.family->defaults(s), p);

  std::shared_ptr<rt::Kernel> k1;
  {
    rt::KernelCache cache(c->store.get());
    rt::Status st = cache.get(cfg, true, &k1);
    ASSERT_TRUE(st.ok()) << st.message;
    EXPECT_EQ(cache.stats().compiles, 1);
    EXPECT_EQ(cache.stats().store_hits, 0);
    ASSERT_FALSE(k1->cubin.empty());
  }
  const std::vector<cache::CubinSummary> listed = tune::context_db(c)->list_cubins(false);
  EXPECT_GE(listed.size(), 1u);
  // The row's shared memory is the CTA's: ptxas's static part plus the dynamic tiles the family launches with.
  ASSERT_GT(gen::smem_of(cfg), 0u);
  for (const cache::CubinSummary& row : listed) {
    if (row.compile_key != k1->key) continue;
    EXPECT_EQ(row.smem_bytes, k1->ptxas.smem_static + static_cast<int>(gen::smem_of(cfg)));
  }
  fa_context_destroy(c);

  // A new process-like setup: a new Db on the same file, a new cache.
  fa_context c2 = nullptr;
  ASSERT_EQ(fa_context_create(&o, &c2), FA_OK) << fa_last_error();
  auto store = tune::open_cache_store(c2, path.c_str());
  rt::KernelCache cache2(store.get());
  std::shared_ptr<rt::Kernel> k2;
  rt::Status st = cache2.get(cfg, false, &k2);  // compiling not even allowed
  ASSERT_TRUE(st.ok()) << st.message;
  EXPECT_EQ(cache2.stats().compiles, 0);
  EXPECT_EQ(cache2.stats().store_hits, 1);
  EXPECT_TRUE(k2->from_store);
  EXPECT_EQ(k2->cubin, k1->cubin);
  EXPECT_EQ(k2->ptxas.registers, k1->ptxas.registers);
  EXPECT_EQ(k2->ptxas.smem_static, k1->ptxas.smem_static);  // the dynamic part is taken off again
  EXPECT_EQ(k2->ptxas.spill_stores + k2->ptxas.spill_loads, k1->ptxas.spill_stores + k1->ptxas.spill_loads);
  fa_context_destroy(c2);
}

TEST(TunerStore, EnvironmentOfAContextWithoutDevice) {
  fa_context c = nullptr;
  fa_context_options o;
  fa_context_options_init(&o);
  o.cache_path = ":memory:";
  ASSERT_EQ(fa_context_create(&o, &c), FA_OK);
  const cache::Env e = tune::context_env(c);
  if (!c->has_device) {
    EXPECT_EQ(e.gpu_name, "none");
    EXPECT_EQ(e.sm_count, 0);
  } else {
    EXPECT_EQ(e.gpu_name, c->gpu_name);
    EXPECT_GT(e.sm_count, 0);
  }
  EXPECT_EQ(e.library_version, std::string(fa_version_string()));
  EXPECT_EQ(e.templates_hash, gen::shared_templates_hash());
  EXPECT_EQ(e.generator_version, gen::kGeneratorVersion);
  EXPECT_EQ(e.nvrtc_version, rt::nvrtc_version());
  fa_context_destroy(c);
}
