// test_split_plan.cpp -- the decode family's plan (fwd_split): which problems it covers, the split count (forced,
// heuristic, never more than the key blocks), the combine step and the workspace, which must hold the split count
// of every tunable point (fa_forward_workspace_size is asked before tuning may swap in another winner).
#include <gtest/gtest.h>

#include "generator/family.h"
#include "generator/problem.h"

namespace fa::gen {
namespace {

ProblemDesc decode(int batch, int seqlen_k) {
  ProblemDesc p;
  p.dtype = kBf16;
  p.batch = batch;
  p.seqlen_q = 1;
  p.seqlen_k = seqlen_k;
  p.heads_q = 32;
  p.heads_kv = 8;
  p.head_dim = p.head_dim_v = 128;
  p.aligned16 = true;
  p.sm_count = 132;
  return p;
}

TEST(SplitPlan, CoversDecodeAndKvCaches) {
  ProblemDesc p = decode(1, 4096);
  EXPECT_STREQ(family_name(select_forward(p, 90)), "fwd_split");
  p.seqlen_q = 5;  // 5 tokens x 4 heads = 20 packed rows: prefill families
  EXPECT_STRNE(family_name(select_forward(p, 90)), "fwd_split");
  p.seqused = true;  // every KV-cache problem
  EXPECT_STREQ(family_name(select_forward(p, 90)), "fwd_split");
  p.seqused = false;
  p.paged = true;
  p.page_size = 16;
  EXPECT_STREQ(family_name(select_forward(p, 80)), "fwd_split");
  p.has_bias = true;
  EXPECT_STREQ(family_name(select_forward(p, 90)), "fwd_ref");
  p.has_bias = false;
  p.head_dim = 576;
  p.head_dim_v = 512;
  EXPECT_STREQ(family_name(select_forward(p, 90)), "fwd_split");  // MLA: the wide kernel
  p.heads_q = 128;
  p.heads_kv = 1;
  p.paged = false;
  EXPECT_STREQ(family_name(select_forward(p, 90)), "fwd_split");  // contiguous too, any query length
  p.has_softcap = true;
  EXPECT_STREQ(family_name(select_forward(p, 90)), "fwd_ref");  // no softcap / ALiBi on the wide kernel
}

// MLA decode (128 query heads over one latent KV head, d 576 / dv 512): 64 packed rows per CTA (two row tiles), the
// wide point only, and a split count that fills the device at batch 1.
TEST(SplitPlan, WideHeadsTakeTheWidePoint) {
  ProblemDesc p = decode(1, 4096);
  p.heads_q = 128;
  p.heads_kv = 1;
  p.head_dim = 576;
  p.head_dim_v = 512;
  p.paged = true;
  p.page_size = 64;
  const Semantic s = select_forward(p, 90);
  ASSERT_STREQ(family_name(s), "fwd_split");
  const DeviceLimits lim = limits_for_arch(90);
  const auto pts = all_valid_points(s, lim);
  ASSERT_FALSE(pts.empty());
  for (const Tunables& t : pts) {
    EXPECT_EQ(t[0], 32);
    EXPECT_EQ(t[1], 8);
    EXPECT_EQ(t[2], 2);
  }
  const Plan plan = make_plan(s, p);
  EXPECT_GE(plan.num_splits, 16);
  LaunchShape sh = launch_shape(p);
  sh.num_splits = plan.num_splits;
  const Launch l = s.family->launch(finalize(s, pts[0], p), sh);
  EXPECT_EQ(l.grid[1], 2u);
  EXPECT_EQ(l.block, 256u);
}

TEST(SplitPlan, SplitsWhenTheGridIsSmallAndSizesTheWorkspaceForEveryPoint) {
  const DeviceLimits lim = limits_for_arch(90);
  for (int batch : {1, 8, 64})
    for (int sk : {1, 100, 4096, 131072}) {
      ProblemDesc p = decode(batch, sk);
      const Semantic s = select_forward(p, 90);
      ASSERT_STREQ(family_name(s), "fwd_split");
      size_t ws = 0;
      bool first = true;
      for (const Tunables& t : all_valid_points(s, lim)) {
        const Plan plan = make_plan(s, t, p);
        if (first) ws = plan.reported_workspace();
        first = false;
        EXPECT_EQ(plan.reported_workspace(), ws) << "the workspace must not depend on the tunables";
        EXPECT_LE(plan.workspace_bytes, plan.reported_workspace());
        EXPECT_EQ(plan.workspace_bytes > 0, plan.num_splits > 1) << "allocated exactly when the point splits";
        const int blocks = (sk + t[0] - 1) / t[0];
        EXPECT_GE(plan.num_splits, 1);
        EXPECT_LE(plan.num_splits, std::max(1, blocks));
        EXPECT_EQ(plan.steps.size(), plan.num_splits > 1 ? 2u : 1u);
        if (plan.num_splits > 1) {
          EXPECT_STREQ(family_name(plan.steps[1].s), "fwd_combine");
          const size_t rows = size_t(p.batch) * p.heads_q * p.seqlen_q;
          EXPECT_GE(plan.off_part_lse, plan.off_part_o + size_t(plan.num_splits) * rows * p.head_dim_v * 4);
          EXPECT_GE(plan.workspace_bytes, plan.off_part_lse + size_t(plan.num_splits) * rows * 4);
        }
      }
    }
  // batch 1, 128k keys, 8 KV heads: 8 CTAs without split; the default splits them over the device.
  const ProblemDesc p = decode(1, 131072);
  EXPECT_GE(make_plan(select_forward(p, 90), p).num_splits, 16);
  // batch 64 x 8 KV heads fill the device: no split.
  const ProblemDesc q = decode(64, 4096);
  EXPECT_EQ(make_plan(select_forward(q, 90), q).num_splits, 1);
}

TEST(SplitPlan, ForcedSplitCountIsClampedToTheKeyBlocks) {
  ProblemDesc p = decode(2, 1000);
  p.num_splits = 3;
  EXPECT_EQ(make_plan(select_forward(p, 90), p).num_splits, 3);
  p.num_splits = 1;
  EXPECT_EQ(make_plan(select_forward(p, 90), p).num_splits, 1);
  p.num_splits = 1000;
  const Plan plan = make_plan(select_forward(p, 90), p);
  EXPECT_LE(plan.num_splits, 1000 / 32 + 1);
  p.seqlen_k = 0;
  EXPECT_EQ(make_plan(select_forward(p, 90), p).num_splits, 1);
}

// MLA decode over its latent cache (v = k's first 512 columns: ProblemDesc::v_in_k): 128 query heads over one KV head,
// d 576 / dv 512.
ProblemDesc mla_latent(int batch, int seqlen_k) {
  ProblemDesc p = decode(batch, seqlen_k);
  p.heads_q = 128;
  p.heads_kv = 1;
  p.head_dim = 576;
  p.head_dim_v = 512;
  p.v_in_k = true;
  return p;
}

// MLA over its latent cache (v = k's first 512 columns: ProblemDesc::v_in_k): the Hopper kernel on sm_90 at every
// page size, contiguous or not, any query length and mask; another family on sm_80, for a separate v (fwd_split's
// wide kernel) and for head dims it does not take; fwd_ref with softcap.
TEST(SplitPlan, MlaLatentCacheTakesTheHopperKernelOnSm90) {
  ProblemDesc p = mla_latent(1, 4096);
  EXPECT_STREQ(family_name(select_forward(p, 90)), "fwd_mla");
  EXPECT_STRNE(family_name(select_forward(p, 80)), "fwd_mla");  // sm_80: no Hopper kernel
  p.seqused = true;
  p.paged = true;
  for (int ps = 1; ps <= 512; ps *= 2) {
    p.page_size = ps;
    EXPECT_STREQ(family_name(select_forward(p, 90)), "fwd_mla") << "page size " << ps;
  }
  p.seqlen_q = 3;
  p.mask = kMaskCausal;
  EXPECT_STREQ(family_name(select_forward(p, 90)), "fwd_mla");
  p.head_dim = 512;
  EXPECT_STREQ(family_name(select_forward(p, 90)), "fwd_mla");
  p.head_dim = 576;
  p.v_in_k = false;
  EXPECT_STREQ(family_name(select_forward(p, 90)), "fwd_split");
  p.v_in_k = true;
  p.head_dim = 288;
  p.head_dim_v = 256;
  EXPECT_STREQ(family_name(select_forward(p, 90)), "fwd_split");
  p.head_dim = 576;
  p.head_dim_v = 512;
  p.has_softcap = true;
  EXPECT_STREQ(family_name(select_forward(p, 90)), "fwd_ref");
  p.has_softcap = false;
  p.aligned16 = false;
  EXPECT_STRNE(family_name(select_forward(p, 90)), "fwd_mla");
}

// fwd_mla's plan: 64 packed rows per CTA (128 heads: two row tiles), 384 threads, shared memory within the sm_90
// limit at every point, a split count that fills the device at batch 1 and none at batch 128, and a workspace that
// does not depend on the tunables.
TEST(SplitPlan, MlaPlanSplitsSmallBatchesAndSizesTheWorkspaceForEveryPoint) {
  const DeviceLimits lim = limits_for_arch(90);
  for (int batch : {1, 32, 128})
    for (int sk : {1, 64, 4096, 32768}) {
      ProblemDesc p = mla_latent(batch, sk);
      p.paged = true;
      p.page_size = 64;
      const Semantic s = select_forward(p, 90);
      ASSERT_STREQ(family_name(s), "fwd_mla");
      const auto pts = all_valid_points(s, lim);
      ASSERT_FALSE(pts.empty());
      size_t ws = make_plan(s, pts[0], p).reported_workspace();
      for (const Tunables& t : pts) {
        const KernelConfig c = finalize(s, t, p);
        EXPECT_LE(s.family->smem_bytes(c), unsigned(lim.max_smem_optin));
        const Plan plan = make_plan(s, t, p);
        EXPECT_EQ(plan.reported_workspace(), ws) << "the workspace must not depend on the tunables";
        EXPECT_EQ(plan.workspace_bytes > 0, plan.num_splits > 1);
        EXPECT_LE(plan.num_splits, std::max(1, (sk + 63) / 64));
        EXPECT_EQ(plan.steps.size(), plan.num_splits > 1 ? 2u : 1u);
        LaunchShape sh = launch_shape(p);
        sh.num_splits = plan.num_splits;
        const Launch l = s.family->launch(c, sh);
        EXPECT_EQ(l.grid[0], 2u);
        EXPECT_EQ(l.grid[1], unsigned(plan.num_splits));
        EXPECT_EQ(l.grid[2], unsigned(batch));
        EXPECT_EQ(l.block, 384u);
      }
      if (batch == 1 && sk == 32768) { EXPECT_GE(make_plan(s, p).num_splits, 32); }
      if (batch == 128) { EXPECT_EQ(make_plan(s, p).num_splits, 1); }
    }
}

}  // namespace
}  // namespace fa::gen
