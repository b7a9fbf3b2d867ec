// fwd_mma.cuh -- tensor-core FlashAttention-2 forward (fp16 / bf16, sm_80 and later, mma.sync).
//
// One CTA per (query block of kBlockM rows, query head, batch); K/V blocks of kBlockN keys stream through a
// kStages-deep cp.async pipeline (separate commit groups for K and V, so S = Q K^T starts while V still lands).
// Each warp owns kBlockM / kWarps query rows (kQueryTiles = 1 or 2 m16 tiles). Per K/V block j:
//   S   = Q K_j^T                         mma.sync m16n8k16, fp32 accumulators, Q and K via ldmatrix
//   t   = S * scale_log2                  (plain path: scale folded into the exp2 FMA below)
//   t   = log2e * (softcap*tanh(S*scale/softcap) + bias - slope*|i + sk - sq - j|)   (feature path)
//   m'  = max(m, rowmax t);  P = exp2(t - m');  l = l*exp2(m - m') + rowsum P;  O = O*exp2(m - m') + P V_j
// P stays in registers: the S accumulator layout of two n8 tiles is exactly the A operand of the next m16n8k16,
// so P is only re-packed to 16-bit pairs; V comes through ldmatrix.trans. Finally O /= l, lse = (m + log2 l) ln 2
// (with attention sinks, kHasSinks, the row's sink column joins there: common/sinks.cuh).
// Masks are bottom-right aligned: key j is visible to query i iff lo(i) <= j < hi(i) with
// lo = i + sk - sq - win_left (win_left >= 0), hi = i + sk - sq + win_right + 1 (win_right >= 0). K/V blocks
// wholly outside the band are never loaded; blocks are visited from the last to the first, and masking code runs
// only for blocks that cross the band edge or the end of the keys (never when kEvenK and inside the band).
// Fully masked rows give o = 0, lse = -inf. Head dims are padded to 16 in shared memory (zero-filled). Q, K and V
// rows are XOR-swizzled in 16-byte chunks where the padded head dim is a multiple of 64, else padded by 16 bytes
// (smem_layout.cuh): ldmatrix is conflict-free in both, cp.async writes only in the swizzled one.
// The output tile is staged in shared memory (reusing the Q region) and written with 16-byte stores.
// Large tiles (kBigTile: S + O accumulators above 160 registers per thread, e.g. FA2's 128x64 / 4-warp tile at
// d128 and 128x128 / 4 warps at d64) pack P to 16-bit fragments right after exp2 and rescale O only when some row
// of the warp changed its maximum (warp vote; the skip is exact since corr == 1). Both cut register pressure (the
// rescale in its own branch keeps ptxas from hoisting fragment loads past it), which brings these tiles under 255
// registers; on smaller tiles they cost 5-10% (H200, scratch/h2c/NOTES.md), so those keep the straight-line code.
// Grid: x = query block (reversed for masked problems: the longest blocks first), y = query head, z = batch.
// User code (fa_mods): score_mod runs after ALiBi on the feature path (natural units, in-range i, j); mask_mod hides
// keys where it returns false (both per element in common/fwd_score.cuh, shared with fwd_wgmma). Block skipping
// (kBlockSparse, set with a mask_mod): the plan's mask_blocks step has classified every (query block, key block)
// tile (args.blk_cls, fa_args.cuh); each CTA first compacts its row of classes, from the last key block to the
// first, into its visiting list (args.blk_list: warp 0 writes it, every warp counts it; the votes of
// common/blk_visit.cuh), then the pipeline walks that list (prefetching list[it + kStages - 1]): blocks the mask
// hides wholly are never loaded, and blocks it hides nowhere skip the masking step. Without classes (blk_cls null)
// every block of the band is visited and masked.
// Reads fa_cfg: kDtype, kHeadDim, kHeadDimV, kMask, kHasBias, kHasAlibi, kHasSoftcap, kHasMaskMod, kHasScoreMod,
// kVarlen, kEvenK, kHasLse, kHasSinks,
// kBlockM, kBlockN, kWarps, kStages (1: no prefetch; >= 2: blocks j+1..j+kStages-1 in flight), kQInRegs
// (1: Q fragments loaded once into registers), kKvJoint (false: K and V waited for separately, two barriers per block,
// S = Q K^T overlaps the V copy; true: K and V waited for together, one barrier per block).
#ifndef FA_FWD_MMA_CUH
#define FA_FWD_MMA_CUH

