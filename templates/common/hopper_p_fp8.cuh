// common/hopper_p_fp8.cuh -- the fp8 forward's P operand: the probabilities of a consumer's S accumulator rounded to
// e4m3 in registers and laid out as the A fragments of O += P V^T (wgmma m64nNk32, common/sm90_fp8.cuh), without a
// shuffle: the reduction's key order is permuted instead, and V^T is written in that order
// (common/hopper_v_transpose.cuh).
//
// Why a permutation: in the S accumulator (FaWg<N> layout) a thread holds, per 32-key step kk and row r (gq or gq + 8,
// gq = lane / 4, tq = lane % 4), the keys 2 tq, 2 tq + 1, 8 + 2 tq, 9 + 2 tq and the same + 16; the fp8 A fragment
// wants 4 consecutive positions of k in a register, 4 tq .. 4 tq + 3 (and + 16). A GEMM sums over k, so any
// permutation of k applied to both P's columns and V^T's columns leaves O unchanged: position k of the GEMM's
// reduction holds key key8(k) of the block (no code computes it: both sides lay it out by construction),
//   key8(k) = 32 (k / 32) + 16 ((k / 16) % 2) + 2 ((k % 16) / 4) + (k % 2) + 8 ((k / 2) % 2),
// i.e. inside every 16-key group the positions 4 t + e (t, e < 4) hold the keys 2 t + (e & 1) + 8 (e >> 1). With that
// order each register is four accumulator values of the thread itself (fa_wg_pack_p8), and the V transpose's
// ldmatrix.trans fragments land in it with byte permutes only.
// Rounding: cvt.rn.satfinite to e4m3 (3 mantissa bits: a relative error of at most 2^-4, or 2^-10 absolute below
// 2^-6, the subnormal step's half); the row sums l of the softmax stay those of the unrounded float32 P.
// Needs common/sm90_fp8.cuh (fa_e4m3x4).
#ifndef FA_COMMON_HOPPER_P_FP8_CUH
#define FA_COMMON_HOPPER_P_FP8_CUH

// P (the probabilities in the S fragment of kBN keys, FaWg<kBN> layout) -> the e4m3 A fragments of O += P V^T, one
// [4] per 32-key step kk: registers 0 / 2 row gq (keys of positions 4 tq .. + 3 and 16 + 4 tq .. + 3), 1 / 3 row
// gq + 8. Element jt * 4 + hh * 2 + e of s is row gq + 8 hh, key 8 jt + 2 tq + e.
template <int kBN>
FA_DEVICE void fa_wg_pack_p8(unsigned (&p)[kBN / 32][4], const float (&s)[kBN / 2]) {
  static_assert(kBN % 32 == 0, "fa_wg_pack_p8: block_n a multiple of 32 (k32 steps)");
#pragma unroll
  for (int kk = 0; kk < kBN / 32; ++kk) {
    const float* x = s + kk * 16;                      // jt = 4 kk .. 4 kk + 3
    p[kk][0] = fa_e4m3x4(x[0], x[1], x[4], x[5]);      // row gq:     keys 2tq, 2tq+1, 8+2tq, 9+2tq
    p[kk][1] = fa_e4m3x4(x[2], x[3], x[6], x[7]);      // row gq + 8: the same keys
    p[kk][2] = fa_e4m3x4(x[8], x[9], x[12], x[13]);    // row gq:     16 + those keys
    p[kk][3] = fa_e4m3x4(x[10], x[11], x[14], x[15]);  // row gq + 8
  }
}

#endif  // FA_COMMON_HOPPER_P_FP8_CUH
