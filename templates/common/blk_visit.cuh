// common/blk_visit.cuh -- the forwards' walk over the key blocks of one query block as the mask_blocks step
// classified them (FaFwdArgs::blk_cls: 0 the mask hides every pair, 1 some, 2 none; fa_args.cuh). Blocks of [lo, hi)
// are taken from the last to the first, class 0 skipped; each visited block is the entry (n_block << 1) | full, the
// format of fwd_mma's visiting lists (blk_list). Warp-collective: the 32 lanes of a warp call these with the same
// arguments (one ballot per 32 blocks). cls null: every block of the range is visited, none full.
#ifndef FA_COMMON_BLK_VISIT_CUH
#define FA_COMMON_BLK_VISIT_CUH

// Lane l votes for block base - l (blocks below lo count as hidden): visit bit l set when the block is visited,
// full bit l when the mask hides nothing in it.
struct FaBlkVotes {
  unsigned visit, full;
};
FA_DEVICE FaBlkVotes fa_blk_votes(const unsigned char* cls, int base, int lo) {
  const int nb = base - (int)(threadIdx.x & 31);
  const int c = nb < lo ? 0 : cls != nullptr ? (int)cls[nb] : 1;
  FaBlkVotes v;
  v.visit = __ballot_sync(0xffffffffu, c != 0);
  v.full = __ballot_sync(0xffffffffu, c == 2);
  return v;
}

// How many blocks of [lo, hi) are visited.
FA_DEVICE int fa_blk_count(const unsigned char* cls, int lo, int hi) {
  int n = 0;
  for (int base = hi - 1; base >= lo; base -= 32) n += __popc(fa_blk_votes(cls, base, lo).visit);
  return n;
}

// The visited blocks of [lo, hi), last first, one entry per next(); -1 once none is left.
struct FaBlkCursor {
  const unsigned char* cls;
  int lo, base;
  unsigned visit, full;
  FA_DEVICE void start(const unsigned char* c, int l, int h) {
    cls = c; lo = l; base = h - 1 + 32; visit = 0u; full = 0u;
  }
  FA_DEVICE int next() {
    while (visit == 0u && base - 32 >= lo) {
      base -= 32;
      const FaBlkVotes v = fa_blk_votes(cls, base, lo);
      visit = v.visit;
      full = v.full;
    }
    if (visit == 0u) return -1;
    const int l = __ffs(visit) - 1;
    visit &= visit - 1u;
    return ((base - l) << 1) | (int)((full >> l) & 1u);
  }
};

#endif  // FA_COMMON_BLK_VISIT_CUH
