// sm90_fp8.cuh -- the Hopper (sm_90a) fp8 primitives of the fp8 forward: wgmma m64nNk32 over e4m3 / e5m2 operands
// with fp32 accumulators (SS: A and B K-major in shared memory; RS: A from registers), the 8x8 b16 matrix store
// (stmatrix) and the byte permute (prmt) of the V transpose, and fp32 -> e4m3 pairs (cvt.rn.satfinite).
// fp8 wgmma takes no transpose: both operands are K-major (rows of K contiguous bytes), so O += P V reads V^T
// (common/hopper_v_transpose.cuh writes it). Needs common/sm90.cuh first (its FA_WG_ACC* / FA_WG_OPS* operand tables).
//
// FaWg8<N>: m64nNk32 (N = 16..256, multiple of 16); the accumulators d[N/2] in the D fragment layout of FaWg<N>
// (common/sm90.cuh). TA / TB: the fa_dtype of A / B (4 e4m3, 5 e5m2; they may differ). scale_d 0: D = A B.
//   ss(d, a, b, scale_d): A and B from shared memory through descriptors (fa_wg_desc_sw128: 128-byte rows = 128
//                         elements; step k by 32 elements = 32 bytes inside the row)              -- S = Q K^T
//   rs(d, a[4], b, scale_d): A from registers: warp w of the warpgroup holds rows 16 w + lane / 4 (+ 8); register r
//                         holds the 4 bytes of row lane / 4 + 8 (r & 1) at k = 4 (lane % 4) + 16 (r >> 1) + 0..3,
//                         the lowest k in the lowest byte (CUTLASS's ALayout_64x32; the mma.m16n8k32 A fragment)
//                                                                                                  -- O += P V^T
#ifndef FA_COMMON_SM90_FP8_CUH
#define FA_COMMON_SM90_FP8_CUH

template <int N>
struct FaWg8;
#define FA_WG8_SS_ASM(N, TA, TB, ACC, I0, I1, I2, ...)                                                               \
  asm volatile("{ .reg .pred p; setp.ne.b32 p, " I2 ", 0; wgmma.mma_async.sync.aligned.m64n" #N "k32.f32." TA "." TB \
               " {" ACC "}, " I0 ", " I1 ", p, 1, 1; }"                                                              \
               : __VA_ARGS__                                                                                         \
               : "l"(a), "l"(b), "r"(scale_d))
#define FA_WG8_RS_ASM(N, TA, TB, ACC, I0, I1, I2, I3, I4, I5, ...)                                                   \
  asm volatile("{ .reg .pred p; setp.ne.b32 p, " I5 ", 0; wgmma.mma_async.sync.aligned.m64n" #N "k32.f32." TA "." TB \
               " {" ACC "}, {" I0 ", " I1 ", " I2 ", " I3 "}, " I4 ", p, 1, 1; }"                                    \
               : __VA_ARGS__                                                                                         \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(scale_d))
#define FA_WG8_DEFINE(N, ACC, I0, I1, I2, I3, I4, I5, ...)                                                          \
  template <>                                                                                                       \
  struct FaWg8<N> {                                                                                                 \
    template <int TA, int TB>                                                                                       \
    static FA_DEVICE void ss(float (&d)[N / 2], unsigned long long a, unsigned long long b, int scale_d) {          \
      static_assert((TA == 4 || TA == 5) && (TB == 4 || TB == 5), "FaWg8: e4m3 (4) or e5m2 (5) operands");          \
      if constexpr (TA == 4 && TB == 4) FA_WG8_SS_ASM(N, "e4m3", "e4m3", ACC, I0, I1, I2, __VA_ARGS__);             \
      else if constexpr (TA == 4) FA_WG8_SS_ASM(N, "e4m3", "e5m2", ACC, I0, I1, I2, __VA_ARGS__);                   \
      else if constexpr (TB == 4) FA_WG8_SS_ASM(N, "e5m2", "e4m3", ACC, I0, I1, I2, __VA_ARGS__);                   \
      else FA_WG8_SS_ASM(N, "e5m2", "e5m2", ACC, I0, I1, I2, __VA_ARGS__);                                          \
    }                                                                                                               \
    template <int TA, int TB>                                                                                       \
    static FA_DEVICE void rs(float (&d)[N / 2], const unsigned (&a)[4], unsigned long long b, int scale_d) {        \
      static_assert((TA == 4 || TA == 5) && (TB == 4 || TB == 5), "FaWg8: e4m3 (4) or e5m2 (5) operands");          \
      if constexpr (TA == 4 && TB == 4) FA_WG8_RS_ASM(N, "e4m3", "e4m3", ACC, I0, I1, I2, I3, I4, I5, __VA_ARGS__); \
      else if constexpr (TA == 4) FA_WG8_RS_ASM(N, "e4m3", "e5m2", ACC, I0, I1, I2, I3, I4, I5, __VA_ARGS__);       \
      else if constexpr (TB == 4) FA_WG8_RS_ASM(N, "e5m2", "e4m3", ACC, I0, I1, I2, I3, I4, I5, __VA_ARGS__);       \
      else FA_WG8_RS_ASM(N, "e5m2", "e5m2", ACC, I0, I1, I2, I3, I4, I5, __VA_ARGS__);                              \
    }                                                                                                               \
  };
