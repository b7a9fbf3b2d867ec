// common/fp8.cuh -- fp8 (OCP e4m3fn = 4, e5m2 = 5, the fa_dtype values) to fp16 / bf16 in registers, two codes at a
// time with the sm_89+ cvt (cvt.rn.f16x2.e4m3x2 / .e5m2x2: exact, every fp8 value is an fp16 value); bf16 through
// float32, also exact (e4m3's 3 and e5m2's 2 mantissa bits, their exponent ranges, fit bf16). Byte order kept: the
// code at the lower address lands in the lower half. Needs sm_89 or newer (the selector sends nothing older here).
#ifndef FA_COMMON_FP8_CUH
#define FA_COMMON_FP8_CUH

// common/elem.cuh (fa_fp16 conversions) comes first: fa_common.cuh includes it in every kernel.

// Two fp8 codes (low byte first) to two 16-bit values of dtype OUT (1 fp16, 2 bf16), packed low first.
template <int FP8, int OUT>
FA_DEVICE unsigned fa_fp8x2_to_16x2(unsigned short two) {
  static_assert(FP8 == 4 || FP8 == 5, "fa_fp8x2_to_16x2: e4m3 (4) or e5m2 (5)");
  static_assert(OUT == 1 || OUT == 2, "fa_fp8x2_to_16x2: to fp16 (1) or bf16 (2)");
  unsigned h2;
  if constexpr (FP8 == 4) asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"(two));
  else asm("cvt.rn.f16x2.e5m2x2 %0, %1;" : "=r"(h2) : "h"(two));
  if constexpr (OUT == 1) {
    return h2;
  } else {
    const float lo = fa_h2f((unsigned short)(h2 & 0xffffu)), hi = fa_h2f((unsigned short)(h2 >> 16));
    unsigned out;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(out) : "f"(hi), "f"(lo));
    return out;
  }
}

// Sixteen fp8 codes (a 16-byte chunk, as four words) to sixteen 16-bit values (two 16-byte chunks, as eight words).
template <int FP8, int OUT>
FA_DEVICE void fa_fp8x16_to_16x16(const unsigned (&in)[4], unsigned (&out)[8]) {
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    out[2 * w] = fa_fp8x2_to_16x2<FP8, OUT>((unsigned short)(in[w] & 0xffffu));
    out[2 * w + 1] = fa_fp8x2_to_16x2<FP8, OUT>((unsigned short)(in[w] >> 16));
  }
}

#endif  // FA_COMMON_FP8_CUH
