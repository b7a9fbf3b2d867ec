// gpu_support.cpp -- see gpu_support.h.
#include "tests/gpu/gpu_support.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <thread>

namespace fa::test {

namespace {
void check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) throw std::runtime_error(rt::driver_error(*gpu().d, what, r));
}
}  // namespace

uint64_t test_seed() {
  static const uint64_t s = [] {
    uint64_t v;
    if (const char* e = std::getenv("FA_TEST_SEED"); e && *e) v = std::strtoull(e, nullptr, 10);
    else v = (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
    std::printf("[fa tests] seed %llu (replay with FA_TEST_SEED=%llu)\n", (unsigned long long)v, (unsigned long long)v);
    return v;
  }();
  return s;
}

Gpu& gpu() {
  static Gpu g = [] {
    Gpu x;
    fa_context_options o;
    fa_context_options_init(&o);
    o.cache_path = ":memory:";
    if (const char* p = std::getenv("FA_TEST_CACHE"); p && *p) o.cache_path = p;
    // The shared context checks kernels against the oracle: heuristic defaults, nothing timed, unless
    // $FA_TUNE_POLICY says otherwise (tuning on first use has its own tests, each with its own context).
    if (const char* p = std::getenv("FA_TUNE_POLICY"); p == nullptr || *p == 0) o.tune_policy = FA_TUNE_DEFAULTS_ONLY;
    if (fa_context_create(&o, &x.ctx) != FA_OK) {
      x.why = std::string("fa_context_create failed: ") + fa_last_error();
      return x;
    }
    if (!fa_context_has_device(x.ctx)) {
      x.why = fa_last_error();
      return x;
    }
    std::string why;
    x.d = rt::driver(&why);
    CUdevice dev;
    x.d->cuDeviceGet(&dev, 0);
    x.d->cuDevicePrimaryCtxRetain(&x.cuctx, dev);
    x.d->cuCtxPushCurrent(x.cuctx);
    x.d->cuStreamCreate(&x.stream, CU_STREAM_NON_BLOCKING);
    char name[256] = {0};
    x.d->cuDeviceGetName(name, 255, dev);
    x.name = name;
    return x;
  }();
  if (g.ok()) {  // make the context current on this thread too (a new thread has none: nothing to pop there)
    CUcontext cur = nullptr;
    if (g.d->cuCtxGetCurrent(&cur) != CUDA_SUCCESS || cur != g.cuctx) {
      if (cur != nullptr) g.d->cuCtxPopCurrent(&cur);
      g.d->cuCtxPushCurrent(g.cuctx);
    }
  }
  return g;
}

DevBuf::DevBuf(size_t n) : bytes(n) { check(gpu().d->cuMemAlloc(&ptr, std::max<size_t>(n, 16)), "cuMemAlloc"); }
DevBuf::~DevBuf() {
  if (ptr) gpu().d->cuMemFree(ptr);
}
void DevBuf::upload(const void* src, size_t n) { check(gpu().d->cuMemcpyHtoD(ptr, src, n), "cuMemcpyHtoD"); }
void DevBuf::download(void* dst, size_t n) const { check(gpu().d->cuMemcpyDtoH(dst, ptr, n), "cuMemcpyDtoH"); }

uint16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const int exp = int((x >> 23) & 0xff);
  uint32_t mant = x & 0x7fffffu;
  if (exp == 0xff) return uint16_t(sign | 0x7c00u | (mant ? 0x200u : 0u));
  int e = exp - 127 + 15;
  if (e >= 31) return uint16_t(sign | 0x7c00u);
  if (e <= 0) {  // subnormal
    if (e < -10) return uint16_t(sign);
    mant |= 0x800000u;
    const int shift = 14 - e;
    uint32_t h = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1u))) ++h;
    return uint16_t(sign | h);
  }
  uint32_t h = sign | (uint32_t(e) << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return uint16_t(h);
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  float f;
  if (exp == 0) {
    f = std::ldexp(float(mant), -24);
    return sign ? -f : f;
  }
  uint32_t x = exp == 31 ? (sign | 0x7f800000u | (mant << 13)) : (sign | ((exp - 15 + 127) << 23) | (mant << 13));
  std::memcpy(&f, &x, 4);
  return f;
}

