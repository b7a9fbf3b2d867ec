// forward.cpp -- fa_run, fa_prepare, fa_is_supported, fa_problem_key: validation, then the forward plan (the
// selector's family, the chooser's tunables, the family's launches) enqueued on the caller's stream.
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "api/guarded.h"
#include "fa/fa.h"
#include "runtime/driver.h"
#include "runtime/launch.h"
#include "runtime/validate.h"
#include "tuner/bucket.h"

using namespace fa::rt;
using fa::api::check_context;
using fa::api::guarded;

namespace {

// The context checked and the params validated: the validated copy and its problem description.
Status validated(fa_context c, const fa_params* in, fa_params* p, fa::gen::ProblemDesc* d) {
  Status st = check_context(c);
  if (st.ok()) st = validate_forward(in, p, d);
  std::string why;
  if (st.ok() && !fa::gen::fp8_support(fa::gen::Role::Forward, *d, context_arch(c), &why))
    st = error(FA_ERROR_NOT_SUPPORTED, why);
  if (st.ok()) d->sm_count = c->sm_count > 0 ? c->sm_count : c->limits.sm_count;  // split-KV plans size by it
  return st;
}

// The plans of d's problem at the other key counts of its tuning bucket (tune::bucket_class_lengths: the shape
// classes, key counts a multiple of the tile or not), with the chooser's answer for the key (no tuning here); none
// for varlen (one class). The first failure ends the list.
Status sibling_plans(fa_context c, const fa::gen::ProblemDesc& d, std::vector<fa::gen::Plan>* out) {
  if (d.varlen) return Status::Ok();
  for (int sk : fa::tune::bucket_class_lengths(d)) {
    if (sk == d.seqlen_k) continue;
    fa::gen::ProblemDesc other = d;
    other.seqlen_k = sk;
    fa::gen::Plan plan;
    Status st = plan_for(c, fa::gen::Role::Forward, other, nullptr, &plan);
    if (!st.ok()) return st;
    out->push_back(std::move(plan));
  }
  return Status::Ok();
}

// After a call that brought a kernel into the context: the kernels its siblings plan that it did not use, handed to
// the context's prefetch worker (runtime/serial_worker.h), which compiles and loads them, so that a later new length
// finds them ready.
void prefetch_siblings(fa_context c, const fa::gen::ProblemDesc& d, const fa::gen::Plan& own) {
  if (!c->prefetch) return;
  std::vector<fa::gen::Plan> plans;
  (void)sibling_plans(c, d, &plans);  // what planned before a failure is still worth having
  std::set<std::string> have;
  for (const auto& step : own.steps) have.insert(fa::gen::canonical_key(step));
  for (const auto& plan : plans)
    for (const auto& step : plan.steps) {
      std::string key = fa::gen::canonical_key(step);
      if (!have.insert(key).second) continue;
      c->prefetch->submit(key, [c, step](const std::atomic<bool>&) {
        relax_capture_mode_of_this_thread(*c->drv);
        std::shared_ptr<Kernel> k;
        (void)kernel_for(c, step, true, &k);  // compiled (or from the store) and loaded; an error is the call's
      });
    }
}

// fa_run. Fast path: a shape seen before (runtime/plan_cache.h) launches its cached plan: no capture query, selector,
// chooser or kernel lookup. Slow path: the capture check, the plan (tuning by policy), its kernels, and the entry
// for the next call of this shape (not while capturing: a capture may run a default that a later call tunes).
Status run(fa_context c, const fa_params* in, CUstream stream) {
  fa_params p;
  fa::gen::ProblemDesc d;
  Status st = validated(c, in, &p, &d);
  if (!st.ok()) return st;
  if (!c->has_device) return error(FA_ERROR_NO_DEVICE, c->no_device_reason);
  const ShapeSignature sig = shape_signature(fa::gen::Role::Forward, d);
  FaFwdArgs args = make_fwd_args(p, d);
  FaUser user_storage;  // filled only for user code (352 bytes)
  const FaUser* user = nullptr;
  if (p.mods != nullptr) {
    user_storage = make_user_args(p);
    user = &user_storage;
  }
  // The plan's launches with their args; the classification cache keyed when the caller's fa_mods allows it.
  auto plan_args = [&](const fa::gen::Plan& plan) {
    PlanArgs pa = forward_plan_args(plan, &args, user);
    if (user != nullptr) cache_classes(c, fa::gen::Role::Forward, d, plan, p, *user, &args, &pa);
    return pa;
  };
  if (auto hit = c->plans.find(sig))
    return enqueue_steps(c, hit->plan, hit->kernels, fa::gen::launch_shape(d), plan_args(hit->plan), stream,
                         p.workspace, p.workspace_size);

  const uint64_t generation = c->plans.generation();  // read before the choice (plan_cache.h)
  bool capturing = false;
  st = stream_capturing(c, stream, &capturing);
  if (!st.ok()) return st;
  TuneRequest tune = forward_tune_request(c, p, d, stream);
  tune.synchronous = c->tune_policy == FA_TUNE_ON_FIRST_USE_SYNC;
  auto entry = std::make_shared<CachedPlan>();
  st = plan_for(c, fa::gen::Role::Forward, d, !capturing && tunes_on_first_use(c->tune_policy) ? &tune : nullptr,
                &entry->plan);
  if (!st.ok()) return st;
  const long long loads_before = c->kernels->stats().loads;
  st = resolve_kernels(c, entry->plan, !capturing, &entry->kernels);
  if (!st.ok()) return st;
  st = enqueue_steps(c, entry->plan, entry->kernels, fa::gen::launch_shape(d), plan_args(entry->plan), stream,
                     p.workspace, p.workspace_size);
  if (st.ok() && !capturing) {
    if (c->kernels->stats().loads > loads_before) prefetch_siblings(c, d, entry->plan);
    entry->sig = sig;
    entry->generation = generation;
    c->plans.insert(std::move(entry));
  }
  return st;
}

Status prepare(fa_context c, const fa_params* in) {
  fa_params p;
  fa::gen::ProblemDesc d;
  Status st = validated(c, in, &p, &d);
  if (!st.ok()) return st;
  TuneRequest tune = forward_tune_request(c, p, d, nullptr);
  tune.synchronous = true;  // fa_prepare returns ready: the tuned kernel, never a background job
  fa::gen::Plan plan;
  std::vector<std::shared_ptr<Kernel>> kernels;  // compiled and loaded (resolve_kernels); not kept
  st = plan_for(c, fa::gen::Role::Forward, d, c->has_device && tunes_on_first_use(c->tune_policy) ? &tune : nullptr,
                &plan);
  if (st.ok()) st = resolve_kernels(c, plan, true, &kernels);
  if (st.ok()) {
    // Every shape class of the tuning bucket, so that no later sequence length in it compiles anything, inside or
    // outside graph capture: the chooser may serve a length with the tuned winner or with its fallback
    // (tuner/chooser.h).
    std::vector<fa::gen::Plan> siblings;
    st = sibling_plans(c, d, &siblings);
    if (st.code == FA_ERROR_INVALID_ARGUMENT && !c->pinned.empty()) {
      // A $FA_PIN_TUNABLES point valid for this length but not for another shape class of the bucket: the calls at
      // those lengths will fail with this message; this one is ready.
      c->warn("fa_prepare: " + st.message + " (at another shape class of the bucket)");
      st = Status::Ok();
    }
    for (size_t i = 0; st.ok() && i < siblings.size(); ++i) st = resolve_kernels(c, siblings[i], true, &kernels);
  }
  if (!st.ok()) return st;
  if (!c->has_device)
    return error(FA_ERROR_NO_DEVICE, "kernel compiled, but it cannot be loaded: " + c->no_device_reason);
  return Status::Ok();
}

Status key(fa_context c, const fa_params* in, char* buf, size_t size) {
  fa_params p;
  fa::gen::ProblemDesc d;
  Status st = validated(c, in, &p, &d);
  if (!st.ok()) return st;
  if (buf == nullptr) return invalid("buf", "a non-NULL buffer", "NULL");
  const std::string k = fa::gen::semantic_key(fa::gen::select_forward(d, context_arch(c)));
  if (size < k.size() + 1)  // nothing written: a truncated key would name another kernel
    return invalid("size", fmt::format(">= {} bytes (the key and its NUL)", k.size() + 1), size);
  std::memcpy(buf, k.c_str(), k.size() + 1);
  return Status::Ok();
}

Status workspace_size(fa_context c, const fa_params* in, size_t* out) {
  fa_params p;
  fa::gen::ProblemDesc d;
  Status st = validated(c, in, &p, &d);
  if (!st.ok()) return st;
  if (out == nullptr) return invalid("out_bytes", "a non-NULL size_t*", "NULL");
  // The split count and workspace depend on the family's plan at its tunables: the chooser's answer without tuning.
  fa::gen::Plan plan;
  st = plan_for(c, fa::gen::Role::Forward, d, nullptr, &plan);
  if (!st.ok()) return st;
  *out = plan.reported_workspace();
  return Status::Ok();
}

Status supported(fa_context c, const fa_params* params) {
  fa_params p;
  fa::gen::ProblemDesc d;
  Status st = validated(c, params, &p, &d);
  if (!st.ok()) return st;
  const fa::gen::Plan plan = fa::gen::make_plan(fa::gen::select_forward(d, context_arch(c)), d);
  std::string why;
  for (const auto& step : plan.steps)
    if (!fa::gen::is_valid(step, c->limits, &why))
      return error(FA_ERROR_NOT_SUPPORTED, fa::gen::canonical_key(step) + ": " + why);
  return Status::Ok();
}

}  // namespace

extern "C" FA_API fa_status fa_run(fa_context c, const fa_params* params, void* stream) {
  return guarded("fa_run", [&] { return run(c, params, static_cast<CUstream>(stream)); });
}

extern "C" FA_API fa_status fa_prepare(fa_context c, const fa_params* params) {
  return guarded("fa_prepare", [&] { return prepare(c, params); });
}

extern "C" FA_API int fa_is_supported(fa_context c, const fa_params* params) {
  return guarded("fa_is_supported", [&] { return supported(c, params); }) == FA_OK ? 1 : 0;
}

extern "C" FA_API fa_status fa_forward_workspace_size(fa_context c, const fa_params* params, size_t* out_bytes) {
  return guarded("fa_forward_workspace_size", [&] { return workspace_size(c, params, out_bytes); });
}

extern "C" FA_API fa_status fa_problem_key(fa_context c, const fa_params* params, char* buf, size_t size) {
  return guarded("fa_problem_key", [&] { return key(c, params, buf, size); });
}
