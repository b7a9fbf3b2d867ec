// fwd_wgmma.cuh -- Hopper (sm_90a) FlashAttention forward: TMA + wgmma + warp specialization (fp16 / bf16).
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
// Reads fa_cfg: kDtype (1 fp16, 2 bf16), kHeadDim, kHeadDimV, kMask, kHasBias, kHasAlibi, kHasSoftcap, kHasMaskMod,
// kHasScoreMod, kVarlen, kEvenK (seqlen_k % kBlockN == 0, fixed length only), kHasLse, and the tunables kBlockM
// (= 64 * kConsumers), kBlockN (16..256, multiple of 16), kStages (2..4), kConsumers (1..3), kPingPong,
// kIntraOverlap, kPersistent.
// Parameters: (FaFwdArgs, FaUser with user code (FA_USER_PARAM), FaFwdTma).
// Launch (host): block = 128 * (kConsumers + 1) threads; grid = (ceil(seqlen_q / kBlockM), heads_q, batch), or
// (min(ceil(seqlen_q / kBlockM) * heads_q * batch, SM count), 1, 1) when kPersistent; dynamic shared memory =
// fa_wg::kSmemBytes = nQ * R0 + kStages * (kBlockN * (Dp + DVp) * 2 + M) + 8 * (4 + 4 * kStages) + 1024 with
// R0 = kBlockM * max(Dp, DVp) * 2, Dp = ceil64(head_dim), DVp = ceil64(head_dim_v), M = kBlockM * 32 + 16 with a
// mask_mod (else 0), nQ = 2 if kPersistent and the total with nQ = 2 is <= 232448, else 1 (the kernel traps if
// launched with less).
#ifndef FA_FWD_WGMMA_CUH
#define FA_FWD_WGMMA_CUH

#include "fa_tma_args.cuh"
#include "common/sm90.cuh"
#include "common/fwd_score.cuh"
#include "common/blk_visit.cuh"

namespace fa_wg {

constexpr int kD = fa_cfg::kHeadDim;
constexpr int kDV = fa_cfg::kHeadDimV;
constexpr int kDp = (kD + 63) / 64 * 64;  // shared-memory columns: whole 128-byte swizzle atoms (TMA zero fill)
constexpr int kDVp = (kDV + 63) / 64 * 64;
constexpr int kDk = (kD + 15) / 16 * 16;   // reduction extent of Q K^T (k16 steps)
constexpr int kNV = (kDV + 15) / 16 * 16;  // O columns computed (wgmma N)
constexpr int kBM = fa_cfg::kBlockM;
constexpr int kBN = fa_cfg::kBlockN;
constexpr int kStages = fa_cfg::kStages;
constexpr int kC = fa_cfg::kConsumers;
constexpr bool kPP = fa_cfg::kPingPong && kC >= 2;
constexpr bool kOv = fa_cfg::kIntraOverlap;
constexpr bool kPersist = fa_cfg::kPersistent != 0;
// kPersistent 2, masked problems: pairs of tiles (tile_at)
constexpr bool kHeadOrder = fa_cfg::kPersistent == 2;
constexpr int kThreads = 128 * (kC + 1);
// setmaxnreg split: producer + consumers <= 64K registers (launch allocation 65536 / kThreads per thread).
constexpr int kRegP = kC == 3 ? 32 : (kC == 2 ? 24 : 56);
constexpr int kRegC = kC == 3 ? 160 : 240;
constexpr int kQBytes = kBM * kDp * 2;
constexpr int kOBytes = kBM * kDVp * 2;
constexpr int kR0 = kQBytes > kOBytes ? kQBytes : kOBytes;  // Q tile, then the O staging tile
constexpr int kKBytes = kBN * kDp * 2;
constexpr int kVBytes = kBN * kDVp * 2;
// kSparse: per K stage, the partial block's slot of hidden pairs (mask_blocks' blk_bits, kBM * 32 bytes) and its
// record (kC code words, the slot; 16 bytes), both staged by the producer with the block's K
constexpr int kBitsBytes = fa_cfg::kHasMaskMod ? kBM * 32 : 0;
constexpr int kRecBytes = fa_cfg::kHasMaskMod ? 16 : 0;
constexpr int kRing = kStages * (kKBytes + kVBytes + kBitsBytes + kRecBytes);
constexpr int kBarBytes = 8 * (4 + 4 * kStages);
// Persistent: two Q/O buffers when they fit (the next tile's Q lands while this one computes; O is staged in the
// tile's own buffer), else one (then O goes straight from the accumulators to global memory).
constexpr int kQBuf = (kPersist && 2 * kR0 + kRing + kBarBytes + 1024 <= 232448) ? 2 : 1;
constexpr bool kStaged = !kPersist || kQBuf == 2;  // O staged through shared memory
constexpr int kOffK = kQBuf * kR0;
constexpr int kOffV = kOffK + kStages * kKBytes;
constexpr int kOffBits = kOffV + kStages * kVBytes;
constexpr int kOffRec = kOffBits + kStages * kBitsBytes;
constexpr int kOffBar = kOffRec + kStages * kRecBytes;
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
constexpr bool kIsBf16 = fa_cfg::kDtype == 2;
#define FA_WG_NEG_INF __int_as_float(0xff800000)

static_assert(fa_cfg::kDtype == 1 || fa_cfg::kDtype == 2, "fwd_wgmma: fp16 or bf16 only");
static_assert(kC >= 1 && kC <= 3 && kBM == 64 * kC, "fwd_wgmma: block_m = 64 * consumers, 1..3 consumers");
static_assert(kBN % 16 == 0 && kBN >= 16 && kBN <= 256, "fwd_wgmma: block_n multiple of 16 in [16, 256]");
static_assert(kStages >= 2 && kStages <= 4, "fwd_wgmma: 2..4 stages");
static_assert(kD % 8 == 0 && kDV % 8 == 0 && kD <= 256 && kDV <= 256, "fwd_wgmma: head dims");
static_assert(kSmemBytes <= 232448, "fwd_wgmma: shared memory above 227 KB");

FA_DEVICE unsigned pack2(float lo, float hi) {  // two floats -> 16-bit pair, lo in the low half
  unsigned r;
  if constexpr (kIsBf16) {
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  } else {
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  }
  return r;
}
FA_DEVICE void st_shared_b32(unsigned addr, unsigned v) {
  asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
}
FA_DEVICE unsigned ld_shared_b32(unsigned addr) {
  unsigned v;
  asm volatile("ld.shared.b32 %0, [%1];" : "=r"(v) : "r"(addr) : "memory");
  return v;
}
FA_DEVICE uint4 ld_shared_v4(unsigned addr) {
  uint4 v;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(addr)
               : "memory");
  return v;
}

