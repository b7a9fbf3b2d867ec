// mask_blocks.cuh -- the block classification step of the plans of fwd_mma, fwd_wgmma and bwd_mma when the problem
// has a mask_mod (fa_mods): for every (query block of kBlockM rows, key block of kBlockN keys) tile of the kernel's
// grid, whether the mask (the built-in mask, the key range and mask_mod together, exactly as the kernels apply them)
// hides every pair (0: the tile is never loaded nor computed), some (1: it is masked per element) or none (2: the
// per-element mask is skipped). One CTA of 4 warps per tile: the warps take every fourth row, their lanes the tile's
// keys, and vote (a warp stops once its rows make the tile partial); rows past the query length take no part (their
// outputs are never stored; the backward gives them P = 0), keys past the key length count as hidden.
// With kSubTiles (fwd_wgmma plans; kBlockM a multiple of 64), every pair is evaluated (no early exit), one
// (16-row strip, key group) sub-tile per warp at a time with the lanes in the forward's accumulator layout: each
// sub-tile gets a three-way code (hidden / some / none, in the tile's record in args.blk_sub, layout in fa_args.cuh),
// and a partial tile takes a slot of args.blk_bits (a counter the runtime zeroes first; none once blk_bits_cap are
// taken) for the bit of every pair it hides, so that the forward reads one word per lane where the mask cuts a
// sub-tile instead of running user code.
// Written to args.blk_cls and, for the backward's key-block-major CTAs, transposed to args.blk_cls_t when that is set
// (layouts in fa_args.cuh). Grid: x = key blocks, y = query blocks, z = batch entries x heads classified (1 where the
// mask does not depend on them); 4 warps. A backward plan passes its FaBwdArgs, whose first member is the FaFwdArgs
// read here.
// Reads fa_cfg: kVarlen, kMask, kHasMaskMod, kBlockM, kBlockN, kSubTiles (the sub-tile path compiled in).
#ifndef FA_MASK_BLOCKS_CUH
#define FA_MASK_BLOCKS_CUH