uint16_t f32_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40u);
  const uint32_t lsb = (x >> 16) & 1u;
  x += 0x7fffu + lsb;
  return uint16_t(x >> 16);
}

float bf16_to_f32(uint16_t h) {
  uint32_t x = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

double round_to(int dtype, double x) {
  if (dtype == FA_DTYPE_FP16) return f16_to_f32(f32_to_f16(float(x)));
  if (dtype == FA_DTYPE_BF16) return bf16_to_f32(f32_to_bf16(float(x)));
  return double(float(x));
}

std::vector<uint8_t> encode(int dtype, const std::vector<double>& v) {
  const size_t es = dtype == FA_DTYPE_FP32 ? 4 : 2;
  std::vector<uint8_t> out(v.size() * es);
  for (size_t i = 0; i < v.size(); ++i) {
    if (std::isnan(v[i])) {
      std::memset(&out[i * es], 0xff, es);
    } else if (dtype == FA_DTYPE_FP32) {
      float f = float(v[i]);
      std::memcpy(&out[i * 4], &f, 4);
    } else {
      uint16_t h = dtype == FA_DTYPE_FP16 ? f32_to_f16(float(v[i])) : f32_to_bf16(float(v[i]));
      std::memcpy(&out[i * 2], &h, 2);
    }
  }
  return out;
}

std::vector<double> decode(int dtype, const std::vector<uint8_t>& bytes) {
  const size_t es = dtype == FA_DTYPE_FP32 ? 4 : 2;
  std::vector<double> out(bytes.size() / es);
  for (size_t i = 0; i < out.size(); ++i) {
    if (dtype == FA_DTYPE_FP32) {
      float f;
      std::memcpy(&f, &bytes[i * 4], 4);
      out[i] = f;
    } else {
      uint16_t h;
      std::memcpy(&h, &bytes[i * 2], 2);
      out[i] = dtype == FA_DTYPE_FP16 ? f16_to_f32(h) : bf16_to_f32(h);
    }
  }
  return out;
}

bool is_poison_bits(int dtype, const uint8_t* p) {
  const size_t es = dtype == FA_DTYPE_FP32 ? 4 : 2;
  for (size_t i = 0; i < es; ++i)
    if (p[i] != 0xff) return false;
  return true;
}

void parallel_for(size_t n, const std::function<void(size_t)>& fn) {
  const size_t threads = std::min<size_t>(n, std::max(1u, std::thread::hardware_concurrency()));
  std::atomic<size_t> next{0};
  std::vector<std::thread> pool;
  for (size_t t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      for (size_t i = next++; i < n; i = next++) fn(i);
    });
  for (auto& t : pool) t.join();
}

double tolerance(int dtype) {
  switch (dtype) {
    case FA_DTYPE_FP32: return 2e-5;
    case FA_DTYPE_FP16: return 4e-3;
    default: return 2.5e-2;
  }
}

namespace {

int pick(std::mt19937_64& rng, std::initializer_list<int> xs) {
  std::uniform_int_distribution<size_t> u(0, xs.size() - 1);
  return *(xs.begin() + u(rng));
}
int uni(std::mt19937_64& rng, int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); }
double unif(std::mt19937_64& rng, double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); }

int rand_len(std::mt19937_64& rng, int max_seq) {
  if (uni(rng, 0, 2) == 0) return pick(rng, {1, 7, 127, 129, 1000, 64, 128, 256});
  return uni(rng, 1, max_seq);
}

