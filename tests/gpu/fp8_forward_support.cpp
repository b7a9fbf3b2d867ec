// fp8_forward_support.cpp -- the fp8 forward tests' problems (see fp8_forward_support.h).
#include "tests/gpu/fp8_forward_support.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "generator/problem.h"
#include "runtime/launch.h"
#include "runtime/validate.h"
#include "tests/oracle/fp8.h"

namespace fa::test {

namespace {

const char* fmt_name(int dt) {
  return dt == FA_DTYPE_E4M3 ? "e4m3" : dt == FA_DTYPE_E5M2 ? "e5m2" : dt == 1 ? "fp16" : "bf16";
}

int rand_int(std::mt19937_64& rng, int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); }

// The codes of x (doubles), one descale per (batch, KV head) group or one for the tensor: descale = amax / fp8_max,
// code = round(x / descale) (saturating). group_of(e) names element e's group (-1: none, padding).
void quantize(const std::vector<double>& x, int format, int groups, const std::function<int(size_t)>& group_of,
              bool per_group, std::vector<uint8_t>* codes, std::vector<float>* descale) {
  std::vector<double> amax(size_t(groups), 0.0);
  double all = 0.0;
  for (size_t e = 0; e < x.size(); ++e) {
    const int g = group_of(e);
    if (g < 0) continue;
    amax[size_t(g)] = std::max(amax[size_t(g)], std::fabs(x[e]));
    all = std::max(all, std::fabs(x[e]));
  }
  descale->assign(size_t(groups), 1.f);
  for (int g = 0; g < groups; ++g) {
    const double a = per_group ? amax[size_t(g)] : all;
    (*descale)[size_t(g)] = a > 0 ? float(a / oracle::fp8_max(format)) : 1.f;
  }
  codes->assign(x.size(), 0);
  for (size_t e = 0; e < x.size(); ++e) {
    const int g = group_of(e);
    if (g >= 0) (*codes)[e] = oracle::fp8_encode(x[e] / double((*descale)[size_t(g)]), format);
  }
}

long long o_size(const Fp8Case& c) { return (long long)(c.s.varlen ? 1 : c.s.batch) * c.tq * c.s.hq * c.s.dv; }

}  // namespace

std::string describe(const Fp8Spec& s) {
  return fmt::format(
      "{} -> {} b{} sq{} sk{} hq{}/{} d{}/{} mask{} ({},{}) alibi{} softcap{} scale{} {} {} descale per {}{}",
      fmt_name(s.dtype), fmt_name(s.o_dtype), s.batch, s.sq, s.sk, s.hq, s.hkv, s.d, s.dv, s.mask, s.wl, s.wr, s.alibi,
      s.softcap, s.scale, s.varlen ? "varlen" : "fixed", s.outliers ? "outliers" : "N(0,1)",
      s.per_head_descale ? "(batch, kv head)" : "tensor", s.lse ? "" : " no-lse");
}

void layout_fp8_case(std::mt19937_64& rng, Fp8Case* c) {
  const Fp8Spec& s = c->s;
  oracle::Problem& p = c->op;
  p = oracle::Problem{};
  p.batch = s.batch;
  p.heads_q = s.hq;
  p.heads_kv = s.hkv;
  p.head_dim = s.d;
  p.head_dim_v = s.dv;
  p.mask = s.mask;
  p.window_left = s.mask == FA_MASK_SLIDING_WINDOW ? s.wl : -1;
  p.window_right = s.mask == FA_MASK_SLIDING_WINDOW ? s.wr : -1;
  p.softcap = double(s.softcap);
  p.scale = double(s.scale);
  if (s.varlen) {
    c->cu_q = {0};
    c->cu_k = {0};
    for (int b = 0; b < s.batch; ++b) {
      const bool empty = b == 1 && s.batch > 2;  // a sequence without queries among them
      c->cu_q.push_back(c->cu_q.back() + (empty ? 0 : rand_int(rng, 1, s.sq)));
      c->cu_k.push_back(c->cu_k.back() + rand_int(rng, 0, s.sk));
    }
    p.cu_seqlens_q = c->cu_q;
    p.cu_seqlens_k = c->cu_k;
    c->tq = c->cu_q.back();
    c->tk = c->cu_k.back();
  } else {
    p.seqlen_q = s.sq;
    p.seqlen_k = s.sk;
    c->tq = s.sq;
    c->tk = s.sk;
  }
  const long long nb = s.varlen ? 1 : s.batch;
  c->q.assign(size_t(nb * c->tq * s.hq * s.d), 0);
  c->k.assign(size_t(nb * c->tk * s.hkv * s.d), 0);
  c->v.assign(size_t(nb * c->tk * s.hkv * s.dv), 0);
  c->descale_q.assign(size_t(s.batch * s.hkv), 1.f);
  c->descale_k = c->descale_v = c->descale_q;
  c->alibi.clear();
  c->alibi_f.clear();
  if (s.alibi) {
    std::uniform_real_distribution<double> ud(0.01, 0.5);
    for (int h = 0; h < s.hq; ++h) {
      c->alibi_f.push_back(float(ud(rng)));
      c->alibi.push_back(c->alibi_f.back());
    }
    p.alibi = c->alibi.data();
  }
}

