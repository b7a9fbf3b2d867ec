// backward.cpp -- fa_backward_workspace_size, fa_run_backward, fa_prepare_backward; rt::run_backward_at (tests).
// The plan (generator/backward_plan.h) lists the kernels; this file binds them to the caller's buffers and stream.
#include <algorithm>
#include <cstdlib>

#include "fa/fa.h"
#include "generator/backward_plan.h"
#include "api/backward_at.h"
#include "runtime/launch.h"
#include "runtime/validate.h"
#include "templates/bwd_mma_tiling.cuh"

using namespace fa::rt;

namespace {

struct Prepared {
  BwdView v;
  fa::gen::ProblemDesc d;
  fa::gen::BwdPlan plan;
};

// `pinned`: the bwd_mma step at these tunables (rt::run_backward_at), no chooser; NOT_SUPPORTED where the
// tensor-core pipeline does not cover the problem.
Status plan_for(fa_context c, const fa_bwd_params* in, const TuneRequest* tune, Prepared* out,
                const fa::gen::Tunables* pinned = nullptr) {
  if (c == nullptr) return invalid("context", "a context from fa_context_create", "NULL");
  Status st = validate_backward(in, &out->v, &out->d);
  if (!st.ok()) return st;
  const int arch = context_arch(c);
  // FA_FORCE_REFERENCE_BWD=1 (read per call) routes the backward to the reference kernels: a field switch for
  // suspected kernel bugs, and how the tests compare the two paths. The plan picks the reference pipeline for
  // problems without the 16-byte alignment the tensor-core path needs.
  std::string why;
  if (pinned != nullptr) {
    if (!fa::gen::bwd_mma_covers(out->d, arch, &why))
      return error(FA_ERROR_NOT_SUPPORTED, "the tensor-core backward does not cover this problem: " + why);
    out->plan = fa::gen::plan_backward(out->d, arch, *pinned);
  } else if (const char* e = std::getenv("FA_FORCE_REFERENCE_BWD"); e && *e && *e != '0') {
    fa::gen::ProblemDesc ref = out->d;
    ref.aligned16 = false;
    out->plan = fa::gen::plan_backward(ref, arch);
  } else if (fa::gen::bwd_mma_covers(out->d, arch, nullptr)) {
    const fa::gen::Semantic s = fa::gen::backward_semantic(out->d, arch, fa::gen::Kind::BwdMma);
    fa::gen::Tunables t;
    st = c->chooser->choose(c, s, out->d, tune, &t);
    if (!st.ok()) return st;
    out->plan = fa::gen::plan_backward(out->d, arch, t);
  } else {
    out->plan = fa::gen::plan_backward(out->d, arch);
  }
  for (const auto& step : out->plan.steps) {
    if (!fa::gen::is_valid(step, c->limits, &why))
      return error(FA_ERROR_NOT_SUPPORTED, "backward step " + fa::gen::canonical_key(step) + ": " + why);
  }
  return Status::Ok();
}

FaBwdArgs make_bwd_args(const Prepared& P, char* ws) {
  const fa_params& p = P.v.fwd;
  const fa_bwd_params& b = P.v.bwd;
  FaBwdArgs a{};
  a.f = make_fwd_args(p, P.d);
  a.dout = b.dout; a.do_sb = b.dout_stride_batch; a.do_ss = b.dout_stride_seq; a.do_sh = b.dout_stride_head;
  a.dq = b.dq; a.dq_sb = b.dq_stride_batch; a.dq_ss = b.dq_stride_seq; a.dq_sh = b.dq_stride_head;
  a.dk = b.dk; a.dk_sb = b.dk_stride_batch; a.dk_ss = b.dk_stride_seq; a.dk_sh = b.dk_stride_head;
  a.dv = b.dv; a.dv_sb = b.dv_stride_batch; a.dv_ss = b.dv_stride_seq; a.dv_sh = b.dv_stride_head;
  auto at = [&](size_t off) -> float* { return off == SIZE_MAX ? nullptr : reinterpret_cast<float*>(ws + off); };
  a.delta = at(P.plan.off_delta);
  a.dq_accum = at(P.plan.off_dq_accum);
  a.dk_accum = at(P.plan.off_dk_accum);
  a.dv_accum = at(P.plan.off_dv_accum);
  a.accum_q_stride_row = P.plan.accum_q_stride_row;
  a.accum_kv_stride_row = P.plan.accum_kv_stride_row;
  a.total_q = P.d.total_q;
  a.total_k = P.d.total_k;
  a.deterministic = P.d.deterministic ? 1 : 0;
  return a;
}

// CTAs of kernel k resident on one SM at launch l: shared memory (1 KB reserved per CTA), threads and, where
// ptxas reported them, registers (allocated per warp in units of 256).
int resident_ctas(const Kernel& k, const fa::gen::Launch& l, const fa::gen::DeviceLimits& lim) {
  const int threads = static_cast<int>(l.block);
  if (threads <= 0) return 1;
  int n = ((lim.arch == 80 || lim.arch == 90) ? 2048 : 1536) / threads;
  n = std::min<int>(n, (lim.max_smem_optin + 1024) / (static_cast<int>(l.smem) + 1024));
  if (k.ptxas.registers > 0) {
    const int per_warp = (k.ptxas.registers * 32 + 255) / 256 * 256;
    n = std::min(n, 65536 / (per_warp * (threads / 32)));
  }
  return std::max(1, n);
}

// Enqueues every step of P.plan on `stream` with workspace `ws` (or a stream-ordered allocation when null).
Status enqueue(fa_context c, const Prepared& P, bool allow_compile, CUstream stream, void* ws_in, size_t ws_size) {
  std::vector<std::shared_ptr<Kernel>> kernels;
  for (const auto& step : P.plan.steps) {
    std::shared_ptr<Kernel> k;
    Status st = kernel_for(c, step, allow_compile, &k);
    if (!st.ok()) return st;
    kernels.push_back(k);
  }
  CtxGuard g(c);
  if (!g.status().ok()) return g.status();
  CUdeviceptr ws = reinterpret_cast<CUdeviceptr>(ws_in);
  bool owned = false;
  if (ws_in != nullptr) {
    if (ws_size < P.plan.workspace_bytes)
      return invalid("workspace_size", fmt::format(">= {} bytes (fa_backward_workspace_size)", P.plan.workspace_bytes), ws_size);
  } else if (P.plan.workspace_bytes > 0) {
    CUresult r = c->drv->cuMemAllocAsync(&ws, P.plan.workspace_bytes, stream);
    if (r == CUDA_ERROR_OUT_OF_MEMORY) return error(FA_ERROR_OUT_OF_MEMORY, driver_error(*c->drv, "cuMemAllocAsync", r));
    if (r != CUDA_SUCCESS) return error(FA_ERROR_DRIVER, driver_error(*c->drv, "cuMemAllocAsync", r));
    owned = true;
  }
  FaBwdArgs args = make_bwd_args(P, reinterpret_cast<char*>(ws));
  const fa::gen::LaunchShape shape = fa::gen::launch_shape(P.d);
  Status st;
  for (size_t i = 0; i < P.plan.steps.size() && st.ok(); ++i) {
    const auto& step = P.plan.steps[i];
    const fa::gen::Launch l = fa::gen::family(step.s.kind).launch(step, shape);
    // Causal (fa_bwd_cta_order): the grid's last pairs go heaviest key block first (fa_bwd_cta), two waves' worth.
    // The launch copies `args`, so setting the field here reaches this step only.
    if (step.s.kind == fa::gen::Kind::BwdMma && fa_bwd_cta_order(step.s.mask, step.t.block_m, step.t.block_n)) {
      const int slots = c->limits.sm_count * resident_ctas(*kernels[i], l, c->limits);
      args.lpt_tail = fa_bwd_lpt_tail(static_cast<int>(l.grid[1]), static_cast<int>(l.grid[2]),
                                      static_cast<int>(l.grid[0]), slots, 2);
      args.lpt_magic_tail = args.lpt_tail > 0 ? fa_div_magic(static_cast<unsigned>(args.lpt_tail)) : 0;
      args.lpt_magic_heads = fa_div_magic(l.grid[1]);
    }
    st = launch_kernel(c, *kernels[i], l, &args, sizeof args, stream);
  }
  if (owned) c->drv->cuMemFreeAsync(ws, stream);
  return st;
}

template <class F>
fa_status guarded(const char* fn, F&& f) {
  try {
    return finish(f());
  } catch (const std::bad_alloc&) {
    return finish(error(FA_ERROR_OUT_OF_MEMORY, std::string(fn) + ": host allocation failed"));
  } catch (const std::exception& e) {
    return finish(error(FA_ERROR_INTERNAL, std::string(fn) + ": " + e.what()));
  }
}

TuneRequest backward_tune_request(fa_context c, const Prepared& P, CUstream stream) {
  TuneRequest r;
  r.stream = stream;
  r.launch = [c, P, stream](const fa::gen::KernelConfig& cfg) -> Status {
    Prepared Q = P;
    Q.plan = fa::gen::plan_backward(P.d, context_arch(c), cfg.t);
    return enqueue(c, Q, true, stream, nullptr, 0);
  };
  return r;
}

Status run_backward(fa_context c, const fa_bwd_params* in, CUstream stream) {
  Prepared P;
  Status st = plan_for(c, in, nullptr, &P);  // validation first, without tuning
  if (!st.ok()) return st;
  if (!c->has_device) return error(FA_ERROR_NO_DEVICE, c->no_device_reason);
  bool capturing = false;
  st = stream_capturing(c, stream, &capturing);
  if (!st.ok()) return st;
  if (!capturing && c->tune_policy == FA_TUNE_ON_FIRST_USE && P.plan.uses_mma) {
    const TuneRequest tune = backward_tune_request(c, P, stream);
    st = plan_for(c, in, &tune, &P);
    if (!st.ok()) return st;
  }
  return enqueue(c, P, !capturing, stream, P.v.bwd.workspace, P.v.bwd.workspace_size);
}

}  // namespace

