// mask_blocks -- host side of the block classification step (templates/mask_blocks.cuh): a Step of the plans of
// fwd_mma, fwd_wgmma and bwd_mma when the problem has a mask_mod (fa_mods). It classifies the tiles of that kernel's
// own block_m x block_n grid, so its two knobs take the union of those families' tile sizes and are copied from the
// kernel's tunables by the plan (families/common.h: plan_mask_blocks; never tuned on their own). The classification
// is shared over batch entries and heads where fa_mods.mask_mod_depends allows it (LaunchShape::blk_shared). In a
// backward plan it receives the FaBwdArgs (its first member is the FaFwdArgs the kernel reads) and also writes the
// classes transposed (FaFwdArgs::blk_cls_t). A third knob, sub_tiles (set by fwd_wgmma's plans), compiles the
// sub-tile records in (FaFwdArgs::blk_sub: every pair of every tile evaluated, no early exit on partial tiles) and
// the hidden pairs of partial tiles in slots (FaFwdArgs::blk_bits; the runtime zeroes its counter before the launch).
#include "../common.h"

namespace fa::gen {

namespace {

enum { kBlockM, kBlockN, kSubTiles };

Tunables defaults(const Semantic&) { return Tunables{{128, 32, 0}}; }

Launch launch(const KernelConfig& c, const LaunchShape& sh) {
  Launch l;
  const int nkb = (sh.max_seqlen_k + c.t[kBlockN] - 1) / c.t[kBlockN];
  l.grid[0] = static_cast<unsigned>(std::max(1, nkb));  // one CTA per tile
  l.grid[1] = static_cast<unsigned>(std::max(1, (sh.max_seqlen_q + c.t[kBlockM] - 1) / c.t[kBlockM]));
  const int batch_c = (sh.blk_shared & 1) ? 1 : sh.batch;
  const int heads_c = (sh.blk_shared & 2) ? 1 : sh.heads_q;
  l.grid[2] = static_cast<unsigned>(batch_c * heads_c);
  l.block = 128;
  return l;
}

const Family kFamily{.name = "mask_blocks",
                     .template_name = "mask_blocks.cuh",
                     .role = Role::Step,
                     .tuned_on_first_use = false,
                     .knobs = {fam::block_m({16, 32, 64, 128, 192}),
                               fam::block_n({32, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240, 256}),
                               Knob{"sub_tiles", "st", "kSubTiles", {0, 1}, true}},
                     .defaults = &defaults,
                     .launch = &launch};

}  // namespace

FA_FAMILY_FOLDER(mask_blocks) { register_family(&kFamily); }

}  // namespace fa::gen
