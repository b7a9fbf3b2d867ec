// sm90.cuh -- Hopper (sm_90a) primitives as inline PTX: mbarriers, TMA tensor copies, bulk copies, L2 bulk prefetch,
// proxy fences, wgmma (descriptors, fences, groups, m64nNk16 bf16/fp16 -> fp32 in SS (A and B K- or MN-major) and RS
// forms), named barriers (with an or-reduction), setmaxnreg; the dynamic shared-memory check and plain shared loads
// and stores.
// Self-contained (no CUDA headers), NVRTC-compilable; needs FA_DEVICE (fa_common.cuh) and sm_90a for wgmma and
// setmaxnreg. Shared-memory addresses are 32-bit shared-window addresses (fa_sm90_smem); tensor maps are the
// generic address of a 64-byte aligned CUtensorMap held in a __grid_constant__ kernel parameter.
#ifndef FA_SM90_CUH
#define FA_SM90_CUH

// ---- addresses --------------------------------------------------------------------------------------------------
// 32-bit shared-window address of a generic pointer into shared memory.
FA_DEVICE unsigned fa_sm90_smem(const void* p) {
  unsigned r;
  asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(r) : "l"(p));
  return r;
}

// ---- shared memory -------------------------------------------------------------------------------------------------
// Traps unless the launch gave at least `bytes` of dynamic shared memory (the host's size formula and the kernel's
// layout disagree: nothing is computed on a layout that does not fit).
FA_DEVICE void fa_require_dyn_smem(unsigned bytes) {
  unsigned dyn;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn));
  if (dyn < bytes) __trap();
}
// Plain 32-bit / 64-bit / 128-bit accesses at shared-window addresses.
FA_DEVICE void fa_st_shared_b32(unsigned addr, unsigned v) {
  asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
}
FA_DEVICE unsigned fa_ld_shared_b32(unsigned addr) {
  unsigned v;
  asm volatile("ld.shared.b32 %0, [%1];" : "=r"(v) : "r"(addr) : "memory");
  return v;
}
FA_DEVICE void fa_st_shared_f32(unsigned addr, float v) {
  asm volatile("st.shared.f32 [%0], %1;" ::"r"(addr), "f"(v) : "memory");
}
FA_DEVICE float2 fa_ld_shared_f2(unsigned addr) {
  float2 v;
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"(addr) : "memory");
  return v;
}
FA_DEVICE uint4 fa_ld_shared_v4(unsigned addr) {
  uint4 v;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(addr)
               : "memory");
  return v;
}

// ---- mbarrier -----------------------------------------------------------------------------------------------------
// Initialise the mbarrier at `bar` to expect `count` arrivals per phase.
FA_DEVICE void fa_mbar_init(unsigned bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
// Make mbarrier inits visible to the async proxy (TMA) and the other threads (follow with a CTA barrier).
FA_DEVICE void fa_mbar_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }
// One arrival on `bar`.
FA_DEVICE void fa_mbar_arrive(unsigned bar) {
  asm volatile("{ .reg .b64 st; mbarrier.arrive.shared::cta.b64 st, [%0]; }" ::"r"(bar) : "memory");
}
// One arrival on `bar` that also raises the phase's expected transaction count by `bytes` (TMA bytes to land).
FA_DEVICE void fa_mbar_arrive_expect_tx(unsigned bar, unsigned bytes) {
  asm volatile("{ .reg .b64 st; mbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1; }" ::"r"(bar), "r"(bytes)
               : "memory");
}
// Raises the current phase's expected transaction count by `bytes` without an arrival (the phase still waits for
// its arrivals: copies may be issued before the arrival that publishes other data).
FA_DEVICE void fa_mbar_expect_tx(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
// Non-blocking test: true once the phase of parity `parity` has completed (a fresh barrier: parity 1 is complete).
FA_DEVICE bool fa_mbar_try_wait(unsigned bar, unsigned parity) {
  unsigned ok;
  asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
               : "=r"(ok)
               : "r"(bar), "r"(parity)
               : "memory");
  return ok != 0;
}
// Blocks until the phase of parity `parity` of `bar` has completed (acquire: the phase's TMA data is visible).
// (No in-kernel timeout: a trap/clock path in the wait loop makes ptxas drop the setmaxnreg register regions.)
FA_DEVICE void fa_mbar_wait(unsigned bar, unsigned parity) {
  while (!fa_mbar_try_wait(bar, parity)) {}
}

