// test_selector_defaults.cpp -- the selector never names a family whose heuristic default is invalid for the
// problem: every head-dim pair the API takes (multiples of 8 up to 256), decode and prefill shapes, paged and not,
// sm_80, sm_90, sm_100 and sm_120 (99 KB of shared memory a block). (A decode family once covered d 128 / dv 248, where
// no tile fits its register budget, and fa_run failed with an internal error; the random GPU tests found it.) Also with
// the score features: fwd_wgmma's rules at head dims past 224 (a bias, or ALiBi with softcap, on 1 consumer; a bias
// beside ALiBi on the mma forward).
#include <gtest/gtest.h>

#include <string>

#include "generator/family.h"
#include "generator/problem.h"
#include "generator/user_mods.h"
#include "runtime/arch.h"

namespace {

TEST(SelectorDefaults, TheSelectedFamilysDefaultIsValidForEveryHeadDimPair) {
  int checked = 0, failures = 0;
  std::string first;
  // the score features: none, bias, ALiBi + softcap, bias + ALiBi, softcap (bits: bias 1, ALiBi 2, softcap 4)
  for (int feat : {0, 1, 6, 3, 4})
    for (int arch : {80, 90, 100, 120})
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

// Blackwell (sm_100 / 103 / 120 / 121) runs the mma.sync families: the Hopper ones (wgmma, TMA, setmaxnreg: sm_90a
// only) are never ranked there, and the prefill, decode, MLA-shaped, user-code and backward problems that take them
// on sm_90 take fwd_mma, fwd_split and bwd_mma instead, each step of their plans valid under the arch's limits.
fa::gen::ProblemDesc prefill(bool backward) {
  fa::gen::ProblemDesc p;
  p.dtype = fa::gen::kBf16;
  p.batch = 2;
  p.seqlen_q = p.seqlen_k = 2048;
  p.heads_q = p.heads_kv = 16;
  p.head_dim = p.head_dim_v = 128;
  p.mask = fa::gen::kMaskCausal;
  p.aligned16 = p.tma_ok = true;
  p.has_lse = true;
  p.backward = backward;
  return p;
}

// The families of the plan of the selected family for p on arch, each step checked against the arch's limits.
std::string plan_families(const fa::gen::ProblemDesc& p, int arch, fa::gen::Role role) {
  const fa::gen::Semantic s = fa::gen::select(role, p, arch);
  if (s.family == nullptr) return "(none)";
  std::string out;
  for (const auto& step : fa::gen::make_plan(s, p).steps) {
    std::string why;
    EXPECT_TRUE(fa::gen::is_valid(step, fa::gen::limits_for_arch(arch), &why))
        << fa::gen::canonical_key(step) << ": " << why;
    out += std::string(out.empty() ? "" : " ") + fa::gen::family_name(step.s);
  }
  return out;
}

TEST(SelectorBlackwell, PicksTheMmaFamiliesAndNeverTheHopperOnes) {
  static const int dtypes[1] = {1}, ranks[1] = {1};
  const fa::gen::UserMods* doc = fa::gen::intern_user_mods("return j <= i;", "", 1, dtypes, ranks);
  fa::gen::ProblemDesc decode = prefill(false);
  decode.seqlen_q = 1;
  decode.seqlen_k = 8192;
  decode.heads_kv = 2;
  decode.paged = true;
  decode.page_size = 16;
  decode.tma_ok = false;
  decode.sm_count = 148;
  fa::gen::ProblemDesc mla = decode;  // MLA's latent cache: fwd_mla on sm_90
  mla.heads_q = 128;
  mla.heads_kv = 1;
  mla.head_dim = 576;
  mla.head_dim_v = 512;
  mla.v_in_k = true;
  fa::gen::ProblemDesc mods = prefill(false);
  mods.mods = doc;
  fa::gen::ProblemDesc mods_bwd = prefill(true);
  mods_bwd.mods = doc;
  const fa::gen::Role fwd = fa::gen::Role::Forward, bwd = fa::gen::Role::Backward;
  // sm_90 takes the Hopper families for these problems: what the Blackwell archs must not do
  EXPECT_EQ(plan_families(prefill(false), 90, fwd), "fwd_wgmma");
  EXPECT_EQ(plan_families(prefill(true), 90, bwd), "bwd_pre bwd_wgmma bwd_post");
  EXPECT_EQ(plan_families(mla, 90, fwd), "fwd_mla fwd_combine");
  for (const int arch : {100, 103, 120, 121}) {
    for (const fa::gen::Role role : {fwd, bwd, fa::gen::Role::Step})
      for (const fa::gen::Family* f : fa::gen::ranked_families(role, arch))
        for (const char* hopper : {"fwd_wgmma", "bwd_wgmma", "fwd_mla"}) EXPECT_STRNE(f->name, hopper) << "sm_" << arch;
    EXPECT_EQ(plan_families(prefill(false), arch, fwd), "fwd_mma") << "sm_" << arch;
    EXPECT_EQ(plan_families(prefill(true), arch, bwd), "bwd_pre bwd_mma bwd_post") << "sm_" << arch;
    EXPECT_EQ(plan_families(decode, arch, fwd), "fwd_split fwd_combine") << "sm_" << arch;
    // MLA's wide decode kernel (one tile point) needs about 220 KB of shared memory: sm_120 / 121, like sm_86 / 89,
    // send those heads to the reference kernel, for want of room and not of a rule.
    if (arch < 120) {
      EXPECT_EQ(plan_families(mla, arch, fwd), "fwd_split fwd_combine") << "sm_" << arch;
    } else {
      std::string why;
      EXPECT_FALSE(fa::gen::family_covers(*fa::gen::find_family("fwd_split"), mla, arch, &why));
      EXPECT_NE(why.find("shared memory: expected <= 101376 bytes on sm_" + std::to_string(arch)), std::string::npos)
          << why;
      EXPECT_EQ(plan_families(mla, arch, fwd), "fwd_ref") << "sm_" << arch;
    }
    EXPECT_EQ(plan_families(mods, arch, fwd), "mask_blocks fwd_mma") << "sm_" << arch;
    EXPECT_EQ(plan_families(mods_bwd, arch, bwd), "bwd_pre mask_blocks bwd_mma bwd_post") << "sm_" << arch;
    fa::gen::ProblemDesc fp32 = prefill(false);
    fp32.dtype = fa::gen::kFp32;
    EXPECT_EQ(plan_families(fp32, arch, fwd), "fwd_ref") << "sm_" << arch;
    fp32.backward = true;
    EXPECT_EQ(plan_families(fp32, arch, bwd), "bwd_pre bwd_ref_dq bwd_ref_dkdv") << "sm_" << arch;
  }
}

// Blackwell's ptxas spills the mma forward's bias path past 96 live registers (head_dim_v 168 and up at 16 rows per
// warp; sm_90a and sm_80 take up to 144): the predicate holds the bias there, and a bias problem past it runs the
// reference kernel on Blackwell while sm_80 keeps the tensor-core kernel.
TEST(SelectorBlackwell, ABiasPastBlackwellsRegisterBudgetRunsTheReference) {
  const fa::gen::Family& mma = *fa::gen::find_family("fwd_mma");
  for (const int arch : {80, 90, 100, 120}) {
    for (const int d : {160, 168, 256}) {
      fa::gen::ProblemDesc p = prefill(false);
      p.head_dim = p.head_dim_v = d;
      p.has_bias = true;
      const fa::gen::Semantic s = fa::gen::semantic_for(mma, p, arch);
      std::string why;
      const bool ok = mma.valid(fa::gen::KernelConfig{s, fa::gen::Tunables{{64, 32, 4, 2, 0, 1}}}, &why);
      const bool blackwell_over = arch >= 100 && d > 160;
      EXPECT_EQ(ok, !blackwell_over) << "sm_" << arch << " d " << d << ": " << why;
      if (blackwell_over) {  // 16 S + head_dim_v (padded to 16) / 2 O registers
        const std::string want = "register pressure with a bias on sm_" + std::to_string(arch) + ": " +
                                 std::to_string(16 + (d + 15) / 16 * 8) + " accumulator registers per thread > 96";
        EXPECT_NE(why.find(want), std::string::npos) << why;
      }
      const std::string fam = plan_families(p, arch, fa::gen::Role::Forward);
      if (blackwell_over) EXPECT_EQ(fam, "fwd_ref") << "sm_" << arch << " d " << d;
      else EXPECT_NE(fam, "fwd_ref") << "sm_" << arch << " d " << d;
    }
  }
}

// FA2's d128 tile (128 x 64, 4 warps) past the register budget is sm_90's exception alone: sm_100 / 103 spill 12
// bytes there with a causal or window mask (ptxas -v, 2026-11-29).
TEST(SelectorBlackwell, Fa2D128TileIsSm90sAlone) {
  const fa::gen::Family& mma = *fa::gen::find_family("fwd_mma");
  for (const int arch : {90, 100, 103}) {
    fa::gen::ProblemDesc p = prefill(false);
    fa::gen::Semantic s = fa::gen::semantic_for(mma, p, arch);
    s.even_k = true;
    std::string why;
    const bool ok = mma.valid(fa::gen::KernelConfig{s, fa::gen::Tunables{{128, 64, 4, 2, 0, 1}}}, &why);
    EXPECT_EQ(ok, arch == 90) << "sm_" << arch << ": " << why;
    if (arch != 90) {
      EXPECT_NE(why.find("register pressure: 192 accumulator registers per thread > 160"), std::string::npos) << why;
    }
  }
}

// The heuristic default of the tensor-core forward and backward at every head dim (each mask, with and without the
// score features) fits the arch's shared memory on every arch fa knows: sm_120's 99 KB a block too.
TEST(SelectorDefaults, MmaDefaultsFitEveryKnownArch) {
  int checked = 0;
  for (const int arch : fa::rt::kKnownArchs)
    for (const char* name : {"fwd_mma", "bwd_mma", "fwd_split"})
      for (int d = 8; d <= 256; d += 8)
        for (int mask = 0; mask < 3; ++mask)
          for (bool feat : {false, true}) {
            fa::gen::ProblemDesc p = prefill(std::string(name) == "bwd_mma");
            p.head_dim = p.head_dim_v = d;
            p.mask = mask;
            p.has_alibi = p.has_softcap = feat;
            if (std::string(name) == "fwd_split") {  // the decode class: one query, a paged cache
              p.seqlen_q = 1;
              p.paged = true;
              p.page_size = 16;
            }
            const fa::gen::Family& f = *fa::gen::find_family(name);
            if (!fa::gen::family_covers(f, p, arch, nullptr)) continue;
            const fa::gen::Semantic s = fa::gen::semantic_for(f, p, arch);
            const fa::gen::KernelConfig c{s, f.defaults(s)};
            std::string why;
            EXPECT_TRUE(fa::gen::is_valid(c, fa::gen::limits_for_arch(arch), &why))
                << fa::gen::canonical_key(c) << ": " << why;
            EXPECT_LE(fa::gen::smem_of(c), static_cast<unsigned>(fa::gen::limits_for_arch(arch).max_smem_optin));
            ++checked;
          }
  EXPECT_GT(checked, 1000);
}

}  // namespace
