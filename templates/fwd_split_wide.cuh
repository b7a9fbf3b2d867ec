// fwd_split_wide.cuh -- the wide-head body of the decode forward (templates/fwd_split.cuh; included there, inside
// nothing): head_dim > 256 or head_dim_v > 256, i.e. MLA decode (d 576 / dv 512, 128 query heads over one latent KV
// head). The grid, packing, split-KV, paged reads, used lengths, masks and outputs are the narrow kernel's; the work
// split inside a CTA differs, since a warp cannot hold a 16 x 512 float32 O:
//   rows: kFaSplitRowsWide (64) packed rows per CTA = four m16 row tiles, so every K/V byte a CTA reads serves 64
//     (query token, head) rows; 8 warps, block_n 32 keys, 2 stages (fwd_split_layout.cuh's wide plan, ~215 KB).
//   S = Q K^T once per block: warp w computes row tile w & 3 x key half w >> 2 (16 x 16, the 576-long inner
//     dimension from Q and K in shared memory); the block's row maxima meet in shared memory (two halves per row),
//     P = exp2(S - m) goes to shared memory (dtype), its row sums and the rescale factor exp2(m_old - m) too.
//   O += P V: warp w owns columns [w dv / 8, (w + 1) dv / 8) of all 64 rows (4 m-tiles x dv / 64 n8 tiles float32:
//     128 registers at dv 512); P fragments come from shared memory, V fragments by ldmatrix.trans.
// When v is k's first head_dim_v columns (same pointer and strides: MLA's latent cache), V is read from the K tile
// and the slots hold 4 K tiles (a 4-deep pipeline, half the copies). S keeps four accumulator sets over interleaved
// k steps (short mma dependency chains), summed at the end.
// The running sum l of a row lives in shared memory (updated once per block by one thread per row), its max m in the
// registers of the two warps of its row tile (both compute it identically). The end divides O by l and writes o or
// the split's normalized part_o / part_lse, as the narrow kernel does. No ALiBi or softcap (the family's covers()).
#ifndef FA_FWD_SPLIT_WIDE_CUH
#define FA_FWD_SPLIT_WIDE_CUH

