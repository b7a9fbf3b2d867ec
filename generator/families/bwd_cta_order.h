// bwd_cta_order.h -- binding the backwards' CTA order (bwd_mma and bwd_wgmma; the decode: templates/bwd_mma_tiling.cuh,
// fa_bwd_cta): the grid's last (kv head, batch) pairs run key-block-major, heaviest key blocks first: two waves'
// worth of `slots` resident CTAs under a causal mask, every pair with a mask_mod (the ready mods' heavy key blocks are
// their low ones).
#pragma once

#include "templates/bwd_mma_tiling.cuh"
#include "templates/fa_args.cuh"

namespace fa::gen::fam {

// Fills a's CTA-order fields for a launch of `grid` (key blocks, kv heads, batch).
inline void bind_bwd_cta_order(FaBwdArgs* a, const unsigned grid[3], int slots, bool mask_mod) {
  a->lpt_tail = fa_bwd_lpt_tail(static_cast<int>(grid[1]), static_cast<int>(grid[2]), static_cast<int>(grid[0]), slots,
                                2, mask_mod);
  a->lpt_magic_tail = a->lpt_tail > 0 ? fa_div_magic(static_cast<unsigned>(a->lpt_tail)) : 0;
  a->lpt_magic_heads = fa_div_magic(grid[1]);
}

}  // namespace fa::gen::fam
