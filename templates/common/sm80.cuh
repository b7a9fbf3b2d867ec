// common/sm80.cuh -- the PTX wrappers of the tensor-core kernels (fwd_mma, bwd_mma): the sm_80 instruction set they
// are written in (cp.async, ldmatrix, mma.sync m16n8k16 with float32 accumulators, packed 16-bit conversion) plus a
// few global-memory operations of the backward (red.add, acquire / release). The 16-bit element type comes from the
// rendered prelude (fa_cfg::kDtype: 1 fp16, 2 bf16). Everything lives in namespace fa_sm80; a family pulls it into
// its own namespace with a using-directive, so call sites stay unqualified. Each wrapper is one instruction (or a
// fixed pair of them) and must stay so: the kernels' SASS is checked against these exact PTX strings.
#ifndef FA_COMMON_SM80_CUH
#define FA_COMMON_SM80_CUH

namespace fa_sm80 {

// Shared-memory address (32-bit, the form cp.async and ldmatrix take) of a generic pointer into shared memory.
FA_DEVICE unsigned smem_u32(const void* p) {
  unsigned r;
  asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(r) : "l"(p));
  return r;
}

// ---- cp.async: global -> shared without registers; src_bytes 0 zero-fills the destination.
FA_DEVICE void cp_async16(unsigned dst, const void* src, int src_bytes) {  // 16 bytes, L2 only (.cg)
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
FA_DEVICE void cp_async4(unsigned dst, const void* src, int src_bytes) {  // 4 bytes (.ca: 4 is too small for .cg)
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
FA_DEVICE void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most N of this thread's committed groups are still in flight (N = 0: all landed).
template <int N>
FA_DEVICE void cp_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// ---- ldmatrix: four 8 x 8 matrices of 16-bit elements; lanes 8 i .. 8 i + 7 address the rows of matrix i. The
// results as four registers or as an array of four (the same instruction).
FA_DEVICE void ldsm_x4(unsigned addr, unsigned& r0, unsigned& r1, unsigned& r2, unsigned& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}
FA_DEVICE void ldsm_x4(unsigned addr, unsigned* r) { ldsm_x4(addr, r[0], r[1], r[2], r[3]); }
// Transposed (.trans): for operands stored k-major.
FA_DEVICE void ldsm_x4_t(unsigned addr, unsigned& r0, unsigned& r1, unsigned& r2, unsigned& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}
FA_DEVICE void ldsm_x4_t(unsigned addr, unsigned* r) { ldsm_x4_t(addr, r[0], r[1], r[2], r[3]); }

// ---- mma.sync m16n8k16, row.col, 16-bit inputs of the config's dtype, float32 accumulators.
// c += a b
FA_DEVICE void mma16816(float* c, const unsigned* a, unsigned b0, unsigned b1) {
  if constexpr (fa_cfg::kDtype == 2) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}
// c = a b (no accumulator input: the first k step of a tile, instead of zeroing c first).
FA_DEVICE void mma16816_first(float* c, const unsigned* a, unsigned b0, unsigned b1) {
  const float z = 0.f;
  if constexpr (fa_cfg::kDtype == 2) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%10,%10,%10,%10};\n"
        : "=f"(c[0]), "=f"(c[1]), "=f"(c[2]), "=f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(z));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%10,%10,%10,%10};\n"
        : "=f"(c[0]), "=f"(c[1]), "=f"(c[2]), "=f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(z));
  }
}
// Two floats -> one 32-bit register of two 16-bit values of the output's dtype (fa_cfg::kODtype: the config's dtype,
// but bf16 / fp16 under fp8 inputs, which pack only O), lo in the low half (the lower column index): the A / B
// fragment element order.
FA_DEVICE unsigned pack2(float lo, float hi) {
  unsigned r;
  if constexpr (fa_cfg::kODtype == 2) {
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  } else {
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  }
  return r;
}

// ---- global memory
// p[0] += x, p[1] += y without a return value (p 8-byte aligned): one red.add.v2 from sm_90, two red.adds before.
FA_DEVICE void red_add2(float* p, float x, float y) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(p), "f"(x), "f"(y) : "memory");
#else
  asm volatile("red.global.add.f32 [%0], %1;\n" ::"l"(p), "f"(x) : "memory");
  asm volatile("red.global.add.f32 [%0], %1;\n" ::"l"(p + 1), "f"(y) : "memory");
#endif
}
// GPU-scope acquire load / release store of an int32 (the backward's deterministic-mode semaphores).
FA_DEVICE int ld_acquire(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
FA_DEVICE void st_release(int* p, int v) {
  asm volatile("st.release.gpu.global.s32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}

}  // namespace fa_sm80

#endif  // FA_COMMON_SM80_CUH
