// common/elem.cuh -- element types and scalar math shared by every template: fp16 / bf16 carried as raw 16-bit
// patterns and converted with PTX cvt (round to nearest even), FaElem<kDtype> (the storage type of a dtype and its
// conversions: 1 fp16, 2 bf16, 3 fp32), exp2 and tanh as the kernels use them, and FA_DEVICE. Self-contained (no
// CUDA headers) so NVRTC needs no include path. Arithmetic is float32 everywhere.
#ifndef FA_COMMON_ELEM_CUH
#define FA_COMMON_ELEM_CUH

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

template <int DT>
struct FaElem;
template <>
struct FaElem<1> {
  typedef unsigned short T;
  static FA_DEVICE float to_float(T x) { return fa_h2f(x); }
  static FA_DEVICE T from_float(float f) { return fa_f2h(f); }
};
template <>
struct FaElem<2> {
  typedef unsigned short T;
  static FA_DEVICE float to_float(T x) { return fa_bf2f(x); }
  static FA_DEVICE T from_float(float f) { return fa_f2bf(f); }
};
template <>
struct FaElem<3> {
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

#endif  // FA_COMMON_ELEM_CUH