void make_fp8_case(std::mt19937_64& rng, const Fp8Spec& s, Fp8Case* c) {
  c->s = s;
  layout_fp8_case(rng, c);
  std::normal_distribution<double> nd(0.0, 1.0), wide(0.0, 10.0);
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  const int group = s.hq / s.hkv;
  // the (batch, kv head) group of element e of a [tokens, heads, dim] tensor (varlen: batch by token)
  auto grouping = [&](long long tokens_per_batch, int heads, int dim, bool queries, const std::vector<int>& cu) {
    return [=, &cu](size_t e) {
      const long long tok = (long long)(e / size_t(heads * dim));
      const int h = int((e / size_t(dim)) % size_t(heads));
      int b = 0;
      if (s.varlen) {
        while (b + 1 < int(cu.size()) && cu[size_t(b) + 1] <= tok) ++b;
        if (b >= s.batch) return -1;
      } else {
        b = int(tok / tokens_per_batch);
      }
      return b * s.hkv + (queries ? h / group : h);
    };
  };
  auto fill = [&](std::vector<uint8_t>* codes, std::vector<float>* descale, long long tpb, int heads, int dim,
                  bool queries, const std::vector<int>& cu) {
    std::vector<double> x(codes->size());
    for (auto& e : x) e = nd(rng) + (s.outliers && u01(rng) < 1e-3 ? wide(rng) : 0.0);
    quantize(x, s.dtype, s.batch * s.hkv, grouping(tpb, heads, dim, queries, cu), s.per_head_descale, codes, descale);
  };
  fill(&c->q, &c->descale_q, c->tq, s.hq, s.d, true, c->cu_q);
  fill(&c->k, &c->descale_k, c->tk, s.hkv, s.d, false, c->cu_k);
  fill(&c->v, &c->descale_v, c->tk, s.hkv, s.dv, false, c->cu_k);
  finish(c);
}