namespace fa::rt {

Status run_backward_at(fa_context c, const fa_bwd_params* in, const fa::gen::Tunables& t, CUstream stream) {
  Prepared P;
  Status st = plan_for(c, in, nullptr, &P, &t);
  if (!st.ok()) return st;
  if (!c->has_device) return error(FA_ERROR_NO_DEVICE, c->no_device_reason);
  return enqueue(c, P, true, stream, P.v.bwd.workspace, P.v.bwd.workspace_size);
}

}  // namespace fa::rt

extern "C" FA_API fa_status fa_backward_workspace_size(fa_context c, const fa_bwd_params* params, size_t* out_bytes) {
  return guarded("fa_backward_workspace_size", [&] {
    if (out_bytes == nullptr) return invalid("out_bytes", "a non-NULL size_t*", "NULL");
    Prepared P;
    Status st = plan_for(c, params, nullptr, &P);
    if (st.ok()) *out_bytes = P.plan.workspace_bytes;
    return st;
  });
}

extern "C" FA_API fa_status fa_run_backward(fa_context c, const fa_bwd_params* params, void* stream) {
  return guarded("fa_run_backward", [&] { return run_backward(c, params, static_cast<CUstream>(stream)); });
}

extern "C" FA_API fa_status fa_prepare_backward(fa_context c, const fa_bwd_params* params) {
  return guarded("fa_prepare_backward", [&] {
    Prepared P;
    Status st = plan_for(c, params, nullptr, &P);
    if (!st.ok()) return st;
    if (c->has_device && c->tune_policy == FA_TUNE_ON_FIRST_USE && P.plan.uses_mma) {
      const TuneRequest tune = backward_tune_request(c, P, nullptr);
      st = plan_for(c, params, &tune, &P);
      if (!st.ok()) return st;
    }
    for (const auto& step : P.plan.steps) {
      std::shared_ptr<Kernel> k;
      st = kernel_for(c, step, true, &k);
      if (!st.ok()) return st;
    }
    if (!c->has_device) return error(FA_ERROR_NO_DEVICE, "kernels compiled, but they cannot be loaded: " + c->no_device_reason);
    return Status::Ok();
  });
}