// Strides for [B, S, H, D] in BSHD or BHSD order with optional padding; returns the element count.
size_t layout(bool bhsd, bool aligned, std::mt19937_64& rng, long long B, long long S, long long H, long long D,
              long long* sb, long long* ss, long long* sh) {
  auto pad = [&] { return aligned ? 8LL * uni(rng, 0, 1) : (long long)uni(rng, 0, 3) * (uni(rng, 0, 1) ? 1 : 8); };
  if (!bhsd) {
    *sh = D + pad();
    *ss = H * *sh + pad();
    *sb = S * *ss + pad();
  } else {
    *ss = D + pad();
    *sh = S * *ss + pad();
    *sb = H * *sh + pad();
  }
  return size_t(B > 1 ? (B - 1) * *sb : 0) + size_t(S > 1 ? (S - 1) * *ss : 0) + size_t(H > 1 ? (H - 1) * *sh : 0) +
         size_t(D) + 8;
}

}  // namespace

std::vector<double> random_sinks(std::mt19937_64& rng, int heads, int dtype) {
  std::vector<double> out(static_cast<size_t>(heads));
  const double large = dtype == FA_DTYPE_FP16 ? 12.0 : 30.0;
  for (int h = 0; h < heads; ++h) {
    const int kind = h == 0 ? 0 : uni(rng, 0, 5);
    const double x = kind <= 2   ? unif(rng, -2.0, 4.0)
                     : kind == 3 ? unif(rng, large / 2, large)
                     : kind == 4 ? -INFINITY
                                 : (uni(rng, 0, 1) ? -1e4 : -80.0);
    out[static_cast<size_t>(h)] = double(float(x));
  }
  return out;
}

void make_random_case(std::mt19937_64& rng, const CaseOptions& opt, Case* c) {
  c->force_aligned = opt.force_aligned;
  for (int attempt = 0;; ++attempt) {
    oracle::Problem p;
    c->dtype = opt.allow_fp32 ? pick(rng, {FA_DTYPE_FP16, FA_DTYPE_BF16, FA_DTYPE_FP16, FA_DTYPE_BF16, FA_DTYPE_FP32})
                              : pick(rng, {FA_DTYPE_FP16, FA_DTYPE_BF16});
    p.heads_kv = pick(rng, {1, 1, 2, 3});
    p.heads_q = p.heads_kv * pick(rng, {1, 1, 2, 4});
    p.head_dim = uni(rng, 0, 2) ? pick(rng, {32, 64, 128, 256, 96, 80}) : 8 * uni(rng, 1, 32);
    p.head_dim_v = uni(rng, 0, 4) ? p.head_dim : 8 * uni(rng, 1, 32);
    p.batch = uni(rng, 1, 3);
    const bool varlen = uni(rng, 0, 3) == 0;
    int maxq = 0, maxk = 0;
    if (varlen) {
      p.cu_seqlens_q = {0};
      p.cu_seqlens_k = {0};
      for (int b = 0; b < p.batch; ++b) {
        int lq = uni(rng, 0, 5) == 0 ? 0 : rand_len(rng, opt.max_seq);
        int lk = uni(rng, 0, 5) == 0 ? 0 : (uni(rng, 0, 1) ? lq : rand_len(rng, opt.max_seq));
        p.cu_seqlens_q.push_back(p.cu_seqlens_q.back() + lq);
        p.cu_seqlens_k.push_back(p.cu_seqlens_k.back() + lk);
        maxq = std::max(maxq, lq);
        maxk = std::max(maxk, lk);
      }
    } else {
      p.seqlen_q = rand_len(rng, opt.max_seq);
      p.seqlen_k = uni(rng, 0, 9) == 0 ? 0 : (uni(rng, 0, 1) ? p.seqlen_q : rand_len(rng, opt.max_seq));
      maxq = p.seqlen_q;
      maxk = p.seqlen_k;
    }
    p.mask = pick(rng, {0, 1, 1, 2});
    if (p.mask == 2) {
      p.window_left = uni(rng, 0, 2) ? uni(rng, 0, 200) : -1;
      p.window_right = uni(rng, 0, 2) ? uni(rng, 0, 50) : -1;
    }
    p.softcap = uni(rng, 0, 4) == 0 ? unif(rng, 5.0, 50.0) : 0.0;
    p.scale = uni(rng, 0, 3) == 0 ? unif(rng, 0.05, 0.3) : 0.0;
    const bool bias = uni(rng, 0, 4) == 0, alibi = uni(rng, 0, 5) == 0;
    const double work =
        double(p.batch) * p.heads_q * std::max(maxq, 1) * std::max(maxk, 1) * (p.head_dim + p.head_dim_v);
    if (work > opt.max_work && attempt < 50) continue;
    c->op = p;
    c->bhsd = !varlen && uni(rng, 0, 1);
    c->want_lse = uni(rng, 0, 5) != 0;
    c->desc.clear();
    // bias and alibi are attached in materialize (they need the final shapes)
    c->bias.assign(bias ? 1 : 0, 0.0);
    c->alibi.assign(alibi ? 1 : 0, 0.0);
    c->op.bias = nullptr;
    c->op.alibi = nullptr;
    (void)opt;
    break;
  }
  materialize(rng, c);
  (void)opt;
}

