// split_plan.h -- the split-KV pieces the decode families share (fwd_split, fwd_mla): the split count heuristic and
// the plan of a split call (the family's kernel, then fwd_combine over a float32 workspace of partial outputs).
#pragma once

#include <algorithm>
#include <cmath>

#include "common.h"

namespace fa::gen::fam {

inline constexpr int kSplitMinBlocks = 4;     // the heuristic never gives a split fewer key blocks
inline constexpr int kSplitMax = 128;         // nor more splits than this (the combine reads every split)
inline constexpr int kSplitDefaultSms = 132;  // H100 / H200 when the device is unknown
inline constexpr int kSplitLongBlocks =
    128;  // a grid of one wave or less doubles its splits while each keeps this many

// CTAs along the packed rows (query tokens x the query heads of a KV head) at rows_per_cta rows each.
inline int split_row_tiles(int seqlen_q, int group, int rows_per_cta) {
  const long long packed = static_cast<long long>(seqlen_q) * group;
  return static_cast<int>(std::max<long long>(1, (packed + rows_per_cta - 1) / rows_per_cta));
}

// The split count of problem p at block_n keys per block, split_target CTAs per SM and rows_per_cta packed rows per
// CTA: p.num_splits when given (at most the key blocks), else the smallest n whose grid fills the waves of
// split_target CTAs per SM to at least 95% of the best n's (FA2's wave efficiency rule, waves = CTAs * n /
// (split_target * SMs), efficiency = waves / ceil(waves)), n at most the key blocks / kSplitMinBlocks and kSplitMax.
// Depends on batch, heads, seqlen_q, seqlen_k (the capacity, never seqused_k) and the device.
inline int split_count(const ProblemDesc& p, int block_n, int split_target, int rows_per_cta) {
  const int nblk = std::max(1, (p.seqlen_k + block_n - 1) / block_n);
  if (p.num_splits > 0) return std::min(p.num_splits, nblk);
  const int sms = p.sm_count > 0 ? p.sm_count : kSplitDefaultSms;
  const double base =
      static_cast<double>(p.batch) * p.heads_kv * split_row_tiles(p.seqlen_q, p.heads_q / p.heads_kv, rows_per_cta);
  const double slots = static_cast<double>(split_target) * sms;
  const int cap = std::min(kSplitMax, std::max(1, nblk / kSplitMinBlocks));
  auto eff = [&](int n) {
    const double waves = base * n / slots;
    return waves / std::ceil(waves);
  };
  double best = 0;
  for (int n = 1; n <= cap; ++n) best = std::max(best, eff(n));
  int n = 1;
  while (n < cap && eff(n) < 0.95 * best) ++n;
  // Long splits in one wave or less: twice the CTAs (two waves) balance better as CTAs retire (H200, batch 8 x 128k
  // keys: 8 splits 0.970 ms, 4 splits 0.986 ms), as long as each split keeps kSplitLongBlocks blocks.
  if (base * n / slots <= 1.0 && 2 * n <= kSplitMax && nblk / (2 * n) >= kSplitLongBlocks) n *= 2;
  return n;
}

// The plan of a split-KV call: `main` alone (ns == 1, o written directly), or [main, fwd_combine] over a float32
// workspace of partial outputs [ns, batch, heads_q, seqlen_q, head_dim_v] (normalized per split) and LSEs [ns, batch,
// heads_q, seqlen_q]. The reported workspace is laid out for `most` splits (the largest count any tunable point
// could pick for the problem), so fa_forward_workspace_size holds whichever tunables the chooser serves later; it is
// allocated only when this point splits.
inline Plan split_kv_plan(const KernelConfig& main, const ProblemDesc& p, int ns, int most) {
  Plan out;
  out.steps.push_back(main);
  out.tuned_step = 0;
  if (most > 1) {
    const size_t rows = static_cast<size_t>(p.batch) * p.heads_q * p.seqlen_q;
    const size_t o_bytes = align256(static_cast<size_t>(most) * rows * p.head_dim_v * sizeof(float));
    out.workspace_reserve_bytes = o_bytes + align256(static_cast<size_t>(most) * rows * sizeof(float));
    if (ns > 1) {
      out.off_part_o = 0;
      out.off_part_lse = o_bytes;
      out.workspace_bytes = out.workspace_reserve_bytes;
    }
  }
  if (ns > 1) {
    out.num_splits = ns;
    KernelConfig combine = default_step("fwd_combine", p, main.s.arch);
    combine.s.kv_dtype = 0;  // the merge reads float32 partials: an fp8 cache's combine is the 16-bit one
    out.steps.push_back(combine);
  }
  return out;
}

}  // namespace fa::gen::fam