// ---- bulk copies (cp.async.bulk, no tensor map) -------------------------------------------------------------------
// `bytes` (a multiple of 16) from global `src` to shared `dst` (both 16-byte aligned), completing on mbarrier `bar`
// as transaction bytes (the arrival that expects them counts them in).
FA_DEVICE void fa_bulk_load(unsigned dst, const void* src, unsigned bytes, unsigned bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}

// ---- TMA (cp.async.bulk.tensor) -----------------------------------------------------------------------------------
// Prefetch a tensor map (generic address of the __grid_constant__ parameter) into the descriptor cache.
FA_DEVICE void fa_tma_prefetch(const void* map) { asm volatile("prefetch.tensormap [%0];" ::"l"(map) : "memory"); }
// 2D/3D/4D tile loads: box at coordinates (c0 innermost, ...) -> shared `dst`; completes `bytes` on mbarrier `bar`.
FA_DEVICE void fa_tma_load_2d(unsigned dst, const void* map, unsigned bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::
          "r"(dst),
      "l"(map), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}
FA_DEVICE void fa_tma_load_3d(unsigned dst, const void* map, unsigned bar, int c0, int c1, int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
      "[%5];" ::"r"(dst),
      "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
}
FA_DEVICE void fa_tma_load_4d(unsigned dst, const void* map, unsigned bar, int c0, int c1, int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, "
      "%5}], [%6];" ::"r"(dst),
      "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
      : "memory");
}
// 4D tile store from shared `src` (out-of-bounds parts of the box are not written); then commit / wait (reads done).
FA_DEVICE void fa_tma_store_4d(const void* map, unsigned src, int c0, int c1, int c2, int c3) {
  asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.tile.bulk_group [%0, {%2, %3, %4, %5}], [%1];" ::"l"(map),
               "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
               : "memory");
}
FA_DEVICE void fa_tma_store_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
FA_DEVICE void fa_tma_store_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory"); }

// ---- proxy fence ---------------------------------------------------------------------------------------------------
// Orders this thread's generic-proxy shared-memory accesses before later async-proxy ones (TMA store, wgmma).
FA_DEVICE void fa_fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

// ---- named barriers -------------------------------------------------------------------------------------------------
// bar.sync: wait until `count` threads (multiple of 32, whole warps) have arrived at barrier `id` (1..15).
FA_DEVICE void fa_bar_sync(int id, int count) { asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(count) : "memory"); }
// bar.arrive: count this warp's arrival at barrier `id` without waiting.
FA_DEVICE void fa_bar_arrive(int id, int count) { asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(count) : "memory"); }

// bar.red.or: bar.sync over `count` threads at barrier `id` that also returns whether any of them passed v != 0.
FA_DEVICE bool fa_bar_or(int id, int count, bool v) {
  unsigned r;
  asm volatile("{ .reg .pred p, q; setp.ne.u32 q, %1, 0; bar.red.or.pred p, %2, %3, q; selp.u32 %0, 1, 0, p; }"
               : "=r"(r)
               : "r"((unsigned)v), "r"(id), "r"(count)
               : "memory");
  return r != 0;
}

// ---- L2 prefetch ------------------------------------------------------------------------------------------------
// Bulk prefetch of `bytes` (a multiple of 16) at the 16-byte aligned global address p into L2; no completion to wait
// for, no shared memory touched.
FA_DEVICE void fa_prefetch_l2(const void* p, unsigned bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
}

// Prefetch of the line holding global address p into L1 (no register held until the later load).
FA_DEVICE void fa_prefetch_l1(const void* p) { asm volatile("prefetch.global.L1 [%0];" ::"l"(p)); }

// ---- register reallocation ---------------------------------------------------------------------------------------
// Raise / lower this warpgroup's per-thread register budget (warpgroup-wide; needs __launch_bounds__(T, 1)).
template <int N>
FA_DEVICE void fa_setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N));
}
template <int N>
FA_DEVICE void fa_setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N));
}

