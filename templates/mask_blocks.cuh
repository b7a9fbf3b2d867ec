// mask_blocks.cuh -- the block classification step of the plans of fwd_mma, fwd_wgmma and bwd_mma when the problem
// has a mask_mod (fa_mods): for every (query block of kBlockM rows, key block of kBlockN keys) tile of the kernel's
// grid, whether the mask (the built-in mask, the key range and mask_mod together, exactly as the kernels apply them)
// hides every pair (0: the tile is never loaded nor computed), some (1: it is masked per element) or none (2: the
// per-element mask is skipped). One CTA of 4 warps per tile: the warps take every fourth row, their lanes the tile's
// keys, and vote (a warp stops once its rows make the tile partial); rows past the query length take no part (their
// outputs are never stored; the backward gives them P = 0), keys past the key length count as hidden.
// With kSubTiles (fwd_wgmma plans; kBlockM a multiple of 64), every pair is evaluated (no early exit) and each
// (16-row strip, key group) sub-tile gets the same three-way code (args.blk_sub, layout in fa_args.cuh), so that the
// forward runs user code only on the sub-tiles the mask cuts: each lane keeps a bit per (strip, group) of pairs seen
// visible and of pairs seen hidden, the warp ORs them (redux), the four warps in shared memory, and one thread per
// 64 rows packs the codes into a word.
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
    sq = args.seqlen_q; sk = args.seqlen_k;
  }
  const int m0 = mb * kBM, kn = nb * kBN;
  // a key block at or past the key length is hidden whole: no row takes part (and below, kn < sk)
  const int rows = m0 < sq && kn < sk ? min(kBM, sq - m0) : 0;
  bool any = false, all = true;  // over this warp's rows: warp, warp + 4, ...
  // kSubTiles: per lane and 32-key pass, bit strip (= row / 16) of the pairs seen visible (sp) and hidden (hp)
  constexpr bool kSub = fa_cfg::kSubTiles && kBM % 64 == 0 && kBN % 16 == 0;
  constexpr int kPasses = (kBN + 31) / 32;
  unsigned sp[kPasses], hp[kPasses];
#pragma unroll
  for (int p = 0; p < kPasses; ++p) sp[p] = hp[p] = 0u;
  // each lane owns the key columns lane, lane + 32, ... below kBN; the lanes of a warp walk the same rows (the votes
  // below are warp-uniform). Rows unrolled by 2 up to 6 passes: at 7 (block_n 208 / 224), varlen, ptxas spilled 4
  // bytes with the pair unrolled (full sweep, 2026-11-25).
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
      if constexpr (kSub) {
        sp[c0 / 32] |= (unsigned)vis << (r >> 4);
        hp[c0 / 32] |= (unsigned)(!vis && in_tile) << (r >> 4);
      }
    }
    // a tile this warp already finds partial stays partial (with sub-tile codes every pair counts)
    if constexpr (!kSub) {
      if ((k & 1) == 1 && __any_sync(0xffffffffu, any) && !__all_sync(0xffffffffu, all)) break;
    }
  }
  any = __any_sync(0xffffffffu, any);
  all = __all_sync(0xffffffffu, all);
  constexpr int kSubWords = kSub ? 2 : 1;
  __shared__ unsigned s_some[kSubWords], s_hole[kSubWords];  // OR over the warps, low / high 32 bits
  if constexpr (kSub) {
    // bit 4 * strip + key group of column c = lane + 32 p: (4 (c / 8) + 3) / (kBN / 8)
    unsigned long long some = 0ull, hole = 0ull;
#pragma unroll
    for (int p = 0; p < kPasses; ++p) {
      const int c = 32 * p + lane;
      if (kBN % 32 != 0 && c >= kBN) continue;
      const int g = (4 * (c >> 3) + 3) / (kBN / 8);
#pragma unroll
      for (int st = 0; st < kBM / 16; ++st) {
        some |= (unsigned long long)((sp[p] >> st) & 1u) << (4 * st + g);
        hole |= (unsigned long long)((hp[p] >> st) & 1u) << (4 * st + g);
      }
    }
    if (threadIdx.x < 2) s_some[threadIdx.x] = s_hole[threadIdx.x] = 0u;
    __syncthreads();
    const unsigned sl = __reduce_or_sync(0xffffffffu, (unsigned)some);
    const unsigned sh = __reduce_or_sync(0xffffffffu, (unsigned)(some >> 32));
    const unsigned hl = __reduce_or_sync(0xffffffffu, (unsigned)hole);
    const unsigned hh2 = __reduce_or_sync(0xffffffffu, (unsigned)(hole >> 32));
    if (lane == 0) {
      atomicOr(&s_some[0], sl);
      atomicOr(&s_some[1], sh);
      atomicOr(&s_hole[0], hl);
      atomicOr(&s_hole[1], hh2);
    }
  }
  __shared__ int s_any[4], s_all[4];
  if (lane == 0) {
    s_any[warp] = any;
    s_all[warp] = all;
  }
  __syncthreads();
  const long long head = (long long)bb * args.blk_cls_sb + (long long)hh * args.blk_cls_sh;
  const long long tile = head + (long long)mb * args.blk_nkb + nb;
  // thread 0 writes the class, thread 32 its transposed copy (backward plans), threads 64.. the sub-tile words
  if (threadIdx.x == 0 || (threadIdx.x == 32 && args.blk_cls_t != nullptr)) {
    any = s_any[0] || s_any[1] || s_any[2] || s_any[3];
    all = s_all[0] && s_all[1] && s_all[2] && s_all[3];
    const unsigned char cls = (unsigned char)(!any ? 0 : all ? 2 : 1);
    if (threadIdx.x == 0) args.blk_cls[tile] = cls;
    else args.blk_cls_t[head + (long long)nb * args.blk_nmb + mb] = cls;
  }
  if constexpr (kSub) {
    const int w = (int)threadIdx.x - 64;  // the word of rows 64 w .. 64 w + 63: strips 4 w .. 4 w + 3
    if (args.blk_sub != nullptr && w >= 0 && w < kBM / 64) {
      const unsigned long long all_some = ((unsigned long long)s_some[1] << 32) | s_some[0];
      const unsigned long long all_hole = ((unsigned long long)s_hole[1] << 32) | s_hole[0];
      const unsigned sm = (unsigned)(all_some >> (16 * w)) & 0xffffu, ho = (unsigned)(all_hole >> (16 * w)) & 0xffffu;
      unsigned word = 0u;
#pragma unroll
      for (int q = 0; q < 16; ++q) {  // q = 4 * (strip - 4 w) + key group: 0 hidden, 1 some, 2 none
        const unsigned code = ((sm >> q) & 1u) == 0u ? 0u : ((ho >> q) & 1u) != 0u ? 1u : 2u;
        word |= code << (2 * q);
      }
      args.blk_sub[tile * (kBM / 64) + w] = word;
    }
  }
}

#endif  // FA_MASK_BLOCKS_CUH
