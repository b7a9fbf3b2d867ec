// forward.cpp -- fa_run, fa_prepare, fa_is_supported, fa_problem_key.
#include <cstring>

#include "fa/fa.h"
#include "runtime/launch.h"
#include "runtime/validate.h"

using namespace fa::rt;

namespace {

Status check_context(fa_context c) {
  if (c == nullptr) return invalid("context", "a context from fa_context_create", "NULL");
  return Status::Ok();
}

Status run(fa_context c, const fa_params* in, CUstream stream) {
  Status st = check_context(c);
  if (!st.ok()) return st;
  fa_params p;
  fa::gen::ProblemDesc d;
  st = validate_forward(in, &p, &d);
  if (!st.ok()) return st;
  if (!c->has_device) return error(FA_ERROR_NO_DEVICE, c->no_device_reason);
  bool capturing = false;
  st = stream_capturing(c, stream, &capturing);
  if (!st.ok()) return st;
  std::shared_ptr<Kernel> k;
  fa::gen::KernelConfig cfg;
  const TuneRequest tune = forward_tune_request(c, p, d, stream);
  st = forward_kernel(c, d, !capturing, c->tune_policy == FA_TUNE_ON_FIRST_USE ? &tune : nullptr, &k, &cfg);
  if (!st.ok()) return st;
  FaFwdArgs args = make_fwd_args(p, d);
  const fa::gen::Launch l = fa::gen::family(cfg.s.kind).launch(cfg, fa::gen::launch_shape(d));
  return launch_kernel(c, *k, l, &args, sizeof args, stream);
}

Status prepare(fa_context c, const fa_params* in) {
  Status st = check_context(c);
  if (!st.ok()) return st;
  fa_params p;
  fa::gen::ProblemDesc d;
  st = validate_forward(in, &p, &d);
  if (!st.ok()) return st;
  std::shared_ptr<Kernel> k;
  fa::gen::KernelConfig cfg;
  const TuneRequest tune = forward_tune_request(c, p, d, nullptr);
  st = forward_kernel(c, d, true, c->has_device && c->tune_policy == FA_TUNE_ON_FIRST_USE ? &tune : nullptr, &k, &cfg);
  if (!st.ok()) return st;
  if (cfg.s.kind == fa::gen::Kind::FwdMma && !d.varlen) {
    // Both shape classes of the chosen config (seqlen_k a multiple of block_n or not), so that no later sequence
    // length in this bucket compiles anything, inside or outside graph capture.
    fa::gen::KernelConfig other = cfg;
    other.s.even_k = !cfg.s.even_k;
    std::shared_ptr<Kernel> k2;
    st = kernel_for(c, other, true, &k2);
    if (!st.ok()) return st;
  }
  if (!c->has_device) return error(FA_ERROR_NO_DEVICE, "kernel compiled, but it cannot be loaded: " + c->no_device_reason);
  return Status::Ok();
}

Status key(fa_context c, const fa_params* in, char* buf, size_t size) {
  Status st = check_context(c);
  if (!st.ok()) return st;
  if (buf == nullptr || size == 0) return invalid("buf", "a non-NULL buffer of size >= 1", "NULL or size 0");
  fa_params p;
  fa::gen::ProblemDesc d;
  st = validate_forward(in, &p, &d);
  if (!st.ok()) return st;
  const fa::gen::Semantic s = fa::gen::select_forward(d, context_arch(c));
  const std::string k = fa::gen::semantic_key(s);
  const size_t n = std::min(k.size(), size - 1);
  std::memcpy(buf, k.data(), n);
  buf[n] = '\0';
  return Status::Ok();
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

}  // namespace

extern "C" FA_API fa_status fa_run(fa_context c, const fa_params* params, void* stream) {
  return guarded("fa_run", [&] { return run(c, params, static_cast<CUstream>(stream)); });
}

extern "C" FA_API fa_status fa_prepare(fa_context c, const fa_params* params) {
  return guarded("fa_prepare", [&] { return prepare(c, params); });
}

extern "C" FA_API int fa_is_supported(fa_context c, const fa_params* params) {
  fa_status s = guarded("fa_is_supported", [&] {
    Status st = check_context(c);
    if (!st.ok()) return st;
    fa_params p;
    fa::gen::ProblemDesc d;
    st = validate_forward(params, &p, &d);
    if (!st.ok()) return st;
    const fa::gen::Semantic sem = fa::gen::select_forward(d, context_arch(c));
    fa::gen::KernelConfig cfg = fa::gen::finalize(sem, fa::gen::family(sem.kind).defaults(sem), d);
    std::string why;
    if (!fa::gen::is_valid(cfg, c->limits, &why))
      return error(FA_ERROR_NOT_SUPPORTED, fa::gen::canonical_key(cfg) + ": " + why);
    return Status::Ok();
  });
  return s == FA_OK ? 1 : 0;
}

extern "C" FA_API fa_status fa_problem_key(fa_context c, const fa_params* params, char* buf, size_t size) {
  return guarded("fa_problem_key", [&] { return key(c, params, buf, size); });
}
