// fwd_mla_seesaw.cuh -- the seesaw schedule of the Hopper MLA decode (fa_cfg::kSched == 1; included by fwd_mla.cuh,
// which holds the work split, the Q load and the kernel entry). The lockstep schedule splits each 64-key block's
// keys between the two consumer warpgroups (S = Q K^T at N = 32, so both read all of Q per block, and both stop the
// tensor cores for the shared softmax); here each consumer takes a whole block of a pair (blocks 2t and 2t + 1, in
// buffers 0 and 1: S at N = 64, Q read once per block) and the softmax of one overlaps the other's GEMMs. O stays
// split by columns: consumer c owns O_c = O[:, 256 c .. 256 c + 255] (128 accumulator registers a thread).
// Per pair, with m the running row maximum (log2 units, shared in smem), l_c the row sums each consumer carries
// (l = l_0 + l_1 at the end) and V_x,c the columns of consumer c in buffer x:
//   [0] S_0 = Q K_0^T                      [1] S_1 = Q K_1^T
//   [0] m_0 = max(m, rowmax S_0), f_0 = exp2(m - m_0), P_0 = exp2(S_0 - m_0); O_0 = O_0 f_0 + P_0 V_0,0 (P_0 from
//       registers); l_0 = l_0 f_0 + rowsum P_0
//   [1] m_1 = max(m_0, rowmax S_1), f_1 = exp2(m_0 - m_1), P_1 = exp2(S_1 - m_1) -> smem;
//       O_1 = O_1 f_0 f_1 + P_1 V_1,1 (P_1 from registers); l_1 = l_1 f_0 f_1 + rowsum P_1
//   [0] P_0 f_1 -> smem (from P_0's 16-bit fragments); O_0 = O_0 f_1 + P_1 V_1,0 (P_1 from smem); l_0 = l_0 f_1
//   [1] O_1 += (P_0 f_1) V_0,1 (from smem)                    (m = m_1 afterwards: both O_c and l_c are at m_1)
// Named barriers 6 (f_0 and m_0 written), 7 (f_1 and m_1 written), 8 (P_0 f_1 written), 9 (P_1 written) carry the
// exchange (one warpgroup arrives, the other syncs). Registers hold the last 64 columns of Q (both consumers: the A
// operand of that chunk's S GEMM), and its tile in smem holds P_1. Shared memory: fwd_mla_layout.cuh (seesaw plan).
// Producer (warpgroup 0): warp w copies half h = w % 2 of buffer x = w / 2 (h 0: columns 0-255, the first four
// 64-column chunks; h 1: the rest) for blocks x, x + 2, ..: page indices of the block's 64 rows first (2 a lane),
// then it waits for the half to be released, writes the key flags (h 0: a byte per key, read or zero-filled, and a
// block word), issues the 16-byte cp.async copies (4 rows x 128 bytes a warp instruction), waits for them, fences
// the async proxy and arrives on the half's full mbarrier (32 arrivals). Halves are released (empty mbarrier, one
// arrival per consumer warp) by the last GEMM that reads them: buffer 0's first half by consumer 0's P_0 V GEMM,
// buffer 1's second half by consumer 1's P_1 V GEMM, buffer 1's first half by consumer 0's P_1 V GEMM and buffer
// 0's second half by consumer 1's P_0 V GEMM (each after the owner's own S GEMM, which precedes the exchange).
// The next pair's S GEMM: consumer 1 issues it behind its O GEMMs (second half first); consumer 0 once its last O
// GEMM is done (first half first: the halves in the order they are released; with consumer 0's O GEMM in flight
// across that chain, ptxas of CUDA 13.0 serializes every wgmma of the kernel, C7515). An odd last block leaves
// consumer 1 without a block: its scores are -inf (P_1 = 0, f_1 = 1) and the GEMMs on buffer 1 are skipped.
// Registers: consumers 232 (setmaxnreg; O 128, S 32, Q's last chunk 16, P fragments 16), producer warps 40. Reads
// what fwd_mla.cuh reads.
#ifndef FA_FWD_MLA_SEESAW_CUH
#define FA_FWD_MLA_SEESAW_CUH

