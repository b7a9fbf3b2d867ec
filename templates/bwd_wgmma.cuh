// bwd_wgmma.cuh -- Hopper (sm_90a) backward: TMA + wgmma + warp specialization (fp16 / bf16, head dims 64 / 128).
//
// One CTA per (key block n of kBlockN = 64 * kConsumers keys, kv head g, batch b), in bwd_mma's order (causal: the
// grid's last args.lpt_tail pairs key-block-major, fa_bwd_cta; with a mask_mod every pair). Warpgroup 0 is the
// producer (setmaxnreg.dec): its first warp loads K_n and V_n once by TMA (before the first tile; none without tiles),
// then, for every tile (query head h of g's group, query block m of kBlockM = 64 rows meeting the mask band; heads
// outer, blocks cyclically from one rotated by n, as bwd_mma), Q_m and dO_m by TMA into a kStages-deep ring of
// 128-byte-swizzled slots, and LSE_m (base 2; +inf hides rows past seqlen_q and fully masked rows) and Delta_m
// (bwd_pre) by plain loads into the slot's float arrays; each slot has a full mbarrier (transaction bytes + the warp's
// 32 arrivals) and an empty one (one arrival per consumer warp). Warpgroups 1..kConsumers are consumers
// (setmaxnreg.inc); consumer c owns keys 64 c .. 64 c + 63 of the block and keeps dK, dV (64 x head_dim, fp32) in
// registers. Per tile (wgmma m64, fp32 accumulators):
//   S^T  = K_c Q_m^T          SS, A = K (K-major), B = Q (K-major)              64 keys x 64 queries
//   dP^T = V_c dO_m^T         SS, A = V, B = dO
//   P^T  = exp2(S^T * scale_log2 - lse2_i)   (0 where the band, the end of the keys or the LSE hide the pair)
//   dS^T = P^T (dP^T - Delta_i)
//   dV  += P^T dO_m           RS, A = P^T packed from the accumulator fragment, B = dO (MN-major)
//   dK  += dS^T Q_m           RS, A = dS^T, B = Q (MN-major)
//   dS^T -> shared memory (bf16/fp16, 128-byte swizzle, double-buffered), proxy fence, named barrier, then
//   dQ'_m = dS K              SS, A = dS read MN-major from dS^T, B = K (MN-major)
// split over the consumers by head-dim columns (kDqCols: all kBlockN keys, kHeadDim / kConsumers columns), or by
// keys (each consumer its own 64 keys, every column); each consumer then adds its dQ' part into args.dq_accum with
// float32 red.add.v2 (8 x 8 tiled, common/dq_accum.cuh; rows past seqlen_q skipped). bwd_pre zeroes dq_accum and writes
// Delta; bwd_post writes dq = scale * dQ'. At the end dK = scale * dK and dV are written in the dtype (rows past
// seqlen_k skipped). GQA: the heads of the group are summed in the CTA. Keys past seqlen_k come from TMA zero fill and
// are masked; query rows past seqlen_q are zero-filled and hidden by their LSE. Masks are bottom-right aligned windows
// (causal = (-1, 0)); masking code runs only on tiles whose consumer key range crosses the band edge or the end of the
// keys. Fixed length only, no bias / ALiBi / softcap, no deterministic mode (the host predicate leaves those to
// bwd_mma). User code (fa_mods; fa_user_* rendered by generator/user_mods.cpp): with a score_mod (kHasScoreMod) both
// GEMMs of S^T and dP^T complete first, then per pair s = score_mod(scale S^T), g = score_mod_grad at the same raw
// value, P^T = exp2(s log2e - lse2), dS^T = P^T (dP^T - Delta) g (0 where P^T is). With a mask_mod (kHasMaskMod) the
// CTA visits, for each head of its group, the query blocks that the plan's mask_blocks step did not hide wholly (its
// column of args.f.blk_cls_t at 64 x kBlockN, walked by common/blk_visit.cuh's cursor in the producer warp and in
// every consumer warp alike, last block first); tiles the mask hides nowhere skip every mask, the others evaluate
// mask_mod per pair in a rolled loop. Without classes every tile of the band is visited and masked.
// Reads fa_cfg: kDtype (1 fp16, 2 bf16), kHeadDim (= kHeadDimV, 64 or 128), kMask (1: the CTA order of fa_bwd_cta, as
// with kHasMaskMod), kHasMaskMod, kHasScoreMod, and the tunables kConsumers (1, 2), kStages (2, 3), kDqCols (the dQ'
// split; with one consumer it has every column anyway). Parameters: (FaBwdArgs, FaUser with user code (FA_USER_PARAM),
// FaBwdTma). Launch (host): block = 128 * (kConsumers + 1); grid = (ceil(seqlen_k / kBlockN), heads_kv, batch); dynamic
// shared memory = fa_bwg::kSmemBytes (the kernel traps with less).
#ifndef FA_BWD_WGMMA_CUH
#define FA_BWD_WGMMA_CUH

