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
// The kernel wires shared Hopper pieces (instantiated with fa_bwg::Cfg): common/hopper_bwd_sched.cuh (the tiles and
// their order), common/hopper_bwd_ring.cuh (shared memory, mbarriers, the producer warp; ring positions of
// common/hopper_kv_ring.cuh), common/hopper_bwd_score.cuh (P^T and dS^T with the masks and score_mod),
// common/hopper_bwd_epilogue.cuh (dQ' into dq_accum, dK / dV out), common/hopper_softmax.cuh (the thread's fragment
// place, P packing); this file holds the layout, the consumer's GEMMs and its per-tile schedule (Consumer), and the
// kernel.
// Reads fa_cfg: kDtype (1 fp16, 2 bf16), kHeadDim (= kHeadDimV, 64 or 128), kMask (1: the CTA order of fa_bwd_cta, as
// with kHasMaskMod), kHasMaskMod, kHasScoreMod, and the tunables kConsumers (1, 2), kStages (2, 3), kDqCols (the dQ'
// split; with one consumer it has every column anyway). Parameters: (FaBwdArgs, FaUser with user code (FA_USER_PARAM),
// FaBwdTma). Launch (host): block = 128 * (kConsumers + 1); grid = (ceil(seqlen_k / kBlockN), heads_kv, batch); dynamic
// shared memory = fa_bwg::kSmemBytes (the kernel traps with less).
#ifndef FA_BWD_WGMMA_CUH
#define FA_BWD_WGMMA_CUH

#include "fa_tma_args.cuh"
#include "bwd_mma_tiling.cuh"
#include "common/sm80.cuh"
#include "common/sm90.cuh"
#include "common/fwd_score.cuh"
#include "common/blk_visit.cuh"
#include "common/hopper_tile_sched.cuh"
#include "common/hopper_kv_ring.cuh"
#include "common/hopper_softmax.cuh"
#include "common/hopper_bwd_sched.cuh"
#include "common/hopper_bwd_ring.cuh"
#include "common/hopper_bwd_score.cuh"
#include "common/hopper_bwd_epilogue.cuh"

namespace fa_bwg {
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

// The constexpr config the shared Hopper pieces (common/hopper_*.cuh) are instantiated with.
struct Cfg {
  static constexpr int kBM = fa_bwg::kBM, kBN = fa_bwg::kBN, kD = fa_bwg::kD, kStages = fa_bwg::kStages;
  static constexpr int kQBytes = fa_bwg::kQBytes, kKVBytes = fa_bwg::kKVBytes, kDqN = fa_bwg::kDqN;
  static constexpr bool kSparse = fa_bwg::kSparse;
};

// A consumer warpgroup (after setmaxnreg.inc): keys 64 cw .. 64 cw + 63 of the CTA's block, dK and dV (64 x head_dim,
// fp32) in registers over the CTA's tiles, then written out.
struct Consumer {
  const FaBwdArgs& args;
  const FaUser& u;
  const FaBwdSched<Cfg>& sch;
  FaBwdBars<kStages> bar;
  FaBwdSmem sm;
  FaWgThread th;
  // wgmma descriptors: K / V rows of this consumer (A of S^T / dP^T, K-major), Q / dO slot 0 (B K-major for S^T /
  // dP^T; B MN-major for dK / dV), dS^T buffer 0 (A MN-major of dQ'), K (B MN-major of dQ')
  unsigned long long dK_a, dV_a, dQ_b, dDo_b, dQ_t, dDo_t, dDs_t, dK_t;
  int sq, sk, off;         // seqlen_q, seqlen_k, their difference (the band's diagonal offset)
  int kc0, krow;           // this consumer's first key; the key of accumulator rows hh = 0 (+8: hh = 1)
  FaRingPos<kStages> pos;  // the ring slot and phase, advanced per tile
  FaBwdEpilogue<Cfg> epi;

