// fa_tma_args.cuh -- the TMA half of the Hopper kernels' ABI: the CUtensorMaps of Q, K, V and O (fwd_wgmma.cuh), and of
// Q, K, V and dO (bwd_wgmma.cuh), passed by value as a further __grid_constant__ parameter next to FaFwdArgs /
// FaBwdArgs. Compiled by the host compiler and by NVRTC, so fundamental types only: FaTensorMap is a CUtensorMap
// (128 bytes, 64-byte aligned) that the host fills with cuTensorMapEncodeTiled (the host side: bind() in
// generator/families/fwd_wgmma/family.cpp and bwd_wgmma/family.cpp).
#ifndef FA_TMA_ARGS_CUH
#define FA_TMA_ARGS_CUH

struct alignas(64) FaTensorMap {
  unsigned long long opaque[16];
};
struct FaFwdTma {
  FaTensorMap q, k, v;  // 4D (head_dim, seq, heads, batch) bf16/fp16, box (64, rows, 1, 1), 128-byte swizzle
  FaTensorMap o;        // 4D (head_dim_v, seqlen_q, heads_q, batch), box (64, 64, 1, 1): the epilogue's TMA stores
                        // (fixed length; varlen kernels store O with 16-byte stores and leave it unset)
};
struct FaBwdTma {
  FaTensorMap q, k, v, dout;  // 4D (head_dim, seq, heads, batch), box (64, rows, 1, 1), 128-byte swizzle
};

#endif  // FA_TMA_ARGS_CUH
