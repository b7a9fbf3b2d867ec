// test_backward_plan.cpp -- the backward plans (Family::plan of bwd_mma and bwd_ref_dq, through make_plan and the
// selector in generator/problem.h): workspace layout (256-byte aligned,
// non-overlapping regions sized for the problem, SIZE_MAX when unused, semaphores only when deterministic), the
// pipeline choice (tensor-core where bwd_mma covers, reference otherwise), validity of every step, the tuner's
// bwd_mma point honoured, a non-empty tunable space wherever the mma pipeline is chosen, and one plan compiled
// through NVRTC for sm_80 without spills.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "generator/family.h"
#include "generator/problem.h"
#include "runtime/arch.h"
#include "runtime/nvrtc_compiler.h"

using namespace fa::gen;

namespace {

ProblemDesc random_problem(std::mt19937& rng) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  ProblemDesc p;
  p.dtype = pick(kFp16, kFp32);
  p.batch = pick(1, 4);
  p.seqlen_q = pick(1, 700);
  p.seqlen_k = pick(1, 700);
  p.heads_kv = pick(1, 4);
  p.heads_q = p.heads_kv * pick(1, 4);
  p.head_dim = 8 * pick(1, 32);
  p.head_dim_v = pick(0, 3) == 0 ? 8 * pick(1, 32) : p.head_dim;
  p.varlen = pick(0, 1) == 1;
  p.total_q = p.varlen ? pick(1, 3000) : p.batch * p.seqlen_q;
  p.total_k = p.varlen ? pick(1, 3000) : p.batch * p.seqlen_k;
  p.mask = pick(kMaskNone, kMaskWindow);
  p.has_bias = pick(0, 1) == 1;
  p.has_alibi = pick(0, 1) == 1;
  p.has_softcap = pick(0, 1) == 1;
  p.has_lse = true;
  p.aligned16 = pick(0, 3) != 0;
  p.backward = true;
  p.deterministic = pick(0, 1) == 1;
  return p;
}

std::vector<std::string> kinds_of(const Plan& plan) {
  std::vector<std::string> k;
  for (const KernelConfig& c : plan.steps) k.push_back(family_name(c.s));
  return k;
}

const std::vector<std::string> kMmaPipeline = {"bwd_pre", "bwd_mma", "bwd_post"};
const std::vector<std::string> kRefPipeline = {"bwd_pre", "bwd_ref_dq", "bwd_ref_dkdv"};

const Family& bwd_mma() { return *find_family("bwd_mma"); }
bool bwd_mma_covers(const ProblemDesc& p, int arch, std::string* why) { return family_covers(bwd_mma(), p, arch, why); }
// The selector's backward plan at the family defaults.
Plan plan_backward(const ProblemDesc& p, int arch) { return make_plan(select_backward(p, arch), p); }
// The same with the tuner's choice for the bwd_mma step (ignored by the reference pipeline).
Plan plan_backward(const ProblemDesc& p, int arch, const Tunables& t) {
  const Semantic s = select_backward(p, arch);
  return s.family == &bwd_mma() ? make_plan(s, t, p) : make_plan(s, p);
}
bool uses_mma(const Plan& plan) { return plan.steps.size() == 3 && plan.steps[1].s.family == &bwd_mma(); }

}  // namespace

TEST(BackwardPlan, WorkspaceRegionsAreAlignedDisjointAndSized) {
  std::mt19937 rng(std::random_device{}());
  for (int trial = 0; trial < 400; ++trial) {
    const ProblemDesc p = random_problem(rng);
    const int arch = fa::rt::kKnownArchs[static_cast<size_t>(trial) % std::size(fa::rt::kKnownArchs)];
    const Plan plan = plan_backward(p, arch);
    const size_t rows_q = static_cast<size_t>(p.varlen ? p.total_q : p.batch * p.seqlen_q);
    std::vector<std::pair<size_t, size_t>> regions;  // [begin, end)
    auto region = [&](size_t off, size_t bytes, const char* name) {
      ASSERT_NE(off, SIZE_MAX) << name;
      EXPECT_EQ(off % 256, 0u) << name << " offset " << off;
      EXPECT_LE(off + bytes, plan.workspace_bytes) << name;
      regions.emplace_back(off, off + bytes);
    };
    region(plan.off_delta, rows_q * static_cast<size_t>(p.heads_q) * sizeof(float), "delta");
    EXPECT_EQ(plan.off_dv_accum, SIZE_MAX);
    if (uses_mma(plan)) {
      EXPECT_EQ(plan.accum_q_stride_row, static_cast<long long>(p.heads_q) * p.head_dim);
      const size_t rows8 = (rows_q + 7) / 8 * 8;  // 8 x 8 tiled (fa_dq_accum_off)
      region(plan.off_dq_accum,
             rows8 * static_cast<size_t>(p.heads_q) * static_cast<size_t>(p.head_dim) * sizeof(float), "dq_accum");
      if (p.deterministic)
        region(plan.off_dk_accum, rows_q * static_cast<size_t>(p.heads_q) * sizeof(int), "semaphores");
      else EXPECT_EQ(plan.off_dk_accum, SIZE_MAX);
    } else {
      EXPECT_EQ(plan.off_dq_accum, SIZE_MAX);
      EXPECT_EQ(plan.off_dk_accum, SIZE_MAX);
    }
    EXPECT_EQ(plan.workspace_bytes % 256, 0u);
    std::sort(regions.begin(), regions.end());
    for (size_t i = 1; i < regions.size(); ++i) EXPECT_LE(regions[i - 1].second, regions[i].first) << "regions overlap";
  }
}

