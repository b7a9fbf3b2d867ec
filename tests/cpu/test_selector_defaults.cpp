// test_selector_defaults.cpp -- the selector never names a family whose heuristic default is invalid for the
// problem: every head-dim pair the API takes (multiples of 8 up to 256), decode and prefill shapes, paged and not,
// sm_80 and sm_90. (A decode family once covered d 128 / dv 248, where no tile fits its register budget, and
// fa_run failed with an internal error; the random GPU tests found it.) Also with the score features: fwd_wgmma's
// rules at head dims past 224 (a bias, or ALiBi with softcap, on 1 consumer; a bias beside ALiBi on the mma forward).
#include <gtest/gtest.h>

#include <string>

#include "generator/family.h"
#include "generator/problem.h"

namespace {

TEST(SelectorDefaults, TheSelectedFamilysDefaultIsValidForEveryHeadDimPair) {
  int checked = 0, failures = 0;
  std::string first;
  // the score features: none, bias, ALiBi + softcap, bias + ALiBi, softcap (bits: bias 1, ALiBi 2, softcap 4)
  for (int feat : {0, 1, 6, 3, 4})
    for (int arch : {80, 90})
      for (int sq : {1, 7, 300})
        for (bool paged : {false, true})
          for (int d = 8; d <= 256; d += 8)
            for (int dv = 8; dv <= 256; dv += 8) {
              if (feat != 0 && (sq != 300 || paged)) continue;  // features: the prefill shapes
              fa::gen::ProblemDesc p;
              p.has_bias = (feat & 1) != 0;
              p.has_alibi = (feat & 2) != 0;
              p.has_softcap = (feat & 4) != 0;
              p.dtype = fa::gen::kBf16;
              p.batch = 2;
              p.seqlen_q = sq;
              p.seqlen_k = 256;
              p.heads_q = 8;
              p.heads_kv = 2;
              p.head_dim = d;
              p.head_dim_v = dv;
              p.mask = fa::gen::kMaskCausal;
              p.aligned16 = true;
              p.tma_ok = !paged;
              p.paged = paged;
              p.page_size = paged ? 16 : 0;
              p.has_lse = true;
              const fa::gen::Semantic s = fa::gen::select_forward(p, arch);
              ASSERT_NE(s.family, nullptr);
              const fa::gen::Plan plan = fa::gen::make_plan(s, p);
              std::string why;
              for (const auto& step : plan.steps) {
                ++checked;
                if (!fa::gen::is_valid(step, fa::gen::limits_for_arch(arch), &why)) {
                  if (failures++ == 0) first = fa::gen::canonical_key(step) + ": " + why;
                }
              }
            }
  EXPECT_EQ(failures, 0) << "first: " << first;
  EXPECT_GT(checked, 10000);
}

}  // namespace
