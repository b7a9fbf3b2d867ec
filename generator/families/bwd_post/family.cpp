// bwd_post -- host side of the backward epilogue step (templates/bwd_post.cuh): dq = scale * dq_accum converted to
// the dtype. The CTA owns block_m rows of one (batch, query head): 16-byte items of 8 columns (aligned dq rows),
// else one warp per row.
#include "../common.h"

namespace fa::gen {

namespace {

// 32 rows x 8 warps. H100, bf16, 16k tokens x hidden 2048, per call, with the 16-byte path: d 128 82 -> 70 us,
// d 64 79 -> 69 us, d 256 87 -> 78 us against the old scalar path at 64 x 4 (FA2's convert_dq: 77.5 / 79.6 us at
// d 128 / 64); 64 x 8 and 32 x 4 read within 3 us of it, 64 x 4 and 128 x 4 7 and 20 us slower at d 256.
Tunables defaults(const Semantic&) { return Tunables{{32, 8}}; }

const Family kFamily = fam::query_rows_step("bwd_post", "bwd_post.cuh", &defaults);

}  // namespace

FA_FAMILY_FOLDER(bwd_post) { register_family(&kFamily); }

}  // namespace fa::gen