#include "common/sm80.cuh"
#include "common/fwd_score.cuh"
#include "common/blk_visit.cuh"
#include "smem_layout.cuh"

namespace fa_mma {
using namespace fa_sm80;

constexpr int kD = fa_cfg::kHeadDim;
constexpr int kDV = fa_cfg::kHeadDimV;
constexpr int kDPad = (kD + 15) / 16 * 16;  // padded head dims (MMA k granularity 16, ldmatrix.x4 covers 16)
constexpr int kDVPad = (kDV + 15) / 16 * 16;
constexpr int kBlockM = fa_cfg::kBlockM;
constexpr int kBlockN = fa_cfg::kBlockN;
constexpr int kWarps = fa_cfg::kWarps;
constexpr int kThreads = kWarps * 32;
constexpr int kStages = fa_cfg::kStages;
constexpr int kRowsPerWarp = kBlockM / kWarps;
// Per warp: m16 tiles of query rows, n8 tiles of keys (S) and of head columns (O), k16 steps of Q K^T.
constexpr int kQueryTiles = kRowsPerWarp / 16;
constexpr int kKeyTiles = kBlockN / 8;
constexpr int kColTiles = kDVPad / 8;
constexpr int kKSteps = kDPad / 16;
constexpr bool kBigTile = kQueryTiles * (kKeyTiles + kColTiles) * 4 > 160;  // early P packing + conditional O rescale
// Shared row pitches (elements): Q, K, V swizzled or padded (smem_layout.cuh); the O staging padded (32-bit
// fragment stores, 16-byte reads).
constexpr int kPitchQ = fa_smem_pitch(kDPad);
constexpr int kPitchK = fa_smem_pitch(kDPad);
constexpr int kPitchV = fa_smem_pitch(kDVPad);
constexpr int kPitchO = kDVPad + 8;
constexpr int kQBytes = kBlockM * kPitchQ * 2;
constexpr int kOBytes = kBlockM * kPitchO * 2;
constexpr int kRegion0 = kQBytes > kOBytes ? kQBytes : kOBytes;
constexpr int kKSlot = kBlockN * kPitchK * 2;
constexpr int kVSlot = kBlockN * kPitchV * 2;
static_assert(kRegion0 % 128 == 0 && kKSlot % 128 == 0 && kVSlot % 128 == 0, "fwd_mma: tiles 128-byte aligned");
constexpr bool kFeat = fa_cfg::kHasBias || fa_cfg::kHasAlibi || fa_cfg::kHasSoftcap || fa_cfg::kHasScoreMod;
constexpr bool kJoint = fa_cfg::kKvJoint;           // wait for K and V together, one barrier per block
constexpr bool kBlockSparse = fa_cfg::kHasMaskMod;  // visit the classified key blocks only (mask_blocks)
#define FA_MMA_NEG_INF __int_as_float(0xff800000)

static_assert(fa_cfg::kDtype == 1 || fa_cfg::kDtype == 2, "fwd_mma: fp16 or bf16 only");
static_assert(kRowsPerWarp % 16 == 0 && (kQueryTiles == 1 || kQueryTiles == 2),
              "fwd_mma: 16 or 32 query rows per warp");
static_assert(kBlockN % 16 == 0, "fwd_mma: block_n multiple of 16");
static_assert(kStages >= 1 && kStages <= 4, "fwd_mma: 1..4 stages");
static_assert(kD % 8 == 0 && kDV % 8 == 0 && kD <= 256 && kDV <= 256, "fwd_mma: head dims");

// Copies a [rows x cols] tile (cols a multiple of 8 elements, padded to pcols) from global to shared memory with
// 16-byte cp.async; rows >= nrows and columns >= cols are zero-filled. Row layout from PITCH (smem_layout.cuh).
template <int ROWS, int COLS, int PCOLS, int PITCH, bool UNROLL = false>
FA_DEVICE void load_tile(unsigned sdst, const unsigned short* g, long long gstride, int nrows, int tid) {
  // Each thread owns one 16-byte column chunk and walks rows with a running pointer. UNROLL (K/V blocks with
  // kEvenK, no row predicate): the row loop is unrolled, so each cp.async takes its shared address as
  // [register + immediate] and no register is rewritten right after a cp.async has read it (a rolled loop stalls
  // there on the long scoreboard until the copy has read its operands: ~5% of the warp's stall samples at d128,
  // Nsight Compute on H100). Else a rolled loop: keeps the per-row addresses out of the registers that live
  // across the main loop (the ragged-key variants spill when unrolled). When kThreads is not a multiple of the
  // chunk count, the last kThreads % kChunks threads stay idle.
  constexpr int kChunks = PCOLS / 8;
  constexpr int kStep = kThreads / kChunks;
  static_assert(kStep >= 1, "fwd_mma: too few threads for a tile row");
  const int r0 = tid / kChunks, ch = tid % kChunks;
  if (kThreads % kChunks != 0 && r0 >= kStep) return;
  const bool col_ok = PCOLS == COLS || ch * 8 < COLS;
  const unsigned short* src = g + (long long)r0 * gstride + ch * 8;
  unsigned dst = sdst + fa_smem_off<PITCH>(r0, ch);
  const long long gstep = (long long)kStep * gstride;
  // Two copies of one loop: a computed `#pragma unroll(N)` gives different code (it spilled 8 bytes at the
  // FA2 d128 tile), so the full unroll and the rolled loop are spelled out.
  if constexpr (fa_smem_swizzled(PITCH) && kStep % 8 != 0) {
    // Swizzled rows whose thread steps are not a multiple of 8 rows: the chunk's XOR changes from row to row.
#pragma unroll
    for (int r = r0; r < ROWS; r += kStep) {
      const bool ok = col_ok && r < nrows;
      cp_async16(sdst + fa_smem_off<PITCH>(r, ch), ok ? src : g, ok ? 16 : 0);
      src += gstep;
    }
  } else if constexpr (UNROLL) {
#pragma unroll
    for (int r = r0; r < ROWS; r += kStep) {
      const bool ok = col_ok && r < nrows;
      cp_async16(dst, ok ? src : g, ok ? 16 : 0);
      src += gstep;
      dst += (unsigned)(kStep * PITCH * 2);
    }
  } else {
#pragma unroll 1
    for (int r = r0; r < ROWS; r += kStep) {
      const bool ok = col_ok && r < nrows;
      cp_async16(dst, ok ? src : g, ok ? 16 : 0);
      src += gstep;
      dst += (unsigned)(kStep * PITCH * 2);
    }
  }
}

}  // namespace fa_mma