// Geometry of one work tile (query block, head, batch).
struct FaTile {
  int m0, mb, h, b, g, bt;  // first query row, query block, query head, batch, kv head, TMA batch coordinate
  int sq, sk, base_q, base_k;
  int diag0, nb_lo, nb_hi, n_blocks;  // diagonal offset of row m0, the band's K/V blocks [nb_lo, nb_hi), visited
  const unsigned char* cls;  // kSparse: the query block's row of block classes (null: none, every block masked)
  int last;                  // kSparse: the last visited block (the cursor's start)
};

}  // namespace fa_wg

extern "C" __global__ void __launch_bounds__(fa_wg::kThreads, 1)
    fa_kernel(const __grid_constant__ FaFwdArgs args FA_USER_PARAM, const __grid_constant__ FaFwdTma tma) {
  using namespace fa_wg;
  extern __shared__ __align__(1024) unsigned char fa_smem_raw[];
  typedef unsigned short E;

  const int tid = (int)threadIdx.x;
  const int mblocks = (args.seqlen_q + kBM - 1) / kBM;
  // kHeadOrder: units of two tiles of one cost, round robin (pair_units, tile_at)
  const int heads_batch_all = args.heads_q * args.batch;
  const int pair_units = (mblocks & 1) ? mblocks * ((heads_batch_all + 1) / 2) : (mblocks / 2) * heads_batch_all;
  const int total = !kPersist ? 1
                    : (kMasked && kHeadOrder)
                        ? 2 * (int)gridDim.x * ((pair_units + (int)gridDim.x - 1) / (int)gridDim.x)
                        : mblocks * heads_batch_all;
  const int t_first = kPersist ? (int)blockIdx.x : 0, t_step = kPersist ? (int)gridDim.x : 1;
  // Work tile t: (query block, head, batch). Non-persistent: the block's own coordinates (x reversed for masked
  // problems: the longest blocks first). Persistent: unmasked t = (b * heads_q + h) * mblocks + x (a head's query
  // blocks run side by side and share its K/V in L2); masked t = x * heads_q * batch + b * heads_q + h, x reversed:
  // the tile loop deals the longest query blocks of every head first and each CTA's stride of t meets every length
  // alike, so the CTAs finish together (the (b, h)-major order gave some CTAs only the long blocks of a causal band);
  // the odd waves of that round robin (whole waves of gridDim.x tiles) run in reverse, so a CTA that drew one of the
  // longer tiles of a wave draws one of the shorter of the next (tile lengths fall along t; H200 probe: 1-5% at 4k-8k).
  // Masked with kPersistent 2 (pairs): a unit is two tiles whose bands add up to one length, query blocks x and
  // mblocks - 1 - x of one (batch, head) (odd mblocks: also the middle blocks of two (batch, head)s), units in
  // (batch, head)-major order; CTA c runs unit c + i * gridDim.x as its tiles 2i and 2i + 1 (t = c + k * gridDim.x,
  // unit index from k / 2, the half from k & 1; t runs to 2 gridDim.x times the units' waves, tiles past the last
  // unit are empty). Every unit costs the same, so the CTAs stay in step, and a wave holds every query block of
  // about 2 gridDim.x / mblocks (batch, head)s: their K / V stay in L2 (the query-block-major order streams each
  // head's K / V from DRAM once per query block).
  // n_blocks is the band's block count; kSparse tiles then count their visited blocks (count_visits, warp-wide).
  auto tile_at = [&](int t) {
    FaTile T;
    int xb, h, b;
    if constexpr (kPersist) {
      int hb;
      if constexpr (kMasked && kHeadOrder) {
        const int k = t / t_step, half = k & 1;
        const int u = t - k * t_step + (k >> 1) * t_step;  // the unit
        xb = -1;  // none: past the last unit (m_block = mblocks, a tile past the sequence)
        hb = 0;
        if ((mblocks & 1) == 0) {
          const int per = mblocks / 2, j = u % per;
          hb = u / per;
          xb = half ? mblocks - 1 - j : j;
        } else {
          const int pf = (mblocks - 1) / 2, g = u / mblocks, r = u - g * mblocks;
          if (r < 2 * pf) {
            hb = 2 * g + r / pf;
            xb = half ? mblocks - 1 - r % pf : r % pf;
          } else {  // the middle query blocks of (batch, head)s 2g and 2g + 1
            hb = 2 * g + half;
            xb = pf;
          }
        }
        if (u >= pair_units || hb >= heads_batch_all) {
          xb = -1;
          hb = 0;
        }
      } else if constexpr (kMasked) {
        const int heads_batch = args.heads_q * args.batch;
        const int w = t / t_step;
        if ((w & 1) && (w + 1) * t_step <= total) t = w * t_step + (t_step - 1 - (t - w * t_step));
        xb = t / heads_batch;
        hb = t - xb * heads_batch;
      } else {
        xb = t % mblocks;
        hb = t / mblocks;
      }
      h = hb % args.heads_q;
      b = hb / args.heads_q;
    } else {
      xb = (int)blockIdx.x;
      h = (int)blockIdx.y;
      b = (int)blockIdx.z;
    }
    const int m_block = kMasked ? mblocks - 1 - xb : xb;
    T.h = h;
    T.b = b;
    T.mb = m_block;
    T.m0 = m_block * kBM;
    if constexpr (fa_cfg::kVarlen) {
      const int q0 = args.cu_seqlens_q[b], k0 = args.cu_seqlens_k[b];
      T.sq = args.cu_seqlens_q[b + 1] - q0;
      T.sk = args.cu_seqlens_k[b + 1] - k0;
      T.base_q = q0;
      T.base_k = k0;
    } else {
      T.sq = args.seqlen_q;
      T.sk = args.seqlen_k;
      T.base_q = 0;
      T.base_k = 0;
    }
    T.g = h / args.group;
    T.bt = fa_cfg::kVarlen ? 0 : b;  // TMA batch coordinate (varlen: packed tokens, batch dim of size 1)
    // key range of the whole block; K/V blocks outside it are never loaded
    T.diag0 = T.m0 + T.sk - T.sq;
    const int last_row = min(T.m0 + kBM, T.sq) - 1;
    int key_lo = 0, key_hi = T.sk;
    if constexpr (fa_cfg::kMask != 0) {
      if (args.win_left >= 0) key_lo = max(0, T.diag0 - args.win_left);
      if (args.win_right >= 0) key_hi = min(T.sk, last_row + T.sk - T.sq + args.win_right + 1);
    }
    T.nb_lo = key_lo / kBN;
    T.nb_hi = key_hi > key_lo ? (key_hi + kBN - 1) / kBN : T.nb_lo;
    T.n_blocks = T.m0 < T.sq ? T.nb_hi - T.nb_lo : 0;
    T.cls = nullptr;
    T.last = T.nb_hi - 1;
    if constexpr (kSparse) {
      if (args.blk_cls != nullptr)
        T.cls = args.blk_cls + (long long)b * args.blk_cls_sb + (long long)h * args.blk_cls_sh +
                (long long)m_block * args.blk_nkb;
    }
    return T;
  };
  // kSparse: the visited blocks of the band and the last of them (common/blk_visit.cuh; warp-collective, the same
  // in every warp).
  // kSparse: the sub-tile record (mask_blocks; fa_args.cuh: kC code words, then the slot) of block nb of the class
  // row cls_row (the tile index from the class pointer), or null without records.
  auto sub_words = [&](const unsigned char* cls_row, int nb) -> const unsigned* {
    if (!kSparse || cls_row == nullptr || args.blk_sub == nullptr) return nullptr;
    return args.blk_sub + ((long long)(cls_row - args.blk_cls) + nb) * (kC + 1);
  };
  auto count_visits = [&](FaTile& T) {
    if constexpr (kSparse) {
      if (T.n_blocks > 0) {
        const FaBlkSpan sp = fa_blk_span(T.cls, T.nb_lo, T.nb_hi);
        T.n_blocks = sp.count;
        T.last = sp.last;
      }
    }
  };
  if constexpr (!kPersist) {
    if (tile_at(0).m0 >= tile_at(0).sq) return;  // uniform: the whole CTA leaves
    if constexpr (kSparse) {
      // the tile's row of classes on its way to L1 before the barriers are set up (the walks below read it); the
      // first warp's lanes a line each
      if (tid < 32) {
        const FaTile T0 = tile_at(0);
        if (T0.cls != nullptr && T0.nb_lo + 128 * tid < T0.nb_hi) fa_prefetch_l1(T0.cls + T0.nb_lo + 128 * tid);
      }
    }
  }

  {  // the host must launch with fa_wg::kSmemBytes of dynamic shared memory (formula at the top of this file)
    unsigned dyn;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn));
    if (dyn < (unsigned)kSmemBytes) __trap();
  }
  const unsigned sbase = (fa_sm90_smem(fa_smem_raw) + 1023u) & ~1023u;
  const unsigned sQ = sbase, sK = sbase + kOffK, sV = sbase + kOffV, sBar = sbase + kOffBar;
  const unsigned sBits = sbase + kOffBits, sRec = sbase + kOffRec;
  auto q_full = [&](int i) { return sBar + 8u * i; };         // Q buffer i landed
  auto q_empty = [&](int i) { return sBar + 8u * (2 + i); };  // Q buffer i free again (persistent)
  auto k_full = [&](int s) { return sBar + 8u * (4 + s); };
  auto v_full = [&](int s) { return sBar + 8u * (4 + kStages + s); };
  auto k_empty = [&](int s) { return sBar + 8u * (4 + 2 * kStages + s); };
  auto v_empty = [&](int s) { return sBar + 8u * (4 + 3 * kStages + s); };

  if (tid == 0) {
    for (int i = 0; i < 2; ++i) {
      fa_mbar_init(q_full(i), 1);
      fa_mbar_init(q_empty(i), 4 * kC);  // one arrival per consumer warp
    }
    for (int s = 0; s < kStages; ++s) {
      fa_mbar_init(k_full(s), 1);
      fa_mbar_init(v_full(s), 1);
      fa_mbar_init(k_empty(s), 4 * kC);
      fa_mbar_init(v_empty(s), 4 * kC);
    }
    fa_mbar_init_fence();
  }
  __syncthreads();

  const int wg = tid >> 7;
  if (wg == 0) {
    // ---------------- producer warpgroup: one thread issues every TMA copy ----------------
    fa_setmaxnreg_dec<kRegP>();
    // kSparse: the whole first warp walks the classes (ballots), its lane 0 issues; else thread 0 alone.
    if (kSparse ? tid < 32 : tid == 0) {
      const bool lead = !kSparse || tid == 0;
      if (lead) {
        fa_tma_prefetch(&tma.q);
        fa_tma_prefetch(&tma.k);
        fa_tma_prefetch(&tma.v);
      }
      int ks = 0, vs = 0;  // K / V ring positions and phases, continued across tiles
      unsigned kph = 0, vph = 0;
      int qn = 0;  // tiles whose Q was loaded: buffer qn % kQBuf, phase (qn / kQBuf) & 1
      for (int t = t_first; t < total; t += t_step) {
        FaTile T = tile_at(t);
        // Non-persistent kSparse: Q goes out before the class walk (the walk's round trip runs under Q's copy; a
        // tile the classes leave empty still gets its Q, which the consumers wait for before staging O there).
        if constexpr (!kEarlyQ) count_visits(T);
        if (T.n_blocks == 0) continue;
        const int qb = qn % kQBuf;
        const unsigned qph = (unsigned)(qn / kQBuf) & 1u;
        ++qn;
        if constexpr (kPersist) fa_mbar_wait(q_empty(qb), qph ^ 1u);  // every consumer warp is done with it
        if (lead) {
          fa_mbar_arrive_expect_tx(q_full(qb), (unsigned)kQBytes);
#pragma unroll
          for (int c = 0; c < kDp / 64; ++c)
            fa_tma_load_4d(sQ + (unsigned)(qb * kR0 + c * kBM * 128), &tma.q, q_full(qb), c * 64, T.base_q + T.m0, T.h,
                           T.bt);
        }
        // K of block it+1 is issued before V of block it: the consumers need K_{j+1} (S = Q K^T) before V_j.
        // kSparse: lane l <= kC holds word l of the next partial block's record (block_of); load_k stages it and the
        // slot's hidden pairs in K's stage, on K's full barrier.
        unsigned recw = 0u;
        auto load_k = [&](int entry) {
          const int kn = T.base_k + (entry >> 1) * kBN;
          fa_mbar_wait(k_empty(ks), kph ^ 1u);
          // K's copy goes out first; a partial block's record (whose load may still be in flight) and slot follow,
          // and the arrival comes last, after the record's stores (kSparse), so the phase waits for all of them
          const bool staged = kSparse && (entry & 1) == 0;
          if (lead) {
            if (staged) fa_mbar_expect_tx(k_full(ks), (unsigned)kKBytes);
            else fa_mbar_arrive_expect_tx(k_full(ks), (unsigned)kKBytes);
#pragma unroll
            for (int c = 0; c < kDp / 64; ++c)
              fa_tma_load_4d(sK + (unsigned)(ks * kKBytes + c * kBN * 128), &tma.k, k_full(ks), c * 64, kn, T.g, T.bt);
          }
          if constexpr (kSparse) {
            if (staged) {
              const unsigned slot = __shfl_sync(0xffffffffu, recw, kC);
              if (tid <= kC) st_shared_b32(sRec + (unsigned)(ks * kRecBytes + 4 * tid), recw);
              __syncwarp();
              if (lead) {
                if (slot != 0xffffffffu) {
                  fa_mbar_expect_tx(k_full(ks), (unsigned)kBitsBytes);
                  fa_bulk_load(sBits + (unsigned)(ks * kBitsBytes), args.blk_bits + 64 + (size_t)slot * (kBM * 8),
                               (unsigned)kBitsBytes, k_full(ks));
                }
                fa_mbar_arrive(k_full(ks));
              }
            }
          }
          if (++ks == kStages) {
            ks = 0;
            kph ^= 1u;
          }
        };
        auto load_v = [&](int nb) {
          const int kn = T.base_k + nb * kBN;
          fa_mbar_wait(v_empty(vs), vph ^ 1u);
          if (lead) {
            fa_mbar_arrive_expect_tx(v_full(vs), (unsigned)kVBytes);
#pragma unroll
            for (int c = 0; c < kDVp / 64; ++c)
              fa_tma_load_4d(sV + (unsigned)(vs * kVBytes + c * kBN * 128), &tma.v, v_full(vs), c * 64, kn, T.g, T.bt);
          }
          if (++vs == kStages) {
            vs = 0;
            vph ^= 1u;
          }
        };
        // The entry (n_block << 1) | full of visit it: the band from its last block down, or the next classified one
        // (kSparse; a partial block's record words go to recw, lane l <= kC word l: its codes and slot, defaults
        // without records); -1 past the last visit.
        FaBlkCursor cur;
        if constexpr (kSparse) cur.start(T.cls, T.nb_lo, T.last + 1);
        auto block_of = [&](int it) {
          if constexpr (kSparse) {
            const int entry = cur.next();
            if (entry >= 0 && (entry & 1) == 0) {
              const unsigned* w = sub_words(T.cls, entry >> 1);
              recw = tid < kC ? 0x55555555u : 0xffffffffu;
              if (w != nullptr && tid <= kC && (tid < kC || args.blk_bits != nullptr)) recw = w[tid];
            }
            return entry;
          }
          return it < T.n_blocks ? (T.nb_hi - 1 - it) << 1 : -1;
        };
        int e = block_of(0);
        if (e < 0) continue;
        load_k(e);
        for (int it = 1; e >= 0; ++it) {
          const int e_next = block_of(it);
          if (e_next >= 0) load_k(e_next);
          load_v(e >> 1);
          e = e_next;
        }
      }
    }
  } else {
    // ---------------- consumer warpgroups ----------------
    fa_setmaxnreg_inc<kRegC>();
    const int cw = wg - 1;  // consumer index: rows 64 cw .. 64 cw + 63 of the block
    const int ltid = tid & 127, warp = ltid >> 5, lane = tid & 31;
    const int gq = lane >> 2, tq = lane & 3;
    const int rbase = cw * 64 + warp * 16 + gq;       // block row of this thread's first accumulator row (+8: second)
    const float mul = kFeat ? 1.f : args.scale_log2;  // feature-path scores are already in log2 units
    const unsigned long long dq00 = fa_wg_desc_sw128(sQ + (unsigned)(cw * 64 * 128), 16, 1024);
    const unsigned long long dk0 = fa_wg_desc_sw128(sK, 16, 1024);
    const unsigned long long dv0 = fa_wg_desc_sw128(sV, kBN * 128, 1024);
    auto release = [&](unsigned bar) {
      if (lane == 0) fa_mbar_arrive(bar);
    };
    // Ping-pong: consumer cw issues its GEMMs after bar.sync(4 + cw) and hands the turn to the next one; the
    // hand-overs continue across tiles (every consumer issues the same GEMM sequence).
    auto pp_sync = [&]() {
      if constexpr (kPP) fa_bar_sync(4 + cw, 256);
    };
    auto pp_arrive = [&]() {
      if constexpr (kPP) {
        // the next consumer's barrier, from a fresh read of the thread index: a value kept for the whole kernel was
        // the one ptxas spilled with 3 consumers at head dim 64 (user code with a built-in mask)
        unsigned t;
        asm volatile("mov.u32 %0, %%tid.x;" : "=r"(t));
        fa_bar_arrive(4 + (int)(t >> 7) % kC, 256);
      }
    };
    if constexpr (kPP) {
      if (cw == kC - 1) fa_bar_arrive(4, 256);  // consumer 0 goes first
    }
    int kst = 0, vst = 0;  // K / V ring positions and phases, continued across tiles
    unsigned kph = 0, vph = 0;
    int qn = 0;  // tiles with a Q load, as counted by the producer
    // TMA-stored O (o_flush): the Q buffer whose release by warp 0 waits until the bulk store has read it (-1: none).
    // Warps 1-3 release a buffer as the store is issued; thread 0 waits for the store's reads once this consumer's
    // next GEMM is issued (the store reads under it), else at the next epilogue or the end, then arrives for warp 0.
    int o_pending = -1;
    auto o_flush = [&]() {
      if constexpr (kPersist && kStaged) {
        if (o_pending >= 0) {
          if (ltid == 0) {
            fa_tma_store_wait_read();
            fa_mbar_arrive(q_empty(o_pending));
          }
          o_pending = -1;
        }
      }
    };
    if (!fa_cfg::kVarlen && kStaged && tid == 128) fa_tma_prefetch(&tma.o);
    auto adv_k = [&]() {
      if (++kst == kStages) {
        kst = 0;
        kph ^= 1u;
      }
    };
    auto adv_v = [&]() {
      if (++vst == kStages) {
        vst = 0;
        vph ^= 1u;
      }
    };

    for (int t = t_first; t < total; t += t_step) {
      FaTile T = tile_at(t);
      if (T.m0 >= T.sq) continue;
      const int band = T.n_blocks;
      count_visits(T);
      if constexpr (kEarlyQ) {
        if (T.n_blocks == 0 && band > 0) fa_mbar_wait(q_full(0), 0u);  // the producer's Q copy, before O is staged
      }
      const int m0 = T.m0, sq = T.sq, sk = T.sk, h = T.h, b = T.b;
      const int qb = qn % kQBuf;  // this tile's Q buffer (valid when n_blocks > 0)
      const unsigned qph = (unsigned)(qn / kQBuf) & 1u;
      const unsigned sQt = sQ + (unsigned)(qb * kR0);
      if (T.n_blocks > 0) ++qn;
      float o[kNV / 2];
#pragma unroll
      for (int i = 0; i < kNV / 2; ++i) o[i] = 0.f;
      float row_m[2] = {FA_WG_NEG_INF, FA_WG_NEG_INF}, row_l[2] = {0.f, 0.f};

      if (T.n_blocks > 0) {
        // kTrim: this consumer's share of the band. Its rows see keys below hi_c (its last row's right bound; none
        // for rows past the sequence), so the n_skip blocks at the top of the band, visited first, hold nothing for
        // it: they are passed over without GEMMs (the skip loop below).
        int n_skip = 0;
        if constexpr (kTrim) {
          int hi_c = sk;
          if constexpr (fa_cfg::kMask != 0) {
            if (args.win_right >= 0) hi_c = min(sk, m0 + cw * 64 + 63 + sk - sq + args.win_right + 1);
          }
          if (m0 + cw * 64 >= sq) hi_c = 0;
          n_skip = T.nb_hi - max(min(T.nb_hi, (max(hi_c, 0) + kBN - 1) / kBN), T.nb_lo);
          // broadcast, so that ptxas knows the count warp-uniform: the ring positions it advances then stay in
          // uniform registers (computed per thread, the main loop's descriptor arithmetic moved to the vector
          // datapath, 46 more R2UR, and ran 3-7% slower)
          n_skip = __shfl_sync(0xffffffffu, n_skip, 0);
        }
        const int n_blocks = T.n_blocks - n_skip, nb_hi = T.nb_hi - n_skip, diag0 = T.diag0;
        // The entry (n_block << 1) | full of visit it: the band from its last block down (full never set: the
        // geometry decides the masking), or the next classified block (kSparse; common/blk_visit.cuh).
        FaBlkCursor cur;
        if constexpr (kSparse) cur.start(T.cls, T.nb_lo, T.last + 1);
        auto entry_of = [&](int it) {
          if constexpr (kSparse) return cur.next();
          return (nb_hi - 1 - it) << 1;
        };
        // kSparse: what the softmax masks a partial block with, read from the block's K stage (where the producer
        // staged the record and the slot's hidden pairs) before that stage is released: this warp's 8 code bits and,
        // when the tile has a slot, this lane's word of each key group (common/fwd_score.cuh: fa_wg_user_mask).
        auto mask_words = [&](int entry, int stage) {
          FaWgMaskWords m{0x55u, false, {0u, 0u, 0u, 0u}};
          if constexpr (kSparse) {
            if ((entry & 1) == 0) {
              const unsigned rec = sRec + (unsigned)(stage * kRecBytes);
              m.codes = (ld_shared_b32(rec + 4u * cw) >> (8 * warp)) & 0xffu;
              m.pre = ld_shared_b32(rec + 4u * kC) != 0xffffffffu;
              if (m.pre) {
                const unsigned w0 = sBits + (unsigned)(stage * kBitsBytes + (cw * 4 + warp) * 512 + lane * 4);
#pragma unroll
                for (int g = 0; g < 4; ++g) m.w[g] = ld_shared_b32(w0 + 128u * g);
              }
            }
          }
          return m;
        };
        float slope = 0.f;
        if constexpr (fa_cfg::kHasAlibi) slope = args.alibi[h] * 1.4426950408889634f;
        const E* bias_g = nullptr;
        if constexpr (fa_cfg::kHasBias)
          bias_g = (const E*)args.bias + (long long)b * args.bias_sb + (long long)h * args.bias_sh;
        const unsigned long long dq0 = dq00 + (unsigned)((qb * kR0) >> 4);

        // S = Q K^T of the K block in `slot` (issued and committed, not waited).
        auto gemm_s = [&](float(&s)[kBN / 2], int slot) {
          fa_wg_fence();
#pragma unroll
          for (int ks = 0; ks < kDk / 16; ++ks) {
            const unsigned qo = (unsigned)((ks >> 2) * kBM * 128 + (ks & 3) * 32);
            const unsigned ko = (unsigned)(slot * kKBytes + (ks >> 2) * kBN * 128 + (ks & 3) * 32);
            FaWg<kBN>::ss<fa_cfg::kDtype>(s, dq0 + (qo >> 4), dk0 + (ko >> 4), ks > 0 ? 1 : 0);
          }
          fa_wg_commit();
        };
        // O += P V of the V block in `slot` (issued and committed, not waited).
        auto gemm_o = [&](const unsigned(&p)[kBN / 16][4], int slot) {
          fa_wg_fence();
#pragma unroll
          for (int kk = 0; kk < kBN / 16; ++kk) {
            const unsigned vo = (unsigned)(slot * kVBytes + kk * 16 * 128);
            FaWg<kNV>::rs<fa_cfg::kDtype>(o, p[kk], dv0 + (vo >> 4), 1);
          }
          fa_wg_commit();
        };
        // Scores -> probabilities in place (base 2), running max / sum, rescale factors of O.
        // entry: (n_block << 1) | full (entry_of).
        auto softmax = [&](float(&s)[kBN / 2], int entry, const FaWgMaskWords& mw, float(&corr)[2]) {
          const int kn = (entry >> 1) * kBN;
          if constexpr (kFeat) {
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
              const int i = m0 + rbase + hh * 8;
#pragma unroll
              for (int jt = 0; jt < kBN / 8; ++jt)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                  const int j = kn + jt * 8 + tq * 2 + e;
                  s[jt * 4 + hh * 2 + e] = fa_feature_score(s[jt * 4 + hh * 2 + e], args, bias_g, slope, b, h, i, j, sq,
                                                            sk, FA_USER_ARGS);  // common/fwd_score.cuh
                }
            }
          }
          bool need_mask;
          if constexpr (kSparse) {
            need_mask = (entry & 1) == 0;  // a classified block: full ones skip every mask (built-in, keys, user)
          } else {
            need_mask = !fa_cfg::kEvenK && kn + kBN > sk;
            if constexpr (fa_cfg::kMask != 0) {
              if (args.win_left >= 0) need_mask |= kn < m0 + kBM - 1 + sk - sq - args.win_left;
              if (args.win_right >= 0) need_mask |= kn + kBN - 1 > diag0 + args.win_right;
            }
          }
          if (need_mask) {
            if constexpr (fa_cfg::kHasMaskMod) {
              // user code only on the key groups of this warp's rows that the mask cuts (common/fwd_score.cuh)
              fa_wg_user_mask<kBN / 8>(s, mw, b, h, m0 + rbase, kn + tq * 2, sq, sk, args.win_left, args.win_right,
                                       FA_USER_ARGS);
            } else {
#pragma unroll
              for (int hh = 0; hh < 2; ++hh) {
                // keys [lo, hi) are visible; only a window (kMask 2) has a left bound, so causal and unmasked
                // blocks compare one bound per element
                const int i = m0 + rbase + hh * 8;
                int lo = 0, hi = sk;
                if constexpr (fa_cfg::kMask == 2) {
                  if (args.win_left >= 0) lo = i + sk - sq - args.win_left;
                }
                if constexpr (fa_cfg::kMask != 0) {
                  if (args.win_right >= 0) hi = min(hi, i + sk - sq + args.win_right + 1);
                }
                lo -= kn + tq * 2;  // compare the column offset inside the block
                hi -= kn + tq * 2;
#pragma unroll
                for (int jt = 0; jt < kBN / 8; ++jt)
#pragma unroll
                  for (int e = 0; e < 2; ++e) {
                    const int jj = jt * 8 + e;
                    if ((fa_cfg::kMask == 2 && jj < lo) || jj >= hi) s[jt * 4 + hh * 2 + e] = FA_WG_NEG_INF;
                  }
              }
            }
          }
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            // row max and row sum as trees over the kBN / 8 column pairs (short dependency chains)
            float t[kBN / 8];
#pragma unroll
            for (int jt = 0; jt < kBN / 8; ++jt) t[jt] = fmaxf(s[jt * 4 + hh * 2], s[jt * 4 + hh * 2 + 1]);
#pragma unroll
            for (int w = 1; w < kBN / 8; w *= 2)
#pragma unroll
              for (int i = 0; i + w < kBN / 8; i += 2 * w) t[i] = fmaxf(t[i], t[i + w]);
            float mx = fmaxf(row_m[hh], t[0]);
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float ms = mx == FA_WG_NEG_INF ? 0.f : mx * mul;
            corr[hh] = fa_exp2(row_m[hh] * mul - ms);
            row_m[hh] = mx;
#pragma unroll
            for (int jt = 0; jt < kBN / 8; ++jt) {
              const float p0 = fa_exp2(fmaf(s[jt * 4 + hh * 2], mul, -ms));
              const float p1 = fa_exp2(fmaf(s[jt * 4 + hh * 2 + 1], mul, -ms));
              s[jt * 4 + hh * 2] = p0;
              s[jt * 4 + hh * 2 + 1] = p1;
              t[jt] = p0 + p1;
            }
#pragma unroll
            for (int w = 1; w < kBN / 8; w *= 2)
#pragma unroll
              for (int i = 0; i + w < kBN / 8; i += 2 * w) t[i] += t[i + w];
            row_l[hh] = row_l[hh] * corr[hh] + t[0];
          }
        };
        auto convert = [&](unsigned(&p)[kBN / 16][4], const float(&s)[kBN / 2]) {
#pragma unroll
          for (int kk = 0; kk < kBN / 16; ++kk) {
            p[kk][0] = pack2(s[kk * 8 + 0], s[kk * 8 + 1]);
            p[kk][1] = pack2(s[kk * 8 + 2], s[kk * 8 + 3]);
            p[kk][2] = pack2(s[kk * 8 + 4], s[kk * 8 + 5]);
            p[kk][3] = pack2(s[kk * 8 + 6], s[kk * 8 + 7]);
          }
        };
        auto rescale_o = [&](const float(&corr)[2]) {
#pragma unroll
          for (int jt = 0; jt < kNV / 8; ++jt) {
            o[jt * 4 + 0] *= corr[0];
            o[jt * 4 + 1] *= corr[0];
            o[jt * 4 + 2] *= corr[1];
            o[jt * 4 + 3] *= corr[1];
          }
        };

        float s[kBN / 2];
        unsigned p[kBN / 16][4];
        float corr[2];
        auto release_q = [&]() {  // single Q buffer, persistent: Q is free after the last S = Q K^T
          if constexpr (kPersist && !kStaged) release(q_empty(qb));
        };
        fa_mbar_wait(q_full(qb), qph);
        // kTrim's skipped blocks: each stage released after its full barrier (so the release counts toward this
        // round, never the one before), the ping-pong turns of the block passed on (kOv: one per block, else two).
        for (int k = 0; k < n_skip; ++k) {
          fa_mbar_wait(k_full(kst), kph);
          pp_sync();
          pp_arrive();
          if constexpr (!kOv) {
            pp_sync();
            pp_arrive();
          }
          release(k_empty(kst));
          adv_k();
          fa_mbar_wait(v_full(vst), vph);
          release(v_empty(vst));
          adv_v();
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
          fa_mbar_wait(k_full(kst), kph);
          pp_sync();
          gemm_s(s, kst);
          pp_arrive();
          o_flush();  // the last tile's O store reads under this GEMM
          fa_wg_wait<0>();
          fa_wg_fence_regs(s);
          const FaWgMaskWords mw0 = mask_words(entry0, kst);
          release(k_empty(kst));
          adv_k();
          if (n_blocks == 1) release_q();
          softmax(s, entry0, mw0, corr);
          convert(p, s);
          for (int it = 1; it < n_blocks; ++it) {
            const int entry = entry_of(it);
            fa_mbar_wait(k_full(kst), kph);
            pp_sync();
            gemm_s(s, kst);
            fa_mbar_wait(v_full(vst), vph);
            gemm_o(p, vst);
            pp_arrive();
            fa_wg_wait<1>();
            fa_wg_fence_regs(s);
            const FaWgMaskWords mw = mask_words(entry, kst);
            release(k_empty(kst));
            adv_k();
            if (it == n_blocks - 1) release_q();
            softmax(s, entry, mw, corr);
            // ptxas hoists wait_group 0 to the top of the basic block holding the softmax (SASS: every MUFU.EX2
            // after the WARPGROUP.DEPBAR), which serialises the softmax behind P_j V_j. The wait loop for the next
            // K block (needed next anyway) ends that basic block, so the softmax stays under P_j V_j.
            if (it + 1 < n_blocks) fa_mbar_wait(k_full(kst), kph);
            fa_wg_wait<0>();
            fa_wg_fence_regs(o);
            release(v_empty(vst));
            adv_v();
            rescale_o(corr);  // O (through block it-1) to the new row maxima; no wgmma in flight here
            convert(p, s);
          }
          fa_mbar_wait(v_full(vst), vph);
          pp_sync();
          gemm_o(p, vst);
          pp_arrive();
          fa_wg_wait<0>();
          fa_wg_fence_regs(o);
          release(v_empty(vst));
          adv_v();
        } else {
          for (int it = 0; it < n_blocks; ++it) {
            const int entry = entry_of(it);
            fa_mbar_wait(k_full(kst), kph);
            pp_sync();
            gemm_s(s, kst);
            pp_arrive();
            o_flush();  // the last tile's O store reads under this GEMM (it 0; none pending after)
            fa_wg_wait<0>();
            fa_wg_fence_regs(s);
            const FaWgMaskWords mw = mask_words(entry, kst);
            release(k_empty(kst));
            adv_k();
            if (it == n_blocks - 1) release_q();
            softmax(s, entry, mw, corr);
            rescale_o(corr);
            convert(p, s);
            fa_mbar_wait(v_full(vst), vph);
            pp_sync();
            gemm_o(p, vst);
            pp_arrive();
            fa_wg_wait<0>();
            fa_wg_fence_regs(o);
            release(v_empty(vst));
            adv_v();
          }
        }
      }

      // ---------------- epilogue: O /= l, LSE, O to global memory ----------------
      o_flush();  // a tile without GEMMs: the store before it is read before this one is staged
      float inv[2];
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        float l = row_l[hh];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        inv[hh] = l > 0.f ? 1.f / l : 0.f;
        const int r = rbase + hh * 8;
        if constexpr (fa_cfg::kHasLse) {
          if (args.lse != nullptr && tq == 0 && m0 + r < sq) {
            const float mx = row_m[hh];
            const float lse =
                (l > 0.f && mx != FA_WG_NEG_INF) ? (mx * mul + __log2f(l)) * 0.6931471805599453f : FA_WG_NEG_INF;
            args.lse[(long long)b * args.lse_sb + (long long)h * args.lse_sh + (long long)(T.base_q + m0 + r)] = lse;
          }
        }
      }
      E* og = (E*)args.o + (fa_cfg::kVarlen ? 0ll : (long long)b * args.o_sb) + (long long)T.base_q * args.o_ss +
              (long long)h * args.o_sh;
      if (!kStaged || (kPersist && T.n_blocks == 0)) {
        // straight from the accumulators (single-buffer persistent: the Q tile is being refilled; or a fully masked
        // tile, which owns no Q buffer)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          const int r = rbase + hh * 8;
          if (m0 + r < sq) {
            unsigned* orow = (unsigned*)(og + (long long)(m0 + r) * args.o_ss + tq * 2);
#pragma unroll
            for (int jt = 0; jt < kNV / 8; ++jt)
              if (jt * 8 < kDV) orow[jt * 4] = pack2(o[jt * 4 + hh * 2] * inv[hh], o[jt * 4 + hh * 2 + 1] * inv[hh]);
          }
        }
      } else {
        // staged in this warpgroup's rows of the Q tile (swizzled like it: a 64-column chunk of 64 rows is the TMA box
        // of the O map), then one TMA store per chunk from thread 0 (fixed length: the map clips rows past seqlen_q
        // and columns past head_dim_v), or 16-byte stores (varlen: a box would run into the next sequence's rows)
        constexpr bool o_tma = !fa_cfg::kVarlen;
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          const int r = rbase + hh * 8;
          const unsigned rowaddr = sQt + (unsigned)(r * 128);
#pragma unroll
          for (int jt = 0; jt < kNV / 8; ++jt) {
            if (jt * 8 < kDV) {
              const unsigned addr =
                  rowaddr + (unsigned)((jt >> 3) * kBM * 128) + (unsigned)((((jt & 7) ^ (r & 7)) << 4) + tq * 4);
              st_shared_b32(addr, pack2(o[jt * 4 + hh * 2] * inv[hh], o[jt * 4 + hh * 2 + 1] * inv[hh]));
            }
          }
        }
        if constexpr (o_tma) fa_fence_proxy_async();  // the staged rows feed the TMA store (async proxy)
        fa_bar_sync(1 + cw, 128);
        if constexpr (o_tma) {
          if (ltid == 0) {
#pragma unroll
            for (int c = 0; c < kDVp / 64; ++c)
              fa_tma_store_4d(&tma.o, sQt + (unsigned)(c * kBM * 128 + cw * 64 * 128), c * 64, m0 + cw * 64, h, T.bt);
            fa_tma_store_commit();
            if constexpr (!kPersist) fa_tma_store_wait_read();  // the CTA's shared memory outlives the reads
          }
          if constexpr (kPersist) {  // warps 1-3 release the buffer now, warp 0 once the store has read it
            if (warp == 0) o_pending = qb;
            else release(q_empty(qb));
          }
        } else {
          constexpr int kCh = kDV / 8;  // 16-byte chunks per row
#pragma unroll
          for (int it = 0; it < (64 * kCh + 127) / 128; ++it) {
            const int idx = ltid + it * 128;
            if ((64 * kCh) % 128 == 0 || idx < 64 * kCh) {
              const int r = cw * 64 + idx / kCh, ch = idx % kCh;
              if (m0 + r < sq) {
                const uint4 v =
                    ld_shared_v4(sQt + (unsigned)((ch >> 3) * kBM * 128 + r * 128 + (((ch & 7) ^ (r & 7)) << 4)));
                *(uint4*)(og + (long long)(m0 + r) * args.o_ss + ch * 8) = v;
              }
            }
          }
          if constexpr (kPersist) {  // double-buffered: the buffer is free once this warp has read its O rows
            fa_fence_proxy_async();
            __syncwarp();
            release(q_empty(qb));
          }
        }
      }
    }
    o_flush();  // the last tile's store read before the CTA's shared memory goes
    if constexpr (kPP) {
      if (cw == 0) fa_bar_sync(4, 256);  // the last hand-over from consumer kC-1
    }
  }
}

#endif  // FA_FWD_WGMMA_CUH
