// fwd_wgmma.cuh -- Hopper (sm_90a) FlashAttention forward: TMA + wgmma + warp specialization (fp16 / bf16, and fp8
// q / k / v with a 16-bit o).
//
// A CTA computes tiles of kBlockM = 64 * kConsumers query rows of one (query head, batch). Warpgroup 0 is the
// producer: after setmaxnreg.dec one thread issues TMA copies of the Q tile and of the K / V blocks into a
// kStages-deep ring of 128-byte-swizzled shared-memory slots; each slot has a full mbarrier (transaction bytes) and an
// empty mbarrier (one arrival per consumer warp), and K of block j+1 is issued before V of block j. Warpgroups
// 1..kConsumers are consumers (setmaxnreg.inc); each owns 64 query rows and, per K/V block j (visited from the last
// block of the causal/window band to the first), computes in base 2 with the scale folded in:
//   S  = Q K_j^T                       wgmma m64n{kBlockN}k16, A = Q and B = K from shared memory (SS), fp32 acc.
//   t  = S * scale_log2                (plain path: folded into the exp2 FFMA)
//   t  = log2e * (softcap*tanh(S*scale/softcap) + bias - slope*|i + sk - sq - j|)   (feature path)
//   m' = max(m, rowmax t);  P = exp2(t - m');  l = l*exp2(m - m') + rowsum P;  O = O*exp2(m - m') + P V_j
// O += P V_j is wgmma m64n{dv}k16 with A = P in registers (the S accumulator fragment packed to 16-bit pairs) and
// B = V from shared memory read MN-major (transposed descriptor). At the end O /= l, lse = (m + log2 l) * ln 2.
// kIntraOverlap: per block, issue S_{j+1} = Q K_{j+1}^T and P_j V_j, wait for S_{j+1} only (wgmma depth 1), run its
// softmax under P_j V_j, then wait, rescale O and re-pack P (no wgmma is in flight during the rescale).
// Trimming (kTrim: built-in masks, kBlockM > kBlockN): a consumer passes over the blocks at the top of the band that
// none of its 64 rows sees (every block when its rows lie past the sequence): no GEMMs, its stages released after
// their full barriers and its ping-pong turns passed on.
// kPingPong (kConsumers >= 2): consumers take turns issuing their GEMMs (named barriers 4.., round robin), so one
// warpgroup's softmax runs under another's GEMMs. kPersistent: grid = min(tiles, SMs) CTAs loop over the tiles
// (static round robin over t: (b, h)-major unmasked, query-block-major and longest first masked, pairs of tiles of
// one cost in (b, h)-major order masked with kPersistent 2); Q is double-buffered when shared memory allows, so the
// next tile's Q and first K/V blocks land while the current tile finishes. Masks are bottom-right aligned: key j is
// visible to query i iff lo(i) <= j < hi(i), lo = i + sk - sq - win_left (win_left >= 0), hi = i + sk - sq +
// win_right + 1 (win_right >= 0); K/V blocks wholly outside the band are never loaded; masking code runs only on
// blocks crossing the band edge or the end of the keys. Key rows past seqlen_k come from TMA zero fill (or, varlen,
// the next packed sequence) and are masked; query rows past seqlen_q are computed and never written. Fully masked
// rows give O = 0, lse = -inf. Head dims are padded to 64 columns in shared memory by TMA zero fill. Epilogue: O is
// staged in the warpgroup's rows of its Q buffer and written by one TMA store per 64 columns (tma.o, fixed length;
// persistent: warp 0 releases the buffer once the store has read it, after this consumer's next GEMM is issued) or
// with 16-byte stores (varlen); single-buffered persistent: straight from the accumulators with 4-byte stores.
// User code (fa_mods, common/fwd_score.cuh as in fwd_mma): score_mod runs on the feature path after ALiBi (natural
// units, in-range i, j); mask_mod hides keys per element. Block skipping (kSparse, with a mask_mod): the plan's
// mask_blocks step has classified every (query block, key block) tile (args.blk_cls); the producer warp and every
// consumer warp walk the tile's row of classes themselves (common/blk_visit.cuh: one ballot per 32 blocks, the same
// visiting order in every warp, no list in memory), so key blocks the mask hides wholly are never loaded nor
// computed, and blocks it hides nowhere skip every mask (a tile's visits are counted first, 128 classes per memory
// round trip, and the walk starts at its last visited block). In the blocks it cuts, mask_blocks' sub-tile codes
// (args.blk_sub: per 16-row strip, i.e. per consumer warp, and per quarter of the keys, hidden / some / none) limit
// the mask to the quarters it cuts, where a lane reads its word of hidden pairs from the tile's slot (args.blk_bits;
// user code runs there only for tiles past the slots; common/fwd_score.cuh: fa_wg_user_mask): the producer warp
// loads a partial block's record (codes, slot) when its walk reaches it, and stages the record and a bulk copy of the
// slot in the block's K stage, on K's full barrier; the consumers read them from shared memory before they release
// the stage. With kSparse the whole producer warp walks the classes and its lane 0
// issues the copies. Without classes (blk_cls null) every block of the band is visited and masked.
// The kernel wires the shared Hopper pieces (instantiated with fa_wg::Cfg): common/hopper_tile_sched.cuh (the tiles and
// their order: plain, persistent, pairs), common/hopper_kv_ring.cuh (the mbarriers, ring positions and the producer
// warp), common/hopper_softmax.cuh (the score policy and the online softmax), common/hopper_epilogue.cuh (O and LSE
// out); this file holds the layout, the consumer's GEMMs and its per-block schedule (Consumer), and the kernel.
// FP8 (kDtype 4 e4m3 / 5 e5m2: q, k, v hold fp8 codes, o has kODtype, bf16 or fp16): shared-memory rows stay 128
// bytes (128 fp8 columns, head dims padded to 128 by TMA zero fill); S = Q K^T is wgmma m64nNk32 over the fp8 codes
// (common/sm90_fp8.cuh); fp8 wgmma reads both operands K-major, so warps 1-3 of the producer warpgroup transpose each
// V block into a V^T ring (common/hopper_v_transpose.cuh: ldmatrix.trans / prmt / stmatrix; its own full and empty
// barriers) and O += P V^T takes P in e4m3 from registers (common/hopper_p_fp8.cuh: the accumulator values packed as
// they lie, the reduction's key order permuted alike in V^T). The descales (FlashAttention 3's, per (batch, kv head))
// fold in: descale_q * descale_k into the softmax scale (mul; on the feature path S is multiplied by it first, so
// softcap sees the dequantized score), descale_v into O before its normalisation. No bias, no user code (covers()).
// Reads fa_cfg: kDtype (1 fp16, 2 bf16, 4 e4m3, 5 e5m2), kODtype, kHeadDim, kHeadDimV, kMask, kHasBias, kHasAlibi,
// kHasSoftcap, kHasMaskMod, kHasScoreMod, kVarlen, kEvenK (seqlen_k % kBlockN == 0, fixed length only), kHasLse,
// kHasSinks (the epilogue piece), and the tunables kBlockM (= 64 * kConsumers), kBlockN (16..256, multiple of 16; of 32
// for fp8), kStages (2..4), kConsumers (1..3), kPingPong, kIntraOverlap, kPersistent. Parameters: (FaFwdArgs, FaUser
// with user code (FA_USER_PARAM), FaFwdTma). Launch (host): block = 128 * (kConsumers + 1) threads; grid =
// (ceil(seqlen_q / kBlockM), heads_q, batch), or (min(ceil(seqlen_q / kBlockM) * heads_q * batch, SM count), 1, 1) when
// kPersistent; dynamic shared memory = fa_wg::kSmemBytes = nQ * R0 + kStages * (kBlockN * (Dp + DVp) * E + Vt + M) + 8
// * (4 + 4 * kStages) + B + 1024 with E = 2 bytes (fp8: 1), R0 = kBlockM * max(Dp * E, OVp * 2), Dp = head_dim and DVp
// = head_dim_v rounded up to 128 / E columns, OVp = ceil64(head_dim_v), M = kBlockM * 32 + 16 with a mask_mod (else 0),
// fp8 only: Vt = ceil(kBlockN / 128) * ceil32(head_dim_v) * 128 (V^T) and B = 16 * kStages (its barriers), else 0; nQ =
// 2 if kPersistent and the total with nQ = 2 is <= 232448, else 1 (the kernel traps if launched with less).
#ifndef FA_FWD_WGMMA_CUH
#define FA_FWD_WGMMA_CUH