#include "fa_tma_args.cuh"
#include "bwd_mma_tiling.cuh"
#include "common/blk_visit.cuh"
#include "common/sm80.cuh"
#include "common/sm90.cuh"

namespace fa_bwg {
using fa_sm80::pack2;
using fa_sm80::red_add2;

constexpr int kD = fa_cfg::kHeadDim;
constexpr int kC = fa_cfg::kConsumers;
constexpr int kBN = 64 * kC;  // keys per CTA
constexpr int kBM = 64;       // queries per tile
constexpr int kStages = fa_cfg::kStages;
constexpr int kThreads = 128 * (kC + 1);
// setmaxnreg split: producer + consumers within the 64K registers of the CTA.
constexpr int kRegP = kC == 2 ? 24 : 56;
constexpr int kRegC = 240;
// dQ' split (kDqCols): by head-dim columns (kD / kC per consumer, all keys; one consumer: every column) or by keys
// (each consumer its own 64 keys, every column).
constexpr bool kDqCols = fa_cfg::kDqCols || kC == 1;
constexpr int kDqN = kDqCols ? kD / kC : kD;  // dQ' columns per consumer (wgmma N)
constexpr int kDqK = kDqCols ? kBN : 64;      // keys reduced per consumer
// Shared memory: K, V (kBN rows, 64-column chunks of kBN * 128 bytes), the Q / dO ring (64-row chunks of 8 KB), two
// dS^T buffers (kBN rows of 64 queries), LSE / Delta per slot, barriers.
constexpr int kKVBytes = kBN * kD * 2;
constexpr int kQBytes = kBM * kD * 2;
constexpr int kDsBytes = kBN * kBM * 2;
constexpr int kOffV = kKVBytes;
constexpr int kOffQ = 2 * kKVBytes;
constexpr int kOffDo = kOffQ + kStages * kQBytes;
constexpr int kOffDs = kOffDo + kStages * kQBytes;
constexpr int kOffL = kOffDs + 2 * kDsBytes;
constexpr int kOffDl = kOffL + kStages * kBM * 4;
constexpr int kOffBar = kOffDl + kStages * kBM * 4;
constexpr int kSmemBytes = kOffBar + 8 * (1 + 2 * kStages) + 1024;  // + slack to align the base to 1024
constexpr float kLog2e = 1.4426950408889634f;

static_assert(fa_cfg::kDtype == 1 || fa_cfg::kDtype == 2, "bwd_wgmma: fp16 or bf16 only");
static_assert(fa_cfg::kHeadDimV == kD && (kD == 64 || kD == 128), "bwd_wgmma: head dims 64 or 128, d == dv");
static_assert(kC == 1 || kC == 2, "bwd_wgmma: 1 or 2 consumers");
static_assert(kDqN % 32 == 0, "bwd_wgmma: dQ' columns per consumer a multiple of 32");
static_assert(kStages >= 2 && kStages <= 3, "bwd_wgmma: 2 or 3 stages");
static_assert(kSmemBytes <= 232448, "bwd_wgmma: shared memory above 227 KB");
static_assert(!fa_cfg::kHasBias && !fa_cfg::kHasAlibi && !fa_cfg::kHasSoftcap && !fa_cfg::kVarlen,
              "bwd_wgmma: fixed-length problems without built-in score features (user code is fine)");
constexpr bool kSparse = fa_cfg::kHasMaskMod;  // visit the query blocks mask_blocks classified (block skipping)
constexpr bool kScore = fa_cfg::kHasScoreMod;  // user score_mod (and its derivative) on every pair

FA_DEVICE float2 ld_shared_f2(unsigned addr) {
  float2 v;
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"(addr) : "memory");
  return v;
}
FA_DEVICE void st_shared_f32(unsigned addr, float v) {
  asm volatile("st.shared.f32 [%0], %1;" ::"r"(addr), "f"(v) : "memory");
}

}  // namespace fa_bwg