// ---- wgmma ----------------------------------------------------------------------------------------------------------
// Shared-memory matrix descriptor, 128-byte swizzle (tile base 1024-byte aligned; the swizzle XORs address bits
// 4-6 with 7-9). lbo / sbo in bytes. K-major operand (rows of 128 bytes = 64 16-bit elements, 8-row groups of 1024
// bytes): lbo unused (16), sbo = 1024; step k by 16 elements inside the 64-element atom by adding 32 bytes to
// `addr`. MN-major operand (B of O += P V: rows are K, 64 MN-elements per 128-byte row): lbo = byte distance
// between 64-wide MN chunks, sbo = 1024 (8 K-rows); step k by 16 by adding 2048 bytes.
FA_DEVICE unsigned long long fa_wg_desc_sw128(unsigned addr, unsigned lbo, unsigned sbo) {
  return (unsigned long long)((addr & 0x3FFFF) >> 4) | ((unsigned long long)((lbo >> 4) & 0x3FFF) << 16) |
         ((unsigned long long)((sbo >> 4) & 0x3FFF) << 32) | (1ull << 62);
}
// Orders prior register writes (accumulators, A fragments) before the following wgmma.mma_async.
FA_DEVICE void fa_wg_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
// Closes the wgmma.mma_async issued since the last commit into one group.
FA_DEVICE void fa_wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
// Waits until at most N committed groups are pending.
template <int N>
FA_DEVICE void fa_wg_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// Compiler-only fence: the register values of d are (re)defined here, so no read or write of them moves across
// (put after fa_wg_wait for the accumulators it completes; before the issue when they were just written).
template <int N>
FA_DEVICE void fa_wg_fence_regs(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i]));
}

// FaWg<N>: m64nNk16 (N = 16..256, multiple of 16), fp32 accumulators d[N/2] in the wgmma D fragment layout
// (warp w of the warpgroup holds rows 16w..16w+15: d[4j+0..1] row lane/4, columns 8j + 2(lane%4) + {0,1};
// d[4j+2..3] the same columns of row lane/4 + 8). DT: 1 fp16, 2 bf16. scale_d 0: D = A B, else D += A B.
//   ss(d, a, b, scale_d):        A and B from shared memory, both K-major (descriptors a, b)  -- S = Q K^T
//   ss_t(d, a, b, scale_d):      A K-major and B MN-major (transposed), both from shared memory -- O += P V, P
//                                in shared memory
//   ss_tt(d, a, b, scale_d):     A and B both MN-major (transposed) in shared memory; A's descriptor as B's
//                                (lbo: 64-wide M chunks, sbo 1024, k step 2048 bytes)            -- dQ = dS K
//                                from dS^T
//   rs(d, a[4], b, scale_d):     A from registers (the mma.sync m16n8k16 A fragment of the warp's 16 rows),
//                                B MN-major in shared memory (transposed, descriptor b)          -- O += P V
//   rs_k(d, a[4], b, scale_d):   as rs with B K-major
template <int N>
struct FaWg;
#define FA_WG_SS_ASM(N, TY, TA, TB, ACC, I0, I1, I2, ...)                                                            \
  asm volatile("{ .reg .pred p; setp.ne.b32 p, " I2 ", 0; wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY "." TY \
               " {" ACC "}, " I0 ", " I1 ", p, 1, 1, " TA ", " TB "; }"                                              \
               : __VA_ARGS__                                                                                         \
               : "l"(a), "l"(b), "r"(scale_d))
#define FA_WG_RS_ASM(N, TY, TB, ACC, I0, I1, I2, I3, I4, I5, ...)                                                    \
  asm volatile("{ .reg .pred p; setp.ne.b32 p, " I5 ", 0; wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY "." TY \
               " {" ACC "}, {" I0 ", " I1 ", " I2 ", " I3 "}, " I4 ", p, 1, 1, " TB "; }"                            \
               : __VA_ARGS__                                                                                         \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(scale_d))