#include "fa_tma_args.cuh"
#include "common/sm80.cuh"
#include "common/sm90.cuh"
#include "common/sm90_fp8.cuh"
#include "common/fwd_score.cuh"
#include "common/blk_visit.cuh"
#include "common/hopper_tile_sched.cuh"
#include "common/hopper_kv_ring.cuh"
#include "common/hopper_softmax.cuh"
#include "common/hopper_epilogue.cuh"
#include "common/hopper_p_fp8.cuh"
#include "common/hopper_v_transpose.cuh"

namespace fa_wg {

constexpr bool kFp8 = fa_cfg::kDtype == 4 || fa_cfg::kDtype == 5;  // fp8 q / k / v, o of fa_cfg::kODtype
constexpr int kEs = kFp8 ? 1 : 2;                                  // bytes of a q / k / v element
constexpr int kAtom = 128 / kEs;                                   // columns of a 128-byte swizzled row
constexpr int kKStep = kFp8 ? 32 : 16;                             // k of one wgmma
constexpr int kD = fa_cfg::kHeadDim;
constexpr int kDV = fa_cfg::kHeadDimV;
constexpr int kDp = (kD + kAtom - 1) / kAtom * kAtom;  // shared-memory columns: whole 128-byte swizzle atoms (TMA zero
constexpr int kDVp = (kDV + kAtom - 1) / kAtom * kAtom;   // fill)
constexpr int kOVp = (kDV + 63) / 64 * 64;                // O's staged columns (16-bit)
constexpr int kDk = (kD + kKStep - 1) / kKStep * kKStep;  // reduction extent of Q K^T (k16 / k32 steps)
constexpr int kNV = (kDV + 15) / 16 * 16;                 // O columns computed (wgmma N)
constexpr int kBM = fa_cfg::kBlockM;
constexpr int kBN = fa_cfg::kBlockN;
constexpr int kStages = fa_cfg::kStages;
constexpr int kC = fa_cfg::kConsumers;
constexpr bool kPP = fa_cfg::kPingPong && kC >= 2;
constexpr bool kOv = fa_cfg::kIntraOverlap;
constexpr bool kPersist = fa_cfg::kPersistent != 0;
// kPersistent 2, masked problems: pairs of tiles (common/hopper_tile_sched.cuh)
constexpr bool kHeadOrder = fa_cfg::kPersistent == 2;
constexpr int kThreads = 128 * (kC + 1);
// setmaxnreg split: producer + consumers <= 64K registers (launch allocation 65536 / kThreads per thread); fp8 with 2
// consumers gives 16 registers a thread to the transposer warps.
constexpr int kRegP = kC == 3 ? 32 : (kC == 2 ? (kFp8 ? 40 : 24) : 56);
constexpr int kRegC = kC == 3 ? 160 : (kC == 2 && kFp8 ? 232 : 240);
constexpr int kQBytes = kBM * kDp * kEs;
constexpr int kOBytes = kBM * kOVp * 2;
constexpr int kR0 = kQBytes > kOBytes ? kQBytes : kOBytes;  // Q tile, then the O staging tile
constexpr int kKBytes = kBN * kDp * kEs;
constexpr int kVBytes = kBN * kDVp * kEs;
// fp8: per stage a V^T tile (common/hopper_v_transpose.cuh) of kDVt rows (V's columns, whole 32-column groups) by
// 128-key chunks, written by kTw transposer warps (warps 1-3 of the producer warpgroup)
constexpr int kDVt = kFp8 ? (kDV + 31) / 32 * 32 : 0;
constexpr int kVtRows = kDVt;
constexpr int kVtBytes = kFp8 ? (kBN + 127) / 128 * kVtRows * 128 : 0;
constexpr int kTw = kFp8 ? 3 : 0;
constexpr int kPK = kBN / kKStep;  // k steps of O += P V: P's A fragments
// kSparse: per K stage, the partial block's slot of hidden pairs (mask_blocks' blk_bits, kBM * 32 bytes) and its
// record (kC code words, the slot; 16 bytes), both staged by the producer with the block's K
constexpr int kBitsBytes = fa_cfg::kHasMaskMod ? kBM * 32 : 0;
constexpr int kRecBytes = fa_cfg::kHasMaskMod ? 16 : 0;
constexpr int kRing = kStages * (kKBytes + kVBytes + kVtBytes + kBitsBytes + kRecBytes);
constexpr int kBarBytes = 8 * (4 + 4 * kStages) + (kFp8 ? FaVtBars<kStages>::kBytes : 0);
// Persistent: two Q/O buffers when they fit (the next tile's Q lands while this one computes; O is staged in the
// tile's own buffer), else one (then O goes straight from the accumulators to global memory).
constexpr int kQBuf = (kPersist && 2 * kR0 + kRing + kBarBytes + 1024 <= 232448) ? 2 : 1;
constexpr bool kStaged = !kPersist || kQBuf == 2;  // O staged through shared memory
constexpr int kOffK = kQBuf * kR0;
constexpr int kOffV = kOffK + kStages * kKBytes;
constexpr int kOffVt = kOffV + kStages * kVBytes;
constexpr int kOffBits = kOffVt + kStages * kVtBytes;
constexpr int kOffRec = kOffBits + kStages * kBitsBytes;
constexpr int kOffBar = kOffRec + kStages * kRecBytes;  // FaWgBars, then (fp8) FaVtBars
constexpr int kSmemBytes = kOffBar + kBarBytes + 1024;  // + slack to align the base to 1024
constexpr bool kFeat = fa_cfg::kHasBias || fa_cfg::kHasAlibi || fa_cfg::kHasSoftcap || fa_cfg::kHasScoreMod;
constexpr bool kSparse = fa_cfg::kHasMaskMod;  // visit the key blocks mask_blocks classified (block skipping)
constexpr bool kMasked = fa_cfg::kMask != 0 || fa_cfg::kHasMaskMod;  // query blocks in reverse: longest first
constexpr bool kEarlyQ = kSparse && !kPersist;  // the producer issues Q before it walks the tile's classes
// Per-consumer trimming of the band (built-in masks and rows past the sequence; kSparse walks classes instead): a
// consumer skips the blocks none of its 64 rows sees. Compiled where kBlockM > kBlockN, the tiles whose consumers skip
// whole blocks on every causal diagonal; with kBlockM <= kBlockN they skip only on diagonals that are not block-aligned
// and in a sequence's last tile, and the per-tile bookkeeping cost 1-2% on aligned causal tiles (H200 A/B,
// docs/design_notes.md). (Computing the first block a consumer needs over half the keys when they fit there, with a
// wgmma of N = kBlockN / 2, made ptxas serialize the wgmma pipeline in every form tried: a branch between the two
// GEMMs, a guard predicate on the upper half's, a separate accumulator array.)
constexpr bool kTrim = !kSparse && kBM > kBN;
static_assert(fa_cfg::kDtype == 1 || fa_cfg::kDtype == 2 || kFp8, "fwd_wgmma: fp16, bf16, e4m3 or e5m2");
static_assert(!kFp8 || (kBN % 32 == 0 && !fa_cfg::kHasBias && !kSparse && !fa_cfg::kHasScoreMod),
              "fwd_wgmma fp8: block_n a multiple of 32; no bias, no user code");
static_assert(kC >= 1 && kC <= 3 && kBM == 64 * kC, "fwd_wgmma: block_m = 64 * consumers, 1..3 consumers");
static_assert(kBN % 16 == 0 && kBN >= 16 && kBN <= 256, "fwd_wgmma: block_n multiple of 16 in [16, 256]");
static_assert(kStages >= 2 && kStages <= 4, "fwd_wgmma: 2..4 stages");
static_assert(kD % 8 == 0 && kDV % 8 == 0 && kD <= 256 && kDV <= 256, "fwd_wgmma: head dims");
static_assert(kSmemBytes <= 232448, "fwd_wgmma: shared memory above 227 KB");

// The constexpr config the shared Hopper pieces (common/hopper_*.cuh) are instantiated with.
struct Cfg {
  static constexpr int kBM = fa_wg::kBM, kBN = fa_wg::kBN, kStages = fa_wg::kStages, kC = fa_wg::kC;
  static constexpr int kAtom = fa_wg::kAtom, kDp = fa_wg::kDp, kDVp = fa_wg::kDVp, kOVp = fa_wg::kOVp;
  static constexpr int kDV = fa_wg::kDV, kNV = fa_wg::kNV, kDVt = fa_wg::kDVt, kVtRows = fa_wg::kVtRows;
  static constexpr int kVtBytes = fa_wg::kVtBytes, kTw = fa_wg::kTw;
  static constexpr int kR0 = fa_wg::kR0, kQBytes = fa_wg::kQBytes, kKBytes = fa_wg::kKBytes, kVBytes = fa_wg::kVBytes;
  static constexpr int kBitsBytes = fa_wg::kBitsBytes, kRecBytes = fa_wg::kRecBytes, kQBuf = fa_wg::kQBuf;
  static constexpr bool kPersist = fa_wg::kPersist, kHeadOrder = fa_wg::kHeadOrder, kMasked = fa_wg::kMasked;
  static constexpr bool kSparse = fa_wg::kSparse, kEarlyQ = fa_wg::kEarlyQ, kStaged = fa_wg::kStaged;
  static constexpr bool kFeat = fa_wg::kFeat;
};

// A consumer warpgroup (after setmaxnreg.inc): for each of the CTA's tiles, the GEMMs and the softmax of its 64 rows
// over the tile's visits, then the epilogue.
struct Consumer {
  const FaFwdArgs& args;
  const FaFwdTma& tma;
  const FaUser& u;
  const FaTileSched<Cfg>& sch;
  FaWgBars<kStages> bar;
  FaVtBars<kStages> vtb;  // fp8: the V^T ring's barriers (the consumers walk it with v)
  FaWgSmem sm;
  FaWgThread th;
  float mul;  // scale_log2 on the plain path (fp8: times the tile's q / k descales); 1 on the feature path
  float qk_descale, v_descale;        // fp8: the tile's descale_q * descale_k and descale_v (else 1)
  unsigned long long dq00, dk0, dv0;  // wgmma descriptors: this consumer's Q rows of buffer 0, K stage 0, V stage 0
                                      // (fp8: V^T stage 0)
  FaRingPos<kStages> k, v;            // K / V ring positions, continued across tiles
  int qn;                             // tiles with a Q load, as counted by the producer
  FaWgEpilogue<Cfg> epi;

