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
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "../common.h"
#include "templates/fwd_split_layout.cuh"

namespace fa::gen {

namespace {

enum { kBlockN, kWarps, kStages, kSplitTarget };

constexpr int kMaxRows = kFaSplitRows;   // packed rows per CTA (the contiguous coverage class)
constexpr int kMinBlocksPerSplit = 4;    // the heuristic never gives a split fewer key blocks
constexpr int kMaxSplits = 128;          // nor more splits than this (the combine reads every split)
constexpr int kDefaultSms = 132;         // H100 / H200 when the device is unknown
constexpr int kMaxHeadDimWide = 512;     // head_dim_v of the wide (MLA) kernel
constexpr int kLongSplitBlocks = 128;    // a grid of one wave or less doubles its splits while each keeps this many

bool fail(std::string* why, const std::string& msg) { return fam::fail(why, "fwd_split", msg); }

int round16(int d) { return (d + 15) / 16 * 16; }

bool valid(const KernelConfig& c, std::string* why) {
  const Semantic& s = c.s;
  const Tunables& t = c.t;
  if (s.dtype != kFp16 && s.dtype != kBf16) return fail(why, "dtype must be fp16 or bf16");
  if (s.has_bias) return fail(why, "takes no bias");
  if (s.varlen) return fail(why, "takes no varlen problems");
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
  return static_cast<unsigned>(fa_split_smem_bytes(c.s.head_dim, c.s.head_dim_v, c.t[kBlockN], c.t[kWarps],
                                                   c.t[kStages]));
}

int row_tiles(int seqlen_q, int group, int d, int dv) {
  const int per_cta = fa_split_rows(d, dv);
  const long long packed = static_cast<long long>(seqlen_q) * group;
  return static_cast<int>(std::max<long long>(1, (packed + per_cta - 1) / per_cta));
}

// The split count of problem p at block_n / split_target: p.num_splits when given (at most the key blocks), else
// the smallest n whose grid fills the waves of split_target CTAs per SM to at least 95% of the best n's (FA2's wave
// efficiency rule, waves = CTAs * n / (split_target * SMs), efficiency = waves / ceil(waves)), n at most the key
// blocks / kMinBlocksPerSplit and kMaxSplits. Depends on batch, heads, seqlen_q, seqlen_k (the capacity, never
// seqused_k) and the device.
int split_count(const ProblemDesc& p, int block_n, int split_target) {
  const int nblk = std::max(1, (p.seqlen_k + block_n - 1) / block_n);
  if (p.num_splits > 0) return std::min(p.num_splits, nblk);
  const int sms = p.sm_count > 0 ? p.sm_count : kDefaultSms;
  const double base = static_cast<double>(p.batch) * p.heads_kv *
                      row_tiles(p.seqlen_q, p.heads_q / p.heads_kv, p.head_dim, p.head_dim_v);
  const double slots = static_cast<double>(split_target) * sms;
  const int cap = std::min(kMaxSplits, std::max(1, nblk / kMinBlocksPerSplit));
  auto eff = [&](int n) {
    const double waves = base * n / slots;
    return waves / std::ceil(waves);
  };
  double best = 0;
  for (int n = 1; n <= cap; ++n) best = std::max(best, eff(n));
  int n = 1;
  while (n < cap && eff(n) < 0.95 * best) ++n;
  // Long splits in one wave or less: twice the CTAs (two waves) balance better as CTAs retire (H200, batch 8 x 128k
  // keys: 8 splits 0.970 ms, 4 splits 0.986 ms), as long as each split keeps kLongSplitBlocks blocks.
  if (base * n / slots <= 1.0 && 2 * n <= kMaxSplits && nblk / (2 * n) >= kLongSplitBlocks) n *= 2;
  return n;
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
  Plan out;
  out.steps.push_back(main);
  out.tuned_step = 0;
  const int ns = split_count(p, main.t[kBlockN], main.t[kSplitTarget]);
  // The workspace: laid out for the largest split count of any knob value, so that its size query does not depend on
  // the tunables served; allocated only when this point splits.
  int most = 1;
  for (int bn : kBlockNs)
    for (int sp : kSplitTargets) most = std::max(most, split_count(p, bn, sp));
  if (most > 1) {
    const size_t rows = static_cast<size_t>(p.batch) * p.heads_q * p.seqlen_q;
    const size_t o_bytes = fam::align256(static_cast<size_t>(most) * rows * p.head_dim_v * sizeof(float));
    out.workspace_reserve_bytes = o_bytes + fam::align256(static_cast<size_t>(most) * rows * sizeof(float));
    if (ns > 1) {
      out.off_part_o = 0;
      out.off_part_lse = o_bytes;
      out.workspace_bytes = out.workspace_reserve_bytes;
    }
  }
  if (ns > 1) {
    out.num_splits = ns;
    out.steps.push_back(fam::default_step("fwd_combine", p, main.s.arch));
  }
  return out;
}

const Family kFamily{
    .name = "fwd_split", .template_name = "fwd_split.cuh", .role = Role::Forward, .priority = 30,
    .knobs = {fam::block_n(kBlockNs), fam::warps({2, 4, 8}), fam::stages({2, 3, 4}),
              Knob{"split_target", "sp", "kSplitTarget", kSplitTargets}},
    .covers = &covers, .defaults = &defaults, .valid = &valid, .smem_bytes = &smem_bytes, .launch = &launch,
    .space = &space, .plan = &plan};

}  // namespace

FA_FAMILY_FOLDER(fwd_split) { register_family(&kFamily); }

}  // namespace fa::gen