TEST(BackwardPlan, DeterministicAddsOnlyTheSemaphoreRegion) {
  std::mt19937 rng(std::random_device{}());
  int mma_seen = 0;
  for (int trial = 0; trial < 200; ++trial) {
    ProblemDesc p = random_problem(rng);
    p.deterministic = false;
    const Plan a = plan_backward(p, 90);
    p.deterministic = true;
    const Plan b = plan_backward(p, 90);
    EXPECT_EQ(kinds_of(a), kinds_of(b));
    EXPECT_EQ(a.off_delta, b.off_delta);
    EXPECT_EQ(a.off_dq_accum, b.off_dq_accum);
    if (!uses_mma(a)) {
      EXPECT_EQ(a.workspace_bytes, b.workspace_bytes);
      continue;
    }
    ++mma_seen;
    const size_t rows_q = static_cast<size_t>(p.varlen ? p.total_q : p.batch * p.seqlen_q);
    EXPECT_EQ(b.off_dk_accum, a.workspace_bytes);
    EXPECT_GE(b.workspace_bytes - a.workspace_bytes, rows_q * static_cast<size_t>(p.heads_q) * sizeof(int));
    EXPECT_LT(b.workspace_bytes - a.workspace_bytes, rows_q * static_cast<size_t>(p.heads_q) * sizeof(int) + 256);
  }
  EXPECT_GT(mma_seen, 0);
}

TEST(BackwardPlan, PipelineChoice) {
  ProblemDesc p;
  p.backward = true;
  p.aligned16 = true;
  p.head_dim = p.head_dim_v = 64;
  p.seqlen_q = p.seqlen_k = 256;
  for (int arch : fa::rt::kKnownArchs) {
    p.dtype = kFp32;
    EXPECT_EQ(kinds_of(plan_backward(p, arch)), kRefPipeline) << "fp32 sm_" << arch;
    EXPECT_FALSE(bwd_mma_covers(p, arch, nullptr));
    for (int dt : {kFp16, kBf16}) {
      p.dtype = dt;
      p.aligned16 = false;
      std::string why;
      EXPECT_FALSE(bwd_mma_covers(p, arch, &why));
      EXPECT_NE(why.find("align"), std::string::npos) << why;
      EXPECT_EQ(kinds_of(plan_backward(p, arch)), kRefPipeline);
      p.aligned16 = true;
      EXPECT_FALSE(bwd_mma_covers(p, 75, &why)) << "sm_75";
      for (int d = 8; d <= 256; d += 8) {
        for (int dv : {d, 264 - d}) {
          p.head_dim = d;
          p.head_dim_v = dv;
          const Plan plan = plan_backward(p, arch);
          const bool covers = bwd_mma_covers(p, arch, &why);
          EXPECT_EQ(uses_mma(plan), covers);
          EXPECT_EQ(kinds_of(plan), covers ? kMmaPipeline : kRefPipeline) << "d " << d << " dv " << dv << ": " << why;
        }
      }
      // The common head dims are served by the tensor-core pipeline everywhere.
      for (int d : {64, 128}) {
        p.head_dim = p.head_dim_v = d;
        EXPECT_TRUE(bwd_mma_covers(p, arch, &why)) << "d " << d << " sm_" << arch << ": " << why;
      }
      p.head_dim = p.head_dim_v = 64;
    }
  }
}

