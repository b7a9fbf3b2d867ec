// fa_common.cuh -- the device helpers every template gets: the rendered source includes fa_args.cuh, this file,
// then the family's template. It only gathers the shared pieces of templates/common/ (names "common/xxx.cuh"):
//   common/elem.cuh      element types (FaElem<kDtype>, fp16 / bf16 conversions), FA_DEVICE, exp2, tanh
//   common/warp.cuh      reductions across a warp and across aligned lane groups
//   common/seq.cuh       sequence geometry (FaSeq, varlen offsets) and the mask band (fa_key_range)
//   common/dq_accum.cuh  the 8 x 8 tiled layout of the backward's float32 dQ accumulator (fa_dq_accum_off)
//   common/sinks.cuh     attention sinks: the end of a row with its sink column (fa_sink_row_end)
// common/sm80.cuh (the PTX wrappers of the tensor-core kernels) is included by those kernels themselves.
#ifndef FA_COMMON_CUH
#define FA_COMMON_CUH

#include "common/elem.cuh"
#include "common/warp.cuh"
#include "common/seq.cuh"
#include "common/dq_accum.cuh"
#include "common/sinks.cuh"

#endif  // FA_COMMON_CUH
