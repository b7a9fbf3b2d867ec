// mask_blocks.cuh -- the block classification step of the fwd_mma and bwd_mma plans when the problem has a mask_mod
// (fa_mods): for every (query block of kBlockM rows, key block of kBlockN keys) tile of the kernel's grid, whether
// the mask (the built-in mask, the key range and mask_mod together, exactly as the kernels apply them) hides every
// pair (0: the tile is never computed), some (1: it is masked per element) or none (2: the per-element mask is
// skipped). One warp per tile: the lanes walk the tile's (i, j) pairs and vote; rows past the query length take no
// part (their outputs are never stored; the backward gives them P = 0), keys past the key length count as hidden.
// Written to args.blk_cls and, for the backward's key-block-major CTAs, transposed to args.blk_cls_t when it is set
// (layouts in fa_args.cuh). Grid: x = ceil(key blocks / 4), y = query blocks, z = batch entries x heads classified
// (1 where the mask does not depend on them); 4 warps. A backward plan passes its FaBwdArgs, whose first member
// is the FaFwdArgs read here.
// Reads fa_cfg: kVarlen, kMask, kHasMaskMod, kBlockM, kBlockN.
#ifndef FA_MASK_BLOCKS_CUH
#define FA_MASK_BLOCKS_CUH

extern "C" __global__ void __launch_bounds__(128) fa_kernel(const FaFwdArgs args FA_USER_PARAM) {
  constexpr int kBM = fa_cfg::kBlockM, kBN = fa_cfg::kBlockN;
  const int warp = (int)threadIdx.x >> 5, lane = (int)threadIdx.x & 31;
  const int nb = (int)blockIdx.x * 4 + warp;
  const int mb = (int)blockIdx.y;
  if (nb >= args.blk_nkb) return;
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
  bool any = false, all = true;
  if (m0 < sq) {
    const int rows = min(kBM, sq - m0);
    // each lane owns kBN / 32 key columns; every lane walks the same rows (the votes below are warp-uniform)
    static_assert(kBN % 32 == 0, "mask_blocks: block_n a multiple of 32");
    for (int r = 0; r < rows; ++r) {
      const int i = m0 + r;
      int lo = 0, hi = sk;
      if constexpr (fa_cfg::kMask != 0) {
        if (args.win_left >= 0) lo = max(lo, i + sk - sq - args.win_left);
        if (args.win_right >= 0) hi = min(hi, i + sk - sq + args.win_right + 1);
      }
#pragma unroll
      for (int c = lane; c < kBN; c += 32) {
        const int j = kn + c;
        bool vis = j >= lo && j < hi;
        if constexpr (fa_cfg::kHasMaskMod) vis = vis && fa_user_mask(bb, hh, i, j, FA_USER_ARGS);
        any |= vis;
        all &= vis;
      }
      // a tile that is already partial stays partial
      if ((r & 7) == 7 && __any_sync(0xffffffffu, any) && !__all_sync(0xffffffffu, all)) break;
    }
    any = __any_sync(0xffffffffu, any);
    all = __all_sync(0xffffffffu, all);
  } else {
    any = false;
  }
  if (lane == 0) {
    const long long head = (long long)bb * args.blk_cls_sb + (long long)hh * args.blk_cls_sh;
    const unsigned char cls = (unsigned char)(!any ? 0 : all ? 2 : 1);
    args.blk_cls[head + (long long)mb * args.blk_nkb + nb] = cls;
    if (args.blk_cls_t != nullptr) args.blk_cls_t[head + (long long)nb * args.blk_nmb + mb] = cls;
  }
}

#endif  // FA_MASK_BLOCKS_CUH
