// context.cpp -- fa_context_* and the *_init functions of the C API.
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>

#include "api/env_options.h"
#include "api/stores.h"
#include "fa/fa.h"
#include "runtime/context.h"

namespace fa::rt {
Status bind_device(fa_context c);
}

using namespace fa::rt;

namespace {
// Every *_init: a NULL pointer is an error naming `arg`; otherwise the struct is zeroed and stamped with its size and
// version, then `defaults` sets the fields whose default is not 0.
template <class T, class F>
fa_status init_struct(T* p, const char* arg, const char* type, int version, F&& defaults) {
  if (p == nullptr) return finish(invalid(arg, std::string("a non-NULL ") + type + "*", "NULL"));
  std::memset(p, 0, sizeof *p);
  p->struct_size = sizeof *p;
  p->version = version;
  defaults(p);
  return finish(Status::Ok());
}
}  // namespace

extern "C" FA_API fa_status fa_context_options_init(fa_context_options* o) {
  return init_struct(o, "options", "fa_context_options", FA_CONTEXT_OPTIONS_VERSION, [](fa_context_options* x) {
    x->tune_policy = -1;  // -1: take $FA_TUNE_POLICY, else FA_TUNE_ON_FIRST_USE
  });
}

extern "C" FA_API fa_status fa_params_init(fa_params* p) {
  return init_struct(p, "params", "fa_params", FA_PARAMS_VERSION, [](fa_params* x) {
    x->dtype = FA_DTYPE_FP16;
    x->batch = 1;
    x->heads_q = 1;
    x->heads_kv = 1;
    x->mask = FA_MASK_NONE;
    x->window_left = -1;
    x->window_right = -1;
  });
}

extern "C" FA_API fa_status fa_mods_init(fa_mods* m) {
  return init_struct(m, "mods", "fa_mods", FA_MODS_VERSION, [](fa_mods* x) {
    x->mask_mod_depends = FA_MOD_DEPENDS_BATCH | FA_MOD_DEPENDS_HEAD;  // fa.h: the safe default (0 shares b = 0's)
  });
}

extern "C" FA_API fa_status fa_bwd_params_init(fa_bwd_params* p) {
  return init_struct(p, "params", "fa_bwd_params", FA_BWD_PARAMS_VERSION, [](fa_bwd_params*) {});
}

extern "C" FA_API fa_status fa_merge_params_init(fa_merge_params* p) {
  return init_struct(p, "params", "fa_merge_params", FA_MERGE_PARAMS_VERSION, [](fa_merge_params* x) {
    x->dtype = FA_DTYPE_FP16;
    x->num_parts = 1;
    x->batch = 1;
    x->heads = 1;
    x->seqlen = 1;
  });
}

static Status parse_policy(const char* text, int* out) {
  if (!std::strcmp(text, "first_use") || !std::strcmp(text, "0")) *out = FA_TUNE_ON_FIRST_USE;
  else if (!std::strcmp(text, "defaults") || !std::strcmp(text, "1")) *out = FA_TUNE_DEFAULTS_ONLY;
  else if (!std::strcmp(text, "require") || !std::strcmp(text, "2")) *out = FA_TUNE_REQUIRE_TUNED;
  else if (!std::strcmp(text, "first_use_sync") || !std::strcmp(text, "3")) *out = FA_TUNE_ON_FIRST_USE_SYNC;
  else return invalid("FA_TUNE_POLICY", "first_use, defaults, require or first_use_sync", text);
  return Status::Ok();
}

