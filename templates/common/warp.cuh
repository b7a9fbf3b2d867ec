// common/warp.cuh -- reductions across the lanes of a warp: over all 32 lanes (the reference kernels' one warp
// per row, bwd_pre's fallback) and over aligned groups of N lanes (an mma.sync accumulator row is spread over the 4
// lanes of a quad: fwd_mma's row max and row sum; bwd_pre's 8 lanes per row). The order of the additions is part of
// the result in float32 and is fixed here: fa_warp_* halve the distance (16, 8, .., 1), fa_lanes_* double it
// (1, 2, .., N / 2).
#ifndef FA_COMMON_WARP_CUH
#define FA_COMMON_WARP_CUH

FA_DEVICE float fa_warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
FA_DEVICE float fa_warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
// Over the N lanes (a power of two <= 32) of the aligned group that holds this lane.
template <int N>
FA_DEVICE float fa_lanes_max(float v) {
#pragma unroll
  for (int o = 1; o < N; o <<= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
template <int N>
FA_DEVICE float fa_lanes_sum(float v) {
#pragma unroll
  for (int o = 1; o < N; o <<= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

#endif  // FA_COMMON_WARP_CUH
