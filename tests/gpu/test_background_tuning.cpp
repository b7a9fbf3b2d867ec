// test_background_tuning.cpp -- FA_TUNE_ON_FIRST_USE tunes in the background: the first call of a new key returns
// the oracle's answer from the default kernel without waiting for the tuning; once the worker swapped its winner
// in, calls at random lengths of the key (outputs poisoned beforehand, fresh random inputs) still match the float64
// oracle, with zero failures; destroying a context while its worker tunes returns promptly and a new context on the
// same cache works.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "runtime/context.h"
#include "tests/cpu/context_support.h"
#include "tests/gpu/gpu_support.h"
#include "tuner/chooser.h"

namespace fa::test {
namespace {

using Clock = std::chrono::steady_clock;

void fill(Case* c, int head_dim, int sq, int sk) {
  c->dtype = FA_DTYPE_BF16;
  c->force_aligned = true;
  c->op.heads_q = 4;
  c->op.heads_kv = 2;
  c->op.head_dim = head_dim;
  c->op.mask = FA_MASK_CAUSAL;
  c->op.batch = 2;
  c->op.seqlen_q = sq;
  c->op.seqlen_k = sk;
}

bool matches(Case& c) {
  const CaseResult r = compare_outputs(c);
  return r.err_o <= tolerance(c.dtype) && r.err_lse <= 2e-3 && r.padding_intact;
}

TEST(GpuBackgroundTuning, FirstCallAndCallsAfterTheSwapMatchTheOracle) {
  Gpu& g = gpu();
  if (!g.ok()) GTEST_SKIP() << "no GPU: " << g.why;
  const TempDir tmp("background");
  const std::string dir = tmp.path();
  fa_context ctx = make_context(dir + "/cache.sqlite", FA_TUNE_ON_FIRST_USE);
  ASSERT_NE(ctx, nullptr);
  auto* chooser = dynamic_cast<tune::TuningChooser*>(ctx->chooser.get());
  ASSERT_NE(chooser, nullptr);
  chooser->options().max_candidates = 6;  // a short tuning: the background job's options are these
  chooser->options().budget_ms = 150;
  std::mt19937_64 rng(test_seed() + 19);
  int calls = 0, failures = 0;

  Case first;
  fill(&first, 128, 700 + static_cast<int>(rng() % 300), 700 + static_cast<int>(rng() % 300));
  materialize(rng, &first);
  const uint64_t g0 = ctx->plans.generation();
  const auto t0 = Clock::now();
  ASSERT_EQ(fa_run(ctx, &first.params, g.stream), FA_OK) << fa_last_error();
  ASSERT_EQ(g.d->cuStreamSynchronize(g.stream), CUDA_SUCCESS);
  const double first_s = std::chrono::duration<double>(Clock::now() - t0).count();
  ++calls;
  if (!matches(first)) ++failures, ADD_FAILURE() << "first call [" << first.desc << "]";
  // (The worker compiles in parallel from here on, so the context's compile count says nothing about the call.)
  EXPECT_LT(first_s, 5.0) << "the first call waited for the tuning";

  // Calls while the worker tunes, then after the swap: all match.
  auto random_calls = [&](int n, const char* when) {
    for (int i = 0; i < n; ++i) {
      Case c;
      fill(&c, 128, 513 + static_cast<int>(rng() % 512), 513 + static_cast<int>(rng() % 512));
      materialize(rng, &c);
      ++calls;
      const fa_status st = fa_run(ctx, &c.params, g.stream);
      ASSERT_EQ(st, FA_OK) << fa_last_error() << " [" << c.desc << "] " << when;
      ASSERT_EQ(g.d->cuStreamSynchronize(g.stream), CUDA_SUCCESS);
      if (!matches(c)) ++failures, ADD_FAILURE() << "[" << c.desc << "] " << when;
    }
  };
  random_calls(4, "during tuning");
  ASSERT_TRUE(chooser->wait_background(240.0)) << "the background tuning did not finish";
  const tune::BackgroundStats bs = chooser->background_stats();
  EXPECT_EQ(bs.submitted, 1);
  EXPECT_EQ(bs.finished, 1);
  EXPECT_GT(ctx->plans.generation(), g0) << "the winner was not swapped in";
  random_calls(12, "after the swap");
  // The first call's shape again: its fast-path entry was rebuilt with the winner.
  materialize(rng, &first);
  ASSERT_EQ(fa_run(ctx, &first.params, g.stream), FA_OK) << fa_last_error();
  ASSERT_EQ(g.d->cuStreamSynchronize(g.stream), CUDA_SUCCESS);
  ++calls;
  if (!matches(first)) ++failures, ADD_FAILURE() << "first shape after the swap [" << first.desc << "]";
  std::printf("GPU SUMMARY background tuning: first call %.3f s, %d calls, %d failed\n", first_s, calls, failures);
  fa_context_destroy(ctx);
}

TEST(GpuBackgroundTuning, DestroyWhileTuningReturnsPromptly) {
  Gpu& g = gpu();
  if (!g.ok()) GTEST_SKIP() << "no GPU: " << g.why;
  const TempDir tmp("background_destroy");
  const std::string dir = tmp.path();
  std::mt19937_64 rng(test_seed() + 20);
  for (int round = 0; round < 2; ++round) {
    fa_context ctx = make_context(dir + "/cache.sqlite", FA_TUNE_ON_FIRST_USE);
    ASSERT_NE(ctx, nullptr);
    Case c;
    fill(&c, round == 0 ? 64 : 96, 2048, 2048);  // a new key each round
    materialize(rng, &c);
    ASSERT_EQ(fa_run(ctx, &c.params, g.stream), FA_OK) << fa_last_error();
    ASSERT_EQ(g.d->cuStreamSynchronize(g.stream), CUDA_SUCCESS);
    EXPECT_TRUE(matches(c)) << c.desc;
    if (round == 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));  // mid-compile or mid-timing
    const auto t0 = Clock::now();
    fa_context_destroy(ctx);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    EXPECT_LT(s, 20.0) << "fa_context_destroy waited for the tuning";
    std::printf("GPU SUMMARY background destroy round %d: %.3f s\n", round, s);
  }
  // The cache file is intact: a new context runs.
  fa_context ctx = make_context(dir + "/cache.sqlite", FA_TUNE_ON_FIRST_USE);
  ASSERT_NE(ctx, nullptr);
  Case c;
  fill(&c, 64, 1000, 1000);
  materialize(rng, &c);
  ASSERT_EQ(fa_run(ctx, &c.params, g.stream), FA_OK) << fa_last_error();
  ASSERT_EQ(g.d->cuStreamSynchronize(g.stream), CUDA_SUCCESS);
  EXPECT_TRUE(matches(c)) << c.desc;
  fa_context_destroy(ctx);
}

}  // namespace
}  // namespace fa::test
