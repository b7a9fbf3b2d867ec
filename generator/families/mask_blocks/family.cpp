// mask_blocks -- host side of the block classification step (templates/mask_blocks.cuh): a Step of the fwd_mma and
// bwd_mma plans when the problem has a mask_mod (fa_mods; families/common.h: plan_mask_blocks). It classifies the
// tiles of that kernel's own block_m x block_n grid, so its two knobs (the union of both families' tiles) are copied
// from the kernel's tunables by the plan (never tuned on their own). The classification is shared over batch
// entries and heads where fa_mods.mask_mod_depends allows it (LaunchShape::blk_shared). In a backward plan it
// receives the FaBwdArgs (its first member is the FaFwdArgs the kernel reads) and also writes the classes
// transposed (FaFwdArgs::blk_cls_t).
#include "../common.h"

namespace fa::gen {

namespace {

enum { kBlockM, kBlockN };

Tunables defaults(const Semantic&) { return Tunables{{128, 32}}; }

Launch launch(const KernelConfig& c, const LaunchShape& sh) {
  Launch l;
  const int nkb = (sh.max_seqlen_k + c.t[kBlockN] - 1) / c.t[kBlockN];
  l.grid[0] = static_cast<unsigned>(std::max(1, (nkb + 3) / 4));
  l.grid[1] = static_cast<unsigned>(std::max(1, (sh.max_seqlen_q + c.t[kBlockM] - 1) / c.t[kBlockM]));
  const int batch_c = (sh.blk_shared & 1) ? 1 : sh.batch;
  const int heads_c = (sh.blk_shared & 2) ? 1 : sh.heads_q;
  l.grid[2] = static_cast<unsigned>(batch_c * heads_c);
  l.block = 128;
  return l;
}

const Family kFamily{.name = "mask_blocks", .template_name = "mask_blocks.cuh", .role = Role::Step,
                     .tuned_on_first_use = false, .knobs = {fam::block_m({16, 32, 64, 128}), fam::block_n({32, 64, 128})},
                     .defaults = &defaults, .launch = &launch};

}  // namespace

FA_FAMILY_FOLDER(mask_blocks) { register_family(&kFamily); }

}  // namespace fa::gen