namespace fa_mla {

constexpr int kSsLast = kDc - 1;  // the Q chunk held in registers (its tile: P_1)
constexpr int kSsOffBuf0 = fa_mla_ss_off_buf(kD, 0);
constexpr int kSsBufBytes = fa_mla_ss_off_buf(kD, 1) - kSsOffBuf0;
constexpr int kSsOffP0 = fa_mla_ss_off_p0(kD);
constexpr int kSsOffP1 = kSsLast * kChunk;
constexpr int kSsOffMax = fa_mla_ss_off_max(kD);
constexpr int kSsOffScale = fa_mla_ss_off_scale(kD);
constexpr int kSsOffSum = fa_mla_ss_off_sum(kD);
constexpr int kSsOffValid = fa_mla_ss_off_valid(kD);
constexpr int kSsOffBad = fa_mla_ss_off_bad(kD);
constexpr int kSsOffBar = fa_mla_ss_off_bar(kD);
constexpr int kSsHalf = 4;  // chunks of the first half (V columns 0-255)
static_assert(kDc > kSsHalf + 4 - 1 && kDV == 512, "fwd_mla seesaw: four V chunks a consumer, one Q chunk more");
static_assert(fa_mla_seesaw_smem_bytes(kD) <= 232448, "fwd_mla seesaw: shared memory above 227 KB");
enum { kBarScale0 = 6, kBarScale1 = 7, kBarP0 = 8, kBarP1 = 9 };

// The two 16-bit values of a packed pair (pack2's inverse), as floats.
FA_DEVICE void unpack2(unsigned v, float& lo, float& hi) {
  if constexpr (fa_cfg::kDtype == 2) {
    lo = __uint_as_float(v << 16);
    hi = __uint_as_float(v & 0xffff0000u);
  } else {
    asm("{ .reg .f16 a, b; mov.b32 {a, b}, %2; cvt.f32.f16 %0, a; cvt.f32.f16 %1, b; }" : "=f"(lo), "=f"(hi) : "r"(v));
  }
}

FA_DEVICE unsigned ss_buf(const Cta& c, int x) { return c.base + (unsigned)(kSsOffBuf0 + x * kSsBufBytes); }
FA_DEVICE unsigned ss_full(const Cta& c, int x, int h) { return c.base + (unsigned)(kSsOffBar + 8 * (2 * x + h)); }
FA_DEVICE unsigned ss_empty(const Cta& c, int x, int h) {
  return c.base + (unsigned)(kSsOffBar + 32 + 8 * (2 * x + h));
}

// ---------------- producer warp: half H of buffer X, blocks X, X + 2, .. of the split ----------------
template <int X, int H>
FA_DEVICE void ss_produce(const FaFwdArgs& a, const Cta& c, int lane) {
  typedef unsigned short T;
  constexpr int c0 = H == 0 ? 0 : kSsHalf, c1 = H == 0 ? kSsHalf : kDc;
  const int u = lane & 7, rq = lane >> 3;  // 16-byte column of a 128-byte chunk row; row within a group of 4
  const T* kpool = (const T*)a.k;
  const int key_hi = c.w.key_hi, n = c.w.n_blocks;
  const int* bt = fa_cfg::kPaged ? a.block_table + (long long)c.b * a.bt_stride : nullptr;
  const long long head = (long long)c.g * a.k_sh;
  const unsigned buf = ss_buf(c, X);
  unsigned char* valid = c.gbase + kSsOffValid + X * kBN;
  for (int t = 0; 2 * t + X < n; ++t) {
    const int kn = (c.w.blk0 + 2 * t + X) * kBN;
    // element offsets of rows lane and lane + 32 (-1: past the used keys or on a page outside the pool)
    long long off[2];
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int j = kn + lane + 32 * e;
      off[e] = -1;
      if (j < key_hi) {
        if constexpr (fa_cfg::kPaged) {
          const int pg = bt[j >> a.page_shift];
          if ((unsigned)pg < (unsigned)a.num_pages)
            off[e] = (long long)pg * a.k_sb + (long long)(j & (a.page_size - 1)) * a.k_ss + head;
        } else {
          off[e] = (long long)c.b * a.k_sb + (long long)j * a.k_ss + head;
        }
      }
    }
    fa_mbar_wait(ss_empty(c, X, H), ((unsigned)t & 1u) ^ 1u);
    if constexpr (H == 0) {
      valid[lane] = off[0] >= 0 ? 1 : 0;
      valid[lane + 32] = off[1] >= 0 ? 1 : 0;
      const bool bad = __any_sync(0xffffffffu, off[0] < 0 || off[1] < 0);
      if (lane == 0) ((int*)(c.gbase + kSsOffBad))[X] = bad ? 1 : 0;
    }
#pragma unroll
    for (int i = 0; i < kBN / 4; ++i) {
      const int r = rq + 4 * i;  // < 32 exactly when i < 8: off[i >= 8] is a compile-time choice
      const long long o = __shfl_sync(0xffffffffu, off[i >= kBN / 8 ? 1 : 0], r & 31);
      const bool ok = o >= 0;
      const T* src = kpool + (ok ? o : 0) + u * 8;  // a row not read points into the pool's first row (0 bytes)
#pragma unroll
      for (int ch = c0; ch < c1; ++ch)
        cp_async16(buf + (unsigned)(ch * kChunk) + swz(r, u), src + ch * 64, ok ? 16 : 0);
    }
    cp_commit();
    cp_wait<0>();  // the half landed: publish it to the async proxy and mark it full (the flags too: release)
    fa_fence_proxy_async();
    fa_mbar_arrive(ss_full(c, X, H));
  }
}

