// backward_plan.h -- the host-side plan of one backward pass: which kernels run, in which order, and the layout of
// the float32 workspace they share. No CUDA here: the runtime allocates the workspace, fills FaBwdArgs (pointers =
// workspace base + offsets; a SIZE_MAX offset means the pointer is null) and launches every step in order with
// family(step.s.kind).launch(step, launch_shape(p)).
//
// Two pipelines:
//   mma  (fp16/bf16, arch >= 80, p.aligned16): bwd_pre -> bwd_mma -> bwd_post
//   ref  (everything else, fp32 included):     bwd_pre -> bwd_ref (dQ) -> bwd_ref (dK, dV)
// Workspace regions (each 256-byte aligned):
//   delta     float32 [heads_q * rows_q]         indexed like the LSE (args.f.lse_sb / lse_sh)
//   dq_accum  float32 [rows_q rounded up to 8, heads_q * head_dim] mma only, 8 x 8 tiled (fa_dq_accum_off in
//                                               templates/fa_common.cuh); accum_q_stride_row = heads_q * head_dim
//   dk_accum  int32   [rows_q, heads_q]          mma + deterministic only: the dQ ordering semaphores (the args
//                                               field dk_accum carries them; no float32 dK/dV buffers are needed,
//                                               GQA groups are summed inside the CTA)
//   dv_accum  unused
// rows_q = total_q (varlen) or batch * seqlen_q.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "generator/config.h"
#include "generator/problem.h"

namespace fa::gen {

struct BwdPlan {
  std::vector<KernelConfig> steps;  // launched in order on the caller's stream
  size_t workspace_bytes = 0;       // total, each region 256-byte aligned
  size_t off_delta = SIZE_MAX, off_dq_accum = SIZE_MAX, off_dk_accum = SIZE_MAX, off_dv_accum = SIZE_MAX;
  long long accum_q_stride_row = 0, accum_kv_stride_row = 0;
  bool uses_mma = false;
};

// Whether the tensor-core backward covers the problem on this arch; the reason when not.
bool bwd_mma_covers(const ProblemDesc& p, int arch, std::string* why);
// The semantic part shared by every step (kind set to `kind`).
Semantic backward_semantic(const ProblemDesc& p, int arch, Kind kind);
// The plan with every step at its family default.
BwdPlan plan_backward(const ProblemDesc& p, int arch);
// The same with the tuner's choice for the bwd_mma step (ignored by the reference pipeline).
BwdPlan plan_backward(const ProblemDesc& p, int arch, const Tunables& mma);

}  // namespace fa::gen