extern "C" __global__ void __launch_bounds__(fa_bwg::kThreads, 1)
    fa_kernel(const __grid_constant__ FaBwdArgs args FA_USER_PARAM, const __grid_constant__ FaBwdTma tma) {
  using namespace fa_bwg;
  extern __shared__ __align__(1024) unsigned char fa_smem_raw[];
  const FaFwdArgs& a = args.f;
  const int tid = (int)threadIdx.x;

  FaBwdCta cta{(int)blockIdx.x, (int)blockIdx.y, (int)blockIdx.z};
  if constexpr (fa_cfg::kMask == 1 || fa_cfg::kHasMaskMod)
    cta = fa_bwd_cta(blockIdx.x, blockIdx.y, blockIdx.z, gridDim.x, gridDim.y, gridDim.z, args.lpt_tail,
                     args.lpt_magic_tail, args.lpt_magic_heads);
  const int nb = cta.nb, g = cta.g, b = cta.b;
  const int sq = a.seqlen_q, sk = a.seqlen_k, off = sk - sq;
  const int n0 = nb * kBN;
  if (n0 >= sk) return;  // uniform: the whole CTA leaves

  // Query blocks whose tile meets the band j - off - win_right <= i <= j - off + win_left (bwd_mma's rule).
  const int nmb = (sq + kBM - 1) / kBM;
  int m_lo = 0, m_hi = nmb;
  if (a.win_right >= 0) {
    const int x = n0 - (off + a.win_right);
    if (x > sq - 1) m_hi = 0;
    else if (x > 0) m_lo = x / kBM;
  }
  if (a.win_left >= 0) {
    const int z = min(sk, n0 + kBN) - 1 - (off - a.win_left);
    m_hi = z < 0 ? 0 : min(m_hi, z / kBM + 1);
  }
  const int nm = max(0, m_hi - m_lo);
  const int rot = nm > 0 ? nb % nm : 0;
  // Calls visit(it, h, m, full) for the CTA's tiles in order, it counting the visited ones. Plain: every tile of the
  // band, query head g * group + it / nm, query block m_lo + (it % nm + rot) % nm, masked where it crosses the band
  // (full = false: the geometry decides). kSparse: for each head of the group, the query blocks of the band that
  // mask_blocks did not hide wholly (common/blk_visit.cuh cursor over the CTA's column of args.f.blk_cls_t, last
  // first; warp-collective, the same in every warp), full = the mask hides nothing there (no classes: every block,
  // none full). Returns the count.
  auto for_each_tile = [&](auto&& visit) {
    int it = 0;
    if constexpr (kSparse) {
      for (int hl = 0; hl < a.group; ++hl) {
        const int h = g * a.group + hl;
        const unsigned char* col = a.blk_cls_t != nullptr ? a.blk_cls_t + (long long)b * a.blk_cls_sb +
                                                                (long long)h * a.blk_cls_sh + (long long)nb * a.blk_nmb
                                                          : nullptr;
        FaBlkCursor cur;
        cur.start(col, m_lo, m_hi);
        for (int e = cur.next(); e >= 0; e = cur.next()) visit(it++, h, e >> 1, (e & 1) != 0);
      }
    } else {
      const int total = nm * a.group;
      for (; it < total; ++it) {
        const int hl = it / nm;
        int r = it - hl * nm + rot;
        if (r >= nm) r -= nm;
        visit(it, g * a.group + hl, m_lo + r, false);
      }
    }
    return it;
  };

  fa_require_dyn_smem((unsigned)kSmemBytes);  // the host must launch with kSmemBytes of dynamic shared memory
  const unsigned sbase = (fa_sm90_smem(fa_smem_raw) + 1023u) & ~1023u;
  const unsigned sK = sbase, sV = sbase + kOffV, sQ = sbase + kOffQ, sDo = sbase + kOffDo, sDs = sbase + kOffDs;
  const unsigned sL = sbase + kOffL, sDl = sbase + kOffDl, sBar = sbase + kOffBar;
  const unsigned kv_full = sBar;
  auto full = [&](int s) { return sBar + 8u * (1 + s); };
  auto empty = [&](int s) { return sBar + 8u * (1 + kStages + s); };
  if (tid == 0) {
    fa_mbar_init(kv_full, 1);
    for (int s = 0; s < kStages; ++s) {
      fa_mbar_init(full(s), 33);       // lane 0's expect_tx arrival + the producer warp's 32 after LSE / Delta
      fa_mbar_init(empty(s), 4 * kC);  // one arrival per consumer warp
    }
    fa_mbar_init_fence();
  }
  __syncthreads();

  const int wg = tid >> 7;
  if (wg == 0) {
    // ---------------- producer warpgroup: warp 0 loads, lane 0 issues the TMA copies ----------------
    fa_setmaxnreg_dec<kRegP>();
    if (tid < 32) {
      const int lane = tid;
      const float pos_inf = __int_as_float(0x7f800000);
      int st = 0;  // ring slot and phase, advanced per tile (no division by kStages)
      unsigned ph = 0;
      for_each_tile([&](int it, int h, int m, bool) {
        if (it == 0 && lane == 0) {  // K and V once, before the first tile (none without tiles)
          fa_tma_prefetch(&tma.q);
          fa_tma_prefetch(&tma.dout);
          fa_mbar_arrive_expect_tx(kv_full, (unsigned)(2 * kKVBytes));
#pragma unroll
          for (int c = 0; c < kD / 64; ++c) {
            fa_tma_load_4d(sK + (unsigned)(c * kBN * 128), &tma.k, kv_full, c * 64, n0, g, b);
            fa_tma_load_4d(sV + (unsigned)(c * kBN * 128), &tma.v, kv_full, c * 64, n0, g, b);
          }
        }
        const int i0 = m * kBM;
        fa_mbar_wait(empty(st), ph ^ 1u);
        if (lane == 0) {
          fa_mbar_arrive_expect_tx(full(st), (unsigned)(2 * kQBytes));
#pragma unroll
          for (int c = 0; c < kD / 64; ++c) {
            fa_tma_load_4d(sQ + (unsigned)(st * kQBytes + c * kBM * 128), &tma.q, full(st), c * 64, i0, h, b);
            fa_tma_load_4d(sDo + (unsigned)(st * kQBytes + c * kBM * 128), &tma.dout, full(st), c * 64, i0, h, b);
          }
        }
        const long long lrow = (long long)b * a.lse_sb + (long long)h * a.lse_sh;
#pragma unroll
        for (int k = 0; k < 2; ++k) {
          const int r = lane + 32 * k, i = i0 + r;
          float l2 = pos_inf, dl = 0.f;
          if (i < sq) {
            const float l = a.lse[lrow + i];
            l2 = l == -pos_inf ? pos_inf : l * kLog2e;
            dl = args.delta[lrow + i];
          }
          st_shared_f32(sL + (unsigned)((st * kBM + r) * 4), l2);
          st_shared_f32(sDl + (unsigned)((st * kBM + r) * 4), dl);
        }
        fa_mbar_arrive(full(st));
        if (++st == kStages) {
          st = 0;
          ph ^= 1u;
        }
      });
    }
  } else {
    // ---------------- consumer warpgroups ----------------
    fa_setmaxnreg_inc<kRegC>();
    const int cw = wg - 1;  // keys 64 cw .. 64 cw + 63 of the block
    const int ltid = tid & 127, warp = ltid >> 5, lane = tid & 31;
    const int gq = lane >> 2, tq = lane & 3;
    constexpr int kDT = fa_cfg::kDtype;
    float dk[kD / 2], dv[kD / 2];
#pragma unroll
    for (int i = 0; i < kD / 2; ++i) dk[i] = dv[i] = 0.f;
    {
      // descriptors: K / V rows of this consumer (A of S^T / dP^T, K-major), Q / dO slot 0 (B K-major for S^T /
      // dP^T; B MN-major for dK / dV), dS^T buffer 0 (A MN-major of dQ'), K (B MN-major of dQ')
      const unsigned long long dK_a = fa_wg_desc_sw128(sK + (unsigned)(cw * 64 * 128), 16, 1024);
      const unsigned long long dV_a = fa_wg_desc_sw128(sV + (unsigned)(cw * 64 * 128), 16, 1024);
      const unsigned long long dQ_b = fa_wg_desc_sw128(sQ, 16, 1024);
      const unsigned long long dDo_b = fa_wg_desc_sw128(sDo, 16, 1024);
      const unsigned long long dQ_t = fa_wg_desc_sw128(sQ, kBM * 128, 1024);
      const unsigned long long dDo_t = fa_wg_desc_sw128(sDo, kBM * 128, 1024);
      const unsigned dq_key0 = kDqCols ? 0u : (unsigned)(cw * 64);
      const unsigned long long dDs_t = fa_wg_desc_sw128(sDs + dq_key0 * 128u, kBN * 128, 1024);
      // B of dQ': K from this consumer's first key row and first column (a 32-column half of a 128-byte swizzle
      // row starts 64 bytes into it: the swizzle is a function of the address bits, as in the K-major k steps)
      const unsigned dq_col0 = kDqCols ? (unsigned)(cw * kDqN) : 0u;
      const unsigned long long dK_t = fa_wg_desc_sw128(
          sK + dq_key0 * 128u + (dq_col0 >> 6) * (unsigned)(kBN * 128) + (dq_col0 & 63u) * 2u, kBN * 128, 1024);
      const long long G = args.accum_q_stride_row << 3;  // floats per 8-row group of dq_accum
      const int kc0 = n0 + cw * 64;                      // this consumer's first key
      const int krow = kc0 + warp * 16 + gq;             // key of accumulator rows hh = 0 (+8: hh = 1)
      int st = 0;                                        // ring slot and phase, advanced per tile
      unsigned ph = 0;
      for_each_tile([&](int it, int h, int m, bool full_tile) {
        if (it == 0) fa_mbar_wait(kv_full, 0);
        const int i0 = m * kBM;
        fa_mbar_wait(full(st), ph);
        // ---- S^T and dP^T (two groups: P is computed while dP^T runs)
        float s[32], dp[32];
        fa_wg_fence();
#pragma unroll
        for (int ks = 0; ks < kD / 16; ++ks) {
          const unsigned ao = (unsigned)((ks >> 2) * kBN * 128 + (ks & 3) * 32);
          const unsigned bo = (unsigned)(st * kQBytes + (ks >> 2) * kBM * 128 + (ks & 3) * 32);
          FaWg<64>::ss<kDT>(s, dK_a + (ao >> 4), dQ_b + (bo >> 4), ks > 0 ? 1 : 0);
        }
        fa_wg_commit();
#pragma unroll
        for (int ks = 0; ks < kD / 16; ++ks) {
          const unsigned ao = (unsigned)((ks >> 2) * kBN * 128 + (ks & 3) * 32);
          const unsigned bo = (unsigned)(st * kQBytes + (ks >> 2) * kBM * 128 + (ks & 3) * 32);
          FaWg<64>::ss<kDT>(dp, dV_a + (ao >> 4), dDo_b + (bo >> 4), ks > 0 ? 1 : 0);
        }
        fa_wg_commit();
        bool need_mask;  // the tile crosses the band or the end of the keys (or, kSparse, the mask cuts it)
        if constexpr (kSparse) {
          need_mask = !full_tile;  // the classes cover every mask (built-in, keys, user)
        } else {
          need_mask = kc0 + 64 > sk;
          if (a.win_left >= 0) need_mask |= kc0 < i0 + kBM - 1 + off - a.win_left;
          if (a.win_right >= 0) need_mask |= kc0 + 63 > i0 + off + a.win_right;
        }
        // The hidden pairs of a masked tile, bit 4 j + 2 hh + e. kSparse: user code in a rolled loop over the 8-query
        // column groups (common/fwd_score.cuh does the same for the forward), applied in straight-line code.
        auto hidden_bits = [&]() {
          unsigned bits = 0u;
          if constexpr (kSparse) {
#pragma unroll 1
            for (int j = 0; j < 8; ++j)
#pragma unroll
              for (int hh = 0; hh < 2; ++hh)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                  const int kj = krow + 8 * hh, i = i0 + 8 * j + 2 * tq + e;
                  bool hidden = kj >= sk || i >= sq;
                  if (a.win_left >= 0) hidden |= kj < i + off - a.win_left;
                  if (a.win_right >= 0) hidden |= kj > i + off + a.win_right;
                  hidden |= !fa_user_mask(b, h, min(i, sq - 1), min(kj, sk - 1), FA_USER_ARGS);
                  bits |= (unsigned)hidden << (4 * j + 2 * hh + e);
                }
          } else {
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
              const int kj = krow + 8 * hh;
              // query i sees key kj iff lo <= i < hi (and kj < sk)
              int lo = 0, hi = kj < sk ? sq : 0;
              if (a.win_right >= 0) lo = max(lo, kj - off - a.win_right);
              if (a.win_left >= 0) hi = min(hi, kj - off + a.win_left + 1);
              lo -= i0 + 2 * tq;
              hi -= i0 + 2 * tq;
#pragma unroll
              for (int j = 0; j < 8; ++j)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                  const int cc = 8 * j + e;
                  bits |= (unsigned)(cc < lo || cc >= hi) << (4 * j + 2 * hh + e);
                }
            }
          }
          return bits;
        };
        const unsigned sLst = sL + (unsigned)(st * kBM * 4), sDlst = sDl + (unsigned)(st * kBM * 4);
        unsigned pp[4][4], pd[4][4];
        auto pack_frag = [&](unsigned(&f)[4][4], const float(&x)[32]) {  // accumulator -> A fragments
#pragma unroll
          for (int kk = 0; kk < 4; ++kk) {
            f[kk][0] = pack2(x[kk * 8 + 0], x[kk * 8 + 1]);
            f[kk][1] = pack2(x[kk * 8 + 2], x[kk * 8 + 3]);
            f[kk][2] = pack2(x[kk * 8 + 4], x[kk * 8 + 5]);
            f[kk][3] = pack2(x[kk * 8 + 6], x[kk * 8 + 7]);
          }
        };
        auto issue_dv = [&]() {  // dV += P^T dO
          fa_wg_fence();
#pragma unroll
          for (int kk = 0; kk < 4; ++kk)
            FaWg<kD>::rs<kDT>(dv, pp[kk], dDo_t + ((unsigned)(st * kQBytes + kk * 2048) >> 4), 1);
          fa_wg_commit();
        };
        if constexpr (!kScore) {
          fa_wg_wait<1>();
          fa_wg_fence_regs(s);
          // ---- P^T = exp2(S^T scale_log2 - lse2) (dP^T still running), masked pairs 0
#pragma unroll
          for (int j = 0; j < 8; ++j) {
            const float2 l2 = ld_shared_f2(sLst + (unsigned)((8 * j + 2 * tq) * 4));
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
              s[4 * j + 2 * hh] = fa_exp2(fmaf(s[4 * j + 2 * hh], a.scale_log2, -l2.x));
              s[4 * j + 2 * hh + 1] = fa_exp2(fmaf(s[4 * j + 2 * hh + 1], a.scale_log2, -l2.y));
            }
          }
          if (need_mask) {
            const unsigned bits = hidden_bits();
#pragma unroll
            for (int q = 0; q < 32; ++q)
              if ((bits >> q) & 1u) s[q] = 0.f;
          }
          pack_frag(pp, s);
          // ---- dV += P^T dO (runs under dS), then wait for dP^T; dS^T = P^T (dP^T - Delta)
          issue_dv();
          fa_wg_wait<1>();
          fa_wg_fence_regs(dp);
#pragma unroll
          for (int j = 0; j < 8; ++j) {
            const float2 d2 = ld_shared_f2(sDlst + (unsigned)((8 * j + 2 * tq) * 4));
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
              dp[4 * j + 2 * hh] = s[4 * j + 2 * hh] * (dp[4 * j + 2 * hh] - d2.x);
              dp[4 * j + 2 * hh + 1] = s[4 * j + 2 * hh + 1] * (dp[4 * j + 2 * hh + 1] - d2.y);
            }
          }
        } else {
          // score_mod (user code): both GEMMs first, then per pair s = score_mod(scale S) with its derivative g at
          // the same raw value, P = exp2(s log2e - lse2), dS = P (dP - Delta) g (0 where P is). A rolled loop over
          // the 8-query column groups, each step taking the first 4 pairs of S^T / dP^T and appending its results
          // (the arrays rotate through registers; unrolled, ptxas hoisted every pair's user-code loads and spilled
          // at head dim 128).
          fa_wg_wait<0>();
          fa_wg_fence_regs(s);
          fa_wg_fence_regs(dp);
#pragma unroll 1
          for (int j = 0; j < 8; ++j) {
            const float2 l2 = ld_shared_f2(sLst + (unsigned)((8 * j + 2 * tq) * 4));
            const float2 d2 = ld_shared_f2(sDlst + (unsigned)((8 * j + 2 * tq) * 4));
            float rs[4], rd[4];
#pragma unroll
            for (int hh = 0; hh < 2; ++hh)
#pragma unroll
              for (int e = 0; e < 2; ++e) {
                const int q = 2 * hh + e;
                const int i = min(i0 + 8 * j + 2 * tq + e, sq - 1), kj = min(krow + 8 * hh, sk - 1);
                const float raw = s[q] * a.scale;
                const float g = fa_user_score_grad(raw, b, h, i, kj, FA_USER_ARGS);
                const float sv = fa_user_score(raw, b, h, i, kj, FA_USER_ARGS);
                const float pv = fa_exp2(fmaf(sv, kLog2e, -(e ? l2.y : l2.x)));
                rs[q] = pv;
                rd[q] = pv != 0.f ? pv * (dp[q] - (e ? d2.y : d2.x)) * g : 0.f;
              }
#pragma unroll
            for (int q = 0; q < 28; ++q) {
              s[q] = s[q + 4];
              dp[q] = dp[q + 4];
            }
#pragma unroll
            for (int q = 0; q < 4; ++q) {
              s[28 + q] = rs[q];
              dp[28 + q] = rd[q];
            }
          }
          if (need_mask) {  // hidden pairs: P and dS 0, whatever score_mod and its derivative gave
            const unsigned bits = hidden_bits();
#pragma unroll
            for (int q = 0; q < 32; ++q)
              if ((bits >> q) & 1u) s[q] = dp[q] = 0.f;
          }
          pack_frag(pp, s);
          issue_dv();
        }
        pack_frag(pd, dp);
        // ---- dK += dS^T Q
        fa_wg_fence();
