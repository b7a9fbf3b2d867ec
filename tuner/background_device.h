// background_device.h -- the device runner of the background tuner (background.h): tunes a job on buffers of its
// own (DeviceProblem: random q, k, v of the job's shape, o, lse, bias and ALiBi as the key needs) on a private
// non-blocking stream of the lowest priority, never the caller's stream or buffers. The worker thread first sets
// its stream-capture interaction mode to relaxed, so its allocations and synchronizations neither fail nor
// invalidate a graph capture that another thread of the process runs meanwhile.
#pragma once

#include "tuner/background.h"

namespace fa::tune {

// Tunes job (through tune(), `base` options plus cancelled) on the context's device.
rt::Status run_job_on_device(fa_context c, const BackgroundJob& job, const TuneOptions& base,
                             const std::function<bool()>& cancelled, TuneOutcome* out);

}  // namespace fa::tune
