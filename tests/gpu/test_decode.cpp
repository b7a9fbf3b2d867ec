// test_decode.cpp -- the KV-cache forward (fwd_split / fwd_mla + fwd_combine, issue 21) against the float64 oracle on fresh
// random problems: paged vs contiguous caches bit for bit at every page size 1..512 (same split count), split vs
// unsplit, random used lengths (0 and 1 included: o = 0, lse = -inf for 0), masks / softcap / ALiBi / GQA ratios /
// query tokens / head dims / dtypes, block-table entries outside the pool (masked, never read: the pool's other
// pages and the cache past the used lengths hold NaN), page layouts other than row-major pages (head-major, padded),
// and one captured CUDA graph replayed with new used lengths and block tables. Outputs are poisoned (NaN) before every
// run. The oracle runs per sequence on its used keys; keys of pages outside the pool are masked for it by a -inf bias.
#include <gtest/gtest.h>

#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "tests/gpu/gpu_support.h"

namespace fa::test {
namespace {

struct DecodeSpec {
  int dtype = FA_DTYPE_BF16;
  int batch = 2, sq = 1, cap = 300, hq = 8, hkv = 2, d = 128, dv = 128;
  int mask = FA_MASK_NONE, wl = -1, wr = -1;
  bool alibi = false;
  float softcap = 0.f;
};

std::string describe(const DecodeSpec& s) {
  return fmt::format("{} b{} sq{} cap{} hq{}/{} d{}/{} mask{} ({},{}) alibi{} softcap{}",
                     s.dtype == FA_DTYPE_BF16 ? "bf16" : "fp16", s.batch, s.sq, s.cap, s.hq, s.hkv, s.d, s.dv, s.mask,
                     s.wl, s.wr, s.alibi, s.softcap);
}

// Host data of one problem: logical caches [batch, cap, hkv, d] and the oracle's answer for given used lengths and
// invalid pages.
struct DecodeData {
  DecodeSpec s;
  std::vector<double> q, k, v, alibi;
  std::vector<float> alibi_f;
  DevBuf dq, d_alibi, d_o, d_lse;
  size_t o_n = 0, lse_n = 0;
};

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
  x->o_n = size_t(s.batch) * s.sq * s.hq * s.dv;
  x->lse_n = size_t(s.batch) * s.hq * s.sq;
  x->d_o = DevBuf(x->o_n * 2);
  x->d_lse = DevBuf(x->lse_n * 4);
}

// The oracle per sequence over its used keys; `masked[b][j]` hides key j (a page outside the pool).
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
    oracle::MutTensor4 out{o->data() + size_t(b) * s.sq * s.hq * s.dv, 0, (long long)s.hq * s.dv, s.dv};
    oracle::forward(p, q, k, v, out, lse->data() + size_t(b) * s.hq * s.sq);
  }
}

// A cache on the device: contiguous [batch, cap, hkv, d] (rows past the used lengths NaN), or a pool of pages
// (page_size rows each; pages the table does not name, and table entries past the used lengths, hold / point at NaN).
// Page layouts (make_paged): kRowMajor [page_size, hkv, d] per page (vLLM's); kHeadMajor [hkv, page_size, d] (the
// page stride a multiple of the row stride, not page_size of them); kPadded kRowMajor with 8 elements between pages
// (the page stride no multiple of the row stride).
enum PageLayout { kRowMajor, kHeadMajor, kPadded };

struct Cache {
  int page_size = 0;  // 0: contiguous
  bool latent = false;  // v is k's first head_dim_v columns (MLA's latent cache): params_of passes v = k
  int num_pages = 0, bt_stride = 0;
  int64_t k_sb = 0, k_ss = 0, k_sh = 0, v_sb = 0, v_ss = 0, v_sh = 0;  // paged: the pools' strides (elements)
  std::vector<int> table;
  DevBuf dk, dv, d_bt, d_used;
};

std::vector<uint8_t> nan_bytes(size_t n) { return std::vector<uint8_t>(n * 2, 0xff); }

