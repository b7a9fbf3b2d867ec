/*
 * fp8.h -- exact OCP FP8 codecs and the float64 oracle over fp8 inputs (test code only).
 *
 * Formats (OCP 8-bit Floating Point Specification, v1.0), the values of fa_dtype:
 *   E4M3 (float8_e4m3fn): s eeee mmm, bias 7; no infinities; s 1111 111 (0x7F / 0xFF) is NaN; largest 448 (0x7E);
 *        subnormals m / 8 * 2^-6 (smallest 2^-9).
 *   E5M2 (float8_e5m2): s eeeee mm, bias 15, IEEE-like: s 11111 00 is +-inf, s 11111 mm (mm != 0) NaN; largest 57344
 *        (0x7B); subnormals m / 4 * 2^-14 (smallest 2^-16).
 * fp8_decode gives a code's value exactly (every fp8 value is a double). fp8_encode rounds to nearest, ties to even,
 * and handles what lies past the largest finite value by `overflow`:
 *   kSaturate: to the largest finite value of the sign (infinities too), NaN stays NaN: what a scaled quantizer does
 *              when it clamps before the cast (the inputs of the tests);
 *   kTorch:    as torch's .to(torch.float8_e4m3fn / float8_e5m2) casts (c10's Float8_e4m3fn / Float8_e5m2, which do NOT
 *              saturate): e4m3 gives NaN (0x7F | sign) for every magnitude that rounds above 448 (> 464, and inf);
 *              e5m2 gives +-inf for magnitudes that round above 57344 (>= 61440) and for inf.
 * NaN encodes as 0x7F | sign in both formats.
 */
#ifndef FA_TESTS_ORACLE_FP8_H
#define FA_TESTS_ORACLE_FP8_H

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tests/oracle/oracle.h"

namespace fa::oracle {

inline constexpr int kFp8E4m3 = 4;  // FA_DTYPE_E4M3
inline constexpr int kFp8E5m2 = 5;  // FA_DTYPE_E5M2
enum class Fp8Overflow { kSaturate, kTorch };

double fp8_decode(uint8_t code, int format);  // throws on an unknown format
uint8_t fp8_encode(double x, int format, Fp8Overflow overflow = Fp8Overflow::kSaturate);
double fp8_max(int format);  // 448 or 57344

// An fp8 tensor [batch, seqlen, heads, dim] (element strides, last dim contiguous, as Tensor4) whose element
// (b, t, head, :) reads code * scale[b * scale_sb + g * scale_sh], g the KV head of `head` (for q: head / group;
// for k, v: head itself): FlashAttention 3's descale_q / k / v with scale_sb, and vLLM's per-head k_scale / v_scale
// with scale_sb = 0. scale nullptr: 1.
struct Fp8Tensor4 {
  const uint8_t* data = nullptr;
  long long sb = 0, ss = 0, sh = 0;
  int format = kFp8E4m3;
  const double* scale = nullptr;
  long long scale_sb = 0, scale_sh = 0;
};

// The dequantized values of t as a double buffer of the same strides (its valid rows only, the rest 0): rows of
// `heads` heads, `dim` wide, over the tokens of p's q side (queries) or k side (keys).
std::vector<double> fp8_dequantize(const Problem& p, const Fp8Tensor4& t, bool queries, int heads, int dim);

// The oracle over fp8 inputs: q, k, v dequantized exactly (fp8_dequantize), then forward() in float64.
void forward_fp8(const Problem& p, const Fp8Tensor4& q, const Fp8Tensor4& k, const Fp8Tensor4& v, MutTensor4 o,
                 double* lse);
// A 16-bit query (given as doubles) over an fp8 KV cache (k / v with their per-head scales): forward() over the
// dequantized cache.
void forward_fp8_cache(const Problem& p, Tensor4 q, const Fp8Tensor4& k, const Fp8Tensor4& v, MutTensor4 o,
                       double* lse);

}  // namespace fa::oracle

#endif  // FA_TESTS_ORACLE_FP8_H
