// bwd_post -- host side of the backward epilogue step (templates/bwd_post.cuh): dq = scale * dq_accum converted to
// the dtype. The CTA owns block_m rows of one (batch, query head): 16-byte items of 8 columns (aligned dq rows),
// else one warp per row. Knobs and the measured default: fam::query_rows_step (common.h).
#include "../common.h"

namespace fa::gen {

FA_FAMILY_FOLDER(bwd_post) {
  static const Family family = fam::query_rows_step("bwd_post", "bwd_post.cuh");
  register_family(&family);
}

}  // namespace fa::gen
