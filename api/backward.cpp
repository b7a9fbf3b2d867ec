// backward.cpp -- fa_backward_workspace_size, fa_run_backward, fa_prepare_backward; rt::run_backward_at (tests).
// The backward family's plan (generator/families/*/family.cpp: Family::plan) lists the kernels and the workspace;
// this file binds the common FaBwdArgs to the caller's buffers and enqueues the plan on the caller's stream.
#include <algorithm>
#include <cstddef>

#include "api/backward_at.h"
#include "api/guarded.h"
#include "fa/fa.h"
#include "runtime/launch.h"
#include "runtime/validate.h"

using namespace fa::rt;
using fa::api::check_context;
using fa::api::guarded;

namespace {

struct Prepared {
  BwdView v;
  fa::gen::ProblemDesc d;
  fa::gen::Plan plan;
};

// The context checked and `in` validated into out->v / out->d.
Status validated(fa_context c, const fa_bwd_params* in, Prepared* out) {
  Status st = check_context(c);
  if (st.ok()) st = validate_backward(in, &out->v, &out->d);
  return st;
}

// Plans a validated call (validated()). `pinned`: the backward family `family` (bwd_mma, bwd_wgmma) at these
// tunables (rt::run_backward_at), no chooser; NOT_SUPPORTED where it does not cover the problem.
Status plan_validated(fa_context c, const TuneRequest* tune, Prepared* out, const fa::gen::Tunables* pinned = nullptr,
                      const char* family = "bwd_mma") {
  const int arch = context_arch(c);
  std::string why;
  if (pinned != nullptr) {
    const fa::gen::Family* f = fa::gen::find_family(family);
    if (f == nullptr || f->role != fa::gen::Role::Backward || !fa::gen::family_covers(*f, out->d, arch, &why))
      return error(FA_ERROR_NOT_SUPPORTED,
                   std::string("the backward family ") + family + " does not cover this problem: " + why);
    out->plan = fa::gen::make_plan(fa::gen::semantic_for(*f, out->d, arch), *pinned, out->d);
  } else {
    Status st = plan_for(c, fa::gen::Role::Backward, out->d, tune, &out->plan);
    if (!st.ok()) return st;
  }
  for (const auto& step : out->plan.steps) {
    if (!fa::gen::is_valid(step, c->limits, &why))
      return error(FA_ERROR_NOT_SUPPORTED, "backward step " + fa::gen::canonical_key(step) + ": " + why);
  }
  return Status::Ok();
}

// Validates and plans (validated(), then plan_validated()).
Status prepare_plan(fa_context c, const fa_bwd_params* in, const TuneRequest* tune, Prepared* out,
                    const fa::gen::Tunables* pinned = nullptr, const char* family = "bwd_mma") {
  Status st = validated(c, in, out);
  return st.ok() ? plan_validated(c, tune, out, pinned, family) : st;
}

FaBwdArgs make_bwd_args(const BwdView& v, const fa::gen::ProblemDesc& d, const fa::gen::Plan& plan) {
  const fa_params& p = v.fwd;
  const fa_bwd_params& b = v.bwd;
  FaBwdArgs a{};
  a.f = make_fwd_args(p, d);
  a.dout = b.dout;
  a.do_sb = b.dout_stride_batch;
  a.do_ss = b.dout_stride_seq;
  a.do_sh = b.dout_stride_head;
  a.dq = b.dq;
  a.dq_sb = b.dq_stride_batch;
  a.dq_ss = b.dq_stride_seq;
  a.dq_sh = b.dq_stride_head;
  a.dk = b.dk;
  a.dk_sb = b.dk_stride_batch;
  a.dk_ss = b.dk_stride_seq;
  a.dk_sh = b.dk_stride_head;
  a.dv = b.dv;
  a.dv_sb = b.dv_stride_batch;
  a.dv_ss = b.dv_stride_seq;
  a.dv_sh = b.dv_stride_head;
  a.accum_q_stride_row = plan.accum_q_stride_row;
  a.accum_kv_stride_row = plan.accum_kv_stride_row;
  a.total_q = d.total_q;
  a.total_k = d.total_k;
  a.deterministic = d.deterministic ? 1 : 0;
  a.dsinks = b.dsinks;
  a.dsink_parts = plan.dsink_parts;
  a.dsink_blocks = plan.dsink_blocks;
  return a;
}

// The block classification step (mask_blocks) of a plan with a mask_mod reads the FaFwdArgs at the head of the
// FaBwdArgs it is given.
static_assert(offsetof(FaBwdArgs, f) == 0, "FaBwdArgs starts with the forward's args");

// Enqueues `plan` (its loaded kernels when given, else looked up / compiled) for the validated call (v, d) on
// `stream` with workspace `ws` (or a stream-ordered allocation when null); `cache`: the classification may be kept
// or reused across calls (runtime/mask_cache.h; not while tuning candidates).
Status enqueue_with(fa_context c, const BwdView& v, const fa::gen::ProblemDesc& d, const fa::gen::Plan& plan,
                    const std::vector<std::shared_ptr<Kernel>>* kernels, bool allow_compile, CUstream stream, void* ws,
                    size_t ws_size, bool cache = true) {
  FaBwdArgs args = make_bwd_args(v, d, plan);
  bind_block_sizes(plan, &args.f);
  auto bind_workspace = [&args, &plan](char* base) {
    auto at = [&](size_t off) -> float* { return off == SIZE_MAX ? nullptr : reinterpret_cast<float*>(base + off); };
    args.delta = at(plan.off_delta);
    args.dq_accum = at(plan.off_dq_accum);
    args.dk_accum = at(plan.off_dk_accum);
    args.dv_accum = at(plan.off_dv_accum);
    args.dsink_part = at(plan.off_dsink_part);
    bind_block_workspace(plan, &args.f, base);
  };
  const FaUser user = make_user_args(v.fwd);  // user code's buffers and scalars (zero without mods)
  PlanArgs pa{&args, sizeof args, bind_workspace};
  pa.user = v.fwd.mods != nullptr ? &user : nullptr;
  pa.fwd = &args.f;
  if (cache && pa.user != nullptr) cache_classes(c, fa::gen::Role::Backward, d, plan, v.fwd, user, &args.f, &pa);
  const fa::gen::LaunchShape shape = fa::gen::launch_shape(d);
  if (kernels != nullptr) return enqueue_steps(c, plan, *kernels, shape, pa, stream, ws, ws_size);
  return enqueue_plan(c, plan, shape, pa, allow_compile, stream, ws, ws_size);
}
Status enqueue(fa_context c, const Prepared& P, bool allow_compile, CUstream stream, void* ws, size_t ws_size,
               bool cache = true) {
  return enqueue_with(c, P.v, P.d, P.plan, nullptr, allow_compile, stream, ws, ws_size, cache);
}

TuneRequest backward_tune_request(fa_context c, const Prepared& P, CUstream stream) {
  TuneRequest r;
  r.stream = stream;
  r.synchronous = true;  // the backward tunes in the call (the background tuner covers the forward)
  r.launch = [c, P, stream](const fa::gen::KernelConfig& cfg) -> Status {
    Prepared Q = P;
    Q.plan = fa::gen::make_plan(cfg.s, cfg.t, P.d);
    return enqueue(c, Q, true, stream, nullptr, 0, false);
  };
  return r;
}

// Whether the chooser may time candidates for P's plan now.
bool may_tune(fa_context c, const Prepared& P) {
  const auto& main = P.plan.steps[static_cast<size_t>(P.plan.tuned_step)];
  return c->has_device && tunes_on_first_use(c->tune_policy) && main.s.family->tuned_on_first_use;
}

// fa_run_backward. Fast path, as fa_run's (runtime/plan_cache.h): a shape seen before launches its cached plan and
// kernels after validation (no capture query, selector, chooser, predicate or kernel lookup). Slow path: the plan
// (tuned in the call by policy), its kernels, the launches, and the entry for the next call of this shape (not while
// capturing).
Status run_backward(fa_context c, const fa_bwd_params* in, CUstream stream) {
  Prepared P;
  Status st = validated(c, in, &P);
  if (!st.ok()) return st;
  const ShapeSignature sig = shape_signature(fa::gen::Role::Backward, P.d);
  if (c->has_device)
    if (auto hit = c->plans.find(sig))
      return enqueue_with(c, P.v, P.d, hit->plan, &hit->kernels, false, stream, P.v.bwd.workspace,
                          P.v.bwd.workspace_size);
  const uint64_t generation = c->plans.generation();  // read before the choice (plan_cache.h)
  st = plan_validated(c, nullptr, &P);                // the selector's plan, without tuning
  if (!st.ok()) return st;
  if (!c->has_device) return error(FA_ERROR_NO_DEVICE, c->no_device_reason);
  bool capturing = false;
  st = stream_capturing(c, stream, &capturing);
  if (!st.ok()) return st;
  if (!capturing && may_tune(c, P)) {
    const TuneRequest tune = backward_tune_request(c, P, stream);
    st = plan_validated(c, &tune, &P);
    if (!st.ok()) return st;
  }
  auto entry = std::make_shared<CachedPlan>();
  st = resolve_kernels(c, P.plan, !capturing, &entry->kernels);
  if (!st.ok()) return st;
  st =
      enqueue_with(c, P.v, P.d, P.plan, &entry->kernels, !capturing, stream, P.v.bwd.workspace, P.v.bwd.workspace_size);
  if (st.ok() && !capturing) {
    entry->sig = sig;
    entry->generation = generation;
    entry->plan = std::move(P.plan);
    c->plans.insert(std::move(entry));
  }
  return st;
}

}  // namespace

