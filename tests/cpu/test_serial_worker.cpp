// test_serial_worker.cpp -- the one-thread task queue behind a context's sibling-kernel prefetch (and the
// background tuner): real NVRTC compiles into a kernel cache (no device), each key once, the queue's kernels in
// memory after wait_idle (a later request is a memory hit, no compile); stop() raising the cancel flag, dropping what
// is queued while the task in flight finishes, nothing taken after stop; and $FA_PREFETCH's parsing (a context
// without a device has no prefetch worker: nothing it could load).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>

#include "context_support.h"
#include "fa/fa.h"
#include "generator/family.h"
#include "ref_config.h"
#include "runtime/context.h"
#include "runtime/kernel_cache.h"
#include "runtime/serial_worker.h"

using namespace fa;
using fa::test::ref_config;

namespace {}  // namespace

TEST(SerialWorker, CompilesEachKernelOnceAheadOfTheRequest) {
  rt::KernelCache cache(nullptr);
  rt::SerialWorker pf;
  auto submit = [&](const gen::KernelConfig& cfg) {
    return pf.submit(gen::canonical_key(cfg), [&cache, cfg](const std::atomic<bool>&) {
      std::shared_ptr<rt::Kernel> k;
      (void)cache.get(cfg, true, &k);
    });
  };
  const gen::KernelConfig a = ref_config(64), b = ref_config(96);
  EXPECT_TRUE(submit(a));
  EXPECT_TRUE(submit(b));
  EXPECT_FALSE(submit(a)) << "a kernel submitted before is not queued again";
  ASSERT_TRUE(pf.wait_idle(120.0));
  EXPECT_NE(cache.peek(a), nullptr);
  EXPECT_NE(cache.peek(b), nullptr);
  EXPECT_EQ(cache.stats().compiles, 2);
  std::shared_ptr<rt::Kernel> k;
  ASSERT_TRUE(cache.get(b, false, &k).ok()) << "a request after the prefetch needs no compile";
  EXPECT_EQ(cache.stats().compiles, 2);
  const rt::WorkerStats s = pf.stats();
  EXPECT_EQ(s.submitted, 2);
  EXPECT_EQ(s.done, 2);
  EXPECT_EQ(s.dropped, 0);
}

TEST(SerialWorker, StopCancelsDropsTheQueueAndLetsTheTaskInFlightFinish) {
  std::atomic<bool> started{false}, finished{false}, saw_cancel{false};
  std::atomic<int> calls{0};
  rt::SerialWorker pf;
  auto task = [&](const std::atomic<bool>& cancelled) {
    ++calls;
    started = true;
    for (int i = 0; i < 400 && !cancelled; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    saw_cancel = cancelled.load();
    finished = true;
  };
  ASSERT_TRUE(pf.submit("a", task));
  ASSERT_TRUE(pf.submit("b", task));
  ASSERT_TRUE(pf.submit("c", [](const std::atomic<bool>&) { throw std::runtime_error("never run"); }));
  while (!started) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  pf.stop();
  EXPECT_TRUE(finished) << "stop() joins the worker after its task in flight";
  EXPECT_TRUE(saw_cancel) << "the task in flight sees the cancel flag";
  EXPECT_EQ(calls.load(), 1);
  const rt::WorkerStats s = pf.stats();
  EXPECT_EQ(s.done, 1);
  EXPECT_EQ(s.dropped, 2);
  EXPECT_FALSE(pf.submit("d", task)) << "nothing is taken after stop()";
  pf.stop();  // idempotent
  EXPECT_EQ(calls.load(), 1);
}

TEST(SerialWorker, ATaskThatThrowsLeavesTheWorkerRunning) {
  rt::SerialWorker pf;
  std::atomic<int> after{0};
  ASSERT_TRUE(pf.submit("throws", [](const std::atomic<bool>&) { throw std::runtime_error("boom"); }));
  ASSERT_TRUE(pf.submit("next", [&](const std::atomic<bool>&) { ++after; }));
  ASSERT_TRUE(pf.wait_idle(10.0));
  EXPECT_EQ(after.load(), 1);
  EXPECT_EQ(pf.stats().done, 2);
  EXPECT_TRUE(pf.idle());
}

TEST(SerialWorker, PrefetchEnvironmentSwitchIsParsedAndNeedsADevice) {
  {
    test::ScopedEnv env("FA_PREFETCH", "0");
    fa_context c = test::make_context(":memory:", -1);
    ASSERT_NE(c, nullptr);
    EXPECT_FALSE(c->prefetch_enabled);
    EXPECT_EQ(c->prefetch, nullptr);
    fa_context_destroy(c);
  }
  {
    test::ScopedEnv env("FA_PREFETCH", nullptr);
    fa_context c = test::make_context(":memory:", -1);
    ASSERT_NE(c, nullptr);
    EXPECT_TRUE(c->prefetch_enabled);
    EXPECT_EQ(c->prefetch == nullptr, !c->has_device) << "a prefetcher exactly when there is a device to load on";
    fa_context_destroy(c);
  }
  {
    const std::string err = test::context_create_error("FA_PREFETCH", "yes");
    EXPECT_NE(err.find("FA_PREFETCH"), std::string::npos) << err;
    EXPECT_NE(err.find("'yes'"), std::string::npos) << err;
  }
}