#pragma unroll
        for (int kk = 0; kk < 4; ++kk)
          FaWg<kD>::rs<kDT>(dk, pd[kk], dQ_t + ((unsigned)(st * kQBytes + kk * 2048) >> 4), 1);
        fa_wg_commit();
        // ---- dS^T to shared memory (this consumer's 64 rows of the buffer it & 1, swizzled like a TMA tile)
        const unsigned dsb = sDs + (unsigned)((it & 1) * kDsBytes);
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          const int r = cw * 64 + warp * 16 + gq + 8 * hh;
#pragma unroll
          for (int j = 0; j < 8; ++j)
            fa_st_shared_b32(dsb + (unsigned)(r * 128 + ((j ^ (r & 7)) << 4) + tq * 4), pd[j >> 1][(j & 1) * 2 + hh]);
        }
        fa_fence_proxy_async();
        if constexpr (kDqCols && kC > 1) fa_bar_sync(1, 128 * kC);  // every consumer's dS^T rows are stored
        else fa_bar_sync(1 + cw, 128);
        // ---- dQ' = dS K (this consumer's columns or keys)
        float dq[kDqN / 2];
        fa_wg_fence();
#pragma unroll
        for (int kk = 0; kk < kDqK / 16; ++kk) {
          const unsigned o = (unsigned)((it & 1) * kDsBytes + kk * 2048);
          FaWg<kDqN>::ss_tt<kDT>(dq, dDs_t + (o >> 4), dK_t + ((unsigned)(kk * 2048) >> 4), kk > 0 ? 1 : 0);
        }
        fa_wg_commit();
        fa_wg_wait<0>();
        fa_wg_fence_regs(dq);
        fa_wg_fence_regs(dk);
        fa_wg_fence_regs(dv);
        if (lane == 0) fa_mbar_arrive(empty(st));  // Q / dO of this slot are no longer read
        if (++st == kStages) {
          st = 0;
          ph ^= 1u;
        }
        // ---- dQ' into dq_accum (float32 red.add, rows past seqlen_q skipped)
        const int col0 = kDqCols ? cw * kDqN : 0;
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          const int r = warp * 16 + gq + 8 * hh;
          if (i0 + r < sq) {
            const long long R = (long long)b * sq + i0 + r;
            float* p = args.dq_accum + (R >> 3) * G + ((R & 7) << 3) + (((long long)h * kD + col0) << 3) + 2 * tq;
#pragma unroll
            for (int j = 0; j < kDqN / 8; ++j) red_add2(p + j * 64, dq[4 * j + 2 * hh], dq[4 * j + 2 * hh + 1]);
          }
        }
      });
    }
    // ---------------- epilogue: dK = scale * dK, dV in the dtype (rows past seqlen_k skipped) ----------------
    typedef unsigned short E;
    E* dkg = (E*)args.dk + (long long)b * args.dk_sb + (long long)g * args.dk_sh;
    E* dvg = (E*)args.dv + (long long)b * args.dv_sb + (long long)g * args.dv_sh;
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int kj = n0 + cw * 64 + warp * 16 + gq + 8 * hh;
      if (kj < sk) {
#pragma unroll
        for (int j = 0; j < kD / 8; ++j) {
          const int col = 8 * j + 2 * tq;
          *(unsigned*)(dkg + (long long)kj * args.dk_ss + col) =
              pack2(dk[4 * j + 2 * hh] * a.scale, dk[4 * j + 2 * hh + 1] * a.scale);
          *(unsigned*)(dvg + (long long)kj * args.dv_ss + col) = pack2(dv[4 * j + 2 * hh], dv[4 * j + 2 * hh + 1]);
        }
      }
    }
  }
}

#endif  // FA_BWD_WGMMA_CUH
