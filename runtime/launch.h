// launch.h -- kernel arguments from validated params, and launching on the caller's stream.
#pragma once

#include <cuda.h>

#include "fa/fa.h"
#include "generator/family.h"
#include "generator/problem.h"
#include "runtime/context.h"
#include "templates/fa_args.cuh"

namespace fa::rt {

FaFwdArgs make_fwd_args(const fa_params& p, const gen::ProblemDesc& d);

// Launches kernel k (loaded) with one argument struct of `size` bytes. No synchronization.
Status launch_kernel(fa_context c, Kernel& k, const gen::Launch& l, void* args, size_t size, CUstream stream);

// Whether `stream` is being captured into a graph (false when there is no device).
Status stream_capturing(fa_context c, CUstream stream, bool* capturing);

// Chooses tunables, compiles (if allowed) and loads the forward kernel for a validated problem.
// allow_compile=false: only what is already compiled and loaded in memory.
// tune: non-null when the chooser may time candidates now (first use, not capturing).
Status forward_kernel(fa_context c, const gen::ProblemDesc& d, bool allow_compile, const TuneRequest* tune,
                      std::shared_ptr<Kernel>* out, gen::KernelConfig* cfg);
// A TuneRequest for a validated forward problem on `stream` (launches write the caller's o and lse, which the
// final launch overwrites).
TuneRequest forward_tune_request(fa_context c, const fa_params& p, const gen::ProblemDesc& d, CUstream stream);

// Compiles and loads a config (used by the forward path, the backward plan and the tuner).
Status kernel_for(fa_context c, const gen::KernelConfig& cfg, bool allow_compile, std::shared_ptr<Kernel>* out);

}  // namespace fa::rt