void make_contiguous(const DecodeData& x, const std::vector<int>& used, Cache* c) {
  const DecodeSpec& s = x.s;
  std::vector<double> k = x.k, v = x.v;
  for (int b = 0; b < s.batch; ++b)
    for (int j = used[size_t(b)]; j < s.cap; ++j) {
      for (int e = 0; e < s.hkv * s.d; ++e) k[(size_t(b) * s.cap + j) * s.hkv * s.d + e] = NAN;
      for (int e = 0; e < s.hkv * s.dv; ++e) v[(size_t(b) * s.cap + j) * s.hkv * s.dv + e] = NAN;
    }
  const auto kb = encode(s.dtype, k), vb = encode(s.dtype, v);
  c->page_size = 0;
  c->dk = DevBuf(kb.size());
  c->dk.upload(kb.data(), kb.size());
  c->dv = DevBuf(vb.size());
  c->dv.upload(vb.data(), vb.size());
}

// Pages in a random order; `extra` NaN pages in the pool; table entries past the used pages point at them.
void make_paged(std::mt19937_64& rng, const DecodeData& x, const std::vector<int>& used, int page_size, Cache* c,
                PageLayout layout = kRowMajor) {
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
  const auto kb = encode(s.dtype, pk), vb = encode(s.dtype, pv);
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
  p.q_stride_batch = (int64_t)s.sq * s.hq * s.d; p.q_stride_seq = (int64_t)s.hq * s.d; p.q_stride_head = s.d;
  p.o = x.d_o.get();
  p.o_stride_batch = (int64_t)s.sq * s.hq * s.dv; p.o_stride_seq = (int64_t)s.hq * s.dv; p.o_stride_head = s.dv;
  p.k = c.dk.get();
  p.v = c.dv.get();
  const int64_t rows = s.cap;
  p.k_stride_batch = rows * s.hkv * s.d; p.k_stride_seq = (int64_t)s.hkv * s.d; p.k_stride_head = s.d;
  p.v_stride_batch = rows * s.hkv * s.dv; p.v_stride_seq = (int64_t)s.hkv * s.dv; p.v_stride_head = s.dv;
  if (c.page_size > 0) {
    p.k_stride_batch = c.k_sb; p.k_stride_seq = c.k_ss; p.k_stride_head = c.k_sh;
    p.v_stride_batch = c.v_sb; p.v_stride_seq = c.v_ss; p.v_stride_head = c.v_sh;
  }
  if (c.latent) {
    p.v = p.k;
    p.v_stride_batch = p.k_stride_batch; p.v_stride_seq = p.k_stride_seq; p.v_stride_head = p.k_stride_head;
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
  return p;
}

struct Out {
  std::vector<uint8_t> o_bytes, lse_bytes;
  std::string failure;
  std::string key;
};

void poison(DecodeData& x) {
  const auto po = nan_bytes(x.o_n);
  x.d_o.upload(po.data(), po.size());
  const std::vector<uint8_t> pl(x.lse_n * 4, 0xff);
  x.d_lse.upload(pl.data(), pl.size());
}

Out run(DecodeData& x, fa_params p) {
  Gpu& g = gpu();
  Out out;
  poison(x);
  char key[512] = {0};
  fa_problem_key(g.ctx, &p, key, sizeof key);
  out.key = key;
  if (fa_run(g.ctx, &p, g.stream) != FA_OK) {
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

// "" when o and lse match the oracle (o: relative error within the dtype's tolerance; lse: infinities equal,
// finite values within 2e-3), else what differs.
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
  if (batch >= 3) { used[0] = 0; used[1] = 1; used[2] = cap; }
  return used;
}

#define REQUIRE_GPU()  \
  Gpu& g = gpu();      \
  if (!g.ok()) GTEST_SKIP() << "no GPU: " << g.why

// Paged caches in `layout` at each of page_sizes bit for bit against the contiguous cache at the same split count
// (1 and 3), once the contiguous run matched the oracle.
void check_paged_matches_contiguous(std::mt19937_64& rng, const DecodeSpec& s, const std::vector<int>& page_sizes,
                                    PageLayout layout) {
  DecodeData x;
  make_data(rng, s, &x);
  const std::vector<int> used = random_used(rng, s.batch, s.cap);
  std::vector<double> o_ref, lse_ref;
  oracle_of(x, used, {}, &o_ref, &lse_ref);
  for (int splits : {1, 3}) {
    Cache flat;
    make_contiguous(x, used, &flat);
    set_used(&flat, used);
    const Out base = run(x, params_of(x, flat, true, splits));
    ASSERT_EQ(compare(x, base, o_ref, lse_ref), "") << describe(s) << " contiguous, splits " << splits;
    EXPECT_NE(base.key.find("fwd_split"), std::string::npos) << base.key;
    for (int ps : page_sizes) {
      Cache paged;
      make_paged(rng, x, used, ps, &paged, layout);
      set_used(&paged, used);
      const Out r = run(x, params_of(x, paged, true, splits));
      ASSERT_TRUE(r.failure.empty()) << r.failure;
      EXPECT_TRUE(r.o_bytes == base.o_bytes && r.lse_bytes == base.lse_bytes)
          << describe(s) << " layout " << int(layout) << " page size " << ps << " splits " << splits
          << ": paged differs from contiguous (" << compare(x, r, o_ref, lse_ref) << ")";
    }
  }
}

TEST(GpuDecode, PagedMatchesContiguousBitForBitAtEveryPageSize) {
  REQUIRE_GPU();
  std::mt19937_64 rng(test_seed() + 2101);
  for (int dtype : {FA_DTYPE_BF16, FA_DTYPE_FP16}) {
    DecodeSpec s;
    s.dtype = dtype;
    s.batch = 4;
    s.cap = 1100;
    s.hq = 8;
    s.hkv = 2;
    s.mask = dtype == FA_DTYPE_BF16 ? FA_MASK_CAUSAL : FA_MASK_NONE;
    s.sq = 2;
    check_paged_matches_contiguous(rng, s, {1, 2, 4, 8, 16, 32, 64, 128, 256, 512}, kRowMajor);
  }
}

// Page layouts other than row-major pages: head-major pages ([hkv, page_size, d]: the page stride hkv * page_size
// row strides) and padded pages (a page stride that is no multiple of the row stride), page sizes 1..256.
TEST(GpuDecode, PagedLayoutsMatchContiguousBitForBit) {
  REQUIRE_GPU();
  std::mt19937_64 rng(test_seed() + 2112);
  DecodeSpec s;
  s.batch = 3;
  s.cap = 900;
  s.hq = 16;
  s.hkv = 4;
  for (PageLayout layout : {kHeadMajor, kPadded}) check_paged_matches_contiguous(rng, s, {1, 16, 64, 256}, layout);
}

TEST(GpuDecode, SplitAndUnsplitAgreeWithTheOracle) {
  REQUIRE_GPU();
  std::mt19937_64 rng(test_seed() + 2102);
  for (int cap : {64, 777, 5000}) {
    DecodeSpec s;
    s.batch = 2;
    s.cap = cap;
    s.hq = 16;
    s.hkv = 2;
    DecodeData x;
    make_data(rng, s, &x);
    std::vector<int> used(2, cap);
    std::vector<double> o_ref, lse_ref;
    oracle_of(x, used, {}, &o_ref, &lse_ref);
    Cache flat;
    make_contiguous(x, used, &flat);
    std::vector<std::vector<double>> outs;
    for (int splits : {1, 0, 2, 7, 64}) {
      const Out r = run(x, params_of(x, flat, false, splits));
      EXPECT_EQ(compare(x, r, o_ref, lse_ref), "") << describe(s) << " splits " << splits;
      if (r.failure.empty()) outs.push_back(decode(s.dtype, r.o_bytes));
    }
    for (size_t i = 1; i < outs.size(); ++i)
      EXPECT_LE(oracle::relative_error(outs[i], outs[0]), 2 * tolerance(s.dtype)) << describe(s) << " split run " << i;
  }
}

TEST(GpuDecode, RandomUsedLengthsFeaturesAndShapes) {
  REQUIRE_GPU();
  std::mt19937_64 rng(test_seed() + 2103);
  const int n = std::getenv("FA_TEST_CASES") ? std::atoi(std::getenv("FA_TEST_CASES")) : 72;
  auto pick = [&](std::initializer_list<int> xs) {
    std::uniform_int_distribution<size_t> u(0, xs.size() - 1);
    return *(xs.begin() + u(rng));
  };
  int failures = 0;
  for (int c = 0; c < n; ++c) {
    DecodeSpec s;
    s.dtype = pick({FA_DTYPE_BF16, FA_DTYPE_FP16});
    const int group = pick({1, 4, 8});
    s.hkv = pick({1, 2});
    s.hq = s.hkv * group;
    const bool paged = c % 2 == 1;
    s.sq = pick({1, 1, 2, 3, 5, 8});
    if (!paged) s.sq = std::max(1, std::min(s.sq, 16 / group));  // the contiguous decode class
    s.d = pick({64, 128, 256});
    s.dv = c % 7 == 3 ? 64 : s.d;
    s.batch = pick({1, 3});
    s.cap = pick({1, 17, 200, 640});
    s.mask = pick({0, 1, 2});
    if (s.mask == 2) { s.wl = pick({-1, 0, 5, 60}); s.wr = pick({-1, 0, 3}); }
    s.alibi = c % 3 == 0;
    s.softcap = c % 5 == 0 ? 20.f : 0.f;
    DecodeData x;
    make_data(rng, s, &x);
    const std::vector<int> used = random_used(rng, s.batch, s.cap);
    std::vector<double> o_ref, lse_ref;
    oracle_of(x, used, {}, &o_ref, &lse_ref);
    Cache cache;
    if (paged) make_paged(rng, x, used, pick({1, 16, 64, 256}), &cache);
    else make_contiguous(x, used, &cache);
    set_used(&cache, used);
    const int splits = pick({0, 1, 3});
    const Out r = run(x, params_of(x, cache, true, splits));
    const std::string err = compare(x, r, o_ref, lse_ref);
    if (!err.empty()) {
      ++failures;
      ADD_FAILURE() << "case " << c << " " << describe(s) << (paged ? fmt::format(" paged {}", cache.page_size) : "")
                    << " splits " << splits << ": " << err;
    } else {
      EXPECT_NE(r.key.find("fwd_split"), std::string::npos) << r.key;
    }
  }
  std::printf("GPU SUMMARY decode: %d random KV-cache problems, %d failed\n", n, failures);
}

// MLA's latent layout: v is the first head_dim_v columns of k, one tensor (params_of passes v = k with k's strides).
// The oracle's v becomes k's first columns.
void make_latent(DecodeData* x) {
  const DecodeSpec& s = x->s;
  for (size_t row = 0; row < size_t(s.batch) * s.cap * s.hkv; ++row)
    std::copy_n(&x->k[row * size_t(s.d)], s.dv, &x->v[row * size_t(s.dv)]);
}

// The MLA decode shape: 128 query heads over one latent KV head, d 576 / dv 512.
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

// The family a latent MLA problem runs: the Hopper kernel (fwd_mla) on sm_90, the wide fwd_split kernel elsewhere.
std::string latent_family(const std::string& key) {
  return key.find(".sm90.") != std::string::npos ? "fwd_mla" : "fwd_split";
}

// One MLA-sized decode problem (wide heads, dv 512) against the oracle: contiguous at a forced split count (2 when the
// case says automatic) and automatic, without used lengths when every sequence uses its whole cache, and paged at
// each of page_sizes bit for bit against the contiguous run at the same split count (paged 64 also automatic). With a
// separate v the wide fwd_split kernel runs; with the latent layout (v = k's first columns) latent_family's.
struct MlaCase {
  int dtype, batch, sq, cap, hq, hkv, d, mask, wl, wr, splits;
};
void check_mla_case(std::mt19937_64& rng, const MlaCase& cs, bool latent, const std::vector<int>& page_sizes) {
  DecodeSpec s;
  s.dtype = cs.dtype;
  s.batch = cs.batch;
  s.sq = cs.sq;
  s.cap = cs.cap;
  s.hq = cs.hq;
  s.hkv = cs.hkv;
  s.d = cs.d;
  s.dv = 512;
  s.mask = cs.mask;
  s.wl = cs.wl;
  s.wr = cs.wr;
  DecodeData x;
  make_data(rng, s, &x);
  if (latent) make_latent(&x);
  const std::vector<int> used = random_used(rng, s.batch, s.cap);
  std::vector<double> o_ref, lse_ref;
  oracle_of(x, used, {}, &o_ref, &lse_ref);
  auto family = [&](const std::string& key) { return latent ? latent_family(key) : std::string("fwd_split"); };
  const int splits = cs.splits == 0 ? 2 : cs.splits;
  Cache flat;
  make_contiguous(x, used, &flat);
  flat.latent = latent;
  set_used(&flat, used);
  const Out base = run(x, params_of(x, flat, true, splits));
  EXPECT_EQ(compare(x, base, o_ref, lse_ref), "") << describe(s) << " contiguous, splits " << splits;
  EXPECT_NE(base.key.find(family(base.key)), std::string::npos) << base.key;
  const Out automatic = run(x, params_of(x, flat, true, 0));
  EXPECT_EQ(compare(x, automatic, o_ref, lse_ref), "") << describe(s) << " contiguous, automatic splits";
  if (*std::min_element(used.begin(), used.end()) == s.cap) {
    const Out plain = run(x, params_of(x, flat, false, cs.splits));
    EXPECT_EQ(compare(x, plain, o_ref, lse_ref), "") << describe(s) << " contiguous, no used lengths";
  }
  for (int ps : page_sizes) {
    Cache paged;
    make_paged(rng, x, used, ps, &paged);
    paged.latent = latent;
    set_used(&paged, used);
    const Out r = run(x, params_of(x, paged, true, splits));
    ASSERT_TRUE(r.failure.empty()) << r.failure;
    EXPECT_NE(r.key.find(family(r.key)), std::string::npos) << r.key;
    EXPECT_TRUE(r.o_bytes == base.o_bytes && r.lse_bytes == base.lse_bytes)
        << describe(s) << " page size " << ps << ": paged differs from contiguous (" << compare(x, r, o_ref, lse_ref)
        << ")";
    if (ps == 64) {
      const Out a = run(x, params_of(x, paged, true, 0));
      EXPECT_EQ(compare(x, a, o_ref, lse_ref), "") << describe(s) << " paged 64, automatic splits";
    }
  }
}

// MLA decode shapes with a separate v on the wide kernel (d 576 / dv 512, one latent KV head): 128 query heads (two
// 64-row tiles) and partial tiles (16 heads, several query tokens), used lengths 0 / 1 / full, causal masks, forced
// and automatic split counts, paged (page 64 and others) bit for bit against contiguous at the same split count.
TEST(GpuDecode, MlaWideHeadsMatchTheOracle) {
  REQUIRE_GPU();
  std::mt19937_64 rng(test_seed() + 2106);
  const MlaCase cases[] = {{FA_DTYPE_BF16, 3, 1, 300, 128, 1, 576, FA_MASK_NONE, -1, -1, 0},
                           {FA_DTYPE_BF16, 2, 1, 1000, 128, 1, 576, FA_MASK_NONE, -1, -1, 1},
                           {FA_DTYPE_FP16, 3, 5, 200, 16, 1, 576, FA_MASK_CAUSAL, -1, -1, 3},
                           {FA_DTYPE_BF16, 1, 2, 4100, 128, 1, 576, FA_MASK_CAUSAL, -1, -1, 0},
                           {FA_DTYPE_BF16, 3, 1, 96, 64, 1, 576, FA_MASK_NONE, -1, -1, 7}};
  for (const MlaCase& cs : cases) check_mla_case(rng, cs, false, {64, 1, 16, 256});
}

// MLA decode over the latent cache (fwd_mla on Hopper): 128 query heads (two 64-row tiles), partial tiles (16 / 32 /
// 64 heads, several query tokens, two latent heads), head dims 576 and 512, causal and window masks, used lengths 0 /
// 1 / full among random ones, forced and automatic split counts; every page size 1..512 bit for bit against the
// contiguous cache at the same split count.
TEST(GpuDecode, MlaLatentCacheMatchesTheOracleAtEveryPageSize) {
  REQUIRE_GPU();
  std::mt19937_64 rng(test_seed() + 2107);
  const MlaCase cases[] = {{FA_DTYPE_BF16, 3, 1, 300, 128, 1, 576, FA_MASK_NONE, -1, -1, 0},
                           {FA_DTYPE_BF16, 2, 1, 1000, 128, 1, 576, FA_MASK_NONE, -1, -1, 1},
                           {FA_DTYPE_FP16, 3, 5, 200, 16, 1, 576, FA_MASK_CAUSAL, -1, -1, 3},
                           {FA_DTYPE_BF16, 1, 2, 4100, 128, 1, 576, FA_MASK_CAUSAL, -1, -1, 0},
                           {FA_DTYPE_BF16, 3, 1, 96, 64, 1, 576, FA_MASK_NONE, -1, -1, 7},
                           {FA_DTYPE_BF16, 3, 3, 700, 32, 2, 512, FA_MASK_SLIDING_WINDOW, 40, 0, 2},
                           {FA_DTYPE_FP16, 4, 1, 2000, 128, 1, 576, FA_MASK_NONE, -1, -1, 0}};
  for (const MlaCase& cs : cases) check_mla_case(rng, cs, true, {1, 2, 4, 8, 16, 32, 64, 128, 256, 512});
}

// Block-table entries outside the pool at each page size (latent: MLA's v = k layout): their keys are masked (the
// oracle hides them with -inf), never read. Sequence 0: its second page is -1; sequence 1: its first page is past the
// pool; sequence 2: every page out.
void check_pages_outside_the_pool(const DecodeSpec& s, bool latent, std::initializer_list<int> page_sizes,
                                  uint64_t seed, PageLayout layout = kRowMajor) {
  std::mt19937_64 rng(seed);
  DecodeData x;
  make_data(rng, s, &x);
  if (latent) make_latent(&x);
  const std::vector<int> used = {300, 150, 77};
  for (int ps : page_sizes) {
    Cache cache;
    make_paged(rng, x, used, ps, &cache, layout);
    cache.latent = latent;
    std::vector<std::vector<uint8_t>> masked(size_t(s.batch), std::vector<uint8_t>(size_t(s.cap), 0));
    auto knock = [&](int b, int pg, int id) {
      cache.table[size_t(b) * cache.bt_stride + pg] = id;
      for (int r = 0; r < ps && pg * ps + r < s.cap; ++r) masked[size_t(b)][size_t(pg * ps + r)] = 1;
    };
    knock(0, 1, -1);
    knock(1, 0, cache.num_pages + 5);
    for (int pg = 0; pg * ps < used[2]; ++pg) knock(2, pg, pg % 2 ? cache.num_pages : -7);
    cache.d_bt.upload(cache.table.data(), cache.table.size() * 4);
    set_used(&cache, used);
    std::vector<double> o_ref, lse_ref;
    oracle_of(x, used, masked, &o_ref, &lse_ref);
    for (int splits : {1, 4}) {
      const Out r = run(x, params_of(x, cache, true, splits));
      EXPECT_EQ(compare(x, r, o_ref, lse_ref), "") << describe(s) << " page size " << ps << " splits " << splits
                                                    << " layout " << int(layout);
      if (latent) {
        EXPECT_NE(r.key.find(latent_family(r.key)), std::string::npos) << r.key;
      }
    }
  }
}

// In each of make_paged's layouts (row-major, head-major and padded pages).
TEST(GpuDecode, PagesOutsideThePoolAreMaskedNeverRead) {
  REQUIRE_GPU();
  DecodeSpec s;
  s.batch = 3;
  s.cap = 300;
  s.hq = 8;
  s.hkv = 2;
  check_pages_outside_the_pool(s, false, {1, 16, 64}, test_seed() + 2104);
  check_pages_outside_the_pool(s, false, {1, 16, 64}, test_seed() + 2110, kHeadMajor);
  check_pages_outside_the_pool(s, false, {1, 16, 64}, test_seed() + 2111, kPadded);
}

TEST(GpuDecode, MlaLatentPagesOutsideThePoolAreMasked) {
  REQUIRE_GPU();
  check_pages_outside_the_pool(mla_spec(3, 300), true, {16, 64}, test_seed() + 2108);
}

// The driver's graph entry points (not in rt::Driver), from the already loaded libcuda.
struct GraphApi {
  CUresult (*begin)(CUstream, CUstreamCaptureMode) = nullptr;
  CUresult (*end)(CUstream, CUgraph*) = nullptr;
  CUresult (*instantiate)(CUgraphExec*, CUgraph, unsigned long long) = nullptr;
  CUresult (*launch)(CUgraphExec, CUstream) = nullptr;
  CUresult (*exec_destroy)(CUgraphExec) = nullptr;
  CUresult (*destroy)(CUgraph) = nullptr;
  bool ok = false;
};
GraphApi graph_api() {
  GraphApi a;
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (h == nullptr) return a;
  a.begin = reinterpret_cast<decltype(a.begin)>(dlsym(h, "cuStreamBeginCapture_v2"));
  a.end = reinterpret_cast<decltype(a.end)>(dlsym(h, "cuStreamEndCapture"));
  a.instantiate = reinterpret_cast<decltype(a.instantiate)>(dlsym(h, "cuGraphInstantiateWithFlags"));
  a.launch = reinterpret_cast<decltype(a.launch)>(dlsym(h, "cuGraphLaunch"));
  a.exec_destroy = reinterpret_cast<decltype(a.exec_destroy)>(dlsym(h, "cuGraphExecDestroy"));
  a.destroy = reinterpret_cast<decltype(a.destroy)>(dlsym(h, "cuGraphDestroy"));
  a.ok = a.begin && a.end && a.instantiate && a.launch && a.exec_destroy && a.destroy;
  return a;
}

// One graph captured after fa_prepare (paged at page_size, latent: MLA's v = k layout), replayed with new used
// lengths (0 and 1 among them) and block tables.
void check_graph_replay(const DecodeSpec& s, int page_size, bool latent, uint64_t seed) {
  Gpu& g = gpu();
  const GraphApi api = graph_api();
  if (!api.ok) GTEST_SKIP() << "graph entry points not found in libcuda";
  std::mt19937_64 rng(seed);
  DecodeData x;
  make_data(rng, s, &x);
  if (latent) make_latent(&x);
  std::vector<int> used(size_t(s.batch), s.cap);
  Cache cache;
  make_paged(rng, x, used, page_size, &cache);
  cache.latent = latent;
  set_used(&cache, used);
  fa_params p = params_of(x, cache, true, 0);
  ASSERT_EQ(fa_prepare(g.ctx, &p), FA_OK) << fa_last_error();
  size_t ws_bytes = 0;
  ASSERT_EQ(fa_forward_workspace_size(g.ctx, &p, &ws_bytes), FA_OK) << fa_last_error();
  DevBuf ws(std::max<size_t>(ws_bytes, 256));
  if (ws_bytes > 0) {
    p.workspace = ws.get();
    p.workspace_size = ws_bytes;
  }
  ASSERT_EQ(api.begin(g.stream, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  const fa_status st = fa_run(g.ctx, &p, g.stream);
  const std::string err = st == FA_OK ? "" : fa_last_error();
  CUgraph graph = nullptr;
  ASSERT_EQ(api.end(g.stream, &graph), CUDA_SUCCESS);
  ASSERT_EQ(st, FA_OK) << err;
  CUgraphExec exec = nullptr;
  ASSERT_EQ(api.instantiate(&exec, graph, 0), CUDA_SUCCESS);
  for (int replay = 0; replay < 4; ++replay) {
    // New used lengths (0 and 1 among them) and a fresh page order: the pool is rewritten, the table re-uploaded.
    used = random_used(rng, s.batch, s.cap);
    if (replay == 3) used = {s.cap, 0, 1, s.cap - 1};
    Cache next;
    make_paged(rng, x, used, page_size, &next);
    ASSERT_EQ(next.num_pages, cache.num_pages);
    for (auto [dst, src] : {std::pair{&cache.dk, &next.dk}, std::pair{&cache.dv, &next.dv}}) {
      std::vector<uint8_t> host(src->bytes);
      src->download(host.data(), host.size());
      dst->upload(host.data(), host.size());
    }
    cache.d_bt.upload(next.table.data(), next.table.size() * 4);
    set_used(&cache, used);
    poison(x);
    ASSERT_EQ(api.launch(exec, g.stream), CUDA_SUCCESS);
    ASSERT_EQ(g.d->cuStreamSynchronize(g.stream), CUDA_SUCCESS);
    Out r;
    r.o_bytes.resize(x.o_n * 2);
    r.lse_bytes.resize(x.lse_n * 4);
    x.d_o.download(r.o_bytes.data(), r.o_bytes.size());
    x.d_lse.download(r.lse_bytes.data(), r.lse_bytes.size());
    std::vector<double> o_ref, lse_ref;
    oracle_of(x, used, {}, &o_ref, &lse_ref);
    EXPECT_EQ(compare(x, r, o_ref, lse_ref), "") << describe(s) << " replay " << replay;
  }
  api.exec_destroy(exec);
  api.destroy(graph);
}

TEST(GpuDecode, CapturedGraphReplaysWithNewUsedLengthsAndBlockTables) {
  REQUIRE_GPU();
  DecodeSpec s;
  s.batch = 4;
  s.cap = 2048;
  s.hq = 32;
  s.hkv = 8;
  s.mask = FA_MASK_CAUSAL;
  check_graph_replay(s, 16, false, test_seed() + 2105);
}

TEST(GpuDecode, MlaLatentGraphReplaysWithNewUsedLengthsAndBlockTables) {
  REQUIRE_GPU();
  check_graph_replay(mla_spec(4, 2048), 64, true, test_seed() + 2109);
}

}  // namespace
}  // namespace fa::test