extern "C" __global__ void __launch_bounds__(fa_cfg::kWarps * 32, 1) fa_kernel(const FaFwdArgs args FA_USER_PARAM) {
  using namespace fa_mma;
  extern __shared__ __attribute__((aligned(128))) unsigned char fa_smem[];
  typedef unsigned short T;

  const int tid = (int)threadIdx.x;
  const int warp = tid >> 5, lane = tid & 31;
  const int h = (int)blockIdx.y, b = (int)blockIdx.z;
  const int m_block = fa_cfg::kMask != 0 ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x;
  const int m0 = m_block * kBlockM;

  int sq, sk;
  int base_q, base_k;  // token offsets of the sequence (varlen) or 0
  if constexpr (fa_cfg::kVarlen) {
    const int q0 = args.cu_seqlens_q[b], k0 = args.cu_seqlens_k[b];
    sq = args.cu_seqlens_q[b + 1] - q0;
    sk = args.cu_seqlens_k[b + 1] - k0;
    base_q = q0;
    base_k = k0;
  } else {
    sq = args.seqlen_q;
    sk = args.seqlen_k;
    base_q = 0;
    base_k = 0;
  }
  if (m0 >= sq) return;
  const int g = h / args.group;
  const long long bq = fa_cfg::kVarlen ? 0ll : (long long)b;  // batch offsets vanish in varlen mode
  const T* qg = (const T*)args.q + bq * args.q_sb + (long long)(base_q + m0) * args.q_ss + (long long)h * args.q_sh;
  const T* kg = (const T*)args.k + bq * args.k_sb + (long long)base_k * args.k_ss + (long long)g * args.k_sh;
  const T* vg = (const T*)args.v + bq * args.v_sb + (long long)base_k * args.v_ss + (long long)g * args.v_sh;
  const int q_rows = min(kBlockM, sq - m0);

  // Key range of the whole block; whole K/V blocks outside it are skipped.
  const int diag0 = m0 + sk - sq;  // diagonal offset of the block's first row
  const int last_row = m0 + q_rows - 1;
  int key_lo = 0, key_hi = sk;
  if constexpr (fa_cfg::kMask != 0) {
    if (args.win_left >= 0) key_lo = max(0, diag0 - args.win_left);
    if (args.win_right >= 0) key_hi = min(sk, last_row + sk - sq + args.win_right + 1);
  }
  const int nb_lo = key_lo / kBlockN;
  const int nb_hi = key_hi > key_lo ? (key_hi + kBlockN - 1) / kBlockN : nb_lo;
  int n_blocks = nb_hi - nb_lo;
  // Block skipping: the visiting list of this CTA, (n_block << 1) | full, from the classes of its query block.
  const int* blist = nullptr;
  if constexpr (kBlockSparse) {
    if (args.blk_cls != nullptr) {
      const unsigned char* cls = args.blk_cls + (long long)b * args.blk_cls_sb + (long long)h * args.blk_cls_sh +
                                 (long long)m_block * args.blk_nkb;
      int* list = args.blk_list + (((long long)b * args.heads_q + h) * gridDim.x + m_block) * args.blk_nkb;
      const int count = fa_blk_list<true>(cls, nb_lo, nb_hi, 0, list, warp == 0);  // common/blk_visit.cuh
      __syncthreads();  // warp 0's list is visible to the CTA
      n_blocks = count;
      blist = list;
    }
  }

  const unsigned sQ = smem_u32(fa_smem);
  const unsigned sK = sQ + (unsigned)kRegion0;
  const unsigned sV = sK + (unsigned)(kStages * kKSlot);

  const int gq = lane >> 2, tq = lane & 3;  // mma fragment coordinates
  const int wrow0 = warp * kRowsPerWarp;    // first row of this warp inside the block

  float o_acc[kQueryTiles][kColTiles][4];
  float row_m[kQueryTiles][2], row_l[kQueryTiles][2];
#pragma unroll
  for (int mt = 0; mt < kQueryTiles; ++mt) {
#pragma unroll
    for (int n = 0; n < kColTiles; ++n) o_acc[mt][n][0] = o_acc[mt][n][1] = o_acc[mt][n][2] = o_acc[mt][n][3] = 0.f;
    row_m[mt][0] = row_m[mt][1] = FA_MMA_NEG_INF;
    row_l[mt][0] = row_l[mt][1] = 0.f;
  }

  if (n_blocks > 0) {
    // Prologue: Q, then K/V blocks of the first kStages-1 iterations (block index = nb_hi - 1 - it).
    load_tile<kBlockM, kD, kDPad, kPitchQ>(sQ, qg, args.q_ss, q_rows, tid);
    cp_commit();
    auto issue = [&](int it) {
      if (it < n_blocks) {
        const int nb = kBlockSparse && blist != nullptr ? blist[it] >> 1 : nb_hi - 1 - it;
        const int slot = it % kStages;
        const int kn = nb * kBlockN;
        const int rows = fa_cfg::kEvenK ? kBlockN : min(kBlockN, sk - kn);
        load_tile<kBlockN, kD, kDPad, kPitchK, fa_cfg::kEvenK>(sK + (unsigned)(slot * kKSlot),
                                                               kg + (long long)kn * args.k_ss, args.k_ss, rows, tid);
        cp_commit();
        load_tile<kBlockN, kDV, kDVPad, kPitchV, fa_cfg::kEvenK>(sV + (unsigned)(slot * kVSlot),
                                                                 vg + (long long)kn * args.v_ss, args.v_ss, rows, tid);
        cp_commit();
      } else {
        cp_commit();
        cp_commit();
      }
    };
    if constexpr (kStages >= 2) {
#pragma unroll
      for (int s = 0; s < kStages - 1; ++s) issue(s);
    }

    const float mul = kFeat ? 1.f : args.scale_log2;  // feature path scores are already in log2 units
    const float* alibi_p = nullptr;
    float slope = 0.f;
    if constexpr (fa_cfg::kHasAlibi) {
      alibi_p = args.alibi;
      slope = alibi_p[h] * 1.4426950408889634f;
    }
    const T* bias_g = nullptr;
    if constexpr (fa_cfg::kHasBias)
      bias_g = (const T*)args.bias + (long long)b * args.bias_sb + (long long)h * args.bias_sh;

    // ldmatrix lane address parts (rows, 16-byte chunks; smem_layout.cuh adds the block's rows and columns)
    const unsigned q_lane = fa_smem_lane<kPitchQ>(sQ, wrow0 + (lane & 15), lane >> 4);  // A (Q) operand
    // Q fragments in registers (optional): wait for the Q group only (the K/V prologue groups stay in flight).
    unsigned q_frag[fa_cfg::kQInRegs ? kQueryTiles : 1][fa_cfg::kQInRegs ? kKSteps : 1][4];
    if constexpr (fa_cfg::kQInRegs) {
      cp_wait<2 * (kStages - 1)>();
      __syncthreads();
#pragma unroll
      for (int mt = 0; mt < kQueryTiles; ++mt)
#pragma unroll
        for (int ks = 0; ks < kKSteps; ++ks)
          ldsm_x4(fa_smem_at<kPitchQ>(q_lane, mt * 16, ks * 16), q_frag[mt][ks][0], q_frag[mt][ks][1],
                  q_frag[mt][ks][2], q_frag[mt][ks][3]);
    }
    const unsigned k_lane = fa_smem_lane<kPitchK>(0u, (lane & 7) + ((lane >> 4) << 3), (lane >> 3) & 1);  // K^T
    const unsigned v_lane = fa_smem_lane<kPitchV>(0u, (lane & 7) + (((lane >> 3) & 1) << 3), lane >> 4);  // V

    for (int it = 0; it < n_blocks; ++it) {
      const int entry = kBlockSparse && blist != nullptr ? blist[it] : ((nb_hi - 1 - it) << 1);
      const int nb = entry >> 1;
      const int slot = it % kStages;
      const int kn = nb * kBlockN;
      if constexpr (kStages == 1) {
        __syncthreads();  // everyone is done with the single slot
        issue(it);
        if constexpr (kJoint) cp_wait<0>();
        else cp_wait<1>();
      } else {
        if constexpr (kJoint) cp_wait<2 * kStages - 4>();
        else cp_wait<2 * kStages - 3>();
      }
      __syncthreads();
      if constexpr (kStages >= 2) issue(it + kStages - 1);
      // ---- S = Q K^T ----
      float s[kQueryTiles][kKeyTiles][4];
#pragma unroll
      for (int mt = 0; mt < kQueryTiles; ++mt)
#pragma unroll
        for (int n = 0; n < kKeyTiles; ++n) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.f;
      const unsigned kbase = sK + (unsigned)(slot * kKSlot) + k_lane;
#pragma unroll
      for (int ks = 0; ks < kKSteps; ++ks) {
        unsigned a[kQueryTiles][4];
#pragma unroll
        for (int mt = 0; mt < kQueryTiles; ++mt) {
          if constexpr (fa_cfg::kQInRegs) {
            a[mt][0] = q_frag[mt][ks][0];
            a[mt][1] = q_frag[mt][ks][1];
            a[mt][2] = q_frag[mt][ks][2];
            a[mt][3] = q_frag[mt][ks][3];
          } else {
            ldsm_x4(fa_smem_at<kPitchQ>(q_lane, mt * 16, ks * 16), a[mt][0], a[mt][1], a[mt][2], a[mt][3]);
          }
        }
#pragma unroll
        for (int np = 0; np < kKeyTiles / 2; ++np) {
          unsigned b0, b1, b2, b3;
          ldsm_x4(fa_smem_at<kPitchK>(kbase, np * 16, ks * 16), b0, b1, b2, b3);
#pragma unroll
          for (int mt = 0; mt < kQueryTiles; ++mt) {
            mma16816(s[mt][2 * np], a[mt], b0, b1);
            mma16816(s[mt][2 * np + 1], a[mt], b2, b3);
          }
        }
      }

      // ---- score transforms (feature path) ----
      if constexpr (kFeat) {
#pragma unroll
        for (int mt = 0; mt < kQueryTiles; ++mt)
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            const int i = m0 + wrow0 + mt * 16 + gq + hh * 8;
#pragma unroll
            for (int n = 0; n < kKeyTiles; ++n)
#pragma unroll
              for (int e = 0; e < 2; ++e) {
                const int j = kn + n * 8 + tq * 2 + e;
                s[mt][n][hh * 2 + e] = fa_feature_score(s[mt][n][hh * 2 + e], args, bias_g, slope, b, h, i, j, sq, sk,
                                                        FA_USER_ARGS);  // common/fwd_score.cuh
              }
          }
      }

      // ---- masking: only blocks crossing the band edge or the end of the keys ----
      bool need_mask = fa_cfg::kHasMaskMod || (!fa_cfg::kEvenK && kn + kBlockN > sk);
      if constexpr (fa_cfg::kMask != 0) {
        if (args.win_left >= 0) need_mask |= kn < m0 + kBlockM - 1 + sk - sq - args.win_left;
        if (args.win_right >= 0) need_mask |= kn + kBlockN - 1 > diag0 + args.win_right;
      }
      if constexpr (kBlockSparse) {  // a classified block: full ones skip every mask (built-in, key range, user)
        if (blist != nullptr) need_mask = (entry & 1) == 0;
      }
      if (need_mask) {
#pragma unroll
        for (int mt = 0; mt < kQueryTiles; ++mt)
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            const int i = m0 + wrow0 + mt * 16 + gq + hh * 8;
            int lo = 0, hi = sk;
            if constexpr (fa_cfg::kMask != 0) {
              if (args.win_left >= 0) lo = i + sk - sq - args.win_left;
              if (args.win_right >= 0) hi = min(hi, i + sk - sq + args.win_right + 1);
            }
#pragma unroll
            for (int n = 0; n < kKeyTiles; ++n)
#pragma unroll
              for (int e = 0; e < 2; ++e) {
                const int j = kn + n * 8 + tq * 2 + e;
                // user code for in-range (i, j) only (j < hi <= sk once the band test passed)
                if (j < lo || j >= hi || fa_user_hides(b, h, i, j, sq, FA_USER_ARGS))
                  s[mt][n][hh * 2 + e] = FA_MMA_NEG_INF;
              }
          }
      }

      // ---- online softmax (base 2) ----
      unsigned pk[kBigTile ? kQueryTiles : 1][kBigTile ? kBlockN / 16 : 1][4];  // P as A fragments (kBigTile)
      float corr_b[kBigTile ? kQueryTiles : 1][2];                              // rescale factors (kBigTile)
#pragma unroll
      for (int mt = 0; mt < kQueryTiles; ++mt)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          float mx = row_m[mt][hh];
#pragma unroll
          for (int n = 0; n < kKeyTiles; ++n) mx = fmaxf(mx, fmaxf(s[mt][n][hh * 2], s[mt][n][hh * 2 + 1]));
          mx = fa_lanes_max<4>(mx);  // the row's quad
          const float ms = mx == FA_MMA_NEG_INF ? 0.f : mx * mul;
          const float corr = fa_exp2(row_m[mt][hh] * mul - ms);
          row_m[mt][hh] = mx;
          float sum = 0.f;
#pragma unroll
          for (int n = 0; n < kKeyTiles; ++n) {
            const float p0 = fa_exp2(s[mt][n][hh * 2] * mul - ms);
            const float p1 = fa_exp2(s[mt][n][hh * 2 + 1] * mul - ms);
            if constexpr (kBigTile) {
              pk[mt][n / 2][hh + 2 * (n & 1)] = pack2(p0, p1);
            } else {
              s[mt][n][hh * 2] = p0;
              s[mt][n][hh * 2 + 1] = p1;
            }
            sum += p0 + p1;
          }
          row_l[mt][hh] = row_l[mt][hh] * corr + sum;
          if constexpr (kBigTile) {
            corr_b[mt][hh] = corr;
          } else {
#pragma unroll
            for (int n = 0; n < kColTiles; ++n) {
              o_acc[mt][n][hh * 2] *= corr;
              o_acc[mt][n][hh * 2 + 1] *= corr;
            }
          }
        }
      if constexpr (kBigTile) {
        bool rescale = false;
#pragma unroll
        for (int mt = 0; mt < kQueryTiles; ++mt) rescale |= corr_b[mt][0] != 1.f || corr_b[mt][1] != 1.f;
        if (__any_sync(0xffffffffu, rescale)) {
#pragma unroll
          for (int mt = 0; mt < kQueryTiles; ++mt)
#pragma unroll
            for (int n = 0; n < kColTiles; ++n) {
              o_acc[mt][n][0] *= corr_b[mt][0];
              o_acc[mt][n][1] *= corr_b[mt][0];
              o_acc[mt][n][2] *= corr_b[mt][1];
              o_acc[mt][n][3] *= corr_b[mt][1];
            }
        }
      }

      // ---- wait for V, then O += P V ----
      if constexpr (!kJoint) {
        if constexpr (kStages == 1) cp_wait<0>();
        else cp_wait<2 * kStages - 2>();
        __syncthreads();
      }
      const unsigned vbase = sV + (unsigned)(slot * kVSlot) + v_lane;