  FA_DEVICE Consumer(const FaBwdArgs& a, const FaUser& user, const FaBwdSched<Cfg>& s, FaBwdBars<kStages> b,
                     FaBwdSmem m, FaWgThread t)
      : args(a),
        u(user),
        sch(s),
        bar(b),
        sm(m),
        th(t),
        pos{0, 0u},
        epi{a, t, a.accum_q_stride_row << 3, kDqCols ? t.cw * kDqN : 0} {
    const int cw = th.cw;
    dK_a = fa_wg_desc_sw128(sm.k + (unsigned)(cw * 64 * 128), 16, 1024);
    dV_a = fa_wg_desc_sw128(sm.v + (unsigned)(cw * 64 * 128), 16, 1024);
    dQ_b = fa_wg_desc_sw128(sm.q, 16, 1024);
    dDo_b = fa_wg_desc_sw128(sm.dout, 16, 1024);
    dQ_t = fa_wg_desc_sw128(sm.q, kBM * 128, 1024);
    dDo_t = fa_wg_desc_sw128(sm.dout, kBM * 128, 1024);
    const unsigned dq_key0 = kDqCols ? 0u : (unsigned)(cw * 64);
    dDs_t = fa_wg_desc_sw128(sm.ds + dq_key0 * 128u, kBN * 128, 1024);
    // B of dQ': K from this consumer's first key row and first column (a 32-column half of a 128-byte swizzle row
    // starts 64 bytes into it: the swizzle is a function of the address bits, as in the K-major k steps)
    const unsigned dq_col0 = kDqCols ? (unsigned)(cw * kDqN) : 0u;
    dK_t = fa_wg_desc_sw128(sm.k + dq_key0 * 128u + (dq_col0 >> 6) * (unsigned)(kBN * 128) + (dq_col0 & 63u) * 2u,
                            kBN * 128, 1024);
    sq = args.f.seqlen_q;
    sk = args.f.seqlen_k;
    off = sk - sq;
    kc0 = sch.n0 + cw * 64;
    krow = sch.n0 + th.rbase;
  }

  // acc = A B^T, 64 keys x 64 queries: A (K or V rows of this consumer, desc_a) and B (Q or dO of ring slot st,
  // desc_b) K-major from shared memory; one committed group (after a fence).
  FA_DEVICE void gemm_ss(float (&acc)[32], unsigned long long desc_a, unsigned long long desc_b, int st) const {
#pragma unroll
    for (int ks = 0; ks < kD / 16; ++ks) {
      const unsigned ao = (unsigned)((ks >> 2) * kBN * 128 + (ks & 3) * 32);
      const unsigned bo = (unsigned)(st * kQBytes + (ks >> 2) * kBM * 128 + (ks & 3) * 32);
      FaWg<64>::ss<fa_cfg::kDtype>(acc, desc_a + (ao >> 4), desc_b + (bo >> 4), ks > 0 ? 1 : 0);
    }
    fa_wg_commit();
  }
  // S^T = K_c Q_m^T and dP^T = V_c dO_m^T of ring slot st: two groups (P^T is computed while dP^T runs).
  FA_DEVICE void gemm_s_dp(float (&s)[32], float (&dp)[32], int st) const {
    fa_wg_fence();
    gemm_ss(s, dK_a, dQ_b, st);
    gemm_ss(dp, dV_a, dDo_b, st);
  }
  // acc += A B with A (P^T or dS^T) packed in registers and B (dO or Q of slot st, desc) read MN-major: dV += P^T dO,
  // dK += dS^T Q (issued and committed, not waited).
  FA_DEVICE void gemm_rs(float (&acc)[kD / 2], const unsigned (&f)[4][4], unsigned long long desc, int st) const {
    fa_wg_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
      FaWg<kD>::rs<fa_cfg::kDtype>(acc, f[kk], desc + ((unsigned)(st * kQBytes + kk * 2048) >> 4), 1);
    fa_wg_commit();
  }
  // dS^T to shared memory (this consumer's 64 rows of buffer it & 1, swizzled like a TMA tile), fenced to the async
  // proxy, then the named barrier of the consumers that read it.
  FA_DEVICE void store_ds(const unsigned (&pd)[4][4], int it) const {
    const unsigned dsb = sm.ds + (unsigned)((it & 1) * kDsBytes);
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int r = th.cw * 64 + th.warp * 16 + th.gq + 8 * hh;
#pragma unroll
      for (int j = 0; j < 8; ++j)
        fa_st_shared_b32(dsb + (unsigned)(r * 128 + ((j ^ (r & 7)) << 4) + th.tq * 4), pd[j >> 1][(j & 1) * 2 + hh]);
    }
    fa_fence_proxy_async();
    if constexpr (kDqCols && kC > 1) fa_bar_sync(1, 128 * kC);  // every consumer's dS^T rows are stored
    else fa_bar_sync(1 + th.cw, 128);
  }
  // dQ' = dS K from dS^T buffer it & 1 (this consumer's columns or keys; issued and committed, not waited).
  FA_DEVICE void gemm_dq(float (&dq)[kDqN / 2], int it) const {
    fa_wg_fence();
#pragma unroll
    for (int kk = 0; kk < kDqK / 16; ++kk) {
      const unsigned o = (unsigned)((it & 1) * kDsBytes + kk * 2048);
      FaWg<kDqN>::ss_tt<fa_cfg::kDtype>(dq, dDs_t + (o >> 4), dK_t + ((unsigned)(kk * 2048) >> 4), kk > 0 ? 1 : 0);
    }
    fa_wg_commit();
  }

