// bwd_mma.cuh -- the tensor-core backward (FlashAttention-2 backward, seed 003 step 2), fp16/bf16, sm_80+.
//
// One CTA per (key block n of kBlockN keys, kv head g, batch b): blockIdx.x, .y, .z, except that under a causal mask
// or a mask_mod (fa_bwd_cta_order) the last args.lpt_tail (g, b) pairs go key-block-major, heaviest blocks first
// (fa_bwd_cta; every pair with a mask_mod).
// K_n, V_n stay in shared memory; the CTA loops over the query heads h of g's GQA group and, for each, over the query
// blocks m (kBlockM rows) whose tile meets the mask band (cyclically from a block rotated by n, so CTAs of one head
// add into different dQ rows at a time; in order in the deterministic mode), with Q_m, dO_m, LSE_m, Delta_m
// (bwd_pre) landing in shared memory by cp.async (double-buffered when kStages == 2). Per tile, with scores
// recomputed from the LSE:
//   S^T = K_n Q_m^T,  dP^T = V_n dO_m^T                                  (GEMM 1)
//   s = scale*S -> softcap c*tanh(s/c) (t) -> + bias - slope|i+Sk-Sq-j|;  P = exp(s - lse_i) (0 where hidden)
//   dS' = P (dP - Delta_i) (1 - t^2)                                      (P^T, dS'^T stored to shared memory)
//   dQ'_m += dS' K_n  -> float32 red.add into args.dq_accum (8 x 8 tiled) (GEMM 3)
//     (where registers allow, fa_bwd_interleave: the red.adds are spread over GEMM 2's k steps, not one burst)
//   dV_n += P^T dO_m,  dK_n += dS'^T Q_m                                  (GEMM 2; float32 registers for the CTA)
// At the end dK = scale * dK_n and dV_n are written in the dtype (GQA summed in-CTA: no float32 dK/dV buffers);
// bwd_post writes dq = scale * dQ'. Fully masked rows (lse = -inf), rows past seqlen_q and keys past seqlen_k give
// P = 0; masking code runs only for tiles that cross the band edge or the end of the keys.
// Warp layouts (bwd_mma_tiling.cuh, shared with the host predicate): each GEMM gives every warp a tile of several
// m16 x n16 blocks (e.g. 32 keys x 32 queries, 32 keys x 64 columns at block 64 x 128, 8 warps), so each ldmatrix
// fragment feeds several MMAs. Two barriers per tile: one before GEMM 1 (stage landed, previous tile done), one
// before GEMMs 2 and 3 (P and dS' stored).
// args.deterministic: the dQ' additions of one (b, h, m) happen in key-block order, ordered by an int32 semaphore
// per (token row of block m, h) in args.dk_accum (zeroed by bwd_pre): CTA n waits until it reads n - n_lo(m).
// mma.sync m16n8k16 (float32 accumulate), ldmatrix (.trans for the transposed operands). K, V, Q and dO rows are
// XOR-swizzled in 16-byte chunks where the padded head dim is a multiple of 64, else padded by 16 bytes; P and
// dS'^T rows are padded (smem_layout.cuh: conflict-free ldmatrix in both, conflict-free cp.async writes in the
// swizzled one). Head dims that are not multiples of 16 are zero-padded in the reduction.
// User code (fa_mods; fa_user_* rendered by generator/user_mods.cpp, called for in-range (i, j) only): on the
// feature path s' = score_mod(s) after ALiBi and dS' gains the factor score_mod_grad(s) at the same raw s; masked
// tiles hide the pairs mask_mod refuses. Block skipping (kBlockSparse, set with a mask_mod; the plan's mask_blocks
// step classified every tile at this kernel's block_m x block_n, args.f.blk_cls / blk_cls_t, fa_args.cuh): warp 0
// compacts the CTA's column of classes of every head of its group into its visiting list (args.f.blk_list,
// common/blk_visit.cuh; the other warps count it), the tile loop walks that list (cyclically from an entry rotated by
// the key block, or in order in the deterministic mode): query blocks the mask hides wholly are never loaded, tiles
// it hides nowhere skip the masking code. In the deterministic mode a tile's dQ' ticket is then its key block's rank
// among the visible key blocks of its row (args.f.blk_cls). Without classes (blk_cls_t null) every tile of the band
// is visited and masked.
// Reads from the prelude: kDtype, kHeadDim, kHeadDimV, kMask (causal: the CTA order above; the band itself comes
// through args' window), kHasBias, kHasAlibi, kHasSoftcap, kHasMaskMod, kHasScoreMod, kBlockM, kBlockN, kWarps,
// kStages.
#ifndef FA_BWD_MMA_CUH
#define FA_BWD_MMA_CUH

#include "bwd_mma_tiling.cuh"
#include "common/blk_visit.cuh"
#include "common/sm80.cuh"
#include "smem_layout.cuh"

