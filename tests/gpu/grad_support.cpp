// grad_support.cpp -- see grad_support.h.
#include "tests/gpu/grad_support.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "api/backward_at.h"
#include "runtime/validate.h"

namespace fa::test {

::testing::AssertionResult forward_with_grads(std::mt19937_64& rng, const CaseSpec& spec, Case* c, Grads* g,
                                              gen::ProblemDesc* d) {
  Gpu& gp = gpu();
  materialize_spec(rng, spec, true, c);  // the tensor-core backwards need 16-byte aligned strides
  c->params.lse = reinterpret_cast<float*>(c->d_lse.get());
  if (fa_run(gp.ctx, &c->params, gp.stream) != FA_OK)
    return ::testing::AssertionFailure() << "forward: " << fa_last_error() << " [" << c->desc << "]";
  setup_grads(rng, *c, *g);
  rt::BwdView view;
  const rt::Status st = rt::validate_backward(&g->b, &view, d);
  if (!st.ok()) return ::testing::AssertionFailure() << "backward params: " << st.message << " [" << c->desc << "]";
  return ::testing::AssertionSuccess();
}

double bwd_tolerance(int dtype) {
  switch (dtype) {
    case FA_DTYPE_FP32: return 1e-4;
    case FA_DTYPE_FP16: return 1e-2;
    default: return 5e-2;
  }
}

void poison_grads(const Case& c, Grads& g) {
  const size_t es = c.dtype == FA_DTYPE_FP32 ? 4 : 2;
  std::vector<uint8_t> pq(c.q_n * es, 0xff), pk(c.k_n * es, 0xff), pv(c.v_n * es, 0xff);
  g.d_dq.upload(pq.data(), pq.size());
  g.d_dk.upload(pk.data(), pk.size());
  g.d_dv.upload(pv.data(), pv.size());
  if (!g.dsinks_ref.empty()) {
    const std::vector<float> nan(g.dsinks_ref.size(), std::nanf(""));
    g.d_dsinks.upload(nan.data(), nan.size() * 4);
  }
}

double dsinks_error(const Grads& g) {
  std::vector<float> got(g.dsinks_ref.size());
  g.d_dsinks.download(got.data(), got.size() * 4);
  double num = 0, den = 0;
  for (size_t h = 0; h < got.size(); ++h) {
    if (!std::isfinite(got[h])) return INFINITY;
    num += (got[h] - g.dsinks_ref[h]) * (got[h] - g.dsinks_ref[h]);
    den += g.dsinks_ref[h] * g.dsinks_ref[h];
  }
  return got.empty() ? 0.0 : std::sqrt(num) / std::max(std::sqrt(den), 1e-3 * std::sqrt(double(got.size())));
}

// The backward params of p (whose tensors have c's strides): dout, dq, dk, dv at c's o / q / k / v strides.
fa_bwd_params bwd_params(const Case& c, const fa_params& p, const void* dout, void* dq, void* dk, void* dv) {
  fa_bwd_params b;
  fa_bwd_params_init(&b);
  b.fwd = &p;
  b.dout = dout;
  b.dout_stride_batch = c.o_sb;
  b.dout_stride_seq = c.o_ss;
  b.dout_stride_head = c.o_sh;
  b.dq = dq;
  b.dq_stride_batch = c.q_sb;
  b.dq_stride_seq = c.q_ss;
  b.dq_stride_head = c.q_sh;
  b.dk = dk;
  b.dk_stride_batch = c.k_sb;
  b.dk_stride_seq = c.k_ss;
  b.dk_stride_head = c.k_sh;
  b.dv = dv;
  b.dv_stride_batch = c.v_sb;
  b.dv_stride_seq = c.v_ss;
  b.dv_stride_head = c.v_sh;
  return b;
}

void setup_grads(std::mt19937_64& rng, Case& c, Grads& g) {
  const size_t es = c.dtype == FA_DTYPE_FP32 ? 4 : 2;
  g.dout.assign(c.o_n, std::numeric_limits<double>::quiet_NaN());
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (size_t i = 0; i < c.o_n; ++i)
    if (c.o_valid[i]) g.dout[i] = round_to(c.dtype, u(rng));
  g.d_dout = DevBuf(c.o_n * es);
  g.d_dout.upload(encode(c.dtype, g.dout).data(), c.o_n * es);
  g.d_dq = DevBuf(c.q_n * es);
  g.d_dk = DevBuf(c.k_n * es);
  g.d_dv = DevBuf(c.v_n * es);
  g.dsinks_ref.assign(c.op.sinks != nullptr ? size_t(c.op.heads_q) : 0, 0.0);
  if (!g.dsinks_ref.empty()) g.d_dsinks = DevBuf(g.dsinks_ref.size() * 4);
  poison_grads(c, g);
  g.b = bwd_params(c, c.params, g.d_dout.get(), g.d_dq.get(), g.d_dk.get(), g.d_dv.get());
  if (!g.dsinks_ref.empty()) g.b.dsinks = reinterpret_cast<float*>(g.d_dsinks.get());
  g.dq_ref.assign(c.q_n, 0.0);
  g.dk_ref.assign(c.k_n, 0.0);
  g.dv_ref.assign(c.v_n, 0.0);
  oracle::backward(c.op, {c.q.data(), c.q_sb, c.q_ss, c.q_sh}, {c.k.data(), c.k_sb, c.k_ss, c.k_sh},
                   {c.v.data(), c.v_sb, c.v_ss, c.v_sh}, {g.dout.data(), c.o_sb, c.o_ss, c.o_sh},
                   {g.dq_ref.data(), c.q_sb, c.q_ss, c.q_sh}, {g.dk_ref.data(), c.k_sb, c.k_ss, c.k_sh},
                   {g.dv_ref.data(), c.v_sb, c.v_ss, c.v_sh}, g.dsinks_ref.empty() ? nullptr : g.dsinks_ref.data());
}

double grad_error(int dtype, const DevBuf& buf, const std::vector<double>& input, const std::vector<double>& ref,
                  bool* padding_ok) {
  const size_t es = dtype == FA_DTYPE_FP32 ? 4 : 2;
  std::vector<uint8_t> bytes(input.size() * es);
  buf.download(bytes.data(), bytes.size());
  const std::vector<double> got = decode(dtype, bytes);
  std::vector<double> g, r;
  for (size_t i = 0; i < input.size(); ++i) {
    if (!std::isnan(input[i])) {
      g.push_back(got[i]);
      r.push_back(ref[i]);
    } else if (!is_poison_bits(dtype, &bytes[i * es])) {
      *padding_ok = false;
    }
  }
  if (g.empty()) return 0.0;
  // ||got - ref|| / max(||ref||, 1e-3 * sqrt(n)): relative, with an RMS floor of 1e-3 for gradients that are zero in
  // exact arithmetic (e.g. dQ and dK with a single visible key, where dS = P (dP - Delta) vanishes) and only
  // rounding noise on the GPU. NaN or Inf anywhere fails.
  double num = 0, den = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (!std::isfinite(g[i]) || !std::isfinite(r[i])) return INFINITY;
    num += (g[i] - r[i]) * (g[i] - r[i]);
    den += r[i] * r[i];
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-3 * std::sqrt(double(g.size())));
}