  FA_DEVICE void tile(int it, int h, int m, bool full_tile, float (&dk)[kD / 2], float (&dv)[kD / 2]);
  FA_DEVICE void run();
};

// Tile it (query head h, query block m; full_tile: mask_blocks found nothing hidden there) of the CTA's walk: S^T and
// dP^T, P^T and dS^T (common/hopper_bwd_score.cuh), dV += P^T dO, dK += dS^T Q, dS^T through shared memory, dQ' = dS K
// into dq_accum (common/hopper_bwd_epilogue.cuh); the slot released once every GEMM has read it.
FA_DEVICE void Consumer::tile(int it, int h, int m, bool full_tile, float (&dk)[kD / 2], float (&dv)[kD / 2]) {
  const FaFwdArgs& a = args.f;
  if (it == 0) fa_mbar_wait(bar.kv_full(), 0);
  const int i0 = m * kBM, st = pos.stage;
  fa_mbar_wait(bar.full(st), pos.phase);
  float s[32], dp[32];
  gemm_s_dp(s, dp, st);
  const FaBwdScore<Cfg> sc{a, u, sch.b, h, i0, sq, sk, off, kc0, krow, th.tq};
  const bool masked = sc.need_mask(full_tile);
  const unsigned sl = sm.lse + (unsigned)(st * kBM * 4), sd = sm.delta + (unsigned)(st * kBM * 4);
  unsigned pp[4][4], pd[4][4];
  if constexpr (!kScore) {
    fa_wg_wait<1>();
    fa_wg_fence_regs(s);
    sc.probs(s, sl, masked);  // dP^T still running
    fa_wg_pack_p<64>(pp, s);
    gemm_rs(dv, pp, dDo_t, st);  // dV += P^T dO runs under dS^T
    fa_wg_wait<1>();
    fa_wg_fence_regs(dp);
    sc.grads(dp, s, sd);
  } else {
    fa_wg_wait<0>();  // score_mod: both GEMMs first
    fa_wg_fence_regs(s);
    fa_wg_fence_regs(dp);
    sc.probs_grads(s, dp, sl, sd, masked);
    fa_wg_pack_p<64>(pp, s);
    gemm_rs(dv, pp, dDo_t, st);
  }
  fa_wg_pack_p<64>(pd, dp);
  gemm_rs(dk, pd, dQ_t, st);  // dK += dS^T Q
  store_ds(pd, it);
  float dq[kDqN / 2];
  gemm_dq(dq, it);
  fa_wg_wait<0>();
  fa_wg_fence_regs(dq);
  fa_wg_fence_regs(dk);
  fa_wg_fence_regs(dv);
  if (th.lane == 0) fa_mbar_arrive(bar.empty(st));  // Q / dO of this slot are no longer read
  pos.advance();
  epi.add_dq(dq, sch.b, h, i0, sq);
}

