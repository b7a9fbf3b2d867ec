// env_options.h -- the environment variables a context reads at fa_context_create, parsed and validated in one
// place: a bad value fails fa_context_create with FA_ERROR_INVALID_ARGUMENT naming the variable, the expected and
// the actual value (never a silent default).
#pragma once

#include "runtime/context.h"
#include "runtime/status.h"

namespace fa::rt {

// $FA_CACHE_READONLY: unset, "" or "0": the cache file is written when it may be; "1": it is only read (new
// entries stay in memory). Sets c->cache_read_only.
Status read_cache_readonly_env(fa_context c);

// $FA_ARCH: unset or "": rt::kDefaultArchWithoutDevice; else an arch as runtime/arch.h parses it. Sets c->arch
// and c->limits (the device's replace them when there is one).
Status read_arch_env(fa_context c);

// $FA_MASK_CACHE_MB: unset or "": 64; else a whole number of MiB (0: no classification cache). Sets
// c->mask_cache_bytes (runtime/mask_cache.h).
Status read_mask_cache_env(fa_context c);

// $FA_PREFETCH: unset, "" or "1": a new problem's sibling kernels (its other shape classes) compile on a worker
// thread after its first call (runtime/serial_worker.h); "0": only when a call needs them. Sets
// c->prefetch_enabled.
Status read_prefetch_env(fa_context c);

// $FA_LOG: unset or "": warn; else one of off, warn, info, debug (runtime/log.h). c->verbose == 1 raises the level
// to at least info. Sets c->log_level.
Status read_log_env(fa_context c);

// $FA_TUNE_THREADS and $FA_TUNE_BUDGET_MS (tuner/tune_env.h): unset or "": automatic / 2000 ms; else compile
// threads in [1, 256] and milliseconds in (0, 3600000]. Only validated here: the tuner reads them when it runs.
Status read_tune_env();

// $FA_PIN_TUNABLES: unset or "": nothing pinned; else FAMILY:TUNABLES[,...] (runtime/pinned_tunables.h). Sets
// c->pinned.
Status read_pin_tunables_env(fa_context c);

}  // namespace fa::rt