extern "C" __global__ void __launch_bounds__(128) fa_kernel(const FaFwdArgs args FA_USER_PARAM) {
  constexpr int kBM = fa_cfg::kBlockM, kBN = fa_cfg::kBlockN;
  const int warp = (int)threadIdx.x >> 5, lane = (int)threadIdx.x & 31;
  const int nb = (int)blockIdx.x;
  const int mb = (int)blockIdx.y;
  if (nb >= args.blk_nkb) return;  // the whole CTA
  // z = bb * heads_classified + hh; heads_classified is 1 when the classification is shared over heads
  const int heads_c = args.blk_cls_sh != 0 ? args.heads_q : 1;
  const int bb = (int)blockIdx.z / heads_c, hh = (int)blockIdx.z % heads_c;
  int sq, sk;
  if constexpr (fa_cfg::kVarlen) {
    sq = args.cu_seqlens_q[bb + 1] - args.cu_seqlens_q[bb];
    sk = args.cu_seqlens_k[bb + 1] - args.cu_seqlens_k[bb];
  } else {
    sq = args.seqlen_q;
    sk = args.seqlen_k;
  }
  const int m0 = mb * kBM, kn = nb * kBN;
  // a key block at or past the key length is hidden whole: no row takes part (and below, kn < sk)
  const int rows = m0 < sq && kn < sk ? min(kBM, sq - m0) : 0;
  constexpr bool kSub = fa_cfg::kSubTiles && kBM % 64 == 0 && kBN % 16 == 0;
  bool any = false, all = true;  // over this warp's pairs of rows below the query length
  // kSub: per (16-row strip, key group) sub-tile, its 32 words of hidden pairs in the forward's fragment layout
  // (fa_args.cuh: blk_bits) and its code
  constexpr int kSubTiles = kSub ? kBM / 16 * 4 : 1;
  __shared__ unsigned s_bits[kSubTiles * 32];
  __shared__ unsigned char s_code[kSubTiles];
  if constexpr (kSub) {
    // warp w takes sub-tiles w, w + 4, ...; lane 4 gq + tq the pairs (row 16 st + 8 rh + gq, key 8 c8 + 2 tq + e)
    // of the forward's accumulator fragment, every pair evaluated (rows past the length clamped, not counted)
    constexpr int kJ = kBN / 8;
    const int gq = lane >> 2, tq = lane & 3;
    for (int q = warp; q < kSubTiles; q += 4) {
      const int st = q >> 2, g = q & 3;
      const int c_lo = g * kJ / 4, c_hi = (g + 1) * kJ / 4;
      unsigned word = 0u;
      bool seen_vis = false, seen_hid = false;
      if (rows > 0) {
        for (int c8 = c_lo; c8 < c_hi; ++c8) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
#pragma unroll
            for (int rh = 0; rh < 2; ++rh) {
              const int r = st * 16 + rh * 8 + gq;
              const int i = m0 + min(r, rows - 1), j = kn + c8 * 8 + tq * 2 + e;
              int lo = 0, hi = sk;
              if constexpr (fa_cfg::kMask != 0) {
                if (args.win_left >= 0) lo = max(lo, i + sk - sq - args.win_left);
                if (args.win_right >= 0) hi = min(hi, i + sk - sq + args.win_right + 1);
              }
              bool vis = j >= lo && j < hi;
              // branch-free, as below
              if constexpr (fa_cfg::kHasMaskMod) vis = vis & fa_user_mask(bb, hh, i, min(j, sk - 1), FA_USER_ARGS);
              const bool counted = r < rows;
              seen_vis |= vis && counted;
              seen_hid |= !vis && counted;
              word |= (vis ? 0u : 1u) << ((c8 - c_lo) * 4 + rh * 2 + e);
            }
          }
        }
      }
      any |= seen_vis;
      all &= !seen_hid;
      const bool w_vis = __any_sync(0xffffffffu, seen_vis), w_hid = __any_sync(0xffffffffu, seen_hid);
      s_bits[q * 32 + lane] = word;
      if (lane == 0) s_code[q] = (unsigned char)(!w_vis ? 0 : w_hid ? 1 : 2);
    }
  } else {
    // each lane owns the key columns lane, lane + 32, ... below kBN; the lanes of a warp walk the same rows (the
    // votes below are warp-uniform). Rows unrolled by 2 up to 6 passes: at 7 (block_n 208 / 224), varlen, ptxas
    // spilled 4 bytes with the pair unrolled (full sweep, 2026-11-25).
    constexpr int kPasses = (kBN + 31) / 32;
    constexpr int kRowUnroll = kPasses >= 7 ? 1 : 2;
#pragma unroll kRowUnroll
    for (int r = warp, k = 0; r < rows; r += 4, ++k) {
#pragma unroll
      for (int c0 = 0; c0 < kBN; c0 += 32) {
        const int c = c0 + lane;
        const bool in_tile = kBN % 32 == 0 || c < kBN;  // a predicate, not a branch (see the mask below)
        const int i = m0 + r, j = kn + c;
        int lo = 0, hi = sk;
        if constexpr (fa_cfg::kMask != 0) {
          if (args.win_left >= 0) lo = max(lo, i + sk - sq - args.win_left);
          if (args.win_right >= 0) hi = min(hi, i + sk - sq + args.win_right + 1);
        }
        bool vis = in_tile && j >= lo && j < hi;
        // the user's mask at every lane, branch-free (a key past the length asks for the last key and is hidden by
        // vis): a short-circuit per column nests a divergent branch per column, and ptxas spills convergence state
        if constexpr (fa_cfg::kHasMaskMod) vis = vis & fa_user_mask(bb, hh, i, min(j, sk - 1), FA_USER_ARGS);
        any |= vis;
        all &= vis || !in_tile;
      }
      // a tile this warp already finds partial stays partial
      if ((k & 1) == 1 && __any_sync(0xffffffffu, any) && !__all_sync(0xffffffffu, all)) break;
    }
  }
  any = __any_sync(0xffffffffu, any);
  all = __all_sync(0xffffffffu, all);
  __shared__ int s_any[4], s_all[4];
  __shared__ unsigned s_slot;
  if (lane == 0) {
    s_any[warp] = any;
    s_all[warp] = all;
  }
  __syncthreads();
  const long long head = (long long)bb * args.blk_cls_sb + (long long)hh * args.blk_cls_sh;
  const long long tile = head + (long long)mb * args.blk_nkb + nb;
  any = s_any[0] || s_any[1] || s_any[2] || s_any[3];
  all = s_all[0] && s_all[1] && s_all[2] && s_all[3];
  const unsigned char cls = (unsigned char)(!any ? 0 : all ? 2 : 1);
  // thread 0 writes the class (and takes a slot for a partial tile's hidden pairs), thread 32 its transposed copy
  // (backward plans), threads 64.. the sub-tile records
  if (threadIdx.x == 0) {
    args.blk_cls[tile] = cls;
    if constexpr (kSub) {
      unsigned slot = 0xffffffffu;
      if (cls == 1 && args.blk_bits != nullptr) {
        slot = atomicAdd(args.blk_bits, 1u);
        if (slot >= (unsigned)args.blk_bits_cap) slot = 0xffffffffu;
      }
      s_slot = slot;
    }
  } else if (threadIdx.x == 32 && args.blk_cls_t != nullptr) {
    args.blk_cls_t[head + (long long)nb * args.blk_nmb + mb] = cls;
  }
  if constexpr (kSub) {
    __syncthreads();
    const unsigned slot = s_slot;
    if (args.blk_sub != nullptr) {
      unsigned* rec = args.blk_sub + tile * (kBM / 64 + 1);
      const int w = (int)threadIdx.x - 64;  // the word of rows 64 w .. 64 w + 63: strips 4 w .. 4 w + 3
      if (w >= 0 && w < kBM / 64) {
        unsigned word = 0u;
#pragma unroll
        for (int q = 0; q < 16; ++q) word |= (unsigned)s_code[16 * w + q] << (2 * q);  // q = 4 (strip - 4 w) + group
        rec[w] = word;
      } else if (w == kBM / 64) {
        rec[w] = slot;
      }
    }
    if (slot != 0xffffffffu) {
      unsigned* dst = args.blk_bits + 64 + (size_t)slot * (kBM * 8);
      for (int k = (int)threadIdx.x; k < kSubTiles * 32; k += 128) dst[k] = s_bits[k];
    }
  }
}

#endif  // FA_MASK_BLOCKS_CUH