namespace {

// The oracle's O, LSE and M, and ds per (token, head) (fp8_forward_support.h).
void oracle_of(Fp8Case* c) {
  const Fp8Spec& s = c->s;
  oracle::Problem& p = c->op;
  if (p.scale != 0.0) p.scale = double(float(p.scale));  // the kernel sees the float values
  p.softcap = double(float(p.softcap));
  const long long sb_q = s.varlen ? 0 : c->tq * s.hq * s.d, sb_k = s.varlen ? 0 : c->tk * s.hkv * s.d;
  const long long sb_v = s.varlen ? 0 : c->tk * s.hkv * s.dv, sb_o = s.varlen ? 0 : c->tq * s.hq * s.dv;
  std::vector<double> dq(c->descale_q.begin(), c->descale_q.end()), dk(c->descale_k.begin(), c->descale_k.end()),
      dv(c->descale_v.begin(), c->descale_v.end());
  const oracle::Fp8Tensor4 q{c->q.data(), sb_q, (long long)s.hq * s.d, s.d, s.dtype, dq.data(), s.hkv, 1};
  const oracle::Fp8Tensor4 k{c->k.data(), sb_k, (long long)s.hkv * s.d, s.d, s.dtype, dk.data(), s.hkv, 1};
  oracle::Fp8Tensor4 v{c->v.data(), sb_v, (long long)s.hkv * s.dv, s.dv, s.dtype, dv.data(), s.hkv, 1};
  c->o_n = size_t(o_size(*c));
  c->lse_n = size_t(oracle::lse_size(p));
  c->o_ref.assign(c->o_n, 0.0);
  c->o_mag.assign(c->o_n, 0.0);
  c->lse_ref.assign(c->lse_n, 0.0);
  std::vector<double> lse_mag(c->lse_n, 0.0);
  const oracle::MutTensor4 o{c->o_ref.data(), sb_o, (long long)s.hq * s.dv, s.dv};
  oracle::forward_fp8(p, q, k, v, o, c->lse_ref.data());
  std::vector<uint8_t> vabs(c->v);
  for (auto& e : vabs) e &= 0x7f;  // |v|: the sign bit cleared (the descales are positive)
  v.data = vabs.data();
  oracle::forward_fp8(p, q, k, v, {c->o_mag.data(), sb_o, (long long)s.hq * s.dv, s.dv}, lse_mag.data());
  // ds per (b, h, i): ceil(d / 32) 2^-13 scale |q_i|_1 max|k| (the dequantized values)
  const std::vector<double> qd = oracle::fp8_dequantize(p, q, true, s.hq, s.d);
  const std::vector<double> kd = oracle::fp8_dequantize(p, k, false, s.hkv, s.d);
  const double scale = oracle::effective_scale(p);
  const double steps = double((s.d + 31) / 32) * std::ldexp(1.0, -13);
  c->ds.assign(c->lse_n, 0.0);
  for (int b = 0; b < s.batch; ++b) {
    const int sq = oracle::seqlen_q_of(p, b), sk = oracle::seqlen_k_of(p, b);
    const long long q0 = s.varlen ? c->cu_q[size_t(b)] : 0, k0 = s.varlen ? c->cu_k[size_t(b)] : 0;
    for (int g = 0; g < s.hkv; ++g) {
      double kmax = 0.0;
      for (int j = 0; j < sk; ++j)
        for (int e = 0; e < s.d; ++e)
          kmax = std::max(kmax, std::fabs(kd[size_t(b * sb_k + (k0 + j) * s.hkv * s.d + g * s.d + e)]));
      for (int h = g * (s.hq / s.hkv); h < (g + 1) * (s.hq / s.hkv); ++h)
        for (int i = 0; i < sq; ++i) {
          double q1 = 0.0;
          for (int e = 0; e < s.d; ++e) q1 += std::fabs(qd[size_t(b * sb_q + (q0 + i) * s.hq * s.d + h * s.d + e)]);
          c->ds[size_t(oracle::lse_index(p, b, h, i))] = steps * scale * q1 * kmax;
        }
    }
  }
}

}  // namespace

