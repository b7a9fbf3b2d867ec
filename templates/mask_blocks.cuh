// mask_blocks.cuh -- the block classification step of the plans of fwd_mma, fwd_wgmma and bwd_mma when the problem
// has a mask_mod (fa_mods): for every (query block of kBlockM rows, key block of kBlockN keys) tile of the kernel's
// grid, whether the mask (the built-in mask, the key range and mask_mod together, exactly as the kernels apply them)
// hides every pair (0: the tile is never loaded nor computed), some (1: it is masked per element) or none (2: the
// per-element mask is skipped). One CTA of 4 warps per tile: the warps take every fourth row, their lanes the tile's
// keys, and vote (a warp stops once its rows make the tile partial); rows past the query length take no part (their
// outputs are never stored; the backward gives them P = 0), keys past the key length count as hidden.
// Written to args.blk_cls and, for the backward's key-block-major CTAs, transposed to args.blk_cls_t when that is set
// (layouts in fa_args.cuh). Grid: x = key blocks, y = query blocks, z = batch entries x heads classified (1 where the
// mask does not depend on them); 4 warps. A backward plan passes its FaBwdArgs, whose first member is the FaFwdArgs
// read here.
// Reads fa_cfg: kVarlen, kMask, kHasMaskMod, kBlockM, kBlockN.
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
  // each lane owns the key columns lane, lane + 32, ... below kBN; the lanes of a warp walk the same rows (the votes
  // below are warp-uniform)
#pragma unroll 2
  for (int r = warp, k = 0; r < rows; r += 4, ++k) {
    const int i = m0 + r;
    int lo = 0, hi = sk;
    if constexpr (fa_cfg::kMask != 0) {
      if (args.win_left >= 0) lo = max(lo, i + sk - sq - args.win_left);
      if (args.win_right >= 0) hi = min(hi, i + sk - sq + args.win_right + 1);
    }
#pragma unroll
    for (int c0 = 0; c0 < kBN; c0 += 32) {
      const int c = c0 + lane;
      if (kBN % 32 != 0 && c >= kBN) continue;
      const int j = kn + c;
      bool vis = j >= lo && j < hi;
      // the user's mask at every lane, branch-free (a key past the length asks for the last key and is hidden by
      // vis): a short-circuit per column nests a divergent branch per column, and ptxas spills convergence state
      if constexpr (fa_cfg::kHasMaskMod) vis = vis & fa_user_mask(bb, hh, i, min(j, sk - 1), FA_USER_ARGS);
      any |= vis;
      all &= vis;
    }
    // a tile this warp already finds partial stays partial
    if ((k & 1) == 1 && __any_sync(0xffffffffu, any) && !__all_sync(0xffffffffu, all)) break;
  }
  any = __any_sync(0xffffffffu, any);
  all = __all_sync(0xffffffffu, all);
  __shared__ int s_any[4], s_all[4];
  if (lane == 0) {
    s_any[warp] = any;
    s_all[warp] = all;
  }
  __syncthreads();
  // thread 0 writes the class, thread 32 its transposed copy (backward plans)
  if (threadIdx.x == 0 || (threadIdx.x == 32 && args.blk_cls_t != nullptr)) {
    any = s_any[0] || s_any[1] || s_any[2] || s_any[3];
    all = s_all[0] && s_all[1] && s_all[2] && s_all[3];
    const long long head = (long long)bb * args.blk_cls_sb + (long long)hh * args.blk_cls_sh;
    const unsigned char cls = (unsigned char)(!any ? 0 : all ? 2 : 1);
    if (threadIdx.x == 0) args.blk_cls[head + (long long)mb * args.blk_nkb + nb] = cls;
    else args.blk_cls_t[head + (long long)nb * args.blk_nmb + mb] = cls;
  }
}

#endif  // FA_MASK_BLOCKS_CUH