GradResult check_grads(const Case& c, Grads& g) {
  Gpu& gp = gpu();
  GradResult r;
  poison_grads(c, g);
  if (fa_run_backward(gp.ctx, &g.b, gp.stream) != FA_OK) {
    r.failure = std::string("fa_run_backward: ") + fa_last_error();
    return r;
  }
  return measure_grads(c, g);
}

GradResult check_grads_at(const Case& c, Grads& g, const gen::Tunables& t, const char* family) {
  Gpu& gp = gpu();
  GradResult r;
  poison_grads(c, g);
  const rt::Status st = rt::run_backward_at(gp.ctx, &g.b, t, gp.stream, family);
  if (!st.ok()) {
    r.failure = std::string("run_backward_at: ") + st.message;
    return r;
  }
  return measure_grads(c, g);
}

std::string GradResult::describe() const {
  return fmt::format("dq {:.3g} dk {:.3g} dv {:.3g} dsinks {:.3g} {} padding {} ", dq, dk, dv, dsinks, failure,
                     padding_ok);
}

GradResult measure_grads(const Case& c, Grads& g) {
  Gpu& gp = gpu();
  GradResult r;
  const CUresult cr = gp.d->cuStreamSynchronize(gp.stream);
  if (cr != CUDA_SUCCESS) {
    r.failure = rt::driver_error(*gp.d, "cuStreamSynchronize", cr);
    return r;
  }
  r.dq = grad_error(c.dtype, g.d_dq, c.q, g.dq_ref, &r.padding_ok);
  r.dk = grad_error(c.dtype, g.d_dk, c.k, g.dk_ref, &r.padding_ok);
  r.dv = grad_error(c.dtype, g.d_dv, c.v, g.dv_ref, &r.padding_ok);
  r.dsinks = dsinks_error(g);
  return r;
}

fa_bwd_params prepare_bwd_params(const Case& c, const fa_params& p, PrepareGrads* scratch) {
  const size_t es = c.dtype == FA_DTYPE_FP32 ? 4 : 2;
  scratch->dq = DevBuf(c.q_n * es);
  scratch->dk = DevBuf(c.k_n * es);
  scratch->dv = DevBuf(c.v_n * es);
  fa_bwd_params b = bwd_params(c, p, p.o, scratch->dq.get(), scratch->dk.get(), scratch->dv.get());
  if (p.sinks != nullptr) {
    scratch->dsinks = DevBuf(size_t(p.heads_q) * 4);
    b.dsinks = reinterpret_cast<float*>(scratch->dsinks.get());
  }
  return b;
}

void prepare_in_parallel(const std::vector<const fa_params*>& problems, const std::vector<const Case*>& owners) {
  std::vector<PrepareGrads> scratch(problems.size());
  std::vector<fa_bwd_params> bwd(problems.size());
  for (size_t i = 0; i < problems.size(); ++i) bwd[i] = prepare_bwd_params(*owners.at(i), *problems[i], &scratch[i]);
  parallel_for(problems.size(), [&](size_t i) {
    fa_prepare(gpu().ctx, problems[i]);
    fa_prepare_backward(gpu().ctx, &bwd[i]);
  });
  gpu().d->cuCtxSynchronize();  // tuning launches ran on the legacy stream: done before the scratch is freed
}

}  // namespace fa::test
