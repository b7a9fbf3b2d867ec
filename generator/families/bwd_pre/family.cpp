// bwd_pre -- host side of the backward preprocessing step (templates/bwd_pre.cuh): Delta = rowsum(O * dO) and
// clearing of the float32 dQ accumulators / deterministic semaphores. The CTA owns block_m rows of one (batch,
// query head); eight lanes per row (fp16/bf16, aligned rows), else a warp per row. Knobs and the measured default:
// fam::query_rows_step (common.h).
#include "../common.h"

namespace fa::gen {

FA_FAMILY_FOLDER(bwd_pre) {
  static const Family family = fam::query_rows_step("bwd_pre", "bwd_pre.cuh", true);
  register_family(&family);
}

}  // namespace fa::gen