// Every tile of the CTA's walk (common/hopper_bwd_sched.cuh), then dK / dV out.
FA_DEVICE void Consumer::run() {
  float dk[kD / 2], dv[kD / 2];
#pragma unroll
  for (int i = 0; i < kD / 2; ++i) dk[i] = dv[i] = 0.f;
  sch.for_each([&](int it, int h, int m, bool full_tile) { tile(it, h, m, full_tile, dk, dv); });
  epi.store(dk, dv, sch.n0, sch.g, sch.b, sk);
}

}  // namespace fa_bwg

extern "C" __global__ void __launch_bounds__(fa_bwg::kThreads, 1)
    fa_kernel(const __grid_constant__ FaBwdArgs args FA_USER_PARAM, const __grid_constant__ FaBwdTma tma) {
  using namespace fa_bwg;
  extern __shared__ __align__(1024) unsigned char fa_smem_raw[];
  const FaUser& u = FA_USER_ARGS;
  const int tid = (int)threadIdx.x;

  FaBwdCta cta{(int)blockIdx.x, (int)blockIdx.y, (int)blockIdx.z};
  if constexpr (fa_cfg::kMask == 1 || fa_cfg::kHasMaskMod)
    cta = fa_bwd_cta(blockIdx.x, blockIdx.y, blockIdx.z, gridDim.x, gridDim.y, gridDim.z, args.lpt_tail,
                     args.lpt_magic_tail, args.lpt_magic_heads);
  if (cta.nb * kBN >= args.f.seqlen_k) return;  // uniform: the whole CTA leaves
  const FaBwdSched<Cfg> sch(args.f, cta);

  fa_require_dyn_smem((unsigned)kSmemBytes);  // the host must launch with kSmemBytes of dynamic shared memory
  const unsigned sbase = (fa_sm90_smem(fa_smem_raw) + 1023u) & ~1023u;
  const FaBwdSmem sm{sbase,          sbase + kOffV, sbase + kOffQ, sbase + kOffDo,
                     sbase + kOffDs, sbase + kOffL, sbase + kOffDl};
  const FaBwdBars<kStages> bar{sbase + kOffBar};
  if (tid == 0) bar.init(4 * kC);  // one release per consumer warp
  __syncthreads();

  const int wg = tid >> 7;
  if (wg == 0) {
    // producer warpgroup: warp 0 loads, lane 0 issues the TMA copies
    fa_setmaxnreg_dec<kRegP>();
    if (tid < 32) {
      FaBwdProducer<Cfg> prod{args, tma, sch, bar, sm, tid, {0, 0u}};
      prod.run();
    }
  } else {
    // consumer warpgroups
    fa_setmaxnreg_inc<kRegC>();
    const int cw = wg - 1;  // keys 64 cw .. 64 cw + 63 of the block
    const int ltid = tid & 127, warp = ltid >> 5, lane = tid & 31;
    const int gq = lane >> 2, tq = lane & 3;
    Consumer c(args, u, sch, bar, sm, FaWgThread{cw, ltid, warp, lane, gq, tq, cw * 64 + warp * 16 + gq});
    c.run();
  }
}

#endif  // FA_BWD_WGMMA_CUH
