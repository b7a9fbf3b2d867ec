// test_kernel_cache.cpp -- the in-memory kernel cache: concurrent requests for one kernel compile it once, distinct
// kernels compile separately, and a capture-time request never compiles.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "generator/family.h"
#include "ref_config.h"
#include "runtime/kernel_cache.h"

using namespace fa;
using fa::test::ref_config;

namespace {

TEST(KernelCache, ConcurrentRequestsCompileOnce) {
  rt::KernelCache cache(nullptr);
  const gen::KernelConfig c = ref_config(64);
  std::vector<std::shared_ptr<rt::Kernel>> got(8);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < got.size(); ++i)
    threads.emplace_back([&, i] { ASSERT_TRUE(cache.get(c, true, &got[i]).ok()); });
  for (auto& t : threads) t.join();
  for (const auto& k : got) {
    ASSERT_NE(k, nullptr);
    EXPECT_EQ(k.get(), got[0].get()) << "every thread gets the one compiled kernel";
  }
  const rt::KernelCacheStats s = cache.stats();
  EXPECT_EQ(s.compiles, 1);
  EXPECT_EQ(s.memory_hits, 7);
  EXPECT_FALSE(got[0]->cubin.empty());
}

TEST(KernelCache, DistinctKernelsAndNoCompileWhenForbidden) {
  rt::KernelCache cache(nullptr);
  std::shared_ptr<rt::Kernel> a, b, c;
  EXPECT_EQ(cache.get(ref_config(32), false, &c).code, FA_ERROR_STREAM_CAPTURING) << "no compile while capturing";
  EXPECT_EQ(cache.stats().compiles, 0);
  ASSERT_TRUE(cache.get(ref_config(32), true, &a).ok());
  ASSERT_TRUE(cache.get(ref_config(40), true, &b).ok());
  EXPECT_NE(a->hash, b->hash);
  EXPECT_EQ(cache.stats().compiles, 2);
  ASSERT_TRUE(cache.get(ref_config(32), false, &c).ok()) << "a compiled kernel is served while capturing";
  EXPECT_EQ(c.get(), a.get());
  EXPECT_EQ(cache.peek(ref_config(40)).get(), b.get());
  EXPECT_EQ(cache.peek(ref_config(48)), nullptr);
}

}  // namespace
