// fa_tma_args.cuh -- the TMA half of the Hopper forward's kernel ABI (fwd_wgmma.cuh): the CUtensorMaps of Q, K and V
// passed by value as a second __grid_constant__ parameter next to FaFwdArgs. Compiled by the host compiler and by
// NVRTC, so fundamental types only: FaTensorMap is a CUtensorMap (128 bytes, 64-byte aligned) that the host fills
// with cuTensorMapEncodeTiled (the host side: generator/families/fwd_wgmma/family.cpp, bind()).
#ifndef FA_TMA_ARGS_CUH
#define FA_TMA_ARGS_CUH

struct alignas(64) FaTensorMap { unsigned long long opaque[16]; };
struct FaFwdTma {
  FaTensorMap q, k, v;  // 4D (head_dim, seq, heads, batch) bf16/fp16, box (64, rows, 1, 1), 128-byte swizzle
};

#endif  // FA_TMA_ARGS_CUH