void finish(Fp8Case* c) {
  const Fp8Spec& s = c->s;
  oracle_of(c);
  auto upload = [](DevBuf* d, const void* src, size_t n) {
    *d = DevBuf(std::max<size_t>(n, 16));
    if (n) d->upload(src, n);
  };
  upload(&c->d_q, c->q.data(), c->q.size());
  upload(&c->d_k, c->k.data(), c->k.size());
  upload(&c->d_v, c->v.data(), c->v.size());
  upload(&c->d_dq, c->descale_q.data(), c->descale_q.size() * 4);
  upload(&c->d_dk, c->descale_k.data(), c->descale_k.size() * 4);
  upload(&c->d_dv, c->descale_v.data(), c->descale_v.size() * 4);
  c->d_o = DevBuf(std::max<size_t>(c->o_n * 2, 16));
  c->d_lse = DevBuf(std::max<size_t>(c->lse_n * 4, 16));
  if (s.alibi) upload(&c->d_alibi, c->alibi_f.data(), c->alibi_f.size() * 4);
  fa_params_init(&c->params);
  fa_params& P = c->params;
  P.dtype = s.dtype;
  P.o_dtype = s.o_dtype;
  P.batch = s.batch;
  P.heads_q = s.hq;
  P.heads_kv = s.hkv;
  P.head_dim = s.d;
  P.head_dim_v = s.dv;
  const long long nb_q = s.varlen ? 0 : c->tq, nb_k = s.varlen ? 0 : c->tk;
  P.q = c->d_q.get();
  P.q_stride_batch = nb_q * s.hq * s.d;
  P.q_stride_seq = (long long)s.hq * s.d;
  P.q_stride_head = s.d;
  P.k = c->d_k.get();
  P.k_stride_batch = nb_k * s.hkv * s.d;
  P.k_stride_seq = (long long)s.hkv * s.d;
  P.k_stride_head = s.d;
  P.v = c->d_v.get();
  P.v_stride_batch = nb_k * s.hkv * s.dv;
  P.v_stride_seq = (long long)s.hkv * s.dv;
  P.v_stride_head = s.dv;
  P.o = c->d_o.get();
  P.o_stride_batch = nb_q * s.hq * s.dv;
  P.o_stride_seq = (long long)s.hq * s.dv;
  P.o_stride_head = s.dv;
  if (s.varlen) {
    upload(&c->d_cuq, c->cu_q.data(), c->cu_q.size() * 4);
    upload(&c->d_cuk, c->cu_k.data(), c->cu_k.size() * 4);
    P.cu_seqlens_q = reinterpret_cast<const int32_t*>(c->d_cuq.get());
    P.cu_seqlens_k = reinterpret_cast<const int32_t*>(c->d_cuk.get());
    int mq = 0, mk = 0;
    for (int b = 0; b < s.batch; ++b) {
      mq = std::max(mq, c->cu_q[size_t(b) + 1] - c->cu_q[size_t(b)]);
      mk = std::max(mk, c->cu_k[size_t(b) + 1] - c->cu_k[size_t(b)]);
    }
    P.max_seqlen_q = mq;
    P.max_seqlen_k = mk;
    P.total_q = int(c->tq);
    P.total_k = int(c->tk);
  } else {
    P.seqlen_q = s.sq;
    P.seqlen_k = s.sk;
  }
  P.mask = s.mask;
  P.window_left = s.mask == FA_MASK_SLIDING_WINDOW ? s.wl : -1;
  P.window_right = s.mask == FA_MASK_SLIDING_WINDOW ? s.wr : -1;
  if (s.alibi) P.alibi_slopes = reinterpret_cast<const float*>(c->d_alibi.get());
  P.softcap = s.softcap;
  P.softmax_scale = s.scale;
  P.lse = s.lse ? reinterpret_cast<float*>(c->d_lse.get()) : nullptr;
  const long long sb = s.per_head_descale ? s.hkv : 0, sh = s.per_head_descale ? 1 : 0;
  P.descale_q = reinterpret_cast<const float*>(c->d_dq.get());
  P.descale_k = reinterpret_cast<const float*>(c->d_dk.get());
  P.descale_v = reinterpret_cast<const float*>(c->d_dv.get());
  P.descale_q_stride_batch = P.descale_k_stride_batch = P.descale_v_stride_batch = sb;
  P.descale_q_stride_head = P.descale_k_stride_head = P.descale_v_stride_head = sh;
}

std::vector<double> fp8_output(Fp8Case& c) {
  std::vector<uint8_t> bytes(c.o_n * 2);
  if (!bytes.empty()) c.d_o.download(bytes.data(), bytes.size());
  return decode(c.s.o_dtype, bytes);
}