static Status create(const fa_context_options* in, fa_context* out) {
  if (out == nullptr) return invalid("out_context", "a non-NULL fa_context*", "NULL");
  fa_context_options o;
  fa_context_options_init(&o);
  if (in != nullptr) {
    if (in->version != FA_CONTEXT_OPTIONS_VERSION)
      return error(FA_ERROR_INVALID_VERSION,
                   fmt::format("options.version: expected {} (call fa_context_options_init), got {}",
                               FA_CONTEXT_OPTIONS_VERSION, in->version));
    if (in->struct_size != sizeof(fa_context_options))
      return error(FA_ERROR_INVALID_VERSION, fmt::format("options.struct_size: expected {}, got {}",
                                                         sizeof(fa_context_options), in->struct_size));
    o = *in;
  }
  if (o.device_ordinal < 0) return invalid("device_ordinal", ">= 0", o.device_ordinal);
  int policy = o.tune_policy;
  if (policy == -1) {
    policy = FA_TUNE_ON_FIRST_USE;
    if (const char* env = std::getenv("FA_TUNE_POLICY"); env && *env) {
      Status st = parse_policy(env, &policy);
      if (!st.ok()) return st;
    }
  } else if (policy < FA_TUNE_ON_FIRST_USE || policy > FA_TUNE_ON_FIRST_USE_SYNC) {
    return invalid("tune_policy",
                   "an fa_tune_policy (FA_TUNE_ON_FIRST_USE, FA_TUNE_DEFAULTS_ONLY, FA_TUNE_REQUIRE_TUNED or "
                   "FA_TUNE_ON_FIRST_USE_SYNC: 0 to 3), or the default fa_context_options_init sets (which takes "
                   "$FA_TUNE_POLICY)",
                   policy);
  }
  if (o.verbose != 0 && o.verbose != 1) return invalid("verbose", "0 or 1", o.verbose);

  auto c = std::make_unique<fa_context_s>();
  c->device_ordinal = o.device_ordinal;
  c->tune_policy = policy;
  c->verbose = o.verbose;
  if (Status env = read_log_env(c.get()); !env.ok()) return env;
  if (Status env = read_cache_readonly_env(c.get()); !env.ok()) return env;
  if (Status env = read_arch_env(c.get()); !env.ok()) return env;
  if (Status env = read_mask_cache_env(c.get()); !env.ok()) return env;
  if (Status env = read_prefetch_env(c.get()); !env.ok()) return env;
  if (Status env = read_tune_env(); !env.ok()) return env;
  if (Status env = read_pin_tunables_env(c.get()); !env.ok()) return env;
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  Status st = bind_device(c.get());
  if (!st.ok()) return st;
  const auto t1 = Clock::now();
  c->store = make_cubin_store(c.get(), o.cache_path);
  c->create_bind_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
  c->create_store_ms = std::chrono::duration<double, std::milli>(Clock::now() - t1).count();
  c->kernels = std::make_unique<KernelCache>(c->store.get());
  c->chooser = make_chooser(c.get());
  c->mask_cache = make_mask_cache(c.get());
  if (c->prefetch_enabled && c->has_device) c->prefetch = std::make_unique<SerialWorker>();
  *out = c.release();
  return Status::Ok();
}

extern "C" FA_API fa_status fa_context_create(const fa_context_options* options, fa_context* out_context) {
  try {
    return finish(create(options, out_context));
  } catch (const std::exception& e) {
    return finish(error(FA_ERROR_INTERNAL, std::string("fa_context_create: ") + e.what()));
  }
}

extern "C" FA_API void fa_context_destroy(fa_context c) {
  if (c == nullptr) return;
  if (c->prefetch) c->prefetch->stop();  // joins its worker: nothing compiles or loads for it past this line
  c->chooser->stop_background();         // joins the worker: nothing tunes or loads past this line
  c->mask_cache.reset();                 // waits for the context's device work when it kept classifications, frees them
  if (c->has_device) {
    {
      CtxGuard g(c);
      if (g.status().ok()) c->kernels->unload_all(*c->drv);
    }
    c->drv->cuDevicePrimaryCtxRelease(c->dev);
  }
  delete c;
}

extern "C" FA_API int fa_context_has_device(fa_context c) {
  if (c == nullptr) {
    finish(invalid("context", "a context from fa_context_create", "NULL"));
    return 0;
  }
  if (!c->has_device) {
    finish(error(FA_ERROR_NO_DEVICE, c->no_device_reason));
    return 0;
  }
  finish(Status::Ok());
  return 1;
}
