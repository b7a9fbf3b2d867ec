// bwd_pre -- host side of the backward preprocessing step (templates/bwd_pre.cuh): Delta = rowsum(O * dO) and
// clearing of the float32 dQ accumulators / deterministic semaphores. The CTA owns block_m rows of one (batch,
// query head); eight lanes per row (fp16/bf16, aligned rows), else a warp per row.
#include "../common.h"

namespace fa::gen {

namespace {

// 32 rows x 8 warps: one row group of four per warp, twice the CTAs of 64 x 4. H100, bf16, 16k tokens x hidden
// 2048, per call: d 128 115 -> 93 us, d 64 102 -> 93 us, d 256 122 -> 96 us (FA2's dot_do_o: 95 / 99.5 us at d 128
// / 64); the fastest of the 32/64/128 x 4/8 points at all three (64 x 8: 100 / 95 / 109 us).
Tunables defaults(const Semantic&) { return Tunables{{32, 8}}; }

const Family kFamily = fam::query_rows_step("bwd_pre", "bwd_pre.cuh", &defaults);

}  // namespace

FA_FAMILY_FOLDER(bwd_pre) { register_family(&kFamily); }

}  // namespace fa::gen
