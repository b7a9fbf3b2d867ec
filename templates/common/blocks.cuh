// common/blocks.cuh -- the visiting lists of block skipping, shared by the forward (fwd_mma: a CTA's row of key
// blocks) and the backward (bwd_mma: a CTA's column of query blocks per head). mask_blocks.cuh classifies every
// (query block, key block) tile (0 hidden, 1 partly visible, 2 fully visible; layouts in fa_args.cuh); a warp
// compacts the classes cls[lo .. hi) into the entries of the tiles to visit, in ascending or descending order:
//   entry = ((tag + index) << 1) | full       (index in [lo, hi); full: class 2, the per-element mask is skipped)
// Every lane of the warp gets the count; only a warp with `write` stores the entries (list[0 .. count)).
#ifndef FA_COMMON_BLOCKS_CUH
#define FA_COMMON_BLOCKS_CUH

template <bool kDescending>
FA_DEVICE int fa_blk_compact(const unsigned char* cls, int lo, int hi, int tag, int* list, bool write, int lane) {
  int count = 0;
  for (int base = 0; base < hi - lo; base += 32) {
    const int k = base + lane;
    const int idx = kDescending ? hi - 1 - k : lo + k;
    const int c = k < hi - lo ? (int)cls[idx] : 0;
    const unsigned vote = __ballot_sync(0xffffffffu, c != 0);
    if (write && c != 0) list[count + __popc(vote & ((1u << lane) - 1u))] = ((tag + idx) << 1) | (c == 2 ? 1 : 0);
    count += __popc(vote);
  }
  return count;
}

#endif  // FA_COMMON_BLOCKS_CUH