namespace fa_bwd_mma {
using namespace fa_sm80;
typedef unsigned short T;
constexpr int kBlockM = fa_cfg::kBlockM, kBlockN = fa_cfg::kBlockN, kWarps = fa_cfg::kWarps, kStages = fa_cfg::kStages;
constexpr int kThreads = kWarps * 32;
constexpr int kD = fa_cfg::kHeadDim, kDV = fa_cfg::kHeadDimV;
constexpr FaBwdLayout L = fa_bwd_layout(kBlockM, kBlockN, kWarps, kD, kDV);
static_assert(L.ok, "bwd_mma: no warp layout for this tile");
static_assert(kStages == 1 || kStages == 2, "bwd_mma: 1 or 2 stages");
constexpr int kDPad = L.dp, kDVPad = L.dvp;  // head dims padded to 16 (zeros in the reduction)
// Shared row pitches (elements): K and Q rows kPitchK, V and dO rows kPitchV (swizzled or padded, smem_layout.cuh);
// P and dS'^T rows kPitchP (padded: written by 32-bit stores from fragments).
constexpr int kPitchK = fa_smem_pitch(kDPad), kPitchV = fa_smem_pitch(kDVPad), kPitchP = kBlockM + 8;
// Warp layouts of the three GEMMs (bwd_mma_tiling.cuh): warps along each output axis, and per warp the m16 row
// tiles, n8 column tiles or n16 column pairs (two n8 tiles, one ldmatrix.x4 of B) it owns.
//   GEMM 1  S^T, dP^T  keys x queries       warps kKeyWarps1 x kQueryWarps1; kKeyTiles1 m16, kQueryTiles1 n8
//   GEMM 2  dK, dV     keys x head columns  warps kKeyWarps2 x kColWarps2;   kKeyTiles2 m16, kDkPairs / kDvPairs n16
//   GEMM 3  dQ'        queries x head cols  warps kQueryWarps3 x kColWarps3; kQueryTiles3 m16, kDqPairs n16
// Warp w sits at (w % first, w / first) of each grid.
constexpr int kKeyWarps1 = L.wk1, kQueryWarps1 = L.wq1, kKeyTiles1 = L.mt1, kQueryTiles1 = L.nt1;
constexpr int kKeyWarps2 = L.wk2, kColWarps2 = L.wd2, kKeyTiles2 = L.mt2, kDkPairs = L.npk, kDvPairs = L.npv;
constexpr int kQueryWarps3 = L.wq3, kColWarps3 = L.wd3, kQueryTiles3 = L.mt3, kDqPairs = L.np3;
constexpr bool kFeat = fa_cfg::kHasSoftcap || fa_cfg::kHasBias || fa_cfg::kHasAlibi || fa_cfg::kHasScoreMod;
constexpr bool kBlockSparse = fa_cfg::kHasMaskMod;  // walk the classified tiles only (mask_blocks)
// Which GEMM phases run software-pipelined (bwd_mma_tiling.cuh: register budget per phase).
constexpr int kPersist = fa_bwd_persistent_regs(L), kPipeBudget = fa_bwd_pipe_budget();
constexpr bool kPipeAny = !kFeat && !kBlockSparse && fa_bwd_even_cols(L);
constexpr bool kPipe1 = kPipeAny && kPersist + fa_bwd_pipe_g1(L) <= kPipeBudget;
constexpr bool kPipe2 = kPipeAny && kPersist + fa_bwd_pipe_g2(L) <= kPipeBudget;
constexpr bool kPipe3 = kPipeAny && kPersist + fa_bwd_pipe_g3(L) <= kPipeBudget;
// dQ' red.adds spread over GEMM 2 (bwd_mma_tiling.cuh: fa_bwd_interleave).
constexpr bool kInterleave = kPipe2 && fa_bwd_interleave(L, kStages);
// Lean per-tile load addressing (see issue_next in the kernel) where registers allow (bwd_mma_tiling.cuh).
// (Block skipping decodes each tile from its list: the plain per-tile addressing.)
constexpr bool kLeanIssue = fa_bwd_lean_issue(L) && !kBlockSparse;
// Shared memory (16-bit elements, then floats: LSE and Delta per stage; causal: then the CTA mailbox, 4 ints).
constexpr int kOffV = kBlockN * kPitchK, kOffQ = kOffV + kBlockN * kPitchV;
constexpr int kOffDo = kOffQ + kStages * kBlockM * kPitchK, kOffP = kOffDo + kStages * kBlockM * kPitchV;
constexpr int kOffDs = kOffP + kBlockN * kPitchP, kEndHalf = kOffDs + kBlockN * kPitchP;
static_assert(kOffV % 64 == 0 && kOffQ % 64 == 0 && kOffDo % 64 == 0 && (kBlockM * kPitchK) % 64 == 0 &&
                  (kBlockM * kPitchV) % 64 == 0,
              "bwd_mma: tiles 128-byte aligned");
constexpr float kLog2e = 1.4426950408889634f;

// ROWS x (COLS / 8) 16-byte chunks from global (row stride gs elements) into shared (pitch PITCH elements, row
// layout from smem_layout.cuh); rows >= valid are zero-filled (FULL: every row is valid, no predicates). When the
// CTA's threads cover whole rows, each thread keeps one column chunk and steps rows by a fixed stride (unrolled, no
// divisions); otherwise a generic loop.
template <int ROWS, int COLS, int PITCH, bool FULL = false>
FA_DEVICE void load_tile(unsigned sdst, const T* g, long long gs, int valid, int tid) {
  constexpr int kChunks = COLS / 8;
  if constexpr (kThreads % kChunks == 0 && (ROWS * kChunks) % kThreads == 0) {
    constexpr int kRowStep = kThreads / kChunks, kIters = ROWS * kChunks / kThreads;
    const int r0 = tid / kChunks, c = tid - r0 * kChunks;
    const T* src = g + r0 * gs + c * 8;
    const unsigned dst = sdst + fa_smem_off<PITCH>(r0, c);
#pragma unroll
    for (int k = 0; k < kIters; ++k) {
      const bool ok = FULL || r0 + k * kRowStep < valid;
      // rows step by a multiple of 8: the same swizzled chunk; else recomputed per row
      const unsigned d = kRowStep % 8 == 0 || !fa_smem_swizzled(PITCH)
                             ? dst + (unsigned)(k * kRowStep * PITCH * 2)
                             : sdst + fa_smem_off<PITCH>(r0 + k * kRowStep, c);
      cp_async16(d, ok ? (const void*)(src + k * kRowStep * gs) : (const void*)g, ok ? 16 : 0);
    }
  } else {
#pragma unroll 1
    for (int idx = tid; idx < ROWS * kChunks; idx += kThreads) {
      const int r = idx / kChunks, c = idx - r * kChunks;
      const bool ok = FULL || r < valid;
      cp_async16(sdst + fa_smem_off<PITCH>(r, c), ok ? (const void*)(g + r * gs + c * 8) : (const void*)g, ok ? 16 : 0);
    }
  }
}
template <bool B>
struct Bool {
  static constexpr bool value = B;
};
// ldmatrix lane patterns of one 16 x 16 block (rows, 16-byte chunks; smem_layout.cuh places them):
//   "R" (lane & 15, lane >> 4): A [row][k] -> matrices (rows 0-7, k 0-7), (rows 8-15, k 0-7), (rows 0-7, k 8-15),
//       (rows 8-15, k 8-15); B stored [k][n] with .trans -> b0, b1 of tile n0, then of tile n0 + 8.
//   "C" (((lane >> 4) << 3) + (lane & 7), (lane >> 3) & 1): A stored [k][row] with .trans -> same register order as
//       R; B [n][k] -> b0, b1 of tile n0, then of tile n0 + 8.
// Operands whose k runs along the columns (A, B) keep one lane base and step k by fa_smem_at; those whose k runs
// down the rows (.trans) keep one base per block column and step k by whole rows (the swizzle repeats every 8 rows).
//
// One warp GEMM of the tile, described by a spec struct G (GemmS, GemmDp, GemmDq, GemmDv, GemmDk below):
//   G::kSteps            k16 steps of the reduction
//   G::kPitchA, kTransA  A (m16 row tiles, rows from `a_row0`): shared row pitch; stored [k][row] and read with
//                        ldmatrix .trans (true), or [row][k]
//   G::kPitchB, kTransB  B (n16 column pairs, columns from `b_col0`): stored [k][n] (.trans), or [n][k]
//   G::kCols, kEven      B's columns: pairs at or past kCols are skipped, unless kEven (every warp's pairs lie below
//                        it: no checks)
//   G::kPipe             the k loop unrolled with the fragments of step kk + 1 loaded before the MMAs of step kk
//                        (two register buffers), so ldmatrix latency overlaps tensor work; else one buffer,
//                        unrolled by 2 (fewer registers)
//   G::kZero             (kEven only) acc = A B: the first k step writes acc without reading it, so the caller need
//                        not zero it; else acc += A B
// acc[MT][NT] holds the warp's MT m16 row tiles by NT = 2 x (its column pairs) n8 column tiles. HOOK(kk) runs after
// the MMAs of k step kk (kPipe only: the loop is fully unrolled there, so kk folds to a constant); the dQ reduction
// uses it to spread its red.adds over GEMM 2.
struct NoHook {
  FA_DEVICE void operator()(int) const {}
};
template <class G, int MT, int NT, class HOOK = NoHook>
FA_DEVICE void warp_mma(float (&acc)[MT][NT][4], unsigned sA, int a_row0, unsigned sB, int b_col0, int lane,
                        HOOK hook = HOOK{}) {
  static_assert(NT % 2 == 0, "warp_mma: whole n16 column pairs");
  static_assert(!G::kZero || G::kEven, "warp_mma: kZero needs every column pair computed");
  constexpr int NP = NT / 2, PA = G::kPitchA, PB = G::kPitchB;
  unsigned af[G::kPipe ? 2 : 1][MT][4], bf[G::kPipe ? 2 : 1][NP][4];
  const int rr = lane & 15, rc = lane >> 4, cr = ((lane >> 4) << 3) + (lane & 7), cc = (lane >> 3) & 1;
  const unsigned a_lane = fa_smem_lane<PA>(sA, G::kTransA ? cr : a_row0 + rr, G::kTransA ? cc : rc);
  // .trans B: b_col0 is the warp's column block times NP * 16. When NP is a power of two or a multiple of 4, b_col0 / 8
  // has no bits in common with the pairs' chunk steps 2 pp inside an 8-chunk group, so the column steps fold into
  // the lane base's XOR like the k steps of a non-trans operand (fa_smem_at): one base register, not one per pair.
  constexpr bool kBtFold = G::kTransB && ((NP & (NP - 1)) == 0 || NP % 4 == 0);
  const unsigned b_lane =
      fa_smem_lane<PB>(sB, G::kTransB ? rr : b_col0 + cr, G::kTransB ? (kBtFold ? (b_col0 >> 3) + rc : rc) : cc);
  auto load = [&](int buf, int kk) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      if constexpr (G::kTransA)
        ldsm_x4_t(fa_smem_lane<PA>(sA, cr, ((a_row0 + mt * 16) >> 3) + cc) + (unsigned)(kk * 16 * PA * 2), af[buf][mt]);
      else ldsm_x4(fa_smem_at<PA>(a_lane, mt * 16, kk * 16), af[buf][mt]);
    }
#pragma unroll
    for (int pp = 0; pp < NP; ++pp) {
      if (G::kEven || b_col0 + pp * 16 < G::kCols) {
        if constexpr (kBtFold) ldsm_x4_t(fa_smem_at<PB>(b_lane, kk * 16, pp * 16), bf[buf][pp]);
        else if constexpr (G::kTransB)
          ldsm_x4_t(fa_smem_lane<PB>(sB, rr, ((b_col0 + pp * 16) >> 3) + rc) + (unsigned)(kk * 16 * PB * 2),
                    bf[buf][pp]);
        else ldsm_x4(fa_smem_at<PB>(b_lane, pp * 16, kk * 16), bf[buf][pp]);
      }
    }
  };
  auto mmas = [&](int buf, auto first) {
    constexpr bool kFirst = decltype(first)::value;
#pragma unroll
    for (int pp = 0; pp < NP; ++pp) {
      if (G::kEven || b_col0 + pp * 16 < G::kCols) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          if constexpr (kFirst) {
            mma16816_first(acc[mt][2 * pp], af[buf][mt], bf[buf][pp][0], bf[buf][pp][1]);
            mma16816_first(acc[mt][2 * pp + 1], af[buf][mt], bf[buf][pp][2], bf[buf][pp][3]);
          } else {
            mma16816(acc[mt][2 * pp], af[buf][mt], bf[buf][pp][0], bf[buf][pp][1]);
            mma16816(acc[mt][2 * pp + 1], af[buf][mt], bf[buf][pp][2], bf[buf][pp][3]);
          }
        }
      }
    }
  };
  if constexpr (G::kPipe) {
    load(0, 0);
#pragma unroll
    for (int kk = 0; kk < G::kSteps; ++kk) {
      if (kk + 1 < G::kSteps) load((kk + 1) & 1, kk + 1);
      if (G::kZero && kk == 0) mmas(0, Bool<true>{});
      else mmas(kk & 1, Bool<false>{});
      hook(kk);
    }
  } else {
    int kk0 = 0;
    if constexpr (G::kZero) {  // the first step peeled: acc = A B
      load(0, 0);
      mmas(0, Bool<true>{});
      kk0 = 1;
    }
#pragma unroll 2
    for (int kk = kk0; kk < G::kSteps; ++kk) {
      load(0, kk);
      mmas(0, Bool<false>{});
    }
  }
}
// The five warp GEMMs of a tile. The P and dS'^T tiles are stored [key][query] (pitch kPitchP), K [key][col], Q
// [query][col] (kPitchK), V [key][col], dO [query][col] (kPitchV).
struct GemmS {  // GEMM 1: S^T = K_n Q_m^T (keys x queries, k = head columns of q / k)
  static constexpr int kSteps = kDPad / 16, kPitchA = kPitchK, kPitchB = kPitchK, kCols = kBlockM;
  static constexpr bool kTransA = false, kTransB = false, kEven = true, kPipe = kPipe1, kZero = true;
};
struct GemmDp {  // GEMM 1: dP^T = V_n dO_m^T (keys x queries, k = head columns of v / o)
  static constexpr int kSteps = kDVPad / 16, kPitchA = kPitchV, kPitchB = kPitchV, kCols = kBlockM;
  static constexpr bool kTransA = false, kTransB = false, kEven = true, kPipe = kPipe1, kZero = true;
};
constexpr bool kEvenDq = kDqPairs * kColWarps3 * 16 == kDPad;  // GEMM 3 splits its columns evenly
struct GemmDq {  // GEMM 3: dQ'_m = dS' K_n (queries x head columns, k = keys): A = dS'^T, B = K, both .trans
  static constexpr int kSteps = kBlockN / 16, kPitchA = kPitchP, kPitchB = kPitchK, kCols = kDPad;
  static constexpr bool kTransA = true, kTransB = true, kEven = kEvenDq, kPipe = kPipe3, kZero = kEvenDq;
};
struct GemmDv {  // GEMM 2: dV_n += P^T dO_m (keys x head columns of v, k = queries): B = dO, .trans
  static constexpr int kSteps = kBlockM / 16, kPitchA = kPitchP, kPitchB = kPitchV, kCols = kDVPad;
  static constexpr bool kTransA = false, kTransB = true, kEven = kDvPairs * kColWarps2 * 16 == kDVPad;
  static constexpr bool kPipe = kPipe2, kZero = false;
};
struct GemmDk {  // GEMM 2: dK_n += dS'^T Q_m (keys x head columns of k, k = queries): B = Q, .trans
  static constexpr int kSteps = kBlockM / 16, kPitchA = kPitchP, kPitchB = kPitchK, kCols = kDPad;
  static constexpr bool kTransA = false, kTransB = true, kEven = kDkPairs * kColWarps2 * 16 == kDPad;
  static constexpr bool kPipe = kPipe2, kZero = false;
};
// The CTA's (key block, kv head, batch). Causal or a mask_mod (fa_bwd_cta_order): decoded once from the block index
// (fa_bwd_cta) and kept in a shared-memory mailbox of 4 ints after Delta (every thread writes the same values before
// its first read, so no barrier is needed); the tile loop and the epilogue re-read it (volatile: one shared load per
// coordinate used) instead of holding it: the decoded values held in registers tipped 4-24 byte spills at the
// tightest points, where the plain order's blockIdx reads cost nothing (ptxas re-reads them). Other masks: blockIdx.
constexpr bool kCtaMailbox = fa_bwd_cta_order(fa_cfg::kMask, fa_cfg::kHasMaskMod, kBlockM, kBlockN);
// One coordinate (0: key block, 1: kv head, 2: batch), one shared load.
__device__ __forceinline__ int cta_coord(const volatile int* mailbox, int i) {
  if constexpr (kCtaMailbox) {
    return mailbox[i];
  } else {
    return i == 0 ? (int)blockIdx.x : i == 1 ? (int)blockIdx.y : (int)blockIdx.z;
  }
}
}  // namespace fa_bwd_mma