void materialize(std::mt19937_64& rng, Case* c) {
  oracle::Problem& p = c->op;
  const bool varlen = !p.cu_seqlens_q.empty();
  const int dv = p.head_dim_v ? p.head_dim_v : p.head_dim;
  const long long B = p.batch;
  const long long TQ = varlen ? p.cu_seqlens_q.back() : p.seqlen_q;
  const long long TK = varlen ? p.cu_seqlens_k.back() : p.seqlen_k;
  const long long BB = varlen ? 1 : B;
  const bool aligned = c->force_aligned || uni(rng, 0, 3) != 0;
  c->q_n = layout(c->bhsd, aligned, rng, BB, TQ, p.heads_q, p.head_dim, &c->q_sb, &c->q_ss, &c->q_sh);
  c->k_n = layout(c->bhsd, aligned, rng, BB, TK, p.heads_kv, p.head_dim, &c->k_sb, &c->k_ss, &c->k_sh);
  c->v_n = layout(c->bhsd, aligned, rng, BB, TK, p.heads_kv, dv, &c->v_sb, &c->v_ss, &c->v_sh);
  c->o_n = layout(c->bhsd, aligned, rng, BB, TQ, p.heads_q, dv, &c->o_sb, &c->o_ss, &c->o_sh);
  if (varlen) c->q_sb = c->k_sb = c->v_sb = c->o_sb = 0;
  const double qscale = unif(rng, 0.5, 3.0);
  auto fill = [&](std::vector<double>& v, size_t n, long long sb, long long ss, long long sh, long long TS, long long H,
                  long long D, double amp) {
    v.assign(n, std::numeric_limits<double>::quiet_NaN());  // padding stays NaN: a kernel reading it fails
    for (long long b = 0; b < BB; ++b)
      for (long long s = 0; s < TS; ++s)
        for (long long h = 0; h < H; ++h)
          for (long long d = 0; d < D; ++d)
            v[size_t(b * sb + s * ss + h * sh + d)] = round_to(c->dtype, unif(rng, -amp, amp));
  };
  fill(c->q, c->q_n, c->q_sb, c->q_ss, c->q_sh, TQ, p.heads_q, p.head_dim, qscale);
  fill(c->k, c->k_n, c->k_sb, c->k_ss, c->k_sh, TK, p.heads_kv, p.head_dim, 1.0);
  fill(c->v, c->v_n, c->v_sb, c->v_ss, c->v_sh, TK, p.heads_kv, dv, 1.0);
  const int maxq = varlen ? [&] { int m = 0; for (size_t b = 0; b + 1 < p.cu_seqlens_q.size(); ++b) m = std::max(m, p.cu_seqlens_q[b + 1] - p.cu_seqlens_q[b]); return m; }() : p.seqlen_q;
  const int maxk = varlen ? [&] { int m = 0; for (size_t b = 0; b + 1 < p.cu_seqlens_k.size(); ++b) m = std::max(m, p.cu_seqlens_k[b + 1] - p.cu_seqlens_k[b]); return m; }() : p.seqlen_k;
  if (!c->bias.empty()) {
    // [B or 1, H or 1, maxq, maxk (+pad)], broadcast by stride 0 at random; key stride 1
    const bool bb = uni(rng, 0, 1), bh = uni(rng, 0, 1);
    p.bias_sk = 1;
    p.bias_sq = (maxk + 8) & ~7LL;
    p.bias_sh = bh ? p.bias_sq * std::max(maxq, 1) : 0;
    p.bias_sb = bb ? (bh ? p.bias_sh * p.heads_q : p.bias_sq * std::max(maxq, 1)) : 0;
    const size_t n = size_t((bb ? B : 1) * (bh ? p.heads_q : 1)) * size_t(std::max(maxq, 1)) * size_t(p.bias_sq) + 8;
    c->bias.assign(n, 0.0);
    for (auto& x : c->bias) x = uni(rng, 0, 30) == 0 ? -INFINITY : round_to(c->dtype, unif(rng, -2.0, 2.0));
    p.bias = c->bias.data();
  }
  if (!c->alibi.empty()) {
    c->alibi.resize(size_t(p.heads_q));
    c->alibi_f.resize(size_t(p.heads_q));
    for (int h = 0; h < p.heads_q; ++h) {
      c->alibi_f[size_t(h)] = float(unif(rng, 0.0, 0.5));
      c->alibi[size_t(h)] = c->alibi_f[size_t(h)];
    }
    p.alibi = c->alibi.data();
  }
  if (c->with_sinks) {
    c->sinks = random_sinks(rng, p.heads_q, c->dtype);
    c->sinks_f.assign(c->sinks.begin(), c->sinks.end());
    p.sinks = c->sinks.data();
  }
  // oracle
  c->o_ref.assign(c->o_n, 0.0);
  c->lse_n = size_t(oracle::lse_size(p));
  c->lse_ref.assign(c->lse_n, 0.0);
  oracle::forward(p, {c->q.data(), c->q_sb, c->q_ss, c->q_sh}, {c->k.data(), c->k_sb, c->k_ss, c->k_sh},
                  {c->v.data(), c->v_sb, c->v_ss, c->v_sh}, {c->o_ref.data(), c->o_sb, c->o_ss, c->o_sh},
                  c->lse_ref.data());
  c->o_valid.assign(c->o_n, 0);
  for (long long b = 0; b < BB; ++b)
    for (long long s = 0; s < TQ; ++s)
      for (long long h = 0; h < p.heads_q; ++h)
        for (long long d = 0; d < dv; ++d) c->o_valid[size_t(b * c->o_sb + s * c->o_ss + h * c->o_sh + d)] = 1;
  // device
  const size_t es = c->dtype == FA_DTYPE_FP32 ? 4 : 2;
  c->dq = DevBuf(c->q_n * es);
  c->dq.upload(encode(c->dtype, c->q).data(), c->q_n * es);
  c->dk = DevBuf(c->k_n * es);
  c->dk.upload(encode(c->dtype, c->k).data(), c->k_n * es);
  c->dv = DevBuf(c->v_n * es);
  c->dv.upload(encode(c->dtype, c->v).data(), c->v_n * es);
  c->d_o = DevBuf(c->o_n * es);
  std::vector<uint8_t> poison(c->o_n * es, 0xff);
  c->d_o.upload(poison.data(), poison.size());
  c->d_lse = DevBuf(std::max<size_t>(c->lse_n, 1) * 4);
  std::vector<uint8_t> lpoison(std::max<size_t>(c->lse_n, 1) * 4, 0xff);
  c->d_lse.upload(lpoison.data(), lpoison.size());
  fa_params_init(&c->params);
  fa_params& P = c->params;
  P.dtype = c->dtype;
  P.batch = p.batch;
  P.heads_q = p.heads_q;
  P.heads_kv = p.heads_kv;
  P.head_dim = p.head_dim;
  P.head_dim_v = p.head_dim_v == p.head_dim && uni(rng, 0, 1) ? 0 : dv;
  P.q = c->dq.get();
  P.q_stride_batch = c->q_sb;
  P.q_stride_seq = c->q_ss;
  P.q_stride_head = c->q_sh;
  P.k = c->dk.get();
  P.k_stride_batch = c->k_sb;
  P.k_stride_seq = c->k_ss;
  P.k_stride_head = c->k_sh;
  P.v = c->dv.get();
  P.v_stride_batch = c->v_sb;
  P.v_stride_seq = c->v_ss;
  P.v_stride_head = c->v_sh;
  P.o = c->d_o.get();
  P.o_stride_batch = c->o_sb;
  P.o_stride_seq = c->o_ss;
  P.o_stride_head = c->o_sh;
  if (varlen) {
    c->d_cuq = DevBuf(p.cu_seqlens_q.size() * 4);
    c->d_cuq.upload(p.cu_seqlens_q.data(), p.cu_seqlens_q.size() * 4);
    c->d_cuk = DevBuf(p.cu_seqlens_k.size() * 4);
    c->d_cuk.upload(p.cu_seqlens_k.data(), p.cu_seqlens_k.size() * 4);
    P.cu_seqlens_q = reinterpret_cast<const int32_t*>(c->d_cuq.get());
    P.cu_seqlens_k = reinterpret_cast<const int32_t*>(c->d_cuk.get());
    P.max_seqlen_q = maxq;
    P.max_seqlen_k = maxk;
    P.total_q = int(TQ);
    P.total_k = int(TK);
  } else {
    P.seqlen_q = p.seqlen_q;
    P.seqlen_k = p.seqlen_k;
  }
  P.mask = p.mask;
  P.window_left = p.mask == 2 ? p.window_left : -1;
  P.window_right = p.mask == 2 ? p.window_right : -1;
  if (p.bias) {
    c->d_bias = DevBuf(c->bias.size() * es);
    c->d_bias.upload(encode(c->dtype, c->bias).data(), c->bias.size() * es);
    P.bias = c->d_bias.get();
    P.bias_stride_batch = p.bias_sb;
    P.bias_stride_head = p.bias_sh;
    P.bias_stride_q = p.bias_sq;
    P.bias_stride_k = p.bias_sk;
  }
  if (p.alibi) {
    c->d_alibi = DevBuf(c->alibi_f.size() * 4);
    c->d_alibi.upload(c->alibi_f.data(), c->alibi_f.size() * 4);
    P.alibi_slopes = reinterpret_cast<const float*>(c->d_alibi.get());
  }
  if (p.sinks) {
    c->d_sinks = DevBuf(c->sinks_f.size() * 4);
    c->d_sinks.upload(c->sinks_f.data(), c->sinks_f.size() * 4);
    P.sinks = reinterpret_cast<const float*>(c->d_sinks.get());
  }
  P.softcap = float(p.softcap);
  P.softmax_scale = float(p.scale);
  if (p.scale != 0.0) p.scale = double(float(p.scale));  // the kernel sees the float value
  P.lse = c->want_lse ? reinterpret_cast<float*>(c->d_lse.get()) : nullptr;
  c->desc = fmt::format(
      "{} b{} hq{} hkv{} d{} dv{} {} sq{} sk{} mask{} win({},{}) bias{} alibi{} softcap{:.3g} scale{:.3g} {} lse{}",
      c->dtype == 1   ? "fp16"
      : c->dtype == 2 ? "bf16"
                      : "fp32",
      p.batch, p.heads_q, p.heads_kv, p.head_dim, dv, varlen ? "varlen" : "fixed", maxq, maxk, p.mask, p.window_left,
      p.window_right, p.bias != nullptr, p.alibi != nullptr, p.softcap, p.scale, c->bhsd ? "bhsd" : "bshd",
      c->want_lse);
  if (p.sinks) c->desc += fmt::format(" sinks({})", fmt::join(c->sinks_f, ","));
  if (p.scale != 0.0 || p.softcap != 0.0) {  // recompute the oracle with float-rounded scalars
    p.softcap = double(float(p.softcap));
    oracle::forward(p, {c->q.data(), c->q_sb, c->q_ss, c->q_sh}, {c->k.data(), c->k_sb, c->k_ss, c->k_sh},
                    {c->v.data(), c->v_sb, c->v_ss, c->v_sh}, {c->o_ref.data(), c->o_sb, c->o_ss, c->o_sh},
                    c->lse_ref.data());
  }
}