namespace fa::rt {

Status run_backward_at(fa_context c, const fa_bwd_params* in, const fa::gen::Tunables& t, CUstream stream,
                       const char* family) {
  Prepared P;
  Status st = prepare_plan(c, in, nullptr, &P, &t, family);
  if (!st.ok()) return st;
  if (!c->has_device) return error(FA_ERROR_NO_DEVICE, c->no_device_reason);
  return enqueue(c, P, true, stream, P.v.bwd.workspace, P.v.bwd.workspace_size);
}

}  // namespace fa::rt

extern "C" FA_API fa_status fa_backward_workspace_size(fa_context c, const fa_bwd_params* params, size_t* out_bytes) {
  return guarded("fa_backward_workspace_size", [&] {
    if (out_bytes == nullptr) return invalid("out_bytes", "a non-NULL size_t*", "NULL");
    Prepared P;
    Status st = prepare_plan(c, params, nullptr, &P);
    if (st.ok()) *out_bytes = P.plan.reported_workspace();
    return st;
  });
}

extern "C" FA_API fa_status fa_run_backward(fa_context c, const fa_bwd_params* params, void* stream) {
  return guarded("fa_run_backward", [&] { return run_backward(c, params, static_cast<CUstream>(stream)); });
}

extern "C" FA_API fa_status fa_prepare_backward(fa_context c, const fa_bwd_params* params) {
  return guarded("fa_prepare_backward", [&] {
    Prepared P;
    Status st = prepare_plan(c, params, nullptr, &P);
    if (!st.ok()) return st;
    if (may_tune(c, P)) {
      const TuneRequest tune = backward_tune_request(c, P, nullptr);
      st = plan_validated(c, &tune, &P);
      if (!st.ok()) return st;
    }
    for (const auto& step : P.plan.steps) {
      std::shared_ptr<Kernel> k;
      st = kernel_for(c, step, true, &k);
      if (!st.ok()) return st;
    }
    if (!c->has_device)
      return error(FA_ERROR_NO_DEVICE, "kernels compiled, but they cannot be loaded: " + c->no_device_reason);
    return Status::Ok();
  });
}
