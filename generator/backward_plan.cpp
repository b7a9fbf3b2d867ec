// backward_plan.cpp -- see backward_plan.h: selection of the backward pipeline and the workspace layout.
#include "generator/backward_plan.h"

#include <algorithm>

#include <fmt/format.h>

namespace fa::gen {

namespace {
size_t align256(size_t x) { return (x + 255) & ~static_cast<size_t>(255); }
}  // namespace

bool bwd_mma_covers(const ProblemDesc& p, int arch, std::string* why) {
  auto fail = [&](std::string m) {
    if (why) *why = std::move(m);
    return false;
  };
  if (!family_available(Kind::BwdMma)) return fail("bwd_mma: family not built in");
  if (p.dtype != kFp16 && p.dtype != kBf16) return fail(fmt::format("dtype: bwd_mma needs fp16 or bf16, got {}", dtype_name(p.dtype)));
  if (arch < 80) return fail(fmt::format("arch: bwd_mma needs sm_80+, got sm_{}", arch));
  if (!p.aligned16) return fail("alignment: bwd_mma needs 16-byte aligned pointers and strides");
  const Semantic s = backward_semantic(p, arch, Kind::BwdMma);
  std::string reason;
  if (!is_valid(KernelConfig{s, family(Kind::BwdMma).defaults(s)}, limits_for_arch(arch), &reason))
    return fail("bwd_mma: no valid tiling for this head dim: " + reason);
  return true;
}

Semantic backward_semantic(const ProblemDesc& p, int arch, Kind kind) {
  Semantic s;
  s.kind = kind;
  s.arch = arch;
  s.dtype = p.dtype;
  s.head_dim = p.head_dim;
  s.head_dim_v = p.head_dim_v;
  s.mask = p.mask;
  s.has_bias = p.has_bias;
  s.has_alibi = p.has_alibi;
  s.has_softcap = p.has_softcap;
  s.varlen = p.varlen;
  s.even_k = false;
  s.has_lse = true;  // the backward reads the forward's LSE
  return s;
}

BwdPlan plan_backward(const ProblemDesc& p, int arch, const Tunables& mma) {
  BwdPlan plan;
  plan.uses_mma = bwd_mma_covers(p, arch, nullptr);
  const long long rows_q = p.varlen ? p.total_q : static_cast<long long>(p.batch) * p.seqlen_q;
  auto step = [&](Kind k, const Tunables* t) {
    const Semantic s = backward_semantic(p, arch, k);
    plan.steps.push_back(KernelConfig{s, t ? *t : family(k).defaults(s)});
  };
  size_t off = 0;
  plan.off_delta = off;
  off = align256(off + static_cast<size_t>(rows_q) * static_cast<size_t>(p.heads_q) * sizeof(float));
  if (plan.uses_mma) {
    plan.off_dq_accum = off;
    plan.accum_q_stride_row = static_cast<long long>(p.heads_q) * p.head_dim;
    // 8 x 8 tiled (templates/fa_common.cuh, fa_dq_accum_off): rows rounded up to a multiple of 8
    const size_t rows8 = static_cast<size_t>((rows_q + 7) / 8 * 8);
    off = align256(off + rows8 * static_cast<size_t>(plan.accum_q_stride_row) * sizeof(float));
    if (p.deterministic) {
      plan.off_dk_accum = off;
      off = align256(off + static_cast<size_t>(rows_q) * static_cast<size_t>(p.heads_q) * sizeof(int));
    }
    step(Kind::BwdPre, nullptr);
    step(Kind::BwdMma, &mma);
    step(Kind::BwdPost, nullptr);
  } else {
    step(Kind::BwdPre, nullptr);
    step(Kind::BwdRefDq, nullptr);
    step(Kind::BwdRefDkDv, nullptr);
  }
  plan.workspace_bytes = std::max<size_t>(off, 256);
  return plan;
}

BwdPlan plan_backward(const ProblemDesc& p, int arch) {
  return plan_backward(p, arch, family(Kind::BwdMma).defaults(backward_semantic(p, arch, Kind::BwdMma)));
}

}  // namespace fa::gen