  FA_DEVICE void release(unsigned b) const { epi.release(b); }
  // The V operand of the next visit: its V stage, or (fp8) its V^T stage, waited for / released.
  FA_DEVICE void wait_v() const { fa_mbar_wait(kFp8 ? vtb.full(v.stage) : bar.v_full(v.stage), v.phase); }
  FA_DEVICE void release_v() const { release(kFp8 ? vtb.empty(v.stage) : bar.v_empty(v.stage)); }
  // fp8: the descales of tile T's (batch, kv head) (FlashAttention 3's; a null pointer reads 1): mul, qk_descale and
  // v_descale for its visits and epilogue.
  FA_DEVICE void descale(const FaTile& T) {
    if constexpr (kFp8) {
      auto at = [&](const float* f, long long sb, long long sh) {
        return f != nullptr ? f[(long long)T.b * sb + (long long)T.g * sh] : 1.f;
      };
      qk_descale = at(args.descale_q, args.descale_q_sb, args.descale_q_sh) *
                   at(args.descale_k, args.descale_k_sb, args.descale_k_sh);
      v_descale = at(args.descale_v, args.descale_v_sb, args.descale_v_sh);
      mul = kFeat ? 1.f : args.scale_log2 * qk_descale;
    }
  }
  // Ping-pong: consumer cw issues its GEMMs after bar.sync(4 + cw) and hands the turn to the next one; the hand-overs
  // continue across tiles (every consumer issues the same GEMM sequence).
  FA_DEVICE void pp_sync() const {
    if constexpr (kPP) fa_bar_sync(4 + th.cw, 256);
  }
  FA_DEVICE void pp_arrive() const {
    if constexpr (kPP) {
      // the next consumer's barrier, from a fresh read of the thread index: a value kept for the whole kernel was the
      // one ptxas spilled with 3 consumers at head dim 64 (user code with a built-in mask)
      unsigned t;
      asm volatile("mov.u32 %0, %%tid.x;" : "=r"(t));
      fa_bar_arrive(4 + (int)(t >> 7) % kC, 256);
    }
  }
  // S = Q K^T of the K block in `slot` (issued and committed, not waited); dq0: this consumer's rows of the tile's Q.
  FA_DEVICE void gemm_s(float (&s)[kBN / 2], int slot, unsigned long long dq0) const {
    fa_wg_fence();
#pragma unroll
    for (int ks = 0; ks < kDk / kKStep; ++ks) {  // a k step is 32 bytes of the 128-byte rows in either dtype
      const unsigned qo = (unsigned)((ks >> 2) * kBM * 128 + (ks & 3) * 32);
      const unsigned ko = (unsigned)(slot * kKBytes + (ks >> 2) * kBN * 128 + (ks & 3) * 32);
      if constexpr (kFp8) FaWg8<kBN>::ss<fa_cfg::kDtype, fa_cfg::kDtype>(s, dq0 + (qo >> 4), dk0 + (ko >> 4), ks > 0);
      else FaWg<kBN>::ss<fa_cfg::kDtype>(s, dq0 + (qo >> 4), dk0 + (ko >> 4), ks > 0 ? 1 : 0);
    }
    fa_wg_commit();
  }
  // O += P V of the V block in `slot` (issued and committed, not waited); fp8: P in e4m3 times V^T of the slot
  // (32-key steps: 128-key chunks of kVtRows rows, 32 bytes a step).
  FA_DEVICE void gemm_o(float (&o)[kNV / 2], const unsigned (&p)[kPK][4], int slot) const {
    fa_wg_fence();
#pragma unroll
    for (int kk = 0; kk < kPK; ++kk) {
      if constexpr (kFp8) {
        const unsigned vo = (unsigned)(slot * kVtBytes + (kk >> 2) * kVtRows * 128 + (kk & 3) * 32);
        FaWg8<kNV>::rs<4, fa_cfg::kDtype>(o, p[kk], dv0 + (vo >> 4), 1);
      } else {
        const unsigned vo = (unsigned)(slot * kVBytes + kk * 16 * 128);
        FaWg<kNV>::rs<fa_cfg::kDtype>(o, p[kk], dv0 + (vo >> 4), 1);
      }
    }
    fa_wg_commit();
  }
  // P (the probabilities in s) -> the A fragments of O += P V: 16-bit pairs, or (fp8) e4m3 quadruples. (A template,
  // so that the other dtype's call is never instantiated.)
  template <int kK>
  FA_DEVICE static void pack_p(unsigned (&p)[kK][4], const float (&s)[kBN / 2]) {
    if constexpr (kFp8) fa_wg_pack_p8<kBN>(p, s);
    else fa_wg_pack_p<kBN>(p, s);
  }
  // kSparse: what the softmax masks a partial block with, read from the block's K stage (where the producer staged
  // the record and the slot's hidden pairs) before that stage is released: this warp's 8 code bits and, when the
  // tile has a slot, this lane's word of each key group (common/fwd_score.cuh: fa_wg_user_mask).
  FA_DEVICE FaWgMaskWords mask_words(int entry, int stage) const {
    FaWgMaskWords m{0x55u, false, {0u, 0u, 0u, 0u}};
    if constexpr (kSparse) {
      if ((entry & 1) == 0) {
        const unsigned rec = sm.rec + (unsigned)(stage * kRecBytes);
        m.codes = (fa_ld_shared_b32(rec + 4u * th.cw) >> (8 * th.warp)) & 0xffu;
        m.pre = fa_ld_shared_b32(rec + 4u * kC) != 0xffffffffu;
        if (m.pre) {
          const unsigned w0 = sm.bits + (unsigned)(stage * kBitsBytes + (th.cw * 4 + th.warp) * 512 + th.lane * 4);
#pragma unroll
          for (int g = 0; g < 4; ++g) m.w[g] = fa_ld_shared_b32(w0 + 128u * g);
        }
      }
    }
    return m;
  }
  // One block's S = Q K^T on its own (its ping-pong turn, waited for), the pending O store flushed under it; returns
  // the block's mask words (mask_words), read before its K stage is released.
  FA_DEVICE FaWgMaskWords s_step(float (&s)[kBN / 2], int entry, unsigned long long dq0) {
    fa_mbar_wait(bar.k_full(k.stage), k.phase);
    pp_sync();
    gemm_s(s, k.stage, dq0);
    pp_arrive();
    epi.flush();  // the last tile's O store reads under this GEMM (none pending after a tile's first block)
    fa_wg_wait<0>();
    fa_wg_fence_regs(s);
    const FaWgMaskWords mw = mask_words(entry, k.stage);
    release(bar.k_empty(k.stage));
    k.advance();
    return mw;
  }
  // One block's O += P V on its own (its ping-pong turn, waited for), its V stage released.
  FA_DEVICE void pv_step(float (&o)[kNV / 2], const unsigned (&p)[kPK][4]) {
    wait_v();
    pp_sync();
    gemm_o(o, p, v.stage);
    pp_arrive();
    fa_wg_wait<0>();
    fa_wg_fence_regs(o);
    release_v();
    v.advance();
  }
  // kTrim: the blocks at the top of tile T's band that none of this consumer's rows sees (its rows see keys below
  // hi_c, its last row's right bound; none for rows past the sequence), passed over without GEMMs.
  FA_DEVICE int trim(const FaTile& T) const {
    int n_skip = 0;
    if constexpr (kTrim) {
      const int m0 = T.m0, sq = T.sq, sk = T.sk;
      int hi_c = sk;
      if constexpr (fa_cfg::kMask != 0) {
        if (args.win_right >= 0) hi_c = min(sk, m0 + th.cw * 64 + 63 + sk - sq + args.win_right + 1);
      }
      if (m0 + th.cw * 64 >= sq) hi_c = 0;
      n_skip = T.nb_hi - max(min(T.nb_hi, (max(hi_c, 0) + kBN - 1) / kBN), T.nb_lo);
      // broadcast, so that ptxas knows the count warp-uniform: the ring positions it advances then stay in uniform
      // registers (computed per thread, the main loop's descriptor arithmetic moved to the vector datapath, 46 more
      // R2UR, and ran 3-7% slower)
      n_skip = __shfl_sync(0xffffffffu, n_skip, 0);
    }
    return n_skip;
  }