// ---------------- consumer warpgroup CW: the scores of buffer CW's blocks, O columns [256 CW, 256 CW + 256) -------
template <int CW>
struct SeesawConsumer : ConsumerBase {
  float s[kBN / 2];
  unsigned qr[4][4];  // the last 64 columns of Q: A fragments of its four k steps
  float l[2];
  unsigned long long dq0, ds, dv_own, dv_other, dp_other;

  FA_DEVICE SeesawConsumer(const FaFwdArgs& a_, const Cta& c_, int tid) : ConsumerBase(a_, c_, tid) {
    l[0] = l[1] = 0.f;
  }

  FA_DEVICE float* smax() const { return (float*)(c.gbase + kSsOffMax); }
  FA_DEVICE float* sscale(int k) const { return (float*)(c.gbase + kSsOffScale) + k * kR; }
  FA_DEVICE float* ssum() const { return (float*)(c.gbase + kSsOffSum); }

  // Q into smem (both consumers), row facts, the last chunk into registers, descriptors.
  FA_DEVICE void start(int ct) {
    load_q(a, c, ct);
    row_band(a, c, rw, lo_r, hi_r);
    const int qrow = warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
      ldsm_x4(c.base + (unsigned)(kSsLast * kChunk) + swz(qrow, 2 * kk + (lane >> 4)), qr[kk]);
    dq0 = fa_wg_desc_sw128(c.base, 16, 1024);
    ds = fa_wg_desc_sw128(ss_buf(c, CW), 16, 1024);
    dv_own = fa_wg_desc_sw128(ss_buf(c, CW) + (unsigned)(CW * 4 * kChunk), kChunk, 1024);
    dv_other = fa_wg_desc_sw128(ss_buf(c, 1 - CW) + (unsigned)(CW * 4 * kChunk), kChunk, 1024);
    dp_other = fa_wg_desc_sw128(c.base + (unsigned)(CW == 0 ? kSsOffP1 : kSsOffP0), 16, 1024);
  }

  // S chunks [C0, C1) of buffer CW (the last one from the Q registers) as one commit group; FIRST: the chain's first
  // wgmma (D = A B).
  template <int C0, int C1, bool FIRST>
  FA_DEVICE void s_chunks() {
    // Bases through an opaque zero: otherwise ptxas hoists every (chunk, k step) descriptor of the block loop into
    // registers of its own (head_dim / 16 pairs of 64-bit values) and spills.
    unsigned z;
    asm volatile("mov.u32 %0, 0;" : "=r"(z));
    const unsigned long long dqz = dq0 + z, dsz = ds + z;
    fa_wg_fence();
#pragma unroll
    for (int ch = C0; ch < C1; ++ch) {
      const unsigned long long dk = dsz + (unsigned)((ch * kChunk) >> 4);
#pragma unroll
      for (int k4 = 0; k4 < 4; ++k4) {
        const int acc = FIRST && ch == C0 && k4 == 0 ? 0 : 1;
        if (ch == kSsLast) FaWg<kBN>::rs_k<fa_cfg::kDtype>(s, qr[k4], dk + (unsigned)(k4 * 2), acc);
        else
          FaWg<kBN>::ss<fa_cfg::kDtype>(s, dqz + (unsigned)((ch * kChunk) >> 4) + (unsigned)(k4 * 2),
                                        dk + (unsigned)(k4 * 2), acc);
      }
    }
    fa_wg_commit();
  }