CaseResult compare_outputs(Case& c) {
  CaseResult r;
  const size_t es = c.dtype == FA_DTYPE_FP32 ? 4 : 2;
  std::vector<uint8_t> bytes(c.o_n * es);
  c.d_o.download(bytes.data(), bytes.size());
  std::vector<double> got = decode(c.dtype, bytes);
  std::vector<double> g, ref;
  for (size_t i = 0; i < c.o_n; ++i) {
    if (c.o_valid[i]) {
      g.push_back(got[i]);
      ref.push_back(c.o_ref[i]);
    } else if (!is_poison_bits(c.dtype, &bytes[i * es])) {
      r.padding_intact = false;
    }
  }
  r.err_o = g.empty() ? 0.0 : oracle::relative_error(std::span<const double>(g), std::span<const double>(ref));
  if (g.size() && std::all_of(ref.begin(), ref.end(), [](double x) { return x == 0.0; }))
    r.err_o = std::all_of(g.begin(), g.end(), [](double x) { return x == 0.0; }) ? 0.0 : INFINITY;
  if (c.want_lse && c.lse_n) {
    std::vector<float> lse(c.lse_n);
    c.d_lse.download(lse.data(), c.lse_n * 4);
    r.err_lse = oracle::relative_error(std::span<const float>(lse), std::span<const double>(c.lse_ref));
  }
  return r;
}