  FA_DEVICE void mainloop(const FaTile& T, int qb, unsigned qph, float (&o)[kNV / 2], FaWgSoftmax<kBN>& smx);
  FA_DEVICE void tile(int t);
  FA_DEVICE void run(bool prefetch_o);
};

// The visits of tile T (Q in buffer qb, phase qph), from the band's last block down: per block S = Q K_j^T, the
// score policy and the online softmax, O += P V_j. kIntraOverlap: per block, issue S_{j+1} = Q K_{j+1}^T and P_j V_j,
// wait for S_{j+1} only (wgmma depth 1), run its softmax under P_j V_j, then wait, rescale O and re-pack P (no wgmma
// is in flight during the rescale). Returns with every wgmma done and the tile's stages released.
FA_DEVICE void Consumer::mainloop(const FaTile& T, int qb, unsigned qph, float (&o)[kNV / 2], FaWgSoftmax<kBN>& smx) {
  const int n_skip = trim(T);
  const int n_blocks = T.n_blocks - n_skip, nb_hi = T.nb_hi - n_skip;
  // The entry (n_block << 1) | full of visit it: the band from its last block down (full never set: the geometry
  // decides the masking), or the next classified block (kSparse; common/blk_visit.cuh).
  FaBlkCursor cur;
  if constexpr (kSparse) cur.start(T.cls, T.nb_lo, T.last + 1);
  auto entry_of = [&](int it) {
    if constexpr (kSparse) return cur.next();
    return (nb_hi - 1 - it) << 1;
  };
  float slope = 0.f;
  if constexpr (fa_cfg::kHasAlibi) slope = args.alibi[T.h] * 1.4426950408889634f;
  const unsigned short* bias_g = nullptr;
  if constexpr (fa_cfg::kHasBias)
    bias_g = (const unsigned short*)args.bias + (long long)T.b * args.bias_sb + (long long)T.h * args.bias_sh;
  const FaWgScore<Cfg> score{args, bias_g, slope, T.b, T.h, T.m0, T.sq, T.sk, T.diag0, th.rbase, th.tq};
  const unsigned long long dq0 = dq00 + (unsigned)((qb * kR0) >> 4);
  auto softmax = [&](float(&s)[kBN / 2], int entry, const FaWgMaskWords& mw, float(&corr)[2]) {
    if constexpr (kFp8 && kFeat) {  // the feature path sees the dequantized score
#pragma unroll
      for (int i = 0; i < kBN / 2; ++i) s[i] *= qk_descale;
    }
    score.apply(s, entry, mw, u);
    smx.update(s, mul, corr);
  };

  float s[kBN / 2];
  unsigned p[kPK][4];
  float corr[2];
  auto release_q = [&]() {  // single Q buffer, persistent: Q is free after the last S = Q K^T
    if constexpr (kPersist && !kStaged) release(bar.q_empty(qb));
  };
  fa_mbar_wait(bar.q_full(qb), qph);
  // kTrim's skipped blocks: each stage released after its full barrier (so the release counts toward this round,
  // never the one before), the ping-pong turns of the block passed on (kOv: one per block, else two).
  for (int i = 0; i < n_skip; ++i) {
    fa_mbar_wait(bar.k_full(k.stage), k.phase);
    pp_sync();
    pp_arrive();
    if constexpr (!kOv) {
      pp_sync();
      pp_arrive();
    }
    release(bar.k_empty(k.stage));
    k.advance();
    wait_v();
    release_v();
    v.advance();
  }
  if (kTrim && n_blocks == 0) {  // nothing visible to these rows: O = 0, lse = -inf
    if constexpr (kOv) {         // a band of n blocks takes n + 1 turns with kOv
      pp_sync();
      pp_arrive();
    }
    release_q();
  } else if constexpr (kOv) {
    // block 0: S, softmax (O is still zero)
    const int entry0 = entry_of(0);
    const FaWgMaskWords mw0 = s_step(s, entry0, dq0);  // the last tile's O store reads under this GEMM
    if (n_blocks == 1) release_q();
    softmax(s, entry0, mw0, corr);
    pack_p(p, s);
    for (int it = 1; it < n_blocks; ++it) {
      const int entry = entry_of(it);
      fa_mbar_wait(bar.k_full(k.stage), k.phase);
      pp_sync();
      gemm_s(s, k.stage, dq0);
      wait_v();
      gemm_o(o, p, v.stage);
      pp_arrive();
      fa_wg_wait<1>();
      fa_wg_fence_regs(s);
      const FaWgMaskWords mw = mask_words(entry, k.stage);
      release(bar.k_empty(k.stage));
      k.advance();
      if (it == n_blocks - 1) release_q();
      softmax(s, entry, mw, corr);
      // ptxas hoists wait_group 0 to the top of the basic block holding the softmax (SASS: every MUFU.EX2 after the
      // WARPGROUP.DEPBAR), which serialises the softmax behind P_j V_j. The wait loop for the next K block (needed
      // next anyway) ends that basic block, so the softmax stays under P_j V_j.
      if (it + 1 < n_blocks) fa_mbar_wait(bar.k_full(k.stage), k.phase);
      fa_wg_wait<0>();
      fa_wg_fence_regs(o);
      release_v();
      v.advance();
      fa_wg_rescale_o<kNV>(o, corr);  // O (through block it-1) to the new row maxima; no wgmma in flight here
      pack_p(p, s);
    }
    pv_step(o, p);
  } else {
    for (int it = 0; it < n_blocks; ++it) {
      const int entry = entry_of(it);
      const FaWgMaskWords mw = s_step(s, entry, dq0);  // it 0: the last tile's O store reads under this GEMM
      if (it == n_blocks - 1) release_q();
      softmax(s, entry, mw, corr);
      fa_wg_rescale_o<kNV>(o, corr);
      pack_p(p, s);
      pv_step(o, p);
    }
  }
}

// Tile t of the CTA's walk: its visits (mainloop) and its epilogue (common/hopper_epilogue.cuh).
FA_DEVICE void Consumer::tile(int t) {
  FaTile T = sch.at(t);
  if (T.m0 >= T.sq) return;
  const int band = T.n_blocks;
  sch.count_visits(T);
  if constexpr (kEarlyQ) {
    if (T.n_blocks == 0 && band > 0) fa_mbar_wait(bar.q_full(0), 0u);  // the producer's Q copy, before O is staged
  }
  const int qb = qn % kQBuf;  // this tile's Q buffer (valid when n_blocks > 0)
  const unsigned qph = (unsigned)(qn / kQBuf) & 1u;
  const unsigned sQt = sm.q + (unsigned)(qb * kR0);
  if (T.n_blocks > 0) ++qn;
  float o[kNV / 2];
#pragma unroll
  for (int i = 0; i < kNV / 2; ++i) o[i] = 0.f;
  FaWgSoftmax<kBN> smx{{FA_WG_NEG_INF, FA_WG_NEG_INF}, {0.f, 0.f}};
  descale(T);
  if (T.n_blocks > 0) mainloop(T, qb, qph, o, smx);
  if constexpr (kFp8) {  // O = P (V's codes) descale_v
    const float vd[2] = {v_descale, v_descale};
    fa_wg_rescale_o<kNV>(o, vd);
  }
  epi.store(T, o, smx, mul, sQt, qb);
}

// Every tile of the CTA's walk (common/hopper_tile_sched.cuh), the ping-pong turns started and closed; prefetch_o:
// this thread prefetches the O map.
FA_DEVICE void Consumer::run(bool prefetch_o) {
  if constexpr (kPP) {
    if (th.cw == kC - 1) fa_bar_arrive(4, 256);  // consumer 0 goes first
  }
  if (!fa_cfg::kVarlen && kStaged && prefetch_o) fa_tma_prefetch(&tma.o);
  for (int t = sch.t_first; t < sch.total; t += sch.t_step) tile(t);
  epi.flush();  // the last tile's store read before the CTA's shared memory goes
  if constexpr (kPP) {
    if (th.cw == 0) fa_bar_sync(4, 256);  // the last hand-over from consumer kC-1
  }
}

}  // namespace fa_wg