#define FA_WG_DEFINE(N, ACC, I0, I1, I2, I3, I4, I5, ...)                                                      \
  template <>                                                                                                  \
  struct FaWg<N> {                                                                                             \
    template <int DT>                                                                                          \
    static FA_DEVICE void ss(float (&d)[N / 2], unsigned long long a, unsigned long long b, int scale_d) {     \
      if constexpr (DT == 2) FA_WG_SS_ASM(N, "bf16", "0", "0", ACC, I0, I1, I2, __VA_ARGS__);                  \
      else FA_WG_SS_ASM(N, "f16", "0", "0", ACC, I0, I1, I2, __VA_ARGS__);                                     \
    }                                                                                                          \
    template <int DT>                                                                                          \
    static FA_DEVICE void ss_t(float (&d)[N / 2], unsigned long long a, unsigned long long b, int scale_d) {   \
      if constexpr (DT == 2) FA_WG_SS_ASM(N, "bf16", "0", "1", ACC, I0, I1, I2, __VA_ARGS__);                  \
      else FA_WG_SS_ASM(N, "f16", "0", "1", ACC, I0, I1, I2, __VA_ARGS__);                                     \
    }                                                                                                          \
    template <int DT>                                                                                          \
    static FA_DEVICE void ss_tt(float (&d)[N / 2], unsigned long long a, unsigned long long b, int scale_d) {  \
      if constexpr (DT == 2) FA_WG_SS_ASM(N, "bf16", "1", "1", ACC, I0, I1, I2, __VA_ARGS__);                  \
      else FA_WG_SS_ASM(N, "f16", "1", "1", ACC, I0, I1, I2, __VA_ARGS__);                                     \
    }                                                                                                          \
    template <int DT>                                                                                          \
    static FA_DEVICE void rs(float (&d)[N / 2], const unsigned (&a)[4], unsigned long long b, int scale_d) {   \
      if constexpr (DT == 2) FA_WG_RS_ASM(N, "bf16", "1", ACC, I0, I1, I2, I3, I4, I5, __VA_ARGS__);           \
      else FA_WG_RS_ASM(N, "f16", "1", ACC, I0, I1, I2, I3, I4, I5, __VA_ARGS__);                              \
    }                                                                                                          \
    template <int DT>                                                                                          \
    static FA_DEVICE void rs_k(float (&d)[N / 2], const unsigned (&a)[4], unsigned long long b, int scale_d) { \
      if constexpr (DT == 2) FA_WG_RS_ASM(N, "bf16", "0", ACC, I0, I1, I2, I3, I4, I5, __VA_ARGS__);           \
      else FA_WG_RS_ASM(N, "f16", "0", ACC, I0, I1, I2, I3, I4, I5, __VA_ARGS__);                              \
    }                                                                                                          \
  };
// Operand tables (generated by gen_wgmma_table.py): accumulators are %0..%(N/2-1), the inputs follow.
#define FA_WG_ACC16 "%0,%1,%2,%3,%4,%5,%6,%7"
#define FA_WG_OPS16 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
#define FA_WG_ACC32 FA_WG_ACC16 ",%8,%9,%10,%11,%12,%13,%14,%15"
#define FA_WG_OPS32 \
  FA_WG_OPS16, "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
#define FA_WG_ACC48 FA_WG_ACC32 ",%16,%17,%18,%19,%20,%21,%22,%23"
#define FA_WG_OPS48 \
  FA_WG_OPS32, "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23])
#define FA_WG_ACC64 FA_WG_ACC48 ",%24,%25,%26,%27,%28,%29,%30,%31"
#define FA_WG_OPS64 \
  FA_WG_OPS48, "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define FA_WG_ACC80 FA_WG_ACC64 ",%32,%33,%34,%35,%36,%37,%38,%39"
#define FA_WG_OPS80 \
  FA_WG_OPS64, "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39])
#define FA_WG_ACC96 FA_WG_ACC80 ",%40,%41,%42,%43,%44,%45,%46,%47"
#define FA_WG_OPS96 \
  FA_WG_OPS80, "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
#define FA_WG_ACC112 FA_WG_ACC96 ",%48,%49,%50,%51,%52,%53,%54,%55"
#define FA_WG_OPS112 \
  FA_WG_OPS96, "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55])
#define FA_WG_ACC128 FA_WG_ACC112 ",%56,%57,%58,%59,%60,%61,%62,%63"
#define FA_WG_OPS128 \
  FA_WG_OPS112, "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define FA_WG_ACC144 FA_WG_ACC128 ",%64,%65,%66,%67,%68,%69,%70,%71"
