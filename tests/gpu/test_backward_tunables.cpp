// test_backward_tunables.cpp -- tunables never change the backward's results: for a sample of problems covering
// every feature (GQA, varlen, bias, ALiBi, softcap, windows, head dims not multiples of 16, d != dv), every valid
// bwd_mma tunable point, and on sm_90 every valid bwd_wgmma point of the problems it covers, is compiled, launched
// through rt::run_backward_at (gradients re-poisoned first) and checked against the float64 oracle's gradients; half
// the bwd_mma points run in deterministic mode.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include <fmt/format.h>

#include "generator/family.h"
#include "generator/problem.h"
#include "runtime/context.h"
#include "runtime/launch.h"
#include "tests/gpu/grad_support.h"

namespace fa::test {
namespace {

TEST(GpuBackwardTunables, EveryValidPointGivesTheSameGradients) {
  Gpu& gp = gpu();
  if (!gp.ok()) GTEST_SKIP() << "no GPU: " << gp.why;
  std::mt19937_64 rng(test_seed() + 29);
  // dtype, d, dv, heads q/kv, mask, sq, sk, bias, alibi, softcap, varlen
  const CaseSpec problems[] = {
      {FA_DTYPE_FP16, 64, 64, 4, 2, 1, 257, 257, false, false, false, false},
      {FA_DTYPE_BF16, 128, 128, 2, 2, 0, 200, 333, true, false, false, false},
      {FA_DTYPE_FP16, 72, 40, 3, 1, 2, 150, 170, false, false, true, false},
      {FA_DTYPE_BF16, 128, 128, 4, 1, 1, 0, 0, false, true, false, true},
      {FA_DTYPE_FP16, 96, 96, 2, 2, 1, 190, 130, true, true, true, false},
      {FA_DTYPE_BF16, 192, 192, 2, 1, 0, 100, 140, false, false, false, false},
  };
  int points = 0, problems_run = 0;
  double worst = 0;
  for (const CaseSpec& pr : problems) {
    Case c;
    Grads g;
    gen::ProblemDesc d;
    ASSERT_TRUE(forward_with_grads(rng, pr, &c, &g, &d));
    // bwd_mma everywhere; bwd_wgmma (sm_90) on the problems it covers, non-deterministic only
    for (const char* family : {"bwd_mma", "bwd_wgmma"}) {
      std::string why;
      const gen::Family& fam = *gen::find_family(family);
      const bool wgmma = std::string(family) == "bwd_wgmma";
      if (!gen::family_covers(fam, d, gp.ctx->arch, &why)) {
        ASSERT_TRUE(wgmma) << why << " [" << c.desc << "]";
        continue;
      }
      const gen::Semantic s = gen::semantic_for(fam, d, gp.ctx->arch);
      const auto space = gen::valid_space(s, gp.ctx->limits);
      ASSERT_FALSE(space.empty()) << gen::semantic_key(s);
      parallel_for(space.size(), [&](size_t i) {  // compile in parallel, then launch serially
        for (const auto& step : gen::make_plan(s, space[i], d).steps) {
          std::shared_ptr<rt::Kernel> k;
          rt::kernel_for(gp.ctx, step, true, &k);
        }
      });
      ++problems_run;
      for (size_t i = 0; i < space.size(); ++i) {
        const gen::Tunables& t = space[i];
        const std::string key = fmt::format("{} [{}]", gen::tunables_key(s, t), c.desc);
        g.b.deterministic = wgmma ? 0 : static_cast<int>(i % 2);
        const GradResult r = check_grads_at(c, g, t, family);
        ASSERT_TRUE(r.failure.empty()) << r.failure << " " << key;
        worst = std::max(worst, r.worst());
        EXPECT_TRUE(r.ok(c.dtype)) << r.describe() << key;
        ++points;
      }
      g.b.deterministic = 0;
    }
  }
  std::printf(
      "GPU SUMMARY backward tunables: %d (problem, bwd_mma / bwd_wgmma point) pairs over %d (problem, "
      "family) pairs, worst grad err %.3g\n",
      points, problems_run, worst);
}

}  // namespace
}  // namespace fa::test