extern "C" __global__ void __launch_bounds__(fa_wg::kThreads, 1)
    fa_kernel(const __grid_constant__ FaFwdArgs args FA_USER_PARAM, const __grid_constant__ FaFwdTma tma) {
  using namespace fa_wg;
  extern __shared__ __align__(1024) unsigned char fa_smem_raw[];
  const FaUser& u = FA_USER_ARGS;

  const int tid = (int)threadIdx.x;
  const FaTileSched<Cfg> sch(args);
  if constexpr (!kPersist) {
    if (sch.at(0).m0 >= sch.at(0).sq) return;  // uniform: the whole CTA leaves
    if constexpr (kSparse) {
      // the tile's row of classes on its way to L1 before the barriers are set up (the walks below read it); the
      // first warp's lanes a line each
      if (tid < 32) {
        const FaTile T0 = sch.at(0);
        if (T0.cls != nullptr && T0.nb_lo + 128 * tid < T0.nb_hi) fa_prefetch_l1(T0.cls + T0.nb_lo + 128 * tid);
      }
    }
  }

  fa_require_dyn_smem((unsigned)kSmemBytes);  // the host launches with kSmemBytes (formula at the top of this file)
  const unsigned sbase = (fa_sm90_smem(fa_smem_raw) + 1023u) & ~1023u;
  const FaWgSmem sm{sbase, sbase + kOffK, sbase + kOffV, sbase + kOffBits, sbase + kOffRec};
  const FaWgBars<kStages> bar{sbase + kOffBar};
  const FaVtBars<kStages> vtb{sbase + kOffBar + 8 * (4 + 4 * kStages)};
  if (tid == 0) {
    // one release per consumer warp (fp8: V stages by each transposer warp, V^T stages by each consumer warp)
    if constexpr (kFp8) vtb.init(kTw, 4 * kC);
    bar.init(4 * kC, kFp8 ? kTw : 4 * kC);  // its fence covers vtb's inits too
  }
  __syncthreads();

  const int wg = tid >> 7;
  if (wg == 0) {
    // producer warpgroup: one thread issues every TMA copy (kSparse: the whole first warp walks the classes)
    fa_setmaxnreg_dec<kRegP>();
    if (kSparse ? tid < 32 : tid == 0) {
      FaWgProducer<Cfg> prod{args, tma, sch, bar, sm, tid, !kSparse || tid == 0, {0, 0u}, {0, 0u}};
      prod.run();
    } else if constexpr (kFp8) {
      // fp8: warps 1 .. kTw transpose each V block into the V^T ring (common/hopper_v_transpose.cuh), walking the
      // tiles with a scheduler of their own (the kernel's, live across setmaxnreg.dec, was spilled under the budget)
      if (tid >= 32 && tid < 32 * (1 + kTw)) {
        const FaTileSched<Cfg> tsch(args);
        FaWgVTranspose<Cfg>{tsch, bar, vtb, sm.v, sbase + kOffVt, (tid >> 5) - 1, tid & 31, {0, 0u}, {0, 0u}}.run();
      }
    }
  } else {
    // consumer warpgroups
    fa_setmaxnreg_inc<kRegC>();
    const int cw = wg - 1;  // consumer index: rows 64 cw .. 64 cw + 63 of the block
    const int ltid = tid & 127, warp = ltid >> 5, lane = tid & 31;
    const int gq = lane >> 2, tq = lane & 3;
    const FaWgThread th{cw, ltid, warp, lane, gq, tq, cw * 64 + warp * 16 + gq};
    const FaTileSched<Cfg> csch(args);  // fp8: the consumers' own scheduler too (unused otherwise)
    Consumer c{args,
               tma,
               u,
               kFp8 ? csch : sch,
               bar,
               vtb,
               sm,
               th,
               kFeat ? 1.f : args.scale_log2,
               1.f,
               1.f,
               fa_wg_desc_sw128(sm.q + (unsigned)(cw * 64 * 128), 16, 1024),
               fa_wg_desc_sw128(sm.k, 16, 1024),
               kFp8 ? fa_wg_desc_sw128(sbase + kOffVt, 16, 1024) : fa_wg_desc_sw128(sm.v, kBN * 128, 1024),
               {0, 0u},
               {0, 0u},
               0,
               FaWgEpilogue<Cfg>{args, tma, bar, th, -1}};
    c.run(tid == 128);
  }
}

#endif  // FA_FWD_WGMMA_CUH
