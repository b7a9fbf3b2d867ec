// fwd_combine.cuh -- the combine step of split-KV plans (fwd_split, num_splits > 1): merges the splits' normalized
// float32 partial outputs and natural-log LSEs (part_o / part_lse, layout in fa_args.cuh) exactly, with the shared
// merge of common/combine.cuh: lse = log(sum_s exp(lse_s)), o = sum_s exp(lse_s - lse) o_s (all -inf: o = 0,
// lse = -inf). One warp per output row (b, h, i) of the fixed-length problem: the lanes read the splits' LSEs
// (strided by 32), merge them across the warp, then each lane sums 4-column groups of the splits' rows with their
// weights (runs of 32 splits, weights shuffled from the lane that read them, 8 splits' loads in flight) and writes o
// (dtype) and, when asked, lse.
// Grid: x = ceil(batch * heads_q * seqlen_q / kWarps). Reads fa_cfg: kDtype, kHeadDimV, kHasLse, kWarps.
#ifndef FA_FWD_COMBINE_CUH
#define FA_FWD_COMBINE_CUH

#include "common/combine.cuh"

extern "C" __global__ void __launch_bounds__(fa_cfg::kWarps * 32) fa_kernel(const FaFwdArgs a) {
  typedef FaElem<fa_cfg::kDtype> E;
  typedef typename E::T T;
  constexpr int kDV = fa_cfg::kHeadDimV;
  constexpr int kQuads = kDV / 4;
  const int lane = (int)threadIdx.x & 31;
  const long long rows = (long long)a.batch * a.heads_q * a.seqlen_q;
  const long long row = (long long)blockIdx.x * fa_cfg::kWarps + ((int)threadIdx.x >> 5);
  if (row >= rows) return;
  const int ns = a.num_splits;
  FaLseMerge acc = fa_lse_merge_init();
  for (int s = lane; s < ns; s += 32) acc = fa_lse_merge_add(acc, a.part_lse[(long long)s * rows + row]);
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    FaLseMerge other;
    other.m = __shfl_xor_sync(0xffffffffu, acc.m, o);
    other.s = __shfl_xor_sync(0xffffffffu, acc.s, o);
    acc = fa_lse_merge_join(acc, other);
  }
  const float total = fa_lse_merge_total(acc);
  const int i = (int)(row % a.seqlen_q);
  const int h = (int)((row / a.seqlen_q) % a.heads_q);
  const int b = (int)(row / ((long long)a.seqlen_q * a.heads_q));
  T* o = (T*)a.o + (long long)b * a.o_sb + (long long)i * a.o_ss + (long long)h * a.o_sh;
  // Splits in runs of 32: lane t holds the weight of split s0 + t, broadcast by a shuffle; each lane sums its
  // 4-column groups (c4 = lane + 32 g) over the run with the loads of 8 splits in flight (no load waits on the last).
  constexpr int kGroups = (kQuads + 31) / 32;
  float x[kGroups][4];
#pragma unroll
  for (int gi = 0; gi < kGroups; ++gi) x[gi][0] = x[gi][1] = x[gi][2] = x[gi][3] = 0.f;
  if (total != -INFINITY) {
    for (int s0 = 0; s0 < ns; s0 += 32) {
      const float lse_s = s0 + lane < ns ? a.part_lse[(long long)(s0 + lane) * rows + row] : -INFINITY;
      const float w = lse_s == -INFINITY ? 0.f : fa_lse_merge_weight(lse_s, total);
      const int cnt = min(32, ns - s0);
#pragma unroll 8
      for (int t = 0; t < cnt; ++t) {
        const float wt = __shfl_sync(0xffffffffu, w, t);  // 0: a split that saw no key (its o_s is 0, finite)
        const float* src = a.part_o + ((long long)(s0 + t) * rows + row) * kDV;
#pragma unroll
        for (int gi = 0; gi < kGroups; ++gi) {
          const int c4 = lane + 32 * gi;
          if (kQuads % 32 == 0 || c4 < kQuads) {
            const float4 v = *(const float4*)(src + c4 * 4);
            x[gi][0] += wt * v.x; x[gi][1] += wt * v.y; x[gi][2] += wt * v.z; x[gi][3] += wt * v.w;
          }
        }
      }
    }
  }
#pragma unroll
  for (int gi = 0; gi < kGroups; ++gi) {
    const int c4 = lane + 32 * gi;
    if (kQuads % 32 == 0 || c4 < kQuads) {
      o[c4 * 4 + 0] = E::from_float(x[gi][0]);
      o[c4 * 4 + 1] = E::from_float(x[gi][1]);
      o[c4 * 4 + 2] = E::from_float(x[gi][2]);
      o[c4 * 4 + 3] = E::from_float(x[gi][3]);
    }
  }
  if constexpr (fa_cfg::kHasLse) {
    if (lane == 0 && a.lse != nullptr) a.lse[(long long)b * a.lse_sb + (long long)h * a.lse_sh + i] = total;
  }
}

#endif  // FA_FWD_COMBINE_CUH
