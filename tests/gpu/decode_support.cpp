// decode_support.cpp -- the KV-cache decode tests' problems (see decode_support.h).
#include "tests/gpu/decode_support.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>

#include "tests/oracle/fp8.h"

namespace fa::test {

namespace {
bool fp8_cache(const DecodeSpec& s) { return s.kv_dtype == FA_DTYPE_E4M3 || s.kv_dtype == FA_DTYPE_E5M2; }
}  // namespace

std::string describe(const DecodeSpec& s) {
  const std::string kv = fp8_cache(s)
                             ? fmt::format(" cache {} scales per {}", s.kv_dtype == FA_DTYPE_E4M3 ? "e4m3" : "e5m2",
                                           s.per_head_scale ? "head" : "tensor")
                             : "";
  return fmt::format("{} b{} sq{} cap{} hq{}/{} d{}/{} mask{} ({},{}) alibi{} softcap{}{}{}",
                     s.dtype == FA_DTYPE_BF16 ? "bf16" : "fp16", s.batch, s.sq, s.cap, s.hq, s.hkv, s.d, s.dv, s.mask,
                     s.wl, s.wr, s.alibi, s.softcap, kv, s.sinks ? " sinks" : "");
}

std::vector<uint8_t> encode_cache(const DecodeSpec& s, const std::vector<double>& v) {
  if (!fp8_cache(s)) return encode(s.dtype, v);
  std::vector<uint8_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = oracle::fp8_encode(v[i], s.kv_dtype);  // exact: v holds fp8 values
  return out;
}

void make_data(std::mt19937_64& rng, const DecodeSpec& s, DecodeData* x) {
  x->s = s;
  std::normal_distribution<double> nd(0.0, 1.0);
  auto fill = [&](std::vector<double>& v, size_t n) {
    v.resize(n);
    for (auto& e : v) e = round_to(s.dtype, nd(rng));
  };
  fill(x->q, size_t(s.batch) * s.sq * s.hq * s.d);
  fill(x->k, size_t(s.batch) * s.cap * s.hkv * s.d);
  fill(x->v, size_t(s.batch) * s.cap * s.hkv * s.dv);
  if (fp8_cache(s)) {
    // The cache as a quantizer leaves it: values of N(0, 1) x 16 rounded to fp8 (e4m3 saturating at 448; spread over
    // the format's binades, subnormals included), read back with scales in [1/64, 1/8] (one per KV head or one for
    // all), so the dequantized keys and values are again about N(0, 1).
    for (auto* t : {&x->k, &x->v})
      for (auto& e : *t) e = oracle::fp8_decode(oracle::fp8_encode(e * 16.0, s.kv_dtype), s.kv_dtype);
    std::uniform_real_distribution<double> ud(1.0 / 64, 1.0 / 8);
    x->k_scale.assign(size_t(s.hkv), float(ud(rng)));
    x->v_scale.assign(size_t(s.hkv), float(ud(rng)));
    if (s.per_head_scale)
      for (int g = 0; g < s.hkv; ++g) {
        x->k_scale[size_t(g)] = float(ud(rng));
        x->v_scale[size_t(g)] = float(ud(rng));
      }
    x->d_k_scale = DevBuf(size_t(s.hkv) * 4);
    x->d_k_scale.upload(x->k_scale.data(), size_t(s.hkv) * 4);
    x->d_v_scale = DevBuf(size_t(s.hkv) * 4);
    x->d_v_scale.upload(x->v_scale.data(), size_t(s.hkv) * 4);
  }
  x->dq = DevBuf(x->q.size() * 2);
  const auto qb = encode(s.dtype, x->q);
  x->dq.upload(qb.data(), qb.size());
  if (s.alibi) {
    std::uniform_real_distribution<double> ud(0.01, 0.5);
    x->alibi.resize(size_t(s.hq));
    x->alibi_f.resize(size_t(s.hq));
    for (int h = 0; h < s.hq; ++h) {
      x->alibi_f[size_t(h)] = float(ud(rng));
      x->alibi[size_t(h)] = x->alibi_f[size_t(h)];
    }
    x->d_alibi = DevBuf(size_t(s.hq) * 4);
    x->d_alibi.upload(x->alibi_f.data(), size_t(s.hq) * 4);
  }
  if (s.sinks) {
    x->sinks = random_sinks(rng, s.hq, s.dtype);
    x->sinks_f.assign(x->sinks.begin(), x->sinks.end());
    x->d_sinks = DevBuf(size_t(s.hq) * 4);
    x->d_sinks.upload(x->sinks_f.data(), size_t(s.hq) * 4);
  }
  x->o_n = size_t(s.batch) * s.sq * s.hq * s.dv;
  x->lse_n = size_t(s.batch) * s.hq * s.sq;
  x->d_o = DevBuf(x->o_n * 2);
  x->d_lse = DevBuf(x->lse_n * 4);
}

void oracle_of(const DecodeData& x, const std::vector<int>& used, const std::vector<std::vector<uint8_t>>& masked,
               std::vector<double>* o, std::vector<double>* lse) {
  const DecodeSpec& s = x.s;
  o->assign(x.o_n, 0.0);
  lse->assign(x.lse_n, 0.0);
  for (int b = 0; b < s.batch; ++b) {
    oracle::Problem p;
    p.batch = 1;
    p.seqlen_q = s.sq;
    p.seqlen_k = used[size_t(b)];
    p.heads_q = s.hq;
    p.heads_kv = s.hkv;
    p.head_dim = s.d;
    p.head_dim_v = s.dv;
    p.mask = s.mask;
    p.window_left = s.wl;
    p.window_right = s.wr;
    p.alibi = s.alibi ? x.alibi.data() : nullptr;
    p.sinks = s.sinks ? x.sinks.data() : nullptr;
    p.softcap = s.softcap;
    std::vector<double> bias;
    if (!masked.empty()) {
      bias.assign(size_t(std::max(1, used[size_t(b)])), 0.0);
      for (int j = 0; j < used[size_t(b)]; ++j)
        if (masked[size_t(b)][size_t(j)]) bias[size_t(j)] = -INFINITY;
      p.bias = bias.data();
      p.bias_sk = 1;
    }
    oracle::Tensor4 q{x.q.data() + size_t(b) * s.sq * s.hq * s.d, 0, (long long)s.hq * s.d, s.d};
    oracle::Tensor4 k{x.k.data() + size_t(b) * s.cap * s.hkv * s.d, 0, (long long)s.hkv * s.d, s.d};
    oracle::Tensor4 v{x.v.data() + size_t(b) * s.cap * s.hkv * s.dv, 0, (long long)s.hkv * s.dv, s.dv};
    std::vector<double> kd, vd;  // an fp8 cache: the dequantized keys and values of sequence b (code x scale[g])
    if (fp8_cache(s)) {
      kd.assign(k.data, k.data + size_t(s.cap) * s.hkv * s.d);
      vd.assign(v.data, v.data + size_t(s.cap) * s.hkv * s.dv);
      for (size_t e = 0; e < kd.size(); ++e) kd[e] *= x.k_scale[(e / size_t(s.d)) % size_t(s.hkv)];
      for (size_t e = 0; e < vd.size(); ++e) vd[e] *= x.v_scale[(e / size_t(s.dv)) % size_t(s.hkv)];
      k.data = kd.data();
      v.data = vd.data();
    }
    oracle::MutTensor4 out{o->data() + size_t(b) * s.sq * s.hq * s.dv, 0, (long long)s.hq * s.dv, s.dv};
    oracle::forward(p, q, k, v, out, lse->data() + size_t(b) * s.hq * s.sq);
  }
}

void make_contiguous(const DecodeData& x, const std::vector<int>& used, Cache* c) {
  const DecodeSpec& s = x.s;
  std::vector<double> k = x.k, v = x.v;
  for (int b = 0; b < s.batch; ++b)
    for (int j = used[size_t(b)]; j < s.cap; ++j) {
      for (int e = 0; e < s.hkv * s.d; ++e) k[(size_t(b) * s.cap + j) * s.hkv * s.d + e] = NAN;
      for (int e = 0; e < s.hkv * s.dv; ++e) v[(size_t(b) * s.cap + j) * s.hkv * s.dv + e] = NAN;
    }
  const auto kb = encode_cache(s, k), vb = encode_cache(s, v);
  c->page_size = 0;
  c->dk = DevBuf(kb.size());
  c->dk.upload(kb.data(), kb.size());
  c->dv = DevBuf(vb.size());
  c->dv.upload(vb.data(), vb.size());
}

void make_paged(std::mt19937_64& rng, const DecodeData& x, const std::vector<int>& used, int page_size, Cache* c,
                PageLayout layout) {
  const DecodeSpec& s = x.s;
  const int pps = (s.cap + page_size - 1) / page_size;
  const int extra = 3;
  c->page_size = page_size;
  c->bt_stride = pps + 1;
  c->num_pages = s.batch * pps + extra;
  std::vector<int> perm(size_t(c->num_pages));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  c->table.assign(size_t(s.batch) * c->bt_stride, 0);
  const size_t rk = size_t(s.hkv) * s.d, rv = size_t(s.hkv) * s.dv;
  auto strides = [&](int64_t d, int64_t* sb, int64_t* ss, int64_t* sh) {
    const int64_t row = int64_t(s.hkv) * d;
    *ss = layout == kHeadMajor ? d : row;
    *sh = layout == kHeadMajor ? int64_t(page_size) * d : d;
    *sb = int64_t(page_size) * row + (layout == kPadded ? 8 : 0);
  };
  strides(s.d, &c->k_sb, &c->k_ss, &c->k_sh);
  strides(s.dv, &c->v_sb, &c->v_ss, &c->v_sh);
  std::vector<double> pk(size_t(c->num_pages * c->k_sb), NAN), pv(size_t(c->num_pages * c->v_sb), NAN);
  for (int b = 0; b < s.batch; ++b)
    for (int pg = 0; pg < c->bt_stride; ++pg) {
      const bool live = pg < pps && pg * page_size < used[size_t(b)];
      const int id = live ? perm[size_t(b * pps + pg)] : perm[size_t(s.batch * pps + (b + pg) % extra)];
      c->table[size_t(b) * c->bt_stride + pg] = id;
      if (!live) continue;
      for (int r = 0; r < page_size; ++r) {
        const int j = pg * page_size + r;
        if (j >= used[size_t(b)]) break;  // past the used length: NaN stays
        for (int h = 0; h < s.hkv; ++h) {
          std::copy_n(&x.k[(size_t(b) * s.cap + j) * rk + size_t(h) * s.d], s.d,
                      &pk[size_t(id * c->k_sb + r * c->k_ss + h * c->k_sh)]);
          std::copy_n(&x.v[(size_t(b) * s.cap + j) * rv + size_t(h) * s.dv], s.dv,
                      &pv[size_t(id * c->v_sb + r * c->v_ss + h * c->v_sh)]);
        }
      }
    }
  const auto kb = encode_cache(s, pk), vb = encode_cache(s, pv);
  c->dk = DevBuf(kb.size());
  c->dk.upload(kb.data(), kb.size());
  c->dv = DevBuf(vb.size());
  c->dv.upload(vb.data(), vb.size());
  c->d_bt = DevBuf(c->table.size() * 4);
  c->d_bt.upload(c->table.data(), c->table.size() * 4);
}

void set_used(Cache* c, const std::vector<int>& used) {
  if (c->d_used.bytes == 0) c->d_used = DevBuf(used.size() * 4);
  c->d_used.upload(used.data(), used.size() * 4);
}

fa_params params_of(DecodeData& x, Cache& c, bool with_used, int num_splits) {
  const DecodeSpec& s = x.s;
  fa_params p;
  fa_params_init(&p);
  p.dtype = s.dtype;
  p.batch = s.batch;
  p.seqlen_q = s.sq;
  p.seqlen_k = s.cap;
  p.heads_q = s.hq;
  p.heads_kv = s.hkv;
  p.head_dim = s.d;
  p.head_dim_v = s.dv;
  p.q = x.dq.get();
  p.q_stride_batch = (int64_t)s.sq * s.hq * s.d;
  p.q_stride_seq = (int64_t)s.hq * s.d;
  p.q_stride_head = s.d;
  p.o = x.d_o.get();
  p.o_stride_batch = (int64_t)s.sq * s.hq * s.dv;
  p.o_stride_seq = (int64_t)s.hq * s.dv;
  p.o_stride_head = s.dv;
  p.k = c.dk.get();
  p.v = c.dv.get();
  const int64_t rows = s.cap;
  p.k_stride_batch = rows * s.hkv * s.d;
  p.k_stride_seq = (int64_t)s.hkv * s.d;
  p.k_stride_head = s.d;
  p.v_stride_batch = rows * s.hkv * s.dv;
  p.v_stride_seq = (int64_t)s.hkv * s.dv;
  p.v_stride_head = s.dv;
  if (c.page_size > 0) {
    p.k_stride_batch = c.k_sb;
    p.k_stride_seq = c.k_ss;
    p.k_stride_head = c.k_sh;
    p.v_stride_batch = c.v_sb;
    p.v_stride_seq = c.v_ss;
    p.v_stride_head = c.v_sh;
  }
  if (c.latent) {
    p.v = p.k;
    p.v_stride_batch = p.k_stride_batch;
    p.v_stride_seq = p.k_stride_seq;
    p.v_stride_head = p.k_stride_head;
  }
  if (c.page_size > 0) {
    p.block_table = static_cast<const int32_t*>(c.d_bt.get());
    p.block_table_stride = c.bt_stride;
    p.page_size = c.page_size;
    p.num_pages = c.num_pages;
  }
  if (with_used) p.seqused_k = static_cast<const int32_t*>(c.d_used.get());
  p.mask = s.mask;
  p.window_left = s.wl;
  p.window_right = s.wr;
  p.alibi_slopes = s.alibi ? static_cast<const float*>(x.d_alibi.get()) : nullptr;
  p.softcap = s.softcap;
  p.lse = static_cast<float*>(x.d_lse.get());
  p.num_splits = num_splits;
  if (s.sinks) p.sinks = static_cast<const float*>(x.d_sinks.get());
  if (fp8_cache(s)) {
    p.kv_dtype = s.kv_dtype;
    p.k_scale = static_cast<const float*>(x.d_k_scale.get());
    p.v_scale = static_cast<const float*>(x.d_v_scale.get());
    p.k_scale_stride_head = p.v_scale_stride_head = s.per_head_scale ? 1 : 0;
  }
  return p;
}

void poison(DecodeData& x) {
  const auto po = nan_bytes(x.o_n);
  x.d_o.upload(po.data(), po.size());
  const std::vector<uint8_t> pl(x.lse_n * 4, 0xff);
  x.d_lse.upload(pl.data(), pl.size());
}

Out run(DecodeData& x, fa_params p, fa_context ctx) {
  Gpu& g = gpu();
  if (ctx == nullptr) ctx = g.ctx;
  Out out;
  poison(x);
  char key[512] = {0};
  fa_problem_key(ctx, &p, key, sizeof key);
  out.key = key;
  if (fa_run(ctx, &p, g.stream) != FA_OK) {
    out.failure = fa_last_error();
    return out;
  }
  if (g.d->cuStreamSynchronize(g.stream) != CUDA_SUCCESS) out.failure = "stream sync failed";
  out.o_bytes.resize(x.o_n * 2);
  out.lse_bytes.resize(x.lse_n * 4);
  x.d_o.download(out.o_bytes.data(), out.o_bytes.size());
  x.d_lse.download(out.lse_bytes.data(), out.lse_bytes.size());
  return out;
}

std::string compare(const DecodeData& x, const Out& r, const std::vector<double>& o_ref,
                    const std::vector<double>& lse_ref) {
  if (!r.failure.empty()) return "fa_run: " + r.failure;
  const std::vector<double> o = decode(x.s.dtype, r.o_bytes);
  const double err = oracle::relative_error(o, o_ref);
  std::vector<float> lse(x.lse_n);
  std::memcpy(lse.data(), r.lse_bytes.data(), x.lse_n * 4);
  double lerr = 0;
  for (size_t i = 0; i < x.lse_n; ++i) {
    if (std::isinf(lse_ref[i]) || std::isinf(lse[i]) || std::isnan(lse[i])) {
      if (!(lse[i] == lse_ref[i])) lerr = INFINITY;
    } else {
      lerr = std::max(lerr, std::fabs(lse[i] - lse_ref[i]));
    }
  }
  if (err <= tolerance(x.s.dtype) && lerr <= 2e-3) return "";
  return fmt::format("err_o {} (tol {}) err_lse {} [{}]", err, tolerance(x.s.dtype), lerr, r.key);
}

std::vector<int> random_used(std::mt19937_64& rng, int batch, int cap) {
  std::vector<int> used(static_cast<size_t>(batch), 0);
  std::uniform_int_distribution<int> u(0, cap);
  for (int b = 0; b < batch; ++b) used[size_t(b)] = u(rng);
  if (batch >= 3) {
    used[0] = 0;
    used[1] = 1;
    used[2] = cap;
  }
  return used;
}

void random_features(Pick& pick, int c, bool paged, DecodeSpec* s) {
  const int group = s->hq / s->hkv;
  s->sq = pick({1, 1, 2, 3, 5, 8});
  if (!paged) s->sq = std::max(1, std::min(s->sq, 16 / group));  // the contiguous decode class
  s->d = pick({64, 128, 256});
  s->dv = c % 7 == 3 ? 64 : s->d;
  s->batch = pick({1, 3});
  s->mask = pick({0, 1, 2});
  if (s->mask == 2) {
    s->wl = pick({-1, 0, 5, 60});
    s->wr = pick({-1, 0, 3});
  }
  s->alibi = c % 3 == 0;
  s->softcap = c % 5 == 0 ? 20.f : 0.f;
}

int case_count(int fallback) {
  const char* e = std::getenv("FA_TEST_CASES");
  return e != nullptr ? std::atoi(e) : fallback;
}

std::string run_random_case(std::mt19937_64& rng, const DecodeSpec& s, int page_size, int splits, std::string* key) {
  DecodeData x;
  make_data(rng, s, &x);
  const std::vector<int> used = random_used(rng, s.batch, s.cap);
  std::vector<double> o_ref, lse_ref;
  oracle_of(x, used, {}, &o_ref, &lse_ref);
  Cache cache;
  if (page_size > 0) make_paged(rng, x, used, page_size, &cache);
  else make_contiguous(x, used, &cache);
  set_used(&cache, used);
  const Out r = run(x, params_of(x, cache, true, splits));
  *key = r.key;
  return compare(x, r, o_ref, lse_ref);
}

void make_latent(DecodeData* x) {
  const DecodeSpec& s = x->s;
  for (size_t row = 0; row < size_t(s.batch) * s.cap * s.hkv; ++row)
    std::copy_n(&x->k[row * size_t(s.d)], s.dv, &x->v[row * size_t(s.dv)]);
}

DecodeSpec mla_spec(int batch, int cap) {
  DecodeSpec s;
  s.batch = batch;
  s.cap = cap;
  s.hq = 128;
  s.hkv = 1;
  s.d = 576;
  s.dv = 512;
  return s;
}

}  // namespace fa::test