namespace {

// fwd_wgmma's plan for c at tunables t, enqueued on the test stream.
std::string run_plan_at(Fp8Case& c, const gen::Tunables& t) {
  Gpu& g = gpu();
  fa_params p;
  gen::ProblemDesc pd;
  rt::Status st = rt::validate_forward(&c.params, &p, &pd);
  if (!st.ok()) return st.message;
  const gen::Family* f = gen::find_family("fwd_wgmma");
  if (f == nullptr || !gen::family_covers(*f, pd, g.ctx->arch, nullptr)) return "fwd_wgmma does not cover the case";
  const gen::Semantic sem = gen::semantic_for(*f, pd, g.ctx->arch);
  const gen::Plan plan = gen::make_plan(sem, t, pd);
  FaFwdArgs args = rt::make_fwd_args(p, pd);
  const FaUser user = rt::make_user_args(p);
  st = rt::enqueue_plan(g.ctx, plan, gen::launch_shape(pd), rt::forward_plan_args(plan, &args, &user), true, g.stream,
                        nullptr, 0);
  return st.ok() ? "" : st.message;
}

// c's outputs against the oracle and the bound.
void compare(Fp8Case& c, Fp8Result* r) {
  const Fp8Spec& s = c.s;
  const std::vector<double> got = fp8_output(c);
  std::vector<float> lse(c.lse_n);
  if (s.lse && c.lse_n) c.d_lse.download(lse.data(), c.lse_n * 4);
  double worst_excess = 0;
  for (int b = 0; b < s.batch; ++b) {
    const int sq = oracle::seqlen_q_of(c.op, b);
    const long long q0 = s.varlen ? c.cu_q[size_t(b)] : (long long)b * c.tq;
    for (int i = 0; i < sq; ++i)
      for (int h = 0; h < s.hq; ++h) {
        const size_t li = size_t(oracle::lse_index(c.op, b, h, i));
        const double ds = c.ds[li];
        for (int n = 0; n < s.dv; ++n) {
          const size_t e = size_t(((q0 + i) * s.hq + h) * s.dv + n);
          const double ref = c.o_ref[e], m = c.o_mag[e];
          const double err = std::fabs(got[e] - ref);
          if (!std::isfinite(got[e])) {
            r->failure = fmt::format("o[token {} head {} col {}] = {} (not written or not finite), oracle {}", q0 + i,
                                     h, n, got[e], ref);
            return;
          }
          const double bound = (1.125 * std::exp(2 * ds) - 1) * m + std::ldexp(std::fabs(ref), -8) + 1e-6;
          r->err_o = std::max(r->err_o, err);
          r->ratio = std::max(r->ratio, err / (0.0625 * m + std::ldexp(std::fabs(ref), -8) + 1e-6));
          if (err > bound && err - bound > worst_excess) {
            worst_excess = err - bound;
            r->failure = fmt::format(
                "o[token {} head {} col {}] = {}, oracle {}: error {:.3g} above the bound {:.3g} "
                "(M {:.3g}, ds {:.3g})",
                q0 + i, h, n, got[e], ref, err, bound, m, ds);
          }
        }
        if (!s.lse) continue;
        const double ref = c.lse_ref[li], x = lse[li];
        if (std::isinf(ref) || std::isinf(x)) {
          if (!(std::isinf(ref) && std::isinf(x) && (ref < 0) == (x < 0)) && r->failure.empty())
            r->failure = fmt::format("lse[b {} h {} row {}] = {}, oracle {}", b, h, i, x, ref);
          continue;
        }
        const double err = std::fabs(x - ref);
        r->err_lse = std::max(r->err_lse, err);
        if (!(err <= 2e-4 * std::max(1.0, std::fabs(ref)) + ds) && r->failure.empty())
          r->failure = fmt::format("lse[b {} h {} row {}] = {}, oracle {} (ds {:.3g})", b, h, i, x, ref, ds);
      }
  }
}

}  // namespace

Fp8Result run_fp8(Fp8Case& c, const gen::Tunables* t) {
  Gpu& g = gpu();
  Fp8Result r;
  std::vector<uint8_t> poison(std::max<size_t>(c.o_n * 2, 16), 0xff);
  c.d_o.upload(poison.data(), poison.size());
  std::vector<float> nan_lse(std::max<size_t>(c.lse_n, 4), std::nanf(""));
  c.d_lse.upload(nan_lse.data(), nan_lse.size() * 4);
  if (t == nullptr) {
    char key[512] = "";
    if (fa_problem_key(g.ctx, &c.params, key, sizeof key) == FA_OK) r.key = key;
    if (fa_run(g.ctx, &c.params, g.stream) != FA_OK) {
      r.failure = fmt::format("fa_run: {}", fa_last_error());
      return r;
    }
  } else {
    r.failure = run_plan_at(c, *t);
    if (!r.failure.empty()) return r;
  }
  const CUresult cr = g.d->cuStreamSynchronize(g.stream);
  if (cr != CUDA_SUCCESS) {
    r.failure = rt::driver_error(*g.d, "cuStreamSynchronize", cr);
    return r;
  }
  compare(c, &r);
  return r;
}

}  // namespace fa::test