#define FA_WG_OPS144 \
  FA_WG_OPS128, "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71])
#define FA_WG_ACC160 FA_WG_ACC144 ",%72,%73,%74,%75,%76,%77,%78,%79"
#define FA_WG_OPS160 \
  FA_WG_OPS144, "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79])
#define FA_WG_ACC176 FA_WG_ACC160 ",%80,%81,%82,%83,%84,%85,%86,%87"
#define FA_WG_OPS176 \
  FA_WG_OPS160, "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87])
#define FA_WG_ACC192 FA_WG_ACC176 ",%88,%89,%90,%91,%92,%93,%94,%95"
#define FA_WG_OPS192 \
  FA_WG_OPS176, "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
#define FA_WG_ACC208 FA_WG_ACC192 ",%96,%97,%98,%99,%100,%101,%102,%103"
#define FA_WG_OPS208                                                                                          \
  FA_WG_OPS192, "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), \
      "+f"(d[103])
#define FA_WG_ACC224 FA_WG_ACC208 ",%104,%105,%106,%107,%108,%109,%110,%111"
#define FA_WG_OPS224                                                                                              \
  FA_WG_OPS208, "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), \
      "+f"(d[111])
#define FA_WG_ACC240 FA_WG_ACC224 ",%112,%113,%114,%115,%116,%117,%118,%119"
#define FA_WG_OPS240                                                                                              \
  FA_WG_OPS224, "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), \
      "+f"(d[119])
#define FA_WG_ACC256 FA_WG_ACC240 ",%120,%121,%122,%123,%124,%125,%126,%127"
#define FA_WG_OPS256                                                                                              \
  FA_WG_OPS240, "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), \
      "+f"(d[127])
FA_WG_DEFINE(16, FA_WG_ACC16, "%8", "%9", "%10", "%11", "%12", "%13", FA_WG_OPS16)
FA_WG_DEFINE(32, FA_WG_ACC32, "%16", "%17", "%18", "%19", "%20", "%21", FA_WG_OPS32)
FA_WG_DEFINE(48, FA_WG_ACC48, "%24", "%25", "%26", "%27", "%28", "%29", FA_WG_OPS48)
FA_WG_DEFINE(64, FA_WG_ACC64, "%32", "%33", "%34", "%35", "%36", "%37", FA_WG_OPS64)
FA_WG_DEFINE(80, FA_WG_ACC80, "%40", "%41", "%42", "%43", "%44", "%45", FA_WG_OPS80)
FA_WG_DEFINE(96, FA_WG_ACC96, "%48", "%49", "%50", "%51", "%52", "%53", FA_WG_OPS96)
FA_WG_DEFINE(112, FA_WG_ACC112, "%56", "%57", "%58", "%59", "%60", "%61", FA_WG_OPS112)
FA_WG_DEFINE(128, FA_WG_ACC128, "%64", "%65", "%66", "%67", "%68", "%69", FA_WG_OPS128)
FA_WG_DEFINE(144, FA_WG_ACC144, "%72", "%73", "%74", "%75", "%76", "%77", FA_WG_OPS144)
FA_WG_DEFINE(160, FA_WG_ACC160, "%80", "%81", "%82", "%83", "%84", "%85", FA_WG_OPS160)
FA_WG_DEFINE(176, FA_WG_ACC176, "%88", "%89", "%90", "%91", "%92", "%93", FA_WG_OPS176)
FA_WG_DEFINE(192, FA_WG_ACC192, "%96", "%97", "%98", "%99", "%100", "%101", FA_WG_OPS192)
FA_WG_DEFINE(208, FA_WG_ACC208, "%104", "%105", "%106", "%107", "%108", "%109", FA_WG_OPS208)
FA_WG_DEFINE(224, FA_WG_ACC224, "%112", "%113", "%114", "%115", "%116", "%117", FA_WG_OPS224)
FA_WG_DEFINE(240, FA_WG_ACC240, "%120", "%121", "%122", "%123", "%124", "%125", FA_WG_OPS240)
FA_WG_DEFINE(256, FA_WG_ACC256, "%128", "%129", "%130", "%131", "%132", "%133", FA_WG_OPS256)

#undef FA_WG_DEFINE

#endif  // FA_SM90_CUH