// Register discipline: minBlocksPerSM = 1 is explicit (ptxas gets the whole register file of one CTA), the
// reduction loops are unrolled by 2 at most, and bwd_mma.cpp bounds fa_bwd_acc_regs() so that every accepted point
// compiles without spills (checked by the NVRTC sweep).
extern "C" __global__ void __launch_bounds__(fa_cfg::kWarps * 32, 1) fa_kernel(const FaBwdArgs args FA_USER_PARAM) {
  using namespace fa_bwd_mma;
  extern __shared__ __align__(128) unsigned char fa_smem_raw[];
  T* sm = reinterpret_cast<T*>(fa_smem_raw);
  float* sLse = reinterpret_cast<float*>(sm + kEndHalf);
  float* sDelta = sLse + kStages * kBlockM;
  const FaFwdArgs& a = args.f;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  // Causal / mask_mod grids: the last args.lpt_tail pairs key-block-major (fa_bwd_cta); other masks keep the plain
  // order (their key blocks carry even work). Used in the prologue; the loop and the epilogue read cta_coord(mailbox,
  // i).
  int* mailbox = reinterpret_cast<int*>(sDelta + kStages * kBlockM);
  FaBwdCta cta{(int)blockIdx.x, (int)blockIdx.y, (int)blockIdx.z};
  if constexpr (kCtaMailbox) {
    cta = fa_bwd_cta(blockIdx.x, blockIdx.y, blockIdx.z, gridDim.x, gridDim.y, gridDim.z, args.lpt_tail,
                     args.lpt_magic_tail, args.lpt_magic_heads);
    volatile int* mb = mailbox;
    mb[0] = cta.nb;
    mb[1] = cta.g;
    mb[2] = cta.b;
  }
  const int nb = cta.nb, g = cta.g, b = cta.b;
  const FaSeq seq = fa_seq(a, b);
  const int n0 = nb * kBlockN;
  if (n0 >= seq.sk) return;
  const bool varlen = a.cu_seqlens_q != nullptr;
  const long long row0 = varlen ? seq.base_q : (long long)b * a.seqlen_q;
  const unsigned sbase = smem_u32(sm);
  const unsigned sK = sbase, sV = sbase + kOffV * 2, sP = sbase + kOffP * 2, sDs = sbase + kOffDs * 2;

  // Zero the padded reduction columns once (cp.async never writes them).
  if constexpr (kDPad != kD) {
    for (int r = tid; r < kBlockN + kStages * kBlockM; r += kThreads) {
      T* tile = r < kBlockN ? sm : sm + kOffQ;
      const int lr = r < kBlockN ? r : r - kBlockN;
      for (int c = kD; c < kDPad; ++c) tile[fa_smem_off<kPitchK>(lr, c >> 3) / 2 + (c & 7)] = 0;
    }
  }
  if constexpr (kDVPad != kDV) {
    for (int r = tid; r < kBlockN + kStages * kBlockM; r += kThreads) {
      T* tile = r < kBlockN ? sm + kOffV : sm + kOffDo;
      const int lr = r < kBlockN ? r : r - kBlockN;
      for (int c = kDV; c < kDVPad; ++c) tile[fa_smem_off<kPitchV>(lr, c >> 3) / 2 + (c & 7)] = 0;
    }
  }
  {
    const long long kb = varlen ? 0 : (long long)b * a.k_sb, vb = varlen ? 0 : (long long)b * a.v_sb;
    const T* kg = static_cast<const T*>(a.k) + kb + (seq.base_k + n0) * a.k_ss + (long long)g * a.k_sh;
    const T* vg = static_cast<const T*>(a.v) + vb + (seq.base_k + n0) * a.v_ss + (long long)g * a.v_sh;
    load_tile<kBlockN, kD, kPitchK>(sK, kg, a.k_ss, seq.sk - n0, tid);
    load_tile<kBlockN, kDV, kPitchV>(sV, vg, a.v_ss, seq.sk - n0, tid);
    cp_commit();
  }

  // Query blocks whose tile meets the band j - off_r <= i <= j - off_l (exact; see the header).
  const int off = seq.sk - seq.sq;
  const int nmb = (seq.sq + kBlockM - 1) / kBlockM;
  int m_lo = 0, m_hi = nmb;
  if (a.win_right >= 0) {
    const int x = n0 - (off + a.win_right);
    if (x > seq.sq - 1) m_hi = 0;
    else if (x > 0) m_lo = x / kBlockM;
  }
  if (a.win_left >= 0) {
    const int z = min(seq.sk, n0 + kBlockN) - 1 - (off - a.win_left);
    m_hi = z < 0 ? 0 : min(m_hi, z / kBlockM + 1);
  }
  const int nm = max(0, m_hi - m_lo);
  int total = nm * a.group;
  // Block skipping: the visiting list of this CTA, the query blocks of every head of its group in order, from the
  // classes (common/blk_visit.cuh: entries ((hl * blk_nmb + m) << 1) | full for query head g * group + hl).
  const int* blist = nullptr;
  if constexpr (kBlockSparse) {
    if (a.blk_cls_t != nullptr) {
      int* list = a.blk_list + (((long long)b * a.heads_kv + g) * gridDim.x + nb) * ((long long)a.group * a.blk_nmb);
      int count = 0;
      for (int hl = 0; hl < a.group; ++hl) {
        const unsigned char* col = a.blk_cls_t + (long long)b * a.blk_cls_sb +
                                   (long long)(g * a.group + hl) * a.blk_cls_sh + (long long)nb * a.blk_nmb;
        count += fa_blk_list<false>(col, m_lo, m_hi, hl * a.blk_nmb, list + count, warp == 0);
      }
      __syncthreads();  // warp 0's list is visible to the CTA
      blist = list;
      total = count;
    }
  }
  const bool keys_cut = n0 + kBlockN > seq.sk;  // this CTA's last keys lie past seqlen_k

  // This warp's place in the three GEMMs: its first key row / query column / query row, and its column block.
  const int g1_key0 = (warp % kKeyWarps1) * kKeyTiles1 * 16, g1_query0 = (warp / kKeyWarps1) * kQueryTiles1 * 8;
  const int g2_key0 = (warp % kKeyWarps2) * kKeyTiles2 * 16, g2_colblk = warp / kKeyWarps2;
  const int g3_query0 = (warp % kQueryWarps3) * kQueryTiles3 * 16, g3_colblk = warp / kQueryWarps3;
  float acc_dk[kKeyTiles2][2 * kDkPairs][4], acc_dv[kKeyTiles2][2 * kDvPairs][4];
#pragma unroll
  for (int mt = 0; mt < kKeyTiles2; ++mt) {
#pragma unroll
    for (int t = 0; t < 2 * kDkPairs; ++t)
      acc_dk[mt][t][0] = acc_dk[mt][t][1] = acc_dk[mt][t][2] = acc_dk[mt][t][3] = 0.f;
#pragma unroll
    for (int t = 0; t < 2 * kDvPairs; ++t)
      acc_dv[mt][t][0] = acc_dv[mt][t][1] = acc_dv[mt][t][2] = acc_dv[mt][t][3] = 0.f;
  }

  const long long qb = varlen ? 0 : (long long)b * a.q_sb, dob = varlen ? 0 : (long long)b * args.do_sb;
  const float pos_inf = __int_as_float(0x7f800000), neg_inf = -pos_inf;
  // Tile order: the query heads of the group outer; query blocks inner, cyclically from m_first. Outside the
  // deterministic mode m_first is rotated by the key block, so the CTAs of one head add into different dQ rows at
  // any moment rather than all into the same ones (the deterministic mode needs the plain order: its semaphores
  // admit key blocks in order). step() moves (hh, mm) to the next tile and returns the row step of mm (kBlockM, or
  // kBlockM - nm * kBlockM at the wrap); new_head: the head advanced (mm is back at m_first).
  const int m_first = args.deterministic || nm == 0 ? m_lo : m_lo + nb % nm;
  // Block skipping: the list walked from entry l_first on, cyclically (the same rotation); tile_at decodes entry it
  // of the walk into its head, query block and class (full: no masking).
  const int l_first = args.deterministic || total == 0 ? 0 : nb % total;
  auto tile_at = [&](int it, int& hh, int& mm, bool& full) {
    const int e = blist[it + l_first < total ? it + l_first : it + l_first - total];
    const int idx = e >> 1, hl = idx / a.blk_nmb;
    hh = cta_coord(mailbox, 1) * a.group + hl;
    mm = idx - hl * a.blk_nmb;
    full = (e & 1) != 0;
  };
  auto step = [&](int& hh, int& mm, bool& new_head) {
    int rows = kBlockM;
    if (++mm == m_hi) {
      mm = m_lo;
      rows -= nm * kBlockM;
    }
    new_head = mm == m_first;
    if (new_head) ++hh;
    return rows;
  };
  // The loads of the next tile (head h_next, query block m_next). kLeanIssue: the element offsets of its Q, dO rows
  // and LSE/Delta entries are advanced incrementally and full query blocks skip the row predicates, so the
  // per-tile address work that sits between the barrier and GEMM 1 (where nothing overlaps it) stays small; else
  // they are recomputed per tile (fewer live registers).
  int h = g * a.group, m = m_first, h_next = h, m_next = m;
  bool tile_full = false;  // block skipping: the tile (h, m) is wholly visible
  int it_next = 0;         // block skipping: the walk's entry that issue_next loads
  if (kBlockSparse && blist != nullptr && total > 0) {
    tile_at(0, h, m, tile_full);
    h_next = h;
    m_next = m;
  }
  long long q_next = qb + (seq.base_q + (long long)m_first * kBlockM) * a.q_ss + (long long)h * a.q_sh;
  long long do_next = dob + (seq.base_q + (long long)m_first * kBlockM) * args.do_ss + (long long)h * args.do_sh;
  long long l_next = (long long)b * a.lse_sb + (long long)h * a.lse_sh + seq.base_q + (long long)m_first * kBlockM;
  // Issues the cp.async loads of the next tile into stage `st` and moves on to the tile after it: Q, dO, LSE and
  // Delta (rows past seqlen_q: zeros).
  auto issue_next = [&](int st) {
    const int i0 = m_next * kBlockM;
    if constexpr (!kLeanIssue) {
      q_next = qb + (seq.base_q + i0) * a.q_ss + (long long)h_next * a.q_sh;
      do_next = dob + (seq.base_q + i0) * args.do_ss + (long long)h_next * args.do_sh;
      l_next = (long long)cta_coord(mailbox, 2) * a.lse_sb + (long long)h_next * a.lse_sh + seq.base_q + i0;
    }
    const T* qg = static_cast<const T*>(a.q) + q_next;
    const T* dg = static_cast<const T*>(args.dout) + do_next;
    const unsigned sq_st = sbase + (unsigned)((kOffQ + st * kBlockM * kPitchK) * 2);
    const unsigned sdo_st = sbase + (unsigned)((kOffDo + st * kBlockM * kPitchV) * 2);
    const unsigned sl = smem_u32(sLse + st * kBlockM), sd = smem_u32(sDelta + st * kBlockM);
    const float* lg = a.lse + l_next;
    const float* dlg = args.delta + l_next;
    auto rows = [&](auto full) {
      constexpr bool kFull = decltype(full)::value;
      load_tile<kBlockM, kD, kPitchK, kFull>(sq_st, qg, a.q_ss, seq.sq - i0, tid);
      load_tile<kBlockM, kDV, kPitchV, kFull>(sdo_st, dg, args.do_ss, seq.sq - i0, tid);
      auto lse_delta = [&](int r) {
        const bool ok = kFull || i0 + r < seq.sq;
        cp_async4(sl + r * 4, ok ? (const void*)(lg + r) : (const void*)a.lse, ok ? 4 : 0);
        cp_async4(sd + r * 4, ok ? (const void*)(dlg + r) : (const void*)args.delta, ok ? 4 : 0);
      };
      // Unrolled on the lean path; the plain loop elsewhere (unrolling it alone tipped the d 128 default into spills)
      if constexpr (kLeanIssue) {
        constexpr int kIt = (kBlockM + kThreads - 1) / (kThreads);
#pragma unroll
        for (int k = 0; k < kIt; ++k)
          if (kBlockM % (kThreads) == 0 || tid + k * kThreads < kBlockM) lse_delta(tid + k * kThreads);
      } else {
        for (int r = tid; r < kBlockM; r += kThreads) lse_delta(r);
      }
    };
    if (kLeanIssue && i0 + kBlockM <= seq.sq) rows(Bool<kLeanIssue>{});
    else rows(Bool<false>{});
    if (kBlockSparse && blist != nullptr) {
      bool full_next;
      if (++it_next < total) tile_at(it_next, h_next, m_next, full_next);
      return;
    }
    bool new_head;
    const int rows_step = step(h_next, m_next, new_head);
    if constexpr (kLeanIssue) {
      q_next += rows_step * a.q_ss + (new_head ? a.q_sh : 0);
      do_next += rows_step * args.do_ss + (new_head ? args.do_sh : 0);
      l_next += rows_step + (new_head ? a.lse_sh : 0);
    }
  };
  if (total > 0) issue_next(0);
  cp_commit();

#pragma unroll 1
  for (int it = 0; it < total; ++it) {
    const int st = kStages == 2 ? (it & 1) : 0;
    if constexpr (kStages == 1) {
      if (it > 0) {
        __syncthreads();  // every warp is done with the single stage
        issue_next(0);
        cp_commit();
      }
    }
    cp_wait<0>();
    __syncthreads();  // stage `st` landed for every thread; the previous tile's readers are done
    if constexpr (kStages == 2) {
      if (it + 1 < total) {
        issue_next(st ^ 1);
        cp_commit();
      }
    }
    const int i0 = m * kBlockM;
    const unsigned sQ = sbase + (unsigned)((kOffQ + st * kBlockM * kPitchK) * 2);
    const unsigned sDo = sbase + (unsigned)((kOffDo + st * kBlockM * kPitchV) * 2);

    // ---- GEMM 1: S^T (keys x queries) and dP^T for this warp's tile, then P and dS' to shared memory.
    {
      float s[kKeyTiles1][kQueryTiles1][4], dp[kKeyTiles1][kQueryTiles1][4];  // written whole by the first k step
      warp_mma<GemmS>(s, sK, g1_key0, sQ, g1_query0, lane);
      warp_mma<GemmDp>(dp, sV, g1_key0, sDo, g1_query0, lane);
      // Per query column of this thread: lse in base 2 (+inf hides the row: fully masked or past seqlen_q).
      float lq[kQueryTiles1][2];
#pragma unroll
      for (int nt = 0; nt < kQueryTiles1; ++nt) {
        const int qc0 = g1_query0 + nt * 8 + (lane & 3) * 2;  // two adjacent columns: one 8-byte load each
        const float2 l2 = *reinterpret_cast<const float2*>(sLse + st * kBlockM + qc0);
        lq[nt][0] = (l2.x == neg_inf || i0 + qc0 >= seq.sq) ? pos_inf : l2.x * kLog2e;
        lq[nt][1] = (l2.y == neg_inf || i0 + qc0 + 1 >= seq.sq) ? pos_inf : l2.y * kLog2e;
      }
      // Masking is needed only where the tile crosses the band edge or the end of the keys.
      const int n0t = cta_coord(mailbox, 0) * kBlockN;
      bool need_mask = keys_cut;
      if (a.win_left >= 0) need_mask = need_mask || n0t < i0 + kBlockM - 1 + off - a.win_left;
      if (a.win_right >= 0) need_mask = need_mask || n0t + kBlockN - 1 > i0 + off + a.win_right;
      if constexpr (kBlockSparse) need_mask = blist == nullptr || !tile_full;  // classes cover every mask
      const float slope = fa_cfg::kHasAlibi ? a.alibi[h] : 0.f;
      const T* bias = fa_cfg::kHasBias ? static_cast<const T*>(a.bias) + (long long)cta_coord(mailbox, 2) * a.bias_sb +
                                             (long long)h * a.bias_sh
                                       : nullptr;
      // P and dS' of this warp's tile to shared memory; MASKED: apply the band, the end of the keys and mask_mod.
      auto p_ds = [&](auto masked) {
        constexpr bool kMasked = decltype(masked)::value;
#pragma unroll
        for (int nt = 0; nt < kQueryTiles1; ++nt) {
          // Delta of this thread's two query columns, read here (not live across the GEMMs)
          const float2 d2 =
              *reinterpret_cast<const float2*>(sDelta + st * kBlockM + g1_query0 + nt * 8 + (lane & 3) * 2);
          const float dl[2] = {d2.x, d2.y};
#pragma unroll
          for (int mt = 0; mt < kKeyTiles1; ++mt)
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
              const int kr = g1_key0 + mt * 16 + (lane >> 2) + hf * 8;  // local key row
              const int j = n0t + kr;
              float pv[2], dsv[2];
#pragma unroll
              for (int e = 0; e < 2; ++e) {
                const int qc = g1_query0 + nt * 8 + (lane & 3) * 2 + e;  // local query column
                const int i = i0 + qc;
                const float x = s[mt][nt][hf * 2 + e];
                float p, dcap = 1.f;
                if constexpr (!kFeat) {
                  p = fa_exp2(x * a.scale_log2 - lq[nt][e]);
                } else {
                  float sv = x * a.scale;
                  if constexpr (fa_cfg::kHasSoftcap) {
                    const float t = fa_tanh(sv * a.inv_softcap);
                    sv = a.softcap * t;
                    dcap = 1.f - t * t;
                  }
                  if constexpr (fa_cfg::kHasBias) {
                    if (i < seq.sq && j < seq.sk)
                      sv += FaElem<fa_cfg::kDtype>::to_float(bias[(long long)i * a.bias_sq + (long long)j * a.bias_sk]);
                  }
                  if constexpr (fa_cfg::kHasAlibi) sv -= slope * fabsf((float)(i + off - j));
                  if constexpr (fa_cfg::kHasScoreMod) {  // the derivative at the raw s the forward's score_mod saw
                    if (i < seq.sq && j < seq.sk) {
                      dcap *= fa_user_score_grad(sv, cta_coord(mailbox, 2), h, i, j, FA_USER_ARGS);
                      sv = fa_user_score(sv, cta_coord(mailbox, 2), h, i, j, FA_USER_ARGS);
                    }
                  }
                  p = fa_exp2(sv * kLog2e - lq[nt][e]);
                }
                if constexpr (kMasked) {
                  bool vis = j < seq.sk;
                  if (a.win_left >= 0) vis = vis && j >= i + off - a.win_left;
                  if (a.win_right >= 0) vis = vis && j <= i + off + a.win_right;
                  if constexpr (fa_cfg::kHasMaskMod)
                    vis = vis && i < seq.sq && fa_user_mask(cta_coord(mailbox, 2), h, i, j, FA_USER_ARGS);
                  p = vis ? p : 0.f;
                }
                pv[e] = p;
                dsv[e] = p * (dp[mt][nt][hf * 2 + e] - dl[e]) * dcap;
                if constexpr (fa_cfg::kHasScoreMod) dsv[e] = p != 0.f ? dsv[e] : 0.f;  // hidden: whatever the grad
              }
              const int qc0 = g1_query0 + nt * 8 + (lane & 3) * 2;
              *reinterpret_cast<unsigned*>(sm + kOffP + kr * kPitchP + qc0) = pack2(pv[0], pv[1]);
              *reinterpret_cast<unsigned*>(sm + kOffDs + kr * kPitchP + qc0) = pack2(dsv[0], dsv[1]);
            }
        }
      };
      if (need_mask) p_ds(Bool<true>{});
      else p_ds(Bool<false>{});
    }
    __syncthreads();  // P^T and dS'^T are complete

    // ---- GEMM 3: dQ'_m += dS' K_n (queries x columns), then float32 red.add into dq_accum; GEMM 2: dV += P^T dO,
    // dK += dS'^T Q (keys x columns; accumulators live for the whole CTA). On full query blocks outside the
    // deterministic mode (and when GEMM 2 is pipelined), the red.adds are spread over GEMM 2's k steps, a few
    // after each step's MMAs, instead of one burst that fills the load/store queue.
    {
      // With evenly split columns every accumulator is written by the first k step (GemmDq::kZero); else
      // zeroed first.
      float dq[kQueryTiles3][2 * kDqPairs][4];
      if constexpr (!kEvenDq) {
#pragma unroll
        for (int mt = 0; mt < kQueryTiles3; ++mt)
#pragma unroll
          for (int t = 0; t < 2 * kDqPairs; ++t) dq[mt][t][0] = dq[mt][t][1] = dq[mt][t][2] = dq[mt][t][3] = 0.f;
      }
      warp_mma<GemmDq>(dq, sDs, g3_query0, sK, g3_colblk * kDqPairs * 16, lane);
      // dq_accum is 8 x 8 tiled (fa_dq_accum_off): this lane's rows R + 8 k (R = its first row) sit k blocks of G
      // floats apart, its columns (lane & 3) * 2 + 8 t of the warp's range 64 floats apart. The offset splits into
      // a 64-bit uniform base (the tile's 8-row group, head h) and a 32-bit lane part (at most (kBlockM / 8 + 1) * G +
      // kDPad * 8), which keeps 64-bit per-lane values out of the registers that live across the tile loop.
      const long long rb = row0 + i0;
      const int G = (int)(args.accum_q_stride_row << 3);  // floats per 8-row group (heads * head_dim * 8)
      float* dqa =
          args.dq_accum + fa_dq_accum_off<long long>(rb & ~7ll, (long long)h * kD, G) +
          fa_dq_accum_off<int>((int)(rb & 7) + g3_query0 + (lane >> 2), g3_colblk * kDqPairs * 16 + (lane & 3) * 2, G);
      constexpr bool kFullCols = kDqPairs * kColWarps3 * 16 == kD && kD == kDPad;
      // The red.adds of chunk c of nc (all when nc == 1); rows past seqlen_q are skipped when kGuarded (only the
      // last query block has any).
      auto reduce = [&](auto guarded, int c, int nc) {
        constexpr bool kGuarded = decltype(guarded)::value;
        constexpr int kReds = kQueryTiles3 * 2 * 2 * kDqPairs;
#pragma unroll
        for (int mt = 0; mt < kQueryTiles3; ++mt)
#pragma unroll
          for (int hf = 0; hf < 2; ++hf) {
            const int r = g3_query0 + mt * 16 + (lane >> 2) + hf * 8;
            if (kGuarded && i0 + r >= seq.sq) continue;
            float* row = dqa + (mt * 2 + hf) * G;
#pragma unroll
            for (int t = 0; t < 2 * kDqPairs; ++t) {
              const int q = (mt * 2 + hf) * 2 * kDqPairs + t;
              if (q * nc / kReds != c) continue;
              const int col = (g3_colblk * kDqPairs + t / 2) * 16 + (t & 1) * 8 + (lane & 3) * 2;
              if (kFullCols || col < kD) red_add2(row + t * 64, dq[mt][t][hf * 2], dq[mt][t][hf * 2 + 1]);
            }
          }
      };
      constexpr int kSteps2 = GemmDv::kSteps;  // k steps of GEMM 2 (one chunk of red.adds after each, two GEMMs)
      if (kInterleave && !args.deterministic && i0 + kBlockM <= seq.sq) {
        // __syncwarp orders each chunk of red.adds after the ldmatrix of the step that precedes it; without it
        // ptxas hoists every red.add to the front of GEMM 2 and the burst comes back.
        auto red_dv = [&](int kk) {
          __syncwarp();
          reduce(Bool<false>{}, kk, 2 * kSteps2);
        };
        auto red_dk = [&](int kk) {
          __syncwarp();
          reduce(Bool<false>{}, kSteps2 + kk, 2 * kSteps2);
        };
        warp_mma<GemmDv>(acc_dv, sP, g2_key0, sDo, g2_colblk * kDvPairs * 16, lane, red_dv);
        warp_mma<GemmDk>(acc_dk, sDs, g2_key0, sQ, g2_colblk * kDkPairs * 16, lane, red_dk);
      } else {
        int* sem = nullptr;
        int ticket = 0;
        if (args.deterministic) {
          sem = reinterpret_cast<int*>(args.dk_accum) + (row0 + m) * a.heads_q + h;
          int n_lo = 0;
          if (a.win_left >= 0) {
            const int y = i0 + off - a.win_left;
            n_lo = y > 0 ? y / kBlockN : 0;
          }
          ticket = cta_coord(mailbox, 0) - n_lo;
          if (kBlockSparse && blist != nullptr && warp == 0) {  // the rank among the row's visible key blocks
            const unsigned char* row = a.blk_cls + (long long)cta_coord(mailbox, 2) * a.blk_cls_sb +
                                       (long long)h * a.blk_cls_sh + (long long)m * a.blk_nkb;
            ticket = fa_blk_count(row, 0, cta_coord(mailbox, 0));
          }
          if (tid == 0)
            while (ld_acquire(sem) != ticket) {}
          __syncthreads();
        }
        if (i0 + kBlockM <= seq.sq) reduce(Bool<false>{}, 0, 1);
        else reduce(Bool<true>{}, 0, 1);
        if (args.deterministic) {
          __threadfence();
          __syncthreads();
          if (tid == 0) st_release(sem, ticket + 1);
        }
        warp_mma<GemmDv>(acc_dv, sP, g2_key0, sDo, g2_colblk * kDvPairs * 16, lane);
        warp_mma<GemmDk>(acc_dk, sDs, g2_key0, sQ, g2_colblk * kDkPairs * 16, lane);
      }
    }
    if (kBlockSparse && blist != nullptr) {  // the tile computed next
      if (it + 1 < total) tile_at(it + 1, h, m, tile_full);
    } else {
      bool new_head;
      step(h, m, new_head);
    }
  }

  // ---- Epilogue: dK = scale * acc_dk, dV = acc_dv in the dtype (32-bit stores of column pairs).
  cp_wait<0>();
  {
    const int n0e = cta_coord(mailbox, 0) * kBlockN, ge = cta_coord(mailbox, 1), be = cta_coord(mailbox, 2);
    const long long dkb = varlen ? 0 : (long long)be * args.dk_sb, dvb = varlen ? 0 : (long long)be * args.dv_sb;
    T* dkg = static_cast<T*>(args.dk) + dkb + (seq.base_k + n0e) * args.dk_ss + (long long)ge * args.dk_sh;
    T* dvg = static_cast<T*>(args.dv) + dvb + (seq.base_k + n0e) * args.dv_ss + (long long)ge * args.dv_sh;
#pragma unroll
    for (int mt = 0; mt < kKeyTiles2; ++mt)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int r = g2_key0 + mt * 16 + (lane >> 2) + hf * 8;
        if (n0e + r >= seq.sk) continue;
#pragma unroll
        for (int t = 0; t < 2 * kDkPairs; ++t) {
          const int col = (g2_colblk * kDkPairs + t / 2) * 16 + (t & 1) * 8 + (lane & 3) * 2;
          if (col < kD)
            *reinterpret_cast<unsigned*>(dkg + r * args.dk_ss + col) =
                pack2(acc_dk[mt][t][hf * 2] * a.scale, acc_dk[mt][t][hf * 2 + 1] * a.scale);
        }
#pragma unroll
        for (int t = 0; t < 2 * kDvPairs; ++t) {
          const int col = (g2_colblk * kDvPairs + t / 2) * 16 + (t & 1) * 8 + (lane & 3) * 2;
          if (col < kDV)
            *reinterpret_cast<unsigned*>(dvg + r * args.dv_ss + col) =
                pack2(acc_dv[mt][t][hf * 2], acc_dv[mt][t][hf * 2 + 1]);
        }
      }
  }
}

#endif  // FA_BWD_MMA_CUH
