// context.h -- struct fa_context_s: the device binding, the kernel cache, the persistent store and tuning state.
#pragma once

#include <cuda.h>

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "fa/fa.h"
#include "generator/family.h"
#include "generator/problem.h"
#include "runtime/driver.h"
#include "runtime/kernel_cache.h"
#include "runtime/log.h"
#include "runtime/mask_cache.h"
#include "runtime/pinned_tunables.h"
#include "runtime/plan_cache.h"
#include "runtime/serial_worker.h"
#include "runtime/status.h"

namespace fa::rt {

// What the tuner may use to time candidates of one problem: the caller's stream and a launcher that runs the whole
// operation (forward, or every backward step) with a given config for the tuned kernel family. The launcher only
// enqueues work; the tuner records events around it on `stream`. `verify` (optional) runs the candidate and the
// reference path into scratch outputs and returns the relative error between them.
struct TuneRequest {
  CUstream stream = nullptr;
  // The caller waits for the tuning (fa_prepare, FA_TUNE_ON_FIRST_USE_SYNC): under FA_TUNE_ON_FIRST_USE the chooser
  // tunes now instead of queueing the key for the background worker.
  bool synchronous = false;
  std::function<Status(const gen::KernelConfig& cfg)> launch;
  std::function<Status(const gen::KernelConfig& cfg, double* rel_error)> verify;
};

// How a context picks tunables for a semantic: a cached tuning result, tuning now (when `tune` is non-null and
// the policy allows it), or the heuristic default. Never compiles or times anything when `tune` is null.
struct TunableChooser {
  virtual ~TunableChooser() = default;
  virtual Status choose(fa_context ctx, const gen::Semantic& s, const gen::ProblemDesc& p, const TuneRequest* tune,
                        gen::Tunables* out) = 0;
  // Stops background work (fa_context_destroy, before modules are unloaded): returns once no worker thread of this
  // chooser runs; a tuning in flight is abandoned. Idempotent.
  virtual void stop_background() {}
};

// Whether a policy tunes a new key on first use (in the background or synchronously).
inline bool tunes_on_first_use(int policy) {
  return policy == FA_TUNE_ON_FIRST_USE || policy == FA_TUNE_ON_FIRST_USE_SYNC;
}

}  // namespace fa::rt

struct fa_context_s {
  // options
  int device_ordinal = 0;
  int tune_policy = FA_TUNE_ON_FIRST_USE;
  std::string cache_path;
  bool cache_read_only = false;  // $FA_CACHE_READONLY=1: the cache file is only read (api/env_options.h)
  int verbose = 0;
  fa::rt::LogLevel log_level = fa::rt::LogLevel::kWarn;  // $FA_LOG, raised to info by verbose (api/env_options.h)
  // device (drv == nullptr or has_device == false: no launches; keys, validation and compiles still work)
  const fa::rt::Driver* drv = nullptr;
  bool has_device = false;
  std::string no_device_reason;
  CUdevice dev = 0;
  CUcontext cuctx = nullptr;
  int arch = 90;  // the device's, else $FA_ARCH, else rt::kDefaultArchWithoutDevice
  fa::gen::DeviceLimits limits;
  std::string gpu_name;
  int sm_count = 0;
  // caches
  std::unique_ptr<fa::rt::CubinStore> store;
  std::unique_ptr<fa::rt::KernelCache> kernels;
  std::unique_ptr<fa::rt::TunableChooser> chooser;
  fa::rt::PlanCache plans;  // fa_run's fast path: validated shape -> resolved plan (runtime/plan_cache.h)
  // Block classifications kept across calls (runtime/mask_cache.h; $FA_MASK_CACHE_MB bytes at most, 0: none).
  size_t mask_cache_bytes = size_t{64} << 20;
  std::unique_ptr<fa::rt::MaskCache> mask_cache;
  // Sibling kernels of a new problem's other shape classes, compiled and loaded ahead of need (api/forward.cpp,
  // runtime/serial_worker.h; null when $FA_PREFETCH=0 or without a device).
  bool prefetch_enabled = true;
  std::unique_ptr<fa::rt::SerialWorker> prefetch;
  // $FA_PIN_TUNABLES: per-family tunables the chooser takes before anything else (runtime/pinned_tunables.h).
  fa::rt::PinnedTunables pinned;
  // fa_context_create's own cost, split (bench/tuning_figures [2]): binding the device (driver table, cuInit,
  // primary context: the part any CUDA process pays once) and opening the cache store (SQLite open, checks).
  double create_bind_ms = 0, create_store_ms = 0;
  std::mutex mu;                  // guards the maps below
  std::set<std::string> untuned;  // keys that ran on defaults while capturing (or by policy)
  // Messages on stderr at the context's log level, each once per process (runtime/log.h).
  void warn(const std::string& msg) const;
  void info(const std::string& msg, const std::string& once_key = {}) const;
  void debug(const std::string& msg) const;
};

namespace fa::rt {

// Pushes the context's primary CUDA context for the scope.
class CtxGuard {
 public:
  explicit CtxGuard(fa_context c);
  ~CtxGuard();
  Status status() const { return st_; }

 private:
  fa_context c_;
  bool pushed_ = false;
  Status st_;
};

// The context's classification cache (mask_cache_bytes at most) over its driver: stream-ordered memory, events,
// and at destruction a context synchronization before the frees.
std::unique_ptr<MaskCache> make_mask_cache(fa_context c);

// Arch the context compiles for: the device's, or $FA_ARCH / rt::kDefaultArchWithoutDevice (90) without a device.
int context_arch(fa_context c);

// The arch and limits of a device from what the driver reports: compute capability major.minor (12.0 -> sm_120,
// runtime/arch.h), opt-in shared memory per block, resident threads per SM and SMs (each > 0 replaces the arch's
// default of gen::limits_for_arch).
gen::DeviceLimits device_limits(int major, int minor, int smem_optin, int threads_per_sm, int sms);

}  // namespace fa::rt
