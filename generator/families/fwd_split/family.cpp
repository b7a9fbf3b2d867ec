// fwd_split -- host side of the decode forward (templates/fwd_split.cuh): split-KV (flash-decoding) with GQA
// packing and paged KV caches, fp16 / bf16 on sm_80+, head dims up to 256.
//
// Coverage (priority 30, above fwd_wgmma and fwd_mma): every paged problem and every problem with seqused_k, and
// the contiguous decode class: seqlen_q * (heads_q / heads_kv) <= 16 packed rows, i.e. one m16 tile of (query token,
// query head) pairs per KV head (decode, speculative decoding with a few tokens). A shape class like even_k; the
// kernel key never holds lengths. Wide heads (head_dim > 256 or head_dim_v > 256, up to 576 / 512: MLA) are covered
// at any query length by the wide kernel (templates/fwd_split_wide.cuh: 64 packed rows per CTA, one point: block_n
// 32, 8 warps, 2 stages), without ALiBi or softcap. Not covered (served by fwd_ref or the prefill families): bias,
// varlen, unaligned pointers or strides, wide heads with ALiBi / softcap.
// Knobs: block_n {32, 64, 128} keys per pipeline block, warps {2, 4, 8} (each warp takes block_n / warps keys of a
// block, a multiple of 16), stages {2, 3, 4} (cp.async depth), split_target {1, 2, 3, 4}: how aggressively the
// heuristic splits the keys: the split count aims at split_target CTAs per SM (see split_count; a grid of one wave
// or less with long splits doubles its split count).
// Plan: num_splits == 1: one launch writing o directly. num_splits > 1: [fwd_split, fwd_combine] over a float32
// workspace of partial outputs [num_splits, batch, heads_q, seqlen_q, head_dim_v] (normalized per split) and LSEs
// [num_splits, batch, heads_q, seqlen_q]; the workspace is sized by the largest split count any knob value could
// pick for the problem, so fa_forward_workspace_size holds whichever tunables the chooser serves later.
// FP8 KV cache (kv_dtype e4m3 / e5m2 with k_scale / v_scale, fa_params version 3; Family::fp8_kv_cache): the narrow
// kernel on sm_89+ streams fp8 blocks and dequantizes each into one 16-bit tile (templates/fwd_split.cuh); the wide
// (MLA) kernel reads no fp8 yet, so fp8 problems with head dims above 256 find no family.
#include <algorithm>
#include <string>
#include <vector>

#include "../split_plan.h"
#include "templates/fwd_split_layout.cuh"

