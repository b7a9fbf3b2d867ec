// common/blk_visit.cuh -- block skipping's walks over a row (or column) of tiles as the mask_blocks step classified
// them (FaFwdArgs::blk_cls / blk_cls_t: 0 the mask hides every pair, 1 some, 2 none; fa_args.cuh), shared by fwd_mma,
// fwd_wgmma and bwd_mma. Class 0 is skipped; each visited block is the entry (n_block << 1) | full, the format of the
// visiting lists (blk_list: fwd_mma's key blocks of a query block, last first; bwd_mma's query blocks of a key block
// for each head of its group, first first, tagged ((hl * query blocks + m) << 1) | full). Warp-collective: the 32
// lanes of a warp call these with the same arguments (one ballot per 32 blocks). cls null: every block of the range
// is visited, none full.
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

// How many blocks of [lo, hi) are visited, and the last of them (-1: none). Four groups of 32 blocks per step, their
// loads issued before any vote (one memory round trip per 128 blocks).
struct FaBlkSpan {
  int count, last;
};
FA_DEVICE FaBlkSpan fa_blk_span(const unsigned char* cls, int lo, int hi) {
  const int lane = (int)(threadIdx.x & 31);
  FaBlkSpan sp{0, -1};
  for (int base = hi - 1; base >= lo; base -= 128) {
    int c[4];
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int nb = base - 32 * r - lane;
      c[r] = nb < lo ? 0 : cls != nullptr ? (int)cls[nb] : 1;
    }
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const unsigned visit = __ballot_sync(0xffffffffu, c[r] != 0);
      if (sp.last < 0 && visit != 0u) sp.last = base - 32 * r - (__ffs(visit) - 1);
      sp.count += __popc(visit);
    }
  }
  return sp;
}

// How many blocks of [lo, hi) are visited.
FA_DEVICE int fa_blk_count(const unsigned char* cls, int lo, int hi) { return fa_blk_span(cls, lo, hi).count; }

// The visited blocks of [lo, hi), last first, one entry per next(); -1 once none is left.
struct FaBlkCursor {
  const unsigned char* cls;
  int lo, base;
  unsigned visit, full;
  FA_DEVICE void start(const unsigned char* c, int l, int h) {
    cls = c;
    lo = l;
    base = h - 1 + 32;
    visit = 0u;
    full = 0u;
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

// Compacts the visited blocks of [lo, hi) into the visiting list list[0 .. count), entries ((tag + block) << 1) |
// full, last block first (kDescending) or first first; only a warp with `write` stores. Returns the count.
template <bool kDescending>
FA_DEVICE int fa_blk_list(const unsigned char* cls, int lo, int hi, int tag, int* list, bool write) {
  const int lane = (int)(threadIdx.x & 31);
  int count = 0;
  for (int k0 = 0; k0 < hi - lo; k0 += 32) {
    const int nb = kDescending ? hi - 1 - k0 - lane : lo + k0 + lane;
    const int c = (kDescending ? nb >= lo : nb < hi) ? (cls != nullptr ? (int)cls[nb] : 1) : 0;
    const unsigned visit = __ballot_sync(0xffffffffu, c != 0);
    if (write && c != 0) list[count + __popc(visit & ((1u << lane) - 1u))] = ((tag + nb) << 1) | (c == 2 ? 1 : 0);
    count += __popc(visit);
  }
  return count;
}

#endif  // FA_COMMON_BLK_VISIT_CUH