  // Masks the scores of block kn (buffer CW) where the block crosses the band or the used length or holds a key
  // that was not read; returns the row maxima of this thread's two rows (raw scores, -inf when all masked).
  FA_DEVICE void mask_and_max(int kn, float (&mx)[2]) {
    const FaSplitWork& w = c.w;
    if (((const int*)(c.gbase + kSsOffBad))[CW] != 0 || kn < w.full_lo || kn + kBN > w.full_hi)
      mask_keys<kBN / 8>(s, c.gbase + kSsOffValid + CW * kBN, 0, kn, tq, lo_r, hi_r);
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      float m = FA_MLA_NEG_INF;
#pragma unroll
      for (int j = 0; j < kBN / 8; ++j) m = fmaxf(m, fmaxf(s[j * 4 + hh * 2], s[j * 4 + hh * 2 + 1]));
      mx[hh] = fa_lanes_max<4>(m);
    }
  }

  // P = exp2(S scale - ms) in place; returns this thread's part of the row sums.
  FA_DEVICE void exp_scores(const float (&ms)[2], float (&sum)[2]) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      float t = 0.f;
#pragma unroll
      for (int j = 0; j < kBN / 8; ++j) {
        const float p0 = fa_exp2(fmaf(s[j * 4 + hh * 2], mul, -ms[hh]));
        const float p1 = fa_exp2(fmaf(s[j * 4 + hh * 2 + 1], mul, -ms[hh]));
        s[j * 4 + hh * 2] = p0;
        s[j * 4 + hh * 2 + 1] = p1;
        t += p0 + p1;
      }
      sum[hh] = t;
    }
  }

  FA_DEVICE void scale_o(const float (&f)[2]) {
    if (__any_sync(0xffffffffu, f[0] != 1.f || f[1] != 1.f)) {
#pragma unroll
      for (int j = 0; j < kCols / 8; ++j) {
        o[j * 4 + 0] *= f[0];
        o[j * 4 + 1] *= f[0];
        o[j * 4 + 2] *= f[1];
        o[j * 4 + 3] *= f[1];
      }
    }
  }

  // The probabilities in s as the A fragments of four k steps (16 keys each: n8 tiles 2 kk and 2 kk + 1).
  FA_DEVICE void pack_p(unsigned (&pa)[4][4]) {
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      pa[kk][0] = pack2(s[8 * kk + 0], s[8 * kk + 1]);
      pa[kk][1] = pack2(s[8 * kk + 2], s[8 * kk + 3]);
      pa[kk][2] = pack2(s[8 * kk + 4], s[8 * kk + 5]);
      pa[kk][3] = pack2(s[8 * kk + 6], s[8 * kk + 7]);
    }
  }

  // Packed probabilities (pack_p's fragments) times f per row into the swizzled A tile at sp, then published to the
  // async proxy (f all 1: the fragments as they are; else unpacked, scaled and rounded again).
  FA_DEVICE void store_packed(unsigned sp, const unsigned (&pa)[4][4], const float (&f)[2]) {
    const bool scaled = __any_sync(0xffffffffu, f[0] != 1.f || f[1] != 1.f);
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        unsigned v = pa[kk][i];
        if (scaled) {
          float lo, hi;
          unpack2(v, lo, hi);
          v = pack2(lo * f[i & 1], hi * f[i & 1]);
        }
        const unsigned dst = sp + swz(rw + 8 * (i & 1), 2 * kk + (i >> 1)) + (unsigned)(tq * 4);
        fa_st_shared_b32(dst, v);
      }
    fa_fence_proxy_async();
  }

  // O += P V_own with P from registers (pack_p's fragments, which stay live until the GEMM has read them: keep()).
  FA_DEVICE void pv_regs_issue(unsigned (&pa)[4][4]) {
    keep(pa);  // the fragments and O are defined before the fence (no definition may sink into the chain)
    fa_wg_fence_regs(o);
    fa_wg_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) FaWg<kCols>::rs<fa_cfg::kDtype>(o, pa[kk], dv_own + (unsigned)(kk * 128), 1);
    fa_wg_commit();
  }
  FA_DEVICE static void keep(unsigned (&pa)[4][4]) {
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
#pragma unroll
      for (int i = 0; i < 4; ++i) asm volatile("" : "+r"(pa[kk][i]));
  }

  // O += P_other V_other with P from the other consumer's smem tile.
  FA_DEVICE void pv_smem_issue() {
    fa_wg_fence_regs(o);
    fa_wg_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
      FaWg<kCols>::ss_t<fa_cfg::kDtype>(o, dp_other + (unsigned)(kk * 2), dv_other + (unsigned)(kk * 128), 1);
    fa_wg_commit();
  }

  // m and f of this thread's rows into shared memory (lane tq 0 of each row, once every lane of the row read m).
  FA_DEVICE void publish(float* sm, float* fs, const float (&m)[2], const float (&f)[2]) {
    __syncwarp();
    if (tq == 0) {
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        sm[rw + hh * 8] = m[hh];
        fs[rw + hh * 8] = f[hh];
      }
    }
  }

  FA_DEVICE void release(int x, int h) {
    if (lane == 0) fa_mbar_arrive(ss_empty(c, x, h));
  }

  // Consumer 0: blocks 2t (buffer 0), O columns 0-255.
  FA_DEVICE void run0(int n) {
    const int pairs = (n + 1) / 2;
    float* sm = smax();
    float* f0s = sscale(0);
    const float* f1s = sscale(1);
    fa_mbar_wait(ss_full(c, 0, 0), 0u);
    s_chunks<0, kSsHalf, true>();
    fa_mbar_wait(ss_full(c, 0, 1), 0u);
    s_chunks<kSsHalf, kDc, false>();
    for (int t = 0; t < pairs; ++t) {
      const bool has1 = 2 * t + 1 < n;
      const int kn = (c.w.blk0 + 2 * t) * kBN;
      fa_wg_wait<0>();
      fa_wg_fence_regs(s);
      fa_wg_fence_regs(o);
      float mx[2], ms[2], f0[2], sum[2];
      mask_and_max(kn, mx);
      float mprev[2];
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        mprev[hh] = t == 0 ? FA_MLA_NEG_INF : sm[rw + hh * 8];
        const float mn = fmaxf(mprev[hh], mx[hh] * mul);
        ms[hh] = mn == FA_MLA_NEG_INF ? 0.f : mn;
        f0[hh] = fa_exp2(mprev[hh] - ms[hh]);
        mx[hh] = mn;
      }
      publish(sm, f0s, mx, f0);
      fa_bar_arrive(kBarScale0, 256);
      exp_scores(ms, sum);
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) l[hh] = l[hh] * f0[hh] + sum[hh];
      scale_o(f0);
      unsigned pa[4][4];
      pack_p(pa);
      pv_regs_issue(pa);
      fa_wg_wait<0>();
      keep(pa);
      fa_wg_fence_regs(o);
      release(0, 0);
      fa_bar_sync(kBarScale1, 256);
      float f1[2];
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) f1[hh] = f1s[rw + hh * 8];
      store_packed(c.base + (unsigned)kSsOffP0, pa, f1);
      fa_bar_arrive(kBarP0, 256);
      scale_o(f1);
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) l[hh] *= f1[hh];
      if (has1) {
        fa_bar_sync(kBarP1, 256);
        pv_smem_issue();
        // Waited before the next S is issued: with this GEMM in flight across that chain, ptxas (CUDA 13.0)
        // serializes every wgmma of the kernel (C7515).
        fa_wg_wait<0>();
        fa_wg_fence_regs(o);
        release(1, 0);  // P_1 V_1,0 done: buffer 1's first half is free
      }
      if (t + 1 < pairs) {  // the next S: first half first (released earliest)
        const unsigned ph = (unsigned)(t + 1) & 1u;
        fa_mbar_wait(ss_full(c, 0, 0), ph);
        s_chunks<0, kSsHalf, true>();
        fa_mbar_wait(ss_full(c, 0, 1), ph);
        s_chunks<kSsHalf, kDc, false>();
      }
    }
    fa_wg_wait<0>();
    fa_wg_fence_regs(o);
  }

  // Consumer 1: blocks 2t + 1 (buffer 1), O columns 256-511.
  FA_DEVICE void run1(int n) {
    const int pairs = (n + 1) / 2;
    float* sm = smax();
    const float* f0s = sscale(0);
    float* f1s = sscale(1);
    if (n > 1) {
      fa_mbar_wait(ss_full(c, 1, 1), 0u);
      s_chunks<kSsHalf, kDc, true>();
      fa_mbar_wait(ss_full(c, 1, 0), 0u);
      s_chunks<0, kSsHalf, false>();
    }
    for (int t = 0; t < pairs; ++t) {
      const bool has1 = 2 * t + 1 < n;
      const int kn = (c.w.blk0 + 2 * t + 1) * kBN;
      float mx[2] = {FA_MLA_NEG_INF, FA_MLA_NEG_INF}, ms[2], f0[2], f1[2], sum[2] = {0.f, 0.f};
      fa_wg_wait<0>();  // unconditional: ptxas then sees no accumulator read inside a wgmma pipeline stage
      fa_wg_fence_regs(s);
      fa_wg_fence_regs(o);
      if (has1) mask_and_max(kn, mx);
      fa_bar_sync(kBarScale0, 256);
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const float m0 = sm[rw + hh * 8];
        f0[hh] = f0s[rw + hh * 8];
        const float mn = fmaxf(m0, mx[hh] * mul);
        ms[hh] = mn == FA_MLA_NEG_INF ? 0.f : mn;
        f1[hh] = fa_exp2(m0 - ms[hh]);
        mx[hh] = mn;
      }
      publish(sm, f1s, mx, f1);
      fa_bar_arrive(kBarScale1, 256);
      unsigned pa[4][4];
      if (has1) {
        exp_scores(ms, sum);
        pack_p(pa);
        const float one[2] = {1.f, 1.f};
        store_packed(c.base + (unsigned)kSsOffP1, pa, one);
        fa_bar_arrive(kBarP1, 256);
      }
      float f[2];
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        f[hh] = f0[hh] * f1[hh];
        l[hh] = l[hh] * f[hh] + sum[hh];
      }
      scale_o(f);
      if (has1) pv_regs_issue(pa);
      fa_bar_sync(kBarP0, 256);
      pv_smem_issue();
      if (has1) {
        fa_wg_wait<1>();  // P_1 V_1,1 done: buffer 1's second half is free
        keep(pa);
        release(1, 1);
      }
      if (2 * t + 3 < n) {  // the next S behind the O GEMM: second half first (released first)
        const unsigned ph = (unsigned)(t + 1) & 1u;
        fa_mbar_wait(ss_full(c, 1, 1), ph);
        s_chunks<kSsHalf, kDc, true>();
        fa_wg_wait<1>();  // P_0 V_0,1 done: buffer 0's second half is free
        release(0, 1);
        fa_mbar_wait(ss_full(c, 1, 0), ph);
        s_chunks<0, kSsHalf, false>();
      } else {
        fa_wg_wait<0>();
        fa_wg_fence_regs(o);
        release(0, 1);
      }
    }
    fa_wg_wait<0>();
    fa_wg_fence_regs(o);
  }

  // l = l_0 + l_1, O / l, LSE: o and lse, or the split's partials (m: the final running max, log2 units).
  FA_DEVICE void finish(int n) {
    float* ss = ssum();
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const float t = fa_lanes_sum<4>(l[hh]);
      if (tq == 0) ss[CW * kR + rw + hh * 8] = t;
    }
    fa_bar_sync(4, 256);
    float m[2], inv[2], lse[2];
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int r = rw + hh * 8;
      m[hh] = n > 0 ? smax()[r] : FA_MLA_NEG_INF;
      row_end(a, c, r, m[hh], ss[r] + ss[kR + r], &inv[hh], &lse[hh]);
    }
    write_out<CW>(a, c, o, rw, tq, inv, lse);
  }
};

FA_DEVICE void seesaw(const FaFwdArgs& a, const Cta& c, int tid) {
  if (tid < 128) {
    fa_setmaxnreg_dec<kRegP>();
    const int w = tid >> 5, lane = tid & 31;
    if (w == 0) ss_produce<0, 0>(a, c, lane);
    else if (w == 1) ss_produce<0, 1>(a, c, lane);
    else if (w == 2) ss_produce<1, 0>(a, c, lane);
    else ss_produce<1, 1>(a, c, lane);
  } else {
    fa_setmaxnreg_inc<kRegC>();
    const int n = c.w.n_blocks;
    if (tid < 256) {
      SeesawConsumer<0> k(a, c, tid);
      if (n > 0) {
        k.start(tid - 128);
        k.run0(n);
      }
      k.finish(n);
    } else {
      SeesawConsumer<1> k(a, c, tid);
      if (n > 0) {
        k.start(tid - 128);
        k.run1(n);
      }
      k.finish(n);
    }
  }
}

}  // namespace fa_mla

#endif  // FA_FWD_MLA_SEESAW_CUH