namespace fa_split {

template <int kUnused, bool kAlias>
FA_DEVICE void wide_kernel(const FaFwdArgs& a) {
  constexpr int kSt = kAlias ? kFaSplitWideAliasStages : kStages;  // pipeline depth
  constexpr int kRingW = 2 * kSt;
  constexpr int kVSlotW = kAlias ? kKSlot : kVSlot;  // V tiles: inside the K tiles when aliased
  constexpr int kPitchVW = kAlias ? kPitchK : kPitchV;
  constexpr int kSlotsW = fa_split_wide_slots_bytes(kD, kDV, kBlockN, kStages);
  constexpr int kR = kFaSplitRowsWide;             // 64 packed rows
  constexpr int kPitchP = fa_smem_pitch(kBlockN);  // P tile pitch (elements)
  constexpr int kColsW = kDVPad / kWarps;          // O columns per warp
  constexpr int kNT = kColsW / 8;                  // n8 tiles of O per warp
  constexpr int kQW = fa_split_wide_q_bytes(kD);
  static_assert(kUnused == 0 && kWarps == 8 && kBlockN == 32, "fwd_split wide: 8 warps, 32-key blocks");
  static_assert(kUnused == 0 && kColsW % 16 == 0, "fwd_split wide: head_dim_v / 8 a multiple of 16");
  static_assert(kUnused == 0 && !kFeat, "fwd_split wide: no ALiBi / softcap");
  extern __shared__ __attribute__((aligned(128))) unsigned char fa_smem[];
  typedef unsigned short T;

  const int tid = (int)threadIdx.x;
  const int warp = tid >> 5, lane = tid & 31;
  const int ns = a.num_splits;
  const int split = (int)blockIdx.x % ns, g = (int)blockIdx.x / ns;
  const int b = (int)blockIdx.z;
  const int group = a.group;
  const int r0 = (int)blockIdx.y * kR;
  const FaSplitWork w = fa_split_work<kR, kBlockN>(a, b, r0, split, ns);
  if (w.rows <= 0) return;
  const int sq = w.sq, sk = w.sk, rows = w.rows;
  const int key_hi = w.key_hi, full_lo = w.full_lo, full_hi = w.full_hi, blk0 = w.blk0, n_blocks = w.n_blocks;

  const unsigned sQ = smem_u32(fa_smem);
  const unsigned sK = sQ + (unsigned)kQW;
  const unsigned sV = kAlias ? sK : sK + (unsigned)(kSt * kKSlot);
  const unsigned sP = sK + (unsigned)kSlotsW;
  float* stat = (float*)(fa_smem + kQW + kSlotsW + fa_split_wide_p_bytes(kBlockN));
  float* sRed = stat;                 // [2][64] row maxima of the two key halves
  float* sSum = stat + 2 * kR;        // [2][64] row sums of P of the two key halves
  float* sCorr = stat + 4 * kR;       // [64] exp2(m_old - m_new) of the block
  float* sL = stat + 5 * kR;          // [64] running sums
  float* sMf = stat + 6 * kR;         // [64] final maxima (scaled, log2 units)
  int* ring = (int*)(stat + 8 * kR);  // [kRingW][kBlockN]

  const T* kpool = (const T*)a.k;
  const T* vpool = (const T*)a.v;
  const long long kbase_off = (long long)b * a.k_sb + (long long)g * a.k_sh;
  const long long vbase_off = (long long)b * a.v_sb + (long long)g * a.v_sh;
  const int* bt = fa_cfg::kPaged ? a.block_table + (long long)b * a.bt_stride : nullptr;

  const int gq = lane >> 2, tq = lane & 3;
  const int mt = warp & 3, kh = warp >> 2;  // S: row tile, key half
  const float mul = a.scale_log2;

  float o_acc[4][kNT][4];
#pragma unroll
  for (int m = 0; m < 4; ++m)
#pragma unroll
    for (int n = 0; n < kNT; ++n) o_acc[m][n][0] = o_acc[m][n][1] = o_acc[m][n][2] = o_acc[m][n][3] = 0.f;
  float row_m[2] = {FA_SPLIT_NEG_INF, FA_SPLIT_NEG_INF};
  if (tid < kR) sL[tid] = 0.f;

  if (n_blocks > 0) {
    load_q<kR>(a, sQ, tid, b, g, r0, rows);
    auto table_async = [&](int blk) {
      if (blk < n_blocks) ring_load<kRingW, true>(a, ring, bt, tid, blk, blk0, key_hi);
    };
    if constexpr (fa_cfg::kPaged) {
#pragma unroll
      for (int s = 0; s < kSt; ++s)
        if (s < n_blocks) ring_load<kRingW, false>(a, ring, bt, tid, s, blk0, key_hi);
    }
    __syncthreads();
    auto issue = [&](int it) {
      if (it < n_blocks) {
        const int slot = it % kSt;
        const int kn = (blk0 + it) * kBlockN;
        const int* pr = ring + (it % kRingW) * kBlockN;
        load_block<kD, kDPad, kPitchK, 2>(sK + (unsigned)(slot * kKSlot), tid, kpool, [&](int r) {
          return kv_row(a, kpool, kbase_off, a.k_sb, a.k_ss, a.k_sh, g, pr, r, kn + r, key_hi);
        });
        if constexpr (!kAlias)
          load_block<kDV, kDVPad, kPitchV, 2>(sV + (unsigned)(slot * kVSlot), tid, vpool, [&](int r) {
            return kv_row(a, vpool, vbase_off, a.v_sb, a.v_ss, a.v_sh, g, pr, r, kn + r, key_hi);
          });
        if constexpr (fa_cfg::kPaged) table_async(it + kSt);
      }
      cp_commit();
    };
#pragma unroll
    for (int s = 0; s < kSt - 1; ++s) issue(s);

    int lo_r[2], hi_r[2];
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int i = (r0 + mt * 16 + gq + hh * 8) / group;
      lo_r[hh] = 0;
      hi_r[hh] = sk;
      if constexpr (fa_cfg::kMask != 0) {
        if (a.win_left >= 0) lo_r[hh] = i + sk - sq - a.win_left;
        if (a.win_right >= 0) hi_r[hh] = min(sk, i + sk - sq + a.win_right + 1);
      }
    }

    const unsigned q_lane = fa_smem_lane<kPitchK>(sQ, lane & 15, lane >> 4);
    const unsigned k_lane = fa_smem_lane<kPitchK>(0u, (lane & 7) + ((lane >> 4) << 3), (lane >> 3) & 1);
    const unsigned v_lane = fa_smem_lane<kPitchVW>(0u, (lane & 7) + (((lane >> 3) & 1) << 3), lane >> 4);
    const unsigned p_lane = fa_smem_lane<kPitchP>(sP, lane & 15, lane >> 4);

    for (int it = 0; it < n_blocks; ++it) {
      const int slot = it % kSt;
      const int kn = (blk0 + it) * kBlockN;
      cp_wait<kSt - 2>();
      int bad = 0;
      if constexpr (fa_cfg::kPaged) {
        const int* prm = ring + (it % kRingW) * kBlockN;
        for (int r = tid; r < kBlockN; r += kThreads)
          if (kn + r < key_hi && (unsigned)prm[r] >= (unsigned)a.num_pages) bad = 1;
      }
      const bool blk_bad = fa_cfg::kPaged ? __syncthreads_or(bad) != 0 : (__syncthreads(), false);
      issue(it + kSt - 1);
      // ---- S = Q K^T: row tile mt, keys [16 kh, 16 kh + 16) of the block; kSets independent accumulator sets
      // over interleaved k steps (short mma dependency chains), summed at the end ----
      constexpr int kSets = 4;
      float s[2][4], sx[kSets][2][4];
#pragma unroll
      for (int x = 0; x < kSets; ++x)
#pragma unroll
        for (int n = 0; n < 2; ++n) sx[x][n][0] = sx[x][n][1] = sx[x][n][2] = sx[x][n][3] = 0.f;
      const unsigned kb = sK + (unsigned)(slot * kKSlot) + k_lane;
#pragma unroll 2
      for (int k0 = 0; k0 < kKSteps; k0 += kSets) {
#pragma unroll
        for (int x = 0; x < kSets; ++x) {
          const int ks = k0 + x;
          if (kKSteps % kSets == 0 || ks < kKSteps) {
            unsigned qa[4], b0, b1, b2, b3;
            ldsm_x4(fa_smem_at<kPitchK>(q_lane, mt * 16, ks * 16), qa[0], qa[1], qa[2], qa[3]);
            ldsm_x4(fa_smem_at<kPitchK>(kb, kh * 16, ks * 16), b0, b1, b2, b3);
            mma16816(sx[x][0], qa, b0, b1);
            mma16816(sx[x][1], qa, b2, b3);
          }
        }
      }
#pragma unroll
      for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[n][e] = (sx[0][n][e] + sx[1][n][e]) + (sx[2][n][e] + sx[3][n][e]);
      // ---- masking: blocks crossing the band or the used length; pages outside the pool ----
      if (blk_bad || kn < full_lo || kn + kBlockN > full_hi) {
        const int* pr = ring + (it % kRingW) * kBlockN;
#pragma unroll
        for (int n = 0; n < 2; ++n)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int jl = kh * 16 + n * 8 + tq * 2 + e;
            const int j = kn + jl;
            const bool page_ok = !fa_cfg::kPaged || (unsigned)pr[jl] < (unsigned)a.num_pages;
#pragma unroll
            for (int hh = 0; hh < 2; ++hh)
              if (!page_ok || j < lo_r[hh] || j >= hi_r[hh]) s[n][hh * 2 + e] = FA_SPLIT_NEG_INF;
          }
      }
      // ---- the block's row maxima (two key halves meet in shared memory) ----
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        float mx = fmaxf(fmaxf(s[0][hh * 2], s[0][hh * 2 + 1]), fmaxf(s[1][hh * 2], s[1][hh * 2 + 1]));
        mx = fa_lanes_max<4>(mx);
        if (tq == 0) sRed[kh * kR + mt * 16 + gq + hh * 8] = mx;
      }
      __syncthreads();
      // ---- P = exp2(S - m) to shared memory; row sums and the rescale factor ----
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int r = mt * 16 + gq + hh * 8;
        const float mx = fmaxf(row_m[hh], fmaxf(sRed[r], sRed[kR + r]));
        const float ms = mx == FA_SPLIT_NEG_INF ? 0.f : mx * mul;
        const float corr = fa_exp2(row_m[hh] * mul - ms);
        row_m[hh] = mx;
        float sum = 0.f;
#pragma unroll
        for (int n = 0; n < 2; ++n) {
          const float p0 = fa_exp2(s[n][hh * 2] * mul - ms);
          const float p1 = fa_exp2(s[n][hh * 2 + 1] * mul - ms);
          sum += p0 + p1;
          const int c = kh * 16 + n * 8 + tq * 2;
          *(unsigned*)(fa_smem + (sP - sQ) + (unsigned)((r * kPitchP + c) * 2)) = pack2(p0, p1);
        }
        sum = fa_lanes_sum<4>(sum);
        if (tq == 0) {
          sSum[kh * kR + r] = sum;
          if (kh == 0) sCorr[r] = corr;
        }
      }
      __syncthreads();
      // ---- running sums (one thread per row) and the rescale of O ----
      if (tid < kR) sL[tid] = sL[tid] * sCorr[tid] + sSum[tid] + sSum[kR + tid];
