// test_backward_wgmma.cpp -- the Hopper backward (bwd_wgmma) against the float64 oracle's gradients: on sm_90 the
// selector must choose it for the problems it covers (head dims 64 / 128, fp16 / bf16, no mask / causal / windows,
// MHA and GQA, seqlen_q != seqlen_k, lengths that are not multiples of the tiles), fa_run_backward must match the
// oracle, and every valid bwd_wgmma tunable point (rt::run_backward_at) must give the same gradients. Problems it
// does not cover (deterministic mode, a head dim of 96, varlen) must select bwd_mma. Skipped off sm_90.
#include <gtest/gtest.h>

#include <string>

#include <fmt/format.h>

#include "generator/family.h"
#include "generator/problem.h"
#include "runtime/context.h"
#include "tests/gpu/grad_support.h"

namespace fa::test {
namespace {

TEST(GpuBackwardWgmma, SelectedWhereItCoversAndMatchesTheOracle) {
  Gpu& gp = gpu();
  if (!gp.ok()) GTEST_SKIP() << "no GPU: " << gp.why;
  if (gp.ctx->arch != 90) GTEST_SKIP() << "bwd_wgmma runs on sm_90 only";
  std::mt19937_64 rng(test_seed() + 41);
  // dtype, d, dv, heads q/kv, mask (2: window 37 / 5), sq, sk, bias, alibi, softcap, varlen
  const CaseSpec problems[] = {
      {FA_DTYPE_BF16, 128, 128, 4, 4, 0, 333, 333, false, false, false, false},
      {FA_DTYPE_FP16, 64, 64, 4, 2, 1, 257, 200, false, false, false, false},
      {FA_DTYPE_BF16, 128, 128, 6, 2, 1, 200, 517, false, false, false, false},
      {FA_DTYPE_BF16, 64, 64, 2, 2, 2, 300, 300, false, false, false, false},
      {FA_DTYPE_FP16, 128, 128, 2, 1, 2, 190, 130, false, false, false, false},
      {FA_DTYPE_BF16, 128, 128, 2, 2, 1, 640, 640, false, false, false, false},
      {FA_DTYPE_FP16, 64, 64, 3, 1, 0, 64, 1000, false, false, false, false},
      {FA_DTYPE_BF16, 128, 128, 2, 2, 1, 1, 129, false, false, false, false},
  };
  int points = 0;
  double worst = 0;
  for (const CaseSpec& pr : problems) {
    Case c;
    Grads g;
    gen::ProblemDesc d;
    ASSERT_TRUE(forward_with_grads(rng, pr, &c, &g, &d));
    const gen::Semantic s = gen::select_backward(d, gp.ctx->arch);
    ASSERT_NE(s.family, nullptr);
    ASSERT_STREQ(s.family->name, "bwd_wgmma") << c.desc;
    // fa_run_backward (the selector, default tunables)
    const GradResult r = check_grads(c, g);
    EXPECT_TRUE(r.ok(c.dtype)) << r.describe() << "[" << c.desc << "]";
    worst = std::max(worst, r.worst());
    // every valid point of the family
    for (const gen::Tunables& t : gen::valid_space(s, gp.ctx->limits)) {
      const std::string key = fmt::format("{} [{}]", gen::tunables_key(s, t), c.desc);
      const GradResult rp = check_grads_at(c, g, t, "bwd_wgmma");
      ASSERT_TRUE(rp.failure.empty()) << rp.failure << " " << key;
      worst = std::max(worst, rp.worst());
      EXPECT_TRUE(rp.ok(c.dtype)) << rp.describe() << key;
      ++points;
    }
    // the deterministic mode is bwd_mma's
    d.deterministic = true;
    EXPECT_STREQ(gen::select_backward(d, gp.ctx->arch).family->name, "bwd_mma") << c.desc;
  }
  std::printf(
      "GPU SUMMARY backward wgmma: %zu problems selected bwd_wgmma, %d (problem, point) pairs, worst grad err "
      "%.3g\n",
      std::size(problems), points, worst);
}

}  // namespace
}  // namespace fa::test