#pragma unroll
      for (int kk = 0; kk < kBlockN / 16; ++kk) {
        unsigned p[kQueryTiles][4];
#pragma unroll
        for (int mt = 0; mt < kQueryTiles; ++mt) {
          if constexpr (kBigTile) {
            p[mt][0] = pk[mt][kk][0];
            p[mt][1] = pk[mt][kk][1];
            p[mt][2] = pk[mt][kk][2];
            p[mt][3] = pk[mt][kk][3];
          } else {
            p[mt][0] = pack2(s[mt][2 * kk][0], s[mt][2 * kk][1]);
            p[mt][1] = pack2(s[mt][2 * kk][2], s[mt][2 * kk][3]);
            p[mt][2] = pack2(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
            p[mt][3] = pack2(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
          }
        }
#pragma unroll
        for (int dp = 0; dp < kColTiles / 2; ++dp) {
          unsigned b0, b1, b2, b3;
          ldsm_x4_t(fa_smem_at<kPitchV>(vbase, kk * 16, dp * 16), b0, b1, b2, b3);
#pragma unroll
          for (int mt = 0; mt < kQueryTiles; ++mt) {
            mma16816(o_acc[mt][2 * dp], p[mt], b0, b1);
            mma16816(o_acc[mt][2 * dp + 1], p[mt], b2, b3);
          }
        }
      }
    }
    cp_wait<0>();
  }

  // ---- epilogue: O /= l, LSE, stage O through shared memory, 16-byte stores ----
  __syncthreads();  // every warp is done reading Q / K / V
