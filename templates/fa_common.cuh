// fa_common.cuh -- element types and small device helpers shared by every template.
//
// Self-contained (no CUDA headers) so NVRTC needs no include path: fp16 and bf16 are carried as raw 16-bit
// patterns and converted with PTX cvt (round to nearest even). The rendered prelude defines namespace fa_cfg with
// kDtype (1 fp16, 2 bf16, 3 fp32); ElemT<kDtype> is the storage type. Arithmetic is float32 everywhere.
#ifndef FA_COMMON_CUH
#define FA_COMMON_CUH

#define FA_DEVICE __device__ __forceinline__
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif

FA_DEVICE float fa_h2f(unsigned short x) {
  float f;
  asm("{ .reg .f16 h; mov.b16 h, %1; cvt.f32.f16 %0, h; }" : "=f"(f) : "h"(x));
  return f;
}
FA_DEVICE unsigned short fa_f2h(float f) {
  unsigned short x;
  asm("{ .reg .f16 h; cvt.rn.f16.f32 h, %1; mov.b16 %0, h; }" : "=h"(x) : "f"(f));
  return x;
}
FA_DEVICE float fa_bf2f(unsigned short x) { return __uint_as_float(((unsigned)x) << 16); }
FA_DEVICE unsigned short fa_f2bf(float f) {
  unsigned short x;
  asm("{ .reg .b16 h; cvt.rn.bf16.f32 h, %1; mov.b16 %0, h; }" : "=h"(x) : "f"(f));
  return x;
}

template <int DT> struct FaElem;
template <> struct FaElem<1> {
  typedef unsigned short T;
  static FA_DEVICE float to_float(T x) { return fa_h2f(x); }
  static FA_DEVICE T from_float(float f) { return fa_f2h(f); }
};
template <> struct FaElem<2> {
  typedef unsigned short T;
  static FA_DEVICE float to_float(T x) { return fa_bf2f(x); }
  static FA_DEVICE T from_float(float f) { return fa_f2bf(f); }
};
template <> struct FaElem<3> {
  typedef float T;
  static FA_DEVICE float to_float(T x) { return x; }
  static FA_DEVICE T from_float(float f) { return f; }
};

FA_DEVICE float fa_exp2(float x) {  // ex2.approx: exact 0 for -inf
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
FA_DEVICE float fa_tanh(float x) {  // accurate tanh (not tanh.approx): softcap changes results, keep it exact-ish
  float ax = fabsf(x);
  float e = __expf(-2.0f * ax);
  float t = (1.0f - e) / (1.0f + e);
  return copysignf(t, x);
}
FA_DEVICE float fa_warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
FA_DEVICE float fa_warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The float32 dQ accumulator of the tensor-core backward (args.dq_accum: bwd_pre zeroes it, bwd_mma adds into it,
// bwd_post reads it) is tiled in 8 x 8 blocks of (token row r, flat column f = h * head_dim + c), S = heads_q *
// head_dim columns: block (r / 8, f / 8) is 64 contiguous floats, row-major. One red.add.v2 of an mma accumulator
// fragment (8 rows x 4 lanes x 2 columns) then covers 256 contiguous bytes, not eight 32-byte pieces of eight
// rows (Nsight Compute, H100: the row-major layout left the reds' load/store traffic throttling the ldmatrix of
// the same warps). The workspace holds rows_q rounded up to 8 rows. G = 8 * S floats per 8-row group. The offset
// is additive over parts aligned to 8 (off(r0 + r, f0 + f) = off(r0, f0) + off(r, f) when r0 and f0 are multiples
// of 8), so a kernel can keep a 64-bit uniform base and a 32-bit per-lane part (I = int).
template <class I>
FA_DEVICE I fa_dq_accum_off(I r, I f, I G) {
  return (r >> 3) * G + ((f >> 3) << 6) + ((r & 7) << 3) + (f & 7);
}

// Sequence geometry of one (batch, head) work item, shared by all kernels.
struct FaSeq {
  int sq, sk;            // lengths of this sequence
  long long base_q, base_k;  // token offsets (varlen) or 0
  long long boff_q, boff_k;  // unused placeholders kept for clarity
};
FA_DEVICE FaSeq fa_seq(const FaFwdArgs& a, int b) {
  FaSeq s;
  if (a.cu_seqlens_q) {
    int q0 = a.cu_seqlens_q[b], q1 = a.cu_seqlens_q[b + 1];
    int k0 = a.cu_seqlens_k[b], k1 = a.cu_seqlens_k[b + 1];
    s.sq = q1 - q0; s.sk = k1 - k0; s.base_q = q0; s.base_k = k0;
  } else {
    s.sq = a.seqlen_q; s.sk = a.seqlen_k; s.base_q = 0; s.base_k = 0;
  }
  s.boff_q = 0; s.boff_k = 0;
  return s;
}
// Visible key range [lo, hi) of query row i (lo >= hi: fully masked).
FA_DEVICE void fa_key_range(const FaFwdArgs& a, int i, int sq, int sk, int* lo, int* hi) {
  int diag = i + sk - sq;
  int l = 0, h = sk;
  if (a.win_left >= 0) l = max(l, diag - a.win_left);
  if (a.win_right >= 0) h = min(h, diag + a.win_right + 1);
  *lo = l; *hi = h;
}

#endif  // FA_COMMON_CUH
