// fwd_combine.cuh -- the combine step of split-KV plans (fwd_split, num_splits > 1): merges the splits' normalized
// float32 partial outputs and natural-log LSEs (part_o / part_lse, layout in fa_args.cuh) exactly, with the shared
// merge of common/combine.cuh: lse = log(sum_s exp(lse_s)), o = sum_s exp(lse_s - lse) o_s (all -inf: o = 0,
// lse = -inf). Also the kernel of fa_merge_partials (api/merge.cpp: the parts of a context-parallel attention). One
// CTA per output row (b, h, i) of the fixed-length problem, its kWarps warps splitting the splits:
// every thread reads a strided share of the splits' LSEs into shared memory and merges them (warp butterfly, then
// across warps), so every thread knows the total; warp w then sums the splits s = w, w + kWarps, ... over its lanes'
// 4-column groups (the loads of different splits are independent, so they overlap instead of queueing one L2
// round trip per split), and the warps' sums meet in shared memory. A part with lse_s = -inf adds nothing
// (selected out, never multiplied, so whatever its row holds cannot turn into NaN).
// __launch_bounds__(..., 1): without minBlocksPerSM, ptxas's register-occupancy targets spill a few bytes on sm_80.
// Launched as a programmatic dependent of the split kernel on sm_90 (common/pdl.cuh): fa_pdl_wait() before any
// memory access. Grid: x = heads_q * seqlen_q, y = batch (32-bit row arithmetic: a 64-bit division is a call with a
// stack frame that ptxas reports as spills). With attention sinks (kHasSinks: split-KV plans of a problem with
// sinks, never fa_merge_partials) the sink joins the merge as a part of its own. Reads fa_cfg: kDtype, kHeadDimV,
// kHasLse, kHasSinks, kWarps.
#ifndef FA_FWD_COMBINE_CUH
#define FA_FWD_COMBINE_CUH

#include "common/combine.cuh"
#include "common/pdl.cuh"

namespace fa_combine {
constexpr int kWarps = fa_cfg::kWarps;
constexpr int kDV = fa_cfg::kHeadDimV;
constexpr int kQuads = kDV / 4;  // 4-column groups of a row
constexpr int kQuadsPerLane = (kQuads + 31) / 32;
constexpr int kMaxSplits = 256;  // fa.h: num_splits <= 256
}  // namespace fa_combine

extern "C" __global__ void __launch_bounds__(fa_cfg::kWarps * 32, 1) fa_kernel(const FaFwdArgs a) {
  using namespace fa_combine;
  typedef FaElem<fa_cfg::kDtype> E;
  typedef typename E::T T;
  __shared__ float s_lse[kMaxSplits];
  __shared__ FaLseMerge s_acc[kWarps];
  __shared__ float4 s_sum[kWarps - 1][kQuads];
  const int tid = (int)threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const unsigned per_batch = (unsigned)a.heads_q * (unsigned)a.seqlen_q;
  const unsigned r = blockIdx.x;  // h * seqlen_q + i
  const int b = (int)blockIdx.y;
  // Every argument read once into a register: indexing the parameter struct inside the loops makes ptxas copy it
  // to the stack (16 bytes of frame, reported as spills on sm_80).
  const int ns = a.num_splits;
  const long long rows = (long long)a.batch * per_batch;  // rows of one split's partials
  const long long row = (long long)b * per_batch + r;
  const float* __restrict__ part_lse = a.part_lse + row;
  const float* __restrict__ part_o = a.part_o + row * kDV;
  const long long o_stride = rows * kDV;
  fa_pdl_wait();
  FaLseMerge acc = fa_lse_merge_init();
  for (int s = tid; s < ns; s += kWarps * 32) {
    const float l = part_lse[(long long)s * rows];
    s_lse[s] = l;
    acc = fa_lse_merge_add(acc, l);
  }
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    FaLseMerge other;
    other.m = __shfl_xor_sync(0xffffffffu, acc.m, o);
    other.s = __shfl_xor_sync(0xffffffffu, acc.s, o);
    acc = fa_lse_merge_join(acc, other);
  }
  if (lane == 0) s_acc[warp] = acc;
  __syncthreads();
  acc = s_acc[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) acc = fa_lse_merge_join(acc, s_acc[w]);
  // Attention sinks (kHasSinks): the row's sink column as one more part, lse = sink, O = 0 (common/sinks.cuh): the
  // splits left it out, so it counts once; a row no split saw gives O = 0, lse = sink.
  if constexpr (fa_cfg::kHasSinks) acc = fa_lse_merge_add(acc, a.sinks[r / (unsigned)a.seqlen_q]);
  const float total = fa_lse_merge_total(acc);
  const FaLseWeights weights = fa_lse_merge_weights(acc);
  float4 x[kQuadsPerLane];
#pragma unroll
  for (int q = 0; q < kQuadsPerLane; ++q) x[q] = make_float4(0.f, 0.f, 0.f, 0.f);
  if (total != -INFINITY) {
#pragma unroll 4
    for (int s = warp; s < ns; s += kWarps) {
      const float lse_s = s_lse[s];
      const bool live = lse_s != -INFINITY;
      const float w = live ? fa_lse_merge_weight(weights, lse_s) : 0.f;
      const float* src = part_o + (long long)s * o_stride;
#pragma unroll
      for (int q = 0; q < kQuadsPerLane; ++q) {
        const int c4 = lane + 32 * q;
        if (kQuads % 32 == 0 || c4 < kQuads) {
          const float4 v = *(const float4*)(src + c4 * 4);
          x[q].x += live ? w * v.x : 0.f;
          x[q].y += live ? w * v.y : 0.f;
          x[q].z += live ? w * v.z : 0.f;
          x[q].w += live ? w * v.w : 0.f;
        }
      }
    }
  }
  if (warp > 0) {
#pragma unroll
    for (int q = 0; q < kQuadsPerLane; ++q) {
      const int c4 = lane + 32 * q;
      if (kQuads % 32 == 0 || c4 < kQuads) s_sum[warp - 1][c4] = x[q];
    }
  }
  __syncthreads();
  if (warp != 0) return;
  const int i = (int)(r % (unsigned)a.seqlen_q);
  const int h = (int)(r / (unsigned)a.seqlen_q);
  T* o = (T*)a.o + (long long)b * a.o_sb + (long long)i * a.o_ss + (long long)h * a.o_sh;
#pragma unroll
  for (int q = 0; q < kQuadsPerLane; ++q) {
    const int c4 = lane + 32 * q;
    if (kQuads % 32 == 0 || c4 < kQuads) {
      float4 v = x[q];
#pragma unroll
      for (int w = 1; w < kWarps; ++w) {
        const float4 y = s_sum[w - 1][c4];
        v.x += y.x;
        v.y += y.y;
        v.z += y.z;
        v.w += y.w;
      }
      o[c4 * 4 + 0] = E::from_float(v.x);
      o[c4 * 4 + 1] = E::from_float(v.y);
      o[c4 * 4 + 2] = E::from_float(v.z);
      o[c4 * 4 + 3] = E::from_float(v.w);
    }
  }
  if constexpr (fa_cfg::kHasLse) {
    if (lane == 0 && a.lse != nullptr) a.lse[(long long)b * a.lse_sb + (long long)h * a.lse_sh + i] = total;
  }
}

#endif  // FA_FWD_COMBINE_CUH