#pragma unroll
      for (int m = 0; m < 4; ++m)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          const float c = sCorr[m * 16 + gq + hh * 8];
#pragma unroll
          for (int n = 0; n < kNT; ++n) {
            o_acc[m][n][hh * 2] *= c;
            o_acc[m][n][hh * 2 + 1] *= c;
          }
        }
      // ---- O[:, warp's columns] += P V ----
      const unsigned vb = sV + (unsigned)(slot * kVSlotW) + v_lane;
#pragma unroll
      for (int kk = 0; kk < kBlockN / 16; ++kk) {
        unsigned pa[4][4];
#pragma unroll
        for (int m = 0; m < 4; ++m)
          ldsm_x4(fa_smem_at<kPitchP>(p_lane, m * 16, kk * 16), pa[m][0], pa[m][1], pa[m][2], pa[m][3]);
#pragma unroll
        for (int dp = 0; dp < kNT / 2; ++dp) {
          unsigned b0, b1, b2, b3;
          ldsm_x4_t(fa_smem_at<kPitchVW>(vb, kk * 16, warp * kColsW + dp * 16), b0, b1, b2, b3);
#pragma unroll
          for (int m = 0; m < 4; ++m) {
            mma16816(o_acc[m][2 * dp], pa[m], b0, b1);
            mma16816(o_acc[m][2 * dp + 1], pa[m], b2, b3);
          }
        }
      }
    }
    cp_wait<0>();
  }
  // ---- final maxima (scaled) of the rows, then O / l ----
  if (kh == 0 && tq == 0) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh)
      sMf[mt * 16 + gq + hh * 8] = row_m[hh] == FA_SPLIT_NEG_INF ? FA_SPLIT_NEG_INF : row_m[hh] * mul;
  }
  __syncthreads();
  const bool split_out = ns > 1;
