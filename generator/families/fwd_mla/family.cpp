// fwd_mla -- host side of the Hopper MLA decode (templates/fwd_mla.cuh), sm_90a, fp16 / bf16: split-KV attention of
// the query heads of a KV head packed 64 rows per CTA over a latent cache whose values are the first head_dim_v
// columns of its keys, wgmma for S = Q K^T and O = P V, a producer warpgroup copying 64-key blocks by cp.async (any
// page size, used lengths, pages outside the pool never read) into two shared-memory stages.
//
// Coverage (priority 40, above fwd_split): sm_90, head_dim a multiple of 64 in [512, 576] with head_dim_v 512 (MLA's
// 576 / 512), v the first head_dim_v columns of k (ProblemDesc::v_in_k: the same pointer and strides), 16-byte
// aligned pointers and strides, any query length, contiguous or paged (every power-of-two page size), with or
// without seqused_k, any mask; no ALiBi, softcap, bias, varlen or user code (fwd_split's wide kernel or fwd_ref
// serve those, and every problem whose v is a separate tensor).
// Knobs: block_n {64} and stages {2} (the shared-memory plan holds Q, two 64-key stages and P: fwd_mla_layout.cuh),
// split_target {1, 2} (the split heuristic of split_plan.h aims at that many CTAs per SM; one fits an SM), l2_ahead
// {0, 1, 2, 4} (the producer prefetches the block that many blocks ahead into L2; 0: none), sched {0, 1} (0: lockstep,
// the consumers split each block's keys; 1: seesaw, each consumer the scores of its own block of a pair, the softmax
// of one under the other's GEMMs: templates/fwd_mla_seesaw.cuh; no L2 prefetch).
// Plan: split_plan.h's: one launch writing o, or [fwd_mla, fwd_combine] over the float32 partials, the workspace
// sized by the largest split count of any knob value.
#include <algorithm>
#include <string>
#include <vector>

#include "../split_plan.h"
#include "templates/fwd_mla_layout.cuh"

namespace fa::gen {

namespace {

enum { kBlockN, kStages, kSplitTarget, kL2Ahead, kSched };

constexpr int kThreads = 384;  // producer + two consumer warpgroups

bool fail(std::string* why, const std::string& msg) { return fam::fail(why, "fwd_mla", msg); }

bool dims_ok(int d, int dv) { return d % 64 == 0 && d >= 512 && d <= 576 && dv == 512; }

bool valid(const KernelConfig& c, std::string* why) {
  const Semantic& s = c.s;
  if (s.dtype != kFp16 && s.dtype != kBf16) return fail(why, "dtype must be fp16 or bf16");
  if (!dims_ok(s.head_dim, s.head_dim_v))
    return fail(why, "head_dim a multiple of 64 in [512, 576] and head_dim_v 512, got " + std::to_string(s.head_dim) +
                         " / " + std::to_string(s.head_dim_v));
  if (s.has_bias || s.has_alibi || s.has_softcap) return fail(why, "takes no bias, ALiBi or softcap");
  if (s.varlen) return fail(why, "takes no varlen problems");
  if (s.mods != nullptr) return fail(why, "runs no user code (fa_mods)");
  if (c.t[kSched] == 1 && c.t[kL2Ahead] != 0) return fail(why, "the seesaw schedule takes no L2 prefetch (l2_ahead 0)");
  return true;
}

// H200 (bench/probes/mla_probe.sh, batch 32 / 128 x 32k keys): the L2 prefetch two blocks ahead cost 10% (805 vs 731
// us), so none by default; one CTA per SM; the lockstep schedule (fa_decode_probe, batch 32 x 32k: the seesaw 736 us
// against 690, batch 128 x 4k: 375 against 354; docs/design_notes.md, "Decode").
Tunables defaults(const Semantic&) { return Tunables{{64, 2, 1, 0, 0}}; }

unsigned smem_bytes(const KernelConfig& c) {
  return static_cast<unsigned>(fa_mla_smem_bytes(c.s.head_dim, c.t[kBlockN], c.t[kStages], c.t[kSched]));
}

int split_count(const ProblemDesc& p, int split_target) { return fam::split_count(p, 64, split_target, kFaMlaRows); }

Launch launch(const KernelConfig& c, const LaunchShape& sh) {
  Launch l;
  const int ns = std::max(1, sh.num_splits);
  l.grid[0] =
      static_cast<unsigned>(fam::split_row_tiles(sh.max_seqlen_q, sh.heads_q / std::max(1, sh.heads_kv), kFaMlaRows));
  l.grid[1] = static_cast<unsigned>(ns * sh.heads_kv);
  l.grid[2] = static_cast<unsigned>(sh.batch);
  l.block = kThreads;
  l.smem = smem_bytes(c);
  return l;
}

bool covers(const ProblemDesc& p, int arch, std::string* why) {
  if (arch != 90) return fail(why, "needs sm_90, device is sm_" + std::to_string(arch));
  if (p.dtype != kFp16 && p.dtype != kBf16) return fail(why, "dtype must be fp16 or bf16");
  if (!dims_ok(p.head_dim, p.head_dim_v))
    return fail(why, "head_dim a multiple of 64 in [512, 576] and head_dim_v 512 (MLA), got " +
                         std::to_string(p.head_dim) + " / " + std::to_string(p.head_dim_v));
  if (!p.v_in_k) return fail(why, "v must be k's first head_dim_v columns (the same pointer and strides)");
  if (!p.aligned16) return fail(why, "pointers or strides not 16-byte aligned");
  if (p.varlen) return fail(why, "takes no varlen problems");
  if (p.has_bias || p.has_alibi || p.has_softcap) return fail(why, "takes no bias, ALiBi or softcap");
  if (p.mods != nullptr) return fail(why, "runs no user code (fa_mods)");
  return true;
}

const std::vector<int> kSplitTargets = {1, 2};

Plan plan(const KernelConfig& main, const ProblemDesc& p) {
  int most = 1;
  for (int sp : kSplitTargets) most = std::max(most, split_count(p, sp));
  return fam::split_kv_plan(main, p, split_count(p, main.t[kSplitTarget]), most);
}

const Family kFamily{
    .name = "fwd_mla",
    .template_name = "fwd_mla.cuh",
    .role = Role::Forward,
    .arch_min = 90,
    .arch_max = 90,
    .priority = 40,
    .sinks = true,
    .knobs = {fam::block_n({64}), fam::stages({2}), Knob{"split_target", "sp", "kSplitTarget", kSplitTargets},
              Knob{"l2_ahead", "pf", "kL2Ahead", {0, 1, 2, 4}}, Knob{"sched", "ss", "kSched", {0, 1}}},
    .covers = &covers,
    .defaults = &defaults,
    .valid = &valid,
    .smem_bytes = &smem_bytes,
    .launch = &launch,
    .plan = &plan};

}  // namespace

FA_FAMILY_FOLDER(fwd_mla) { register_family(&kFamily); }

}  // namespace fa::gen
