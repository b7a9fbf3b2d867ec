// common/dq_accum.cuh -- the layout of the float32 dQ accumulator of the tensor-core backward (args.dq_accum:
// bwd_pre zeroes it, bwd_mma adds into it, bwd_post reads it), tiled in 8 x 8 blocks of (token row r, flat column
// f = h * head_dim + c), S = heads_q * head_dim columns: block (r / 8, f / 8) is 64 contiguous floats, row-major.
// One red.add.v2 of an mma accumulator fragment (8 rows x 4 lanes x 2 columns) then covers 256 contiguous bytes,
// not eight 32-byte pieces of eight rows (Nsight Compute, H100: the row-major layout left the reds' load/store
// traffic throttling the ldmatrix of the same warps). The workspace holds rows_q rounded up to 8 rows (the host
// sizes it in generator/backward_plan.cpp).
#ifndef FA_COMMON_DQ_ACCUM_CUH
#define FA_COMMON_DQ_ACCUM_CUH

// Offset (floats) of (row r, flat column f); G = 8 * S floats per 8-row group. The offset is additive over parts
// aligned to 8 (off(r0 + r, f0 + f) = off(r0, f0) + off(r, f) when r0 and f0 are multiples of 8), so a kernel can
// keep a 64-bit uniform base and a 32-bit per-lane part (I = int).
template <class I>
FA_DEVICE I fa_dq_accum_off(I r, I f, I G) {
  return (r >> 3) * G + ((f >> 3) << 6) + ((r & 7) << 3) + (f & 7);
}

#endif  // FA_COMMON_DQ_ACCUM_CUH
