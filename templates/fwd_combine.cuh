// fwd_combine.cuh -- the combine step of split-KV plans (fwd_split, num_splits > 1): merges the splits' normalized
// float32 partial outputs and natural-log LSEs (part_o / part_lse, layout in fa_args.cuh) exactly, with the shared
// merge of common/combine.cuh: lse = log(sum_s exp(lse_s)), o = sum_s exp(lse_s - lse) o_s (all -inf: o = 0,
// lse = -inf). Also the kernel of fa_merge_partials (api/merge.cpp: the parts of a context-parallel attention). One
// warp per output row (b, h, i) of the fixed-length problem: the lanes read the splits' LSEs (strided by 32), merge
// them across the warp, then each lane sums 4-column groups of the splits' rows with their weights and writes o
// (dtype) and, when asked, lse.
// Grid: x = ceil(heads_q * seqlen_q / kWarps), y = batch (32-bit row arithmetic: a 64-bit division is a call with a
// stack frame that ptxas reports as spills; so does leaving out minBlocksPerSM = 1, whose register-occupancy targets
// make ptxas spill a few bytes). Reads fa_cfg: kDtype, kHeadDimV, kHasLse, kWarps.
#ifndef FA_FWD_COMBINE_CUH
#define FA_FWD_COMBINE_CUH

#include "common/combine.cuh"

extern "C" __global__ void __launch_bounds__(fa_cfg::kWarps * 32, 1) fa_kernel(const FaFwdArgs a) {
  typedef FaElem<fa_cfg::kDtype> E;
  typedef typename E::T T;
  constexpr int kDV = fa_cfg::kHeadDimV;
  constexpr int kQuads = kDV / 4;
  const int lane = (int)threadIdx.x & 31;
  const unsigned per_batch = (unsigned)a.heads_q * (unsigned)a.seqlen_q;
  const unsigned r = blockIdx.x * (unsigned)fa_cfg::kWarps + (threadIdx.x >> 5);  // h * seqlen_q + i
  if (r >= per_batch) return;
  const int b = (int)blockIdx.y;
  const long long rows = (long long)a.batch * per_batch;  // rows of one split's partials
  const long long row = (long long)b * per_batch + r;
  // Every argument read once into a register: indexing the parameter struct inside the loops makes ptxas copy it
  // to the stack (16 bytes of frame, reported as spills on sm_80).
  const int ns = a.num_splits;
  const float* __restrict__ part_lse = a.part_lse + row;
  const float* __restrict__ part_o = a.part_o + row * kDV;
  const long long o_stride = rows * kDV;
  FaLseMerge acc = fa_lse_merge_init();
  for (int s = lane; s < ns; s += 32) acc = fa_lse_merge_add(acc, part_lse[(long long)s * rows]);
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    FaLseMerge other;
    other.m = __shfl_xor_sync(0xffffffffu, acc.m, o);
    other.s = __shfl_xor_sync(0xffffffffu, acc.s, o);
    acc = fa_lse_merge_join(acc, other);
  }
  const float total = fa_lse_merge_total(acc);
  const FaLseWeights weights = fa_lse_merge_weights(acc);
  const int i = (int)(r % (unsigned)a.seqlen_q);
  const int h = (int)(r / (unsigned)a.seqlen_q);
  T* o = (T*)a.o + (long long)b * a.o_sb + (long long)i * a.o_ss + (long long)h * a.o_sh;
  for (int c4 = lane; c4 < kQuads; c4 += 32) {
    float x0 = 0.f, x1 = 0.f, x2 = 0.f, x3 = 0.f;
    if (total != -INFINITY) {
      for (int s = 0; s < ns; ++s) {
        const float lse_s = part_lse[(long long)s * rows];
        if (lse_s == -INFINITY) continue;
        const float w = fa_lse_merge_weight(weights, lse_s);
        const float4 v = *(const float4*)(part_o + (long long)s * o_stride + c4 * 4);
        x0 += w * v.x; x1 += w * v.y; x2 += w * v.z; x3 += w * v.w;
      }
    }
    o[c4 * 4 + 0] = E::from_float(x0);
    o[c4 * 4 + 1] = E::from_float(x1);
    o[c4 * 4 + 2] = E::from_float(x2);
    o[c4 * 4 + 3] = E::from_float(x3);
  }
  if constexpr (fa_cfg::kHasLse) {
    if (lane == 0 && a.lse != nullptr) a.lse[(long long)b * a.lse_sb + (long long)h * a.lse_sh + i] = total;
  }
}

#endif  // FA_FWD_COMBINE_CUH