FA_WG8_DEFINE(16, FA_WG_ACC16, "%8", "%9", "%10", "%11", "%12", "%13", FA_WG_OPS16)
FA_WG8_DEFINE(32, FA_WG_ACC32, "%16", "%17", "%18", "%19", "%20", "%21", FA_WG_OPS32)
FA_WG8_DEFINE(48, FA_WG_ACC48, "%24", "%25", "%26", "%27", "%28", "%29", FA_WG_OPS48)
FA_WG8_DEFINE(64, FA_WG_ACC64, "%32", "%33", "%34", "%35", "%36", "%37", FA_WG_OPS64)
FA_WG8_DEFINE(80, FA_WG_ACC80, "%40", "%41", "%42", "%43", "%44", "%45", FA_WG_OPS80)
FA_WG8_DEFINE(96, FA_WG_ACC96, "%48", "%49", "%50", "%51", "%52", "%53", FA_WG_OPS96)
FA_WG8_DEFINE(112, FA_WG_ACC112, "%56", "%57", "%58", "%59", "%60", "%61", FA_WG_OPS112)
FA_WG8_DEFINE(128, FA_WG_ACC128, "%64", "%65", "%66", "%67", "%68", "%69", FA_WG_OPS128)
FA_WG8_DEFINE(144, FA_WG_ACC144, "%72", "%73", "%74", "%75", "%76", "%77", FA_WG_OPS144)
FA_WG8_DEFINE(160, FA_WG_ACC160, "%80", "%81", "%82", "%83", "%84", "%85", FA_WG_OPS160)
FA_WG8_DEFINE(176, FA_WG_ACC176, "%88", "%89", "%90", "%91", "%92", "%93", FA_WG_OPS176)
FA_WG8_DEFINE(192, FA_WG_ACC192, "%96", "%97", "%98", "%99", "%100", "%101", FA_WG_OPS192)
FA_WG8_DEFINE(208, FA_WG_ACC208, "%104", "%105", "%106", "%107", "%108", "%109", FA_WG_OPS208)
FA_WG8_DEFINE(224, FA_WG_ACC224, "%112", "%113", "%114", "%115", "%116", "%117", FA_WG_OPS224)
FA_WG8_DEFINE(240, FA_WG_ACC240, "%120", "%121", "%122", "%123", "%124", "%125", FA_WG_OPS240)
FA_WG8_DEFINE(256, FA_WG_ACC256, "%128", "%129", "%130", "%131", "%132", "%133", FA_WG_OPS256)
#undef FA_WG8_DEFINE

// stmatrix.x4 (b16): four 8x8 matrices of 16-bit pairs to shared memory, the inverse of ldmatrix.x4 (no .trans):
// lane l gives the address of row l % 8 of matrix l / 8 (16 bytes, 16-byte aligned); register i of lane l holds
// bytes 4 (l % 4) .. 4 (l % 4) + 3 of row l / 4 of matrix i. (Generic proxy: fence before wgmma or TMA reads it.)
FA_DEVICE void fa_stsm_x4(unsigned addr, unsigned r0, unsigned r1, unsigned r2, unsigned r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(r0), "r"(r1),
               "r"(r2), "r"(r3)
               : "memory");
}

// Byte permute: byte i of the result is byte (sel >> 4 i) & 7 of the pair {b, a} (a: bytes 0-3, b: bytes 4-7).
FA_DEVICE unsigned fa_prmt(unsigned a, unsigned b, unsigned sel) {
  unsigned r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
  return r;
}

// Four floats -> four e4m3 codes in one register, x0 in the lowest byte (round to nearest even, saturating to +-448:
// the probabilities in [0, 1] never reach it).
FA_DEVICE unsigned fa_e4m3x4(float x0, float x1, float x2, float x3) {
  unsigned r;
  asm("{ .reg .b16 lo, hi; cvt.rn.satfinite.e4m3x2.f32 lo, %2, %1; cvt.rn.satfinite.e4m3x2.f32 hi, %4, %3; "
      "mov.b32 %0, {lo, hi}; }"
      : "=r"(r)
      : "f"(x0), "f"(x1), "f"(x2), "f"(x3));
  return r;
}

#endif  // FA_COMMON_SM90_FP8_CUH