#pragma unroll
  for (int m = 0; m < 4; ++m)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int r = m * 16 + gq + hh * 8;
      if (r >= rows) continue;
      const float l = sL[r], mrow = sMf[r];
      float inv = l > 0.f ? 1.f / l : 0.f;
      auto row_lse = [&] {  // evaluated where it is stored (the registers of the loops above stay free)
        return (l > 0.f && mrow != FA_SPLIT_NEG_INF) ? (mrow + __log2f(l)) * 0.6931471805599453f : FA_SPLIT_NEG_INF;
      };
      const int R = r0 + r;
      const int i = R / group, h = g * group + (R - i * group);
      [[maybe_unused]] float lse_sink = 0.f;
      if constexpr (fa_cfg::kHasSinks) {  // the sink column, once per row: here without splits, else in the combine
        if (!split_out) {
          const FaRowEnd e = fa_sink_row_end(mrow, l, a.sinks[h]);
          inv = e.o_mul;
          lse_sink = e.lse;
        }
      }
      if (split_out) {
        const long long row = (((long long)split * a.batch + b) * a.heads_q + h) * a.seqlen_q + i;
        float* dst = a.part_o + row * kDV + warp * kColsW + tq * 2;
#pragma unroll
        for (int n = 0; n < kNT; ++n)
          if (kDVPad == kDV || warp * kColsW + n * 8 + tq * 2 < kDV)
            *(float2*)(dst + n * 8) = make_float2(o_acc[m][n][hh * 2] * inv, o_acc[m][n][hh * 2 + 1] * inv);
        if (warp == 0 && tq == 0) a.part_lse[row] = row_lse();
      } else {
        T* op =
            (T*)a.o + (long long)b * a.o_sb + (long long)i * a.o_ss + (long long)h * a.o_sh + warp * kColsW + tq * 2;
#pragma unroll
        for (int n = 0; n < kNT; ++n)
          if (kDVPad == kDV || warp * kColsW + n * 8 + tq * 2 < kDV)
            *(unsigned*)(op + n * 8) = pack2(o_acc[m][n][hh * 2] * inv, o_acc[m][n][hh * 2 + 1] * inv);
        if constexpr (fa_cfg::kHasLse) {
          if (warp == 0 && tq == 0 && a.lse != nullptr)
            a.lse[(long long)b * a.lse_sb + (long long)h * a.lse_sh + i] = fa_cfg::kHasSinks ? lse_sink : row_lse();
        }
      }
    }
}

}  // namespace fa_split

#endif  // FA_FWD_SPLIT_WIDE_CUH
