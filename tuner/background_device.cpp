// background_device.cpp -- the background tuner's device runner (see background_device.h).
#include "tuner/background_device.h"

#include "runtime/driver.h"
#include "runtime/validate.h"
#include "tuner/bucket.h"
#include "tuner/device_problem.h"

namespace fa::tune {

rt::Status run_job_on_device(fa_context c, const BackgroundJob& job, const TuneOptions& base,
                             const std::function<bool()>& cancelled, TuneOutcome* out) {
  if (!c->has_device) return rt::error(FA_ERROR_NO_DEVICE, c->no_device_reason);
  if (job.p.varlen || job.p.backward || job.p.mods != nullptr)
    return rt::error(FA_ERROR_NOT_SUPPORTED,
                     "background tuning covers fixed-length forward problems without user code only");
  rt::relax_capture_mode_of_this_thread(*c->drv);
  GridPoint g;
  g.desc = job.p;
  g.softcap = job.p.has_softcap ? 30.0f : 0.0f;
  std::unique_ptr<DeviceProblem> dp;
  rt::Status st = DeviceProblem::create(c, g, &dp, /*low_priority=*/true);
  if (!st.ok()) return st;
  fa_params in = dp->params();
  if (!job.p.has_lse) in.lse = nullptr;
  fa_params vp;
  gen::ProblemDesc vd;
  st = rt::validate_forward(&in, &vp, &vd);
  if (!st.ok()) return st;
  vd.sm_count = job.p.sm_count;  // split-KV plans size by the device, as the call's did (api/forward.cpp)
  // The buffers must reach the same kernel family and tuning key as the call that queued the job.
  const gen::Semantic s = gen::select_forward(vd, c->arch);
  if (s.family == nullptr || tuning_key(s, vd) != job.key)
    return rt::error(FA_ERROR_INTERNAL, "background tuning: private buffers give the key " +
                                            (s.family ? tuning_key(s, vd) : std::string("(none)")) + ", not " +
                                            job.key);
  TuneOptions o = base;
  o.cancelled = cancelled;
  return tune(c, s, vd, dp->request(vp, vd), o, out);
}

}  // namespace fa::tune