#pragma unroll
  for (int mt = 0; mt < kQueryTiles; ++mt)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const float l = fa_lanes_sum<4>(row_l[mt][hh]);
      float inv = l > 0.f ? 1.f / l : 0.f;
      const int r = wrow0 + mt * 16 + gq + hh * 8;
      [[maybe_unused]] float lse_sink = 0.f;
      if constexpr (fa_cfg::kHasSinks) {                  // the sink column (common/sinks.cuh)
        const float mul = kFeat ? 1.f : args.scale_log2;  // feature path scores are already in log2 units
        const float mx = row_m[mt][hh];
        const FaRowEnd e = fa_sink_row_end(mx == FA_MMA_NEG_INF ? FA_MMA_NEG_INF : mx * mul, l, args.sinks[h]);
        inv = e.o_mul;
        lse_sink = e.lse;
      }
      if constexpr (fa_cfg::kHasLse) {
        if (args.lse != nullptr && tq == 0 && r < q_rows) {
          const float mul = kFeat ? 1.f : args.scale_log2;  // feature path scores are already in log2 units
          const float mx = row_m[mt][hh];
          const float lse = fa_cfg::kHasSinks                   ? lse_sink
                            : (l > 0.f && mx != FA_MMA_NEG_INF) ? (mx * mul + __log2f(l)) * 0.6931471805599453f
                                                                : FA_MMA_NEG_INF;
          args.lse[(long long)b * args.lse_sb + (long long)h * args.lse_sh + (long long)(base_q + m0 + r)] = lse;
        }
      }
      unsigned* orow = (unsigned*)(fa_smem + (size_t)(r * kPitchO) * 2);
#pragma unroll
      for (int n = 0; n < kColTiles; ++n)
        orow[(n * 8 + tq * 2) / 2] = pack2(o_acc[mt][n][hh * 2] * inv, o_acc[mt][n][hh * 2 + 1] * inv);
    }
  __syncthreads();
  T* og = (T*)args.o + (fa_cfg::kVarlen ? 0ll : (long long)b * args.o_sb) + (long long)(base_q + m0) * args.o_ss +
          (long long)h * args.o_sh;
  constexpr int kChunks = kDV / 8;
  constexpr int kTotal = kBlockM * kChunks;
#pragma unroll
  for (int it = 0; it < (kTotal + kThreads - 1) / kThreads; ++it) {
    const int idx = tid + it * kThreads;
    if (kTotal % kThreads == 0 || idx < kTotal) {
      const int r = idx / kChunks, ch = idx % kChunks;
      if (r < q_rows) {
        const uint4 v = *(const uint4*)(fa_smem + (size_t)(r * kPitchO + ch * 8) * 2);
        *(uint4*)(og + (long long)r * args.o_ss + ch * 8) = v;
      }
    }
  }
}

#endif  // FA_FWD_MMA_CUH