namespace fa::gen {

namespace {

enum { kBlockN, kWarps, kStages, kSplitTarget };

constexpr int kMaxRows = kFaSplitRows;  // packed rows per CTA (the contiguous coverage class)
constexpr int kMaxHeadDimWide = 512;    // head_dim_v of the wide (MLA) kernel

bool fail(std::string* why, const std::string& msg) { return fam::fail(why, "fwd_split", msg); }

int round16(int d) { return (d + 15) / 16 * 16; }

bool valid(const KernelConfig& c, std::string* why) {
  const Semantic& s = c.s;
  const Tunables& t = c.t;
  if (s.dtype != kFp16 && s.dtype != kBf16) return fail(why, "dtype must be fp16 or bf16");
  if (s.has_bias) return fail(why, "takes no bias");
  if (s.varlen) return fail(why, "takes no varlen problems");
  if (s.kv_dtype != 0) {
    if (!is_fp8(s.kv_dtype)) return fail(why, "k / v of q's dtype, or an fp8 cache (kv_dtype e4m3 / e5m2)");
    if (s.arch < 89) return fail(why, "an fp8 cache needs sm_89 or newer, arch is sm_" + std::to_string(s.arch));
    if (fa_split_wide(s.head_dim, s.head_dim_v)) return fail(why, "an fp8 cache at head dims up to 256 only");
  }
  if (fa_split_wide(s.head_dim, s.head_dim_v)) {
    // Wide heads (MLA): 64 rows per CTA, 8 warps splitting head_dim_v for O = P V, 32-key blocks, 2 stages.
    if (s.head_dim > kMaxHeadDim || s.head_dim_v > kMaxHeadDimWide)
      return fail(why, "wide head dims up to " + std::to_string(kMaxHeadDim) + " / " + std::to_string(kMaxHeadDimWide));
    if (round16(s.head_dim_v) % 128 != 0) return fail(why, "wide heads: head_dim_v (padded to 16) a multiple of 128");
    if (s.has_alibi || s.has_softcap) return fail(why, "wide heads: no ALiBi or softcap");
    if (t[kBlockN] != 32 || t[kWarps] != 8 || t[kStages] != 2)
      return fail(why, "wide heads: block_n 32, 8 warps, 2 stages");
    return true;
  }
  const int wn = t[kBlockN] / t[kWarps];
  if (wn % 16 != 0) return fail(why, "block_n / warps must be a multiple of 16, got " + std::to_string(wn));
  // Registers per thread: O (dv / 8 n8 tiles x 4) + S (wn / 8 x 4) + Q fragments (d <= 128: d / 16 x 4).
  const int o_regs = round16(s.head_dim_v) / 2;
  const int s_regs = wn / 2;
  const int q_regs = round16(s.head_dim) <= 128 ? round16(s.head_dim) / 4 : 0;
  // Budget from ptxas -v over the space (compile sweep): 32 keys per warp spill at dv > 128 (255 registers).
  if (o_regs + s_regs + q_regs > 136)
    return fail(why, "register pressure: " + std::to_string(o_regs + s_regs + q_regs) + " accumulator registers > 136");
  return true;
}

Tunables defaults(const Semantic& s) {
  // H200 (227 KB per block): d <= 128: 64-key blocks over 4 warps, 3 stages (96 KB at d128: two CTAs per SM, four
  // blocks in flight per SM), two CTAs per SM targeted by the split heuristic. Larger dims: 32 keys over 2 warps,
  // 4 stages (128 KB at d256, one CTA per SM).
  if (fa_split_wide(s.head_dim, s.head_dim_v)) return Tunables{{32, 8, 2, 1}};
  const int dim = std::max(s.head_dim, s.head_dim_v);
  Tunables t = dim <= 128 ? Tunables{{64, 4, 3, 2}} : Tunables{{32, 2, 4, 1}};
  const DeviceLimits lim = limits_for_arch(s.arch);
  KernelConfig c{s, t};
  while (c.t[kStages] > 2 && !is_valid(c, lim, nullptr)) --c.t[kStages];
  if (!is_valid(c, lim, nullptr)) c.t = Tunables{{32, 2, 2, 1}};
  return c.t;
}

unsigned smem_bytes(const KernelConfig& c) {
  return static_cast<unsigned>(
      fa_split_smem_bytes(c.s.head_dim, c.s.head_dim_v, c.t[kBlockN], c.t[kWarps], c.t[kStages], is_fp8(c.s.kv_dtype)));
}

int row_tiles(int seqlen_q, int group, int d, int dv) {
  return fam::split_row_tiles(seqlen_q, group, fa_split_rows(d, dv));
}

// The split count at block_n / split_target (split_plan.h's heuristic over this kernel's rows per CTA).
int split_count(const ProblemDesc& p, int block_n, int split_target) {
  return fam::split_count(p, block_n, split_target, fa_split_rows(p.head_dim, p.head_dim_v));
}

Launch launch(const KernelConfig& c, const LaunchShape& sh) {
  Launch l;
  const int ns = std::max(1, sh.num_splits);
  l.grid[0] = static_cast<unsigned>(ns * sh.heads_kv);
  l.grid[1] = static_cast<unsigned>(
      row_tiles(sh.max_seqlen_q, sh.heads_q / std::max(1, sh.heads_kv), c.s.head_dim, c.s.head_dim_v));
  l.grid[2] = static_cast<unsigned>(sh.batch);
  l.block = static_cast<unsigned>(c.t[kWarps] * 32);
  l.smem = smem_bytes(c);
  return l;
}

bool covers_shape(const ProblemDesc& p, int arch, std::string* why) {
  if (p.dtype != kFp16 && p.dtype != kBf16) return fail(why, "dtype must be fp16 or bf16");
  if (arch < 80) return fail(why, "needs sm_80 or newer, device is sm_" + std::to_string(arch));
  if (p.varlen) return fail(why, "takes no varlen problems");
  if (p.has_bias) return fail(why, "takes no bias");
  if (p.mods != nullptr) return fail(why, "runs no user code (fa_mods) yet");
  if (!p.aligned16) return fail(why, "pointers or strides not 16-byte aligned");
  if (is_fp8(p.kv_dtype) && fa_split_wide(p.head_dim, p.head_dim_v))
    return fail(why, "an fp8 cache at head dims up to 256 only (the wide / MLA kernel reads no fp8 yet), got " +
                         std::to_string(p.head_dim) + " / " + std::to_string(p.head_dim_v));
  if (fa_split_wide(p.head_dim, p.head_dim_v)) {
    // Wide heads (MLA): any query length (64 packed rows per CTA); no ALiBi / softcap (fwd_ref serves those).
    if (p.head_dim > kMaxHeadDim || p.head_dim_v > kMaxHeadDimWide)
      return fail(why, "wide head dims up to " + std::to_string(kMaxHeadDim) + " / " + std::to_string(kMaxHeadDimWide));
    if (round16(p.head_dim_v) % 128 != 0) return fail(why, "wide heads: head_dim_v (padded to 16) a multiple of 128");
    if (p.has_alibi || p.has_softcap) return fail(why, "wide heads: no ALiBi or softcap");
    return true;
  }
  if (p.paged || p.seqused) return true;
  const long long packed = static_cast<long long>(p.seqlen_q) * (p.heads_q / p.heads_kv);
  if (packed > kMaxRows)
    return fail(why, "contiguous caches only in the decode class: seqlen_q * heads_q / heads_kv <= " +
                         std::to_string(kMaxRows) + ", got " + std::to_string(packed));
  return true;
}

// The shape rules above, and a valid default point for the problem's semantic part (head dims whose accumulators
// exceed every point's register budget, e.g. d 128 / dv 248, go to the next family instead of failing fa_run).
bool covers(const ProblemDesc& p, int arch, std::string* why) {
  if (!covers_shape(p, arch, why)) return false;
  const Semantic s = semantic_for(*find_family("fwd_split"), p, arch);
  std::string reason;
  if (!is_valid(KernelConfig{s, defaults(s)}, limits_for_arch(arch), why ? &reason : nullptr))
    return fail(why, "no valid tile for these head dims: " + reason);
  return true;
}

// The tuner's space: 16 or 32 keys per warp, every stage count, split targets 1, 2 and 4 (is_valid prunes shared
// memory per device).
std::vector<Tunables> space(const Semantic& s) {
  std::vector<Tunables> out;
  if (fa_split_wide(s.head_dim, s.head_dim_v)) {
    for (int sp : {1, 2, 4}) out.push_back(Tunables{{32, 8, 2, sp}});
    return out;
  }
  for (int bn : {32, 64, 128})
    for (int w : {2, 4, 8}) {
      const int wn = bn / w;
      if (wn != 16 && wn != 32) continue;
      for (int st : {2, 3, 4})
        for (int sp : {1, 2, 4}) out.push_back(Tunables{{bn, w, st, sp}});
    }
  return out;
}

const std::vector<int> kBlockNs = {32, 64, 128};
const std::vector<int> kSplitTargets = {1, 2, 3, 4};

Plan plan(const KernelConfig& main, const ProblemDesc& p) {
  int most = 1;  // the largest split count of any knob value (the reported workspace)
  for (int bn : kBlockNs)
    for (int sp : kSplitTargets) most = std::max(most, split_count(p, bn, sp));
  return fam::split_kv_plan(main, p, split_count(p, main.t[kBlockN], main.t[kSplitTarget]), most);
}

const Family kFamily{.name = "fwd_split",
                     .template_name = "fwd_split.cuh",
                     .role = Role::Forward,
                     .priority = 30,
                     .fp8_kv_cache = true,
                     .sinks = true,
                     .knobs = {fam::block_n(kBlockNs), fam::warps({2, 4, 8}), fam::stages({2, 3, 4}),
                               Knob{"split_target", "sp", "kSplitTarget", kSplitTargets}},
                     .covers = &covers,
                     .defaults = &defaults,
                     .valid = &valid,
                     .smem_bytes = &smem_bytes,
                     .launch = &launch,
                     .space = &space,
                     .plan = &plan};

}  // namespace

FA_FAMILY_FOLDER(fwd_split) { register_family(&kFamily); }

}  // namespace fa::gen