CaseResult check_case(Case& c) {
  Gpu& g = gpu();
  fa_status st = fa_run(g.ctx, &c.params, g.stream);
  if (st != FA_OK) {
    CaseResult r;
    r.failure = fmt::format("fa_run: {}", fa_last_error());
    return r;
  }
  CUresult cr = g.d->cuStreamSynchronize(g.stream);
  if (cr != CUDA_SUCCESS) {
    CaseResult r;
    r.failure = rt::driver_error(*g.d, "cuStreamSynchronize", cr);
    return r;
  }
  return compare_outputs(c);
}

void materialize_spec(std::mt19937_64& rng, const CaseSpec& spec, bool aligned, Case* c) {
  c->dtype = spec.dtype;
  c->op.batch = 2;
  c->op.heads_q = spec.heads_q;
  c->op.heads_kv = spec.heads_kv;
  c->op.head_dim = spec.head_dim;
  c->op.head_dim_v = spec.head_dim_v;
  c->op.mask = spec.mask;
  if (spec.mask == 2) {
    c->op.window_left = 37;
    c->op.window_right = 5;
  }
  if (spec.varlen) {
    c->op.cu_seqlens_q = {0, 100, 100, 290};
    c->op.cu_seqlens_k = {0, 130, 131, 331};
    c->op.batch = 3;
  } else {
    c->op.seqlen_q = spec.seqlen_q;
    c->op.seqlen_k = spec.seqlen_k;
  }
  c->op.softcap = spec.softcap ? 30.0 : 0.0;
  c->bias.assign(spec.bias ? 1 : 0, 0.0);  // materialize() fills bias/alibi when these are non-empty
  c->alibi.assign(spec.alibi ? 1 : 0, 0.0);
  c->want_lse = true;
  c->force_aligned = aligned;
  materialize(rng, c);
}

}  // namespace fa::test
