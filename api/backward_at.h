// backward_at.h -- the backward with its tensor-core step pinned to a family and given tunables (no tuner, no cache):
// how the tests prove that every valid bwd_mma / bwd_wgmma tunable point gives the same gradients, and how a
// benchmark times one family against another. Not part of the C API.
#pragma once

#include <cuda.h>

#include "fa/fa.h"
#include "generator/config.h"
#include "runtime/status.h"

namespace fa::rt {

// Validates `in` like fa_run_backward, then enqueues the plan of backward family `family` at tunables t (bwd_pre ->
// bwd_mma(t) or bwd_wgmma(t) -> bwd_post) on `stream` (workspace: in->workspace or a stream-ordered allocation).
// FA_ERROR_NOT_SUPPORTED where the family does not cover the problem or `t` is not a valid point for it (the message
// names the reason).
Status run_backward_at(fa_context c, const fa_bwd_params* in, const gen::Tunables& t, CUstream stream,
                       const char* family = "bwd_mma");

}  // namespace fa::rt