// Every step of every plan passes THE predicate, and the tunable space the tuner gets for the mma step is non-empty
// (it holds the default) wherever the plan chose the mma pipeline; plan_backward(p, arch, t) uses t as given.
TEST(BackwardPlan, EveryStepValidAndTheTunedPointHonoured) {
  for (int arch : fa::rt::kKnownArchs) {
    const DeviceLimits lim = limits_for_arch(arch);
    for (int dt : {kFp16, kBf16, kFp32}) {
      for (int d = 8; d <= 256; d += 8) {
        for (int feat = 0; feat < 6; ++feat) {
          ProblemDesc p;
          p.dtype = dt;
          p.backward = true;
          p.aligned16 = true;
          p.head_dim = d;
          p.head_dim_v = feat == 5 ? 264 - d : d;
          p.mask = feat % 3;
          p.has_bias = feat >= 3;
          p.has_alibi = feat == 4;
          p.has_softcap = feat == 4;
          p.varlen = feat == 2 || feat == 4;
          p.deterministic = feat % 2 == 1;
          p.seqlen_q = p.seqlen_k = p.total_q = p.total_k = 300;
          const Plan plan = plan_backward(p, arch);
          std::string why;
          for (const KernelConfig& step : plan.steps) {
            EXPECT_TRUE(is_valid(step, lim, &why)) << canonical_key(step) << ": " << why;
            EXPECT_EQ(step.s.has_lse, true);
            EXPECT_EQ(step.s.head_dim, p.head_dim);
            EXPECT_EQ(step.s.head_dim_v, p.head_dim_v);
          }
          if (!uses_mma(plan)) continue;
          const Semantic s = semantic_for(bwd_mma(), p, arch);
          const std::vector<Tunables> space = valid_space(s, lim);
          ASSERT_FALSE(space.empty()) << semantic_key(s);
          EXPECT_NE(std::find(space.begin(), space.end(), plan.steps[1].t), space.end()) << semantic_key(s);
          for (const Tunables& t : space) {
            const Plan tuned = plan_backward(p, arch, t);
            ASSERT_EQ(kinds_of(tuned), kMmaPipeline);
            EXPECT_EQ(tuned.steps[1].t, t);
            EXPECT_EQ(tuned.steps[0], plan.steps[0]);
            EXPECT_EQ(tuned.steps[2], plan.steps[2]);
            EXPECT_EQ(tuned.workspace_bytes, plan.workspace_bytes);
          }
        }
      }
    }
  }
}

// The tuner's point is ignored by the reference pipeline.
TEST(BackwardPlan, ReferencePipelineIgnoresTheMmaPoint) {
  ProblemDesc p;
  p.dtype = kFp32;
  p.backward = true;
  p.aligned16 = true;
  const Plan a = plan_backward(p, 80);
  const Plan b = plan_backward(p, 80, Tunables{{32, 32, 4, 1}});
  ASSERT_EQ(kinds_of(a), kRefPipeline);
  ASSERT_EQ(a.steps.size(), b.steps.size());
  for (size_t i = 0; i < a.steps.size(); ++i) EXPECT_EQ(a.steps[i], b.steps[i]);
}

// One whole plan (the head dim and features that used to spill) through NVRTC for sm_80: compiles, no spills.
TEST(BackwardPlan, PlanStepsCompileWithoutSpillsOnSm80) {
  ProblemDesc p;
  p.dtype = kFp16;
  p.backward = true;
  p.aligned16 = true;
  p.head_dim = p.head_dim_v = 72;
  p.mask = kMaskCausal;
  p.has_bias = p.has_alibi = p.has_softcap = true;
  p.varlen = true;
  p.deterministic = true;
  p.seqlen_q = p.seqlen_k = p.total_q = p.total_k = 128;
  const Plan plan = plan_backward(p, 80);
  ASSERT_TRUE(uses_mma(plan));
  for (const KernelConfig& step : plan.steps) {
    const fa::rt::CompileResult r = fa::rt::compile(step);
    ASSERT_TRUE(r.ok) << r.key << "\n" << r.log;
    EXPECT_GT(r.ptxas.registers, 0) << r.key << ": no ptxas report\n" << r.log;
    EXPECT_EQ(r.ptxas.spill_stores, 0) << r.key;
    EXPECT_EQ(r.ptxas.spill_loads, 0) << r.key;
    EXPECT_EQ(r.ptxas.stack_bytes, 0) << r.key;
  }
}
