// test_oracle.cpp -- checks the float64 CPU oracle (tests/oracle) against an independent naive attention written
// here (full score matrix, -inf mask, softmax) and its backward against central finite differences of
// L = sum(o * dO). Fresh random inputs every run; the seed is printed on failure (set FA_TEST_SEED to replay).
#include "tests/oracle/oracle.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

namespace fo = fa::oracle;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

uint64_t fresh_seed() {
  if (const char* env = std::getenv("FA_TEST_SEED"); env != nullptr && *env != '\0') {
    return std::strtoull(env, nullptr, 10);
  }
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ static_cast<uint64_t>(rd());
}

// ---- test data: sequences, strided buffers ---------------------------------------------------------------------
struct Seqs {
  bool varlen = false;
  std::vector<int> lens;   // per batch
  std::vector<int> start;  // varlen: first packed token of each sequence
  int max_len = 0;
  long long total = 0;
};

Seqs make_seqs(int batch, int fixed_len, const std::vector<int>& varlens) {
  Seqs s;
  s.varlen = !varlens.empty();
  s.lens = s.varlen ? varlens : std::vector<int>(static_cast<size_t>(batch), fixed_len);
  for (int len : s.lens) {
    s.start.push_back(static_cast<int>(s.total));
    s.total += len;
    s.max_len = std::max(s.max_len, len);
  }
  return s;
}

std::vector<int> offsets(const Seqs& s) {
  std::vector<int> cu = s.start;
  cu.push_back(static_cast<int>(s.total));
  return cu;
}

enum class Layout { Bshd, Bhsd, Padded };

// A [batch, seq, heads, dim] (or packed varlen) buffer with explicit strides; padding holds NaN so that any read
// of it by the oracle shows up as NaN in the results.
struct Buf {
  const Seqs* seqs = nullptr;
  int heads = 0, dim = 0;
  long long sb = 0, ss = 0, sh = 0;
  std::vector<double> data;

  long long index(int b, int t, int h, int d) const {
    const size_t sbi = static_cast<size_t>(b);
    if (seqs->varlen) return (seqs->start[sbi] + t) * ss + h * sh + d;
    return b * sb + t * ss + h * sh + d;
  }
  double& at(int b, int t, int h, int d) { return data[static_cast<size_t>(index(b, t, h, d))]; }
  double at(int b, int t, int h, int d) const { return data[static_cast<size_t>(index(b, t, h, d))]; }
  fo::Tensor4 view() const { return {data.data(), sb, ss, sh}; }
  fo::MutTensor4 mut() { return {data.data(), sb, ss, sh}; }
  template <typename F>
  void for_each_valid(F f) const {
    for (size_t b = 0; b < seqs->lens.size(); ++b) {
      for (int t = 0; t < seqs->lens[b]; ++t) {
        for (int h = 0; h < heads; ++h) {
          for (int d = 0; d < dim; ++d) f(static_cast<int>(b), t, h, d);
        }
      }
    }
  }
  // Valid elements in a fixed order.
  std::vector<double> gather() const {
    std::vector<double> out;
    for_each_valid([&](int b, int t, int h, int d) { out.push_back(at(b, t, h, d)); });
    return out;
  }
  // How many non-valid (padding) elements no longer hold NaN.
  int touched_padding() const {
    std::vector<char> valid(data.size(), 0);
    for_each_valid([&](int b, int t, int h, int d) { valid[static_cast<size_t>(index(b, t, h, d))] = 1; });
    int n = 0;
    for (size_t e = 0; e < data.size(); ++e) n += (!valid[e] && !std::isnan(data[e])) ? 1 : 0;
    return n;
  }
};

Buf make_buf(const Seqs& s, int heads, int dim, Layout layout) {
  Buf buf;
  buf.seqs = &s;
  buf.heads = heads;
  buf.dim = dim;
  const long long tokens = s.varlen ? s.total : s.max_len;  // per "batch row" of the layout
  const long long nb = s.varlen ? 1 : static_cast<long long>(s.lens.size());
  long long size = 0;
  switch (layout) {
    case Layout::Bshd:
      buf.sh = dim;
      buf.ss = static_cast<long long>(heads) * dim;
      buf.sb = tokens * buf.ss;
      size = nb * buf.sb;
      break;
    case Layout::Bhsd:
      buf.ss = dim;
      buf.sh = tokens * dim;
      buf.sb = heads * buf.sh;
      size = nb * buf.sb;
      break;
    case Layout::Padded:
      buf.sh = dim + 3;
      buf.ss = heads * buf.sh + 5;
      buf.sb = tokens * buf.ss + 7;
      size = nb * buf.sb;
      break;
  }
  if (s.varlen) buf.sb = 123456789;  // ignored in varlen mode: a wrong use would read out of bounds
  buf.data.assign(static_cast<size_t>(size), kNaN);
  return buf;
}

void fill_random(Buf& buf, std::mt19937_64& rng, double lo, double hi) {
  std::uniform_real_distribution<double> dist(lo, hi);
  buf.for_each_valid([&](int b, int t, int h, int d) { buf.at(b, t, h, d) = dist(rng); });
}

// ---- cases -----------------------------------------------------------------------------------------------------
enum class BiasKind { None, Full, BroadcastBatch, BroadcastHeads, BroadcastBoth, Transposed };

struct Case {
  const char* name = "";
  int batch = 2, sq = 5, sk = 6, hq = 2, hkv = 2, d = 8, dv = 8;
  std::vector<int> lens_q = {}, lens_k = {};  // non-empty: varlen (batch entries each)
  int mask = fo::kMaskNone, wl = -1, wr = -1;
  BiasKind bias = BiasKind::None;
  bool alibi = false;
  double softcap = 0.0, scale = 0.0;
  Layout layout = Layout::Bshd;
  bool expect_masked_rows = false;  // the case must contain fully masked query rows
};

// How gtest shows a Case (--gtest_list_tests, failure messages): its name, not its 136 raw bytes.
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

const std::vector<Case>& all_cases() {
  using fo::kMaskCausal, fo::kMaskSlidingWindow;
  static const std::vector<Case> cases = {
      {.name = "plain"},
      {.name = "scale", .scale = 0.37},
      {.name = "single_key", .sq = 3, .sk = 1},
      {.name = "causal_square", .sq = 6, .sk = 6, .mask = kMaskCausal},
      {.name = "causal_q_lt_k", .sq = 3, .sk = 7, .mask = kMaskCausal},
      {.name = "causal_q_gt_k", .sq = 7, .sk = 3, .mask = kMaskCausal, .expect_masked_rows = true},
      {.name = "window_2_1", .sq = 7, .sk = 7, .mask = kMaskSlidingWindow, .wl = 2, .wr = 1},
      {.name = "window_left_unbounded", .sq = 4, .sk = 7, .mask = kMaskSlidingWindow, .wl = -1, .wr = 1},
      {.name = "window_right_unbounded", .sq = 7, .sk = 4, .mask = kMaskSlidingWindow, .wl = 1, .wr = -1},
      {.name = "window_0_0_q_gt_k",
       .sq = 7,
       .sk = 3,
       .mask = kMaskSlidingWindow,
       .wl = 0,
       .wr = 0,
       .expect_masked_rows = true},
      {.name = "window_unbounded", .sq = 4, .sk = 6, .mask = kMaskSlidingWindow},
      {.name = "bias_full", .bias = BiasKind::Full},
      {.name = "bias_bcast_batch", .bias = BiasKind::BroadcastBatch},
      {.name = "bias_bcast_heads", .bias = BiasKind::BroadcastHeads},
      {.name = "bias_bcast_both", .bias = BiasKind::BroadcastBoth},
      {.name = "bias_transposed", .sq = 4, .sk = 6, .bias = BiasKind::Transposed},
      {.name = "alibi", .alibi = true},
      {.name = "alibi_causal_q_lt_k", .sq = 3, .sk = 6, .mask = kMaskCausal, .alibi = true},
      {.name = "alibi_q_gt_k", .sq = 6, .sk = 3, .alibi = true},
      {.name = "softcap", .softcap = 0.8, .scale = 2.0},
      {.name = "softcap_bias_alibi", .bias = BiasKind::Full, .alibi = true, .softcap = 1.5},
      {.name = "gqa", .hq = 4, .hkv = 2},
      {.name = "mqa_causal", .hq = 3, .hkv = 1, .mask = kMaskCausal},
      {.name = "dv_lt_d", .d = 8, .dv = 4},
      {.name = "dv_gt_d", .d = 4, .dv = 12},
      {.name = "bhsd", .layout = Layout::Bhsd},
      {.name = "padded_causal", .mask = kMaskCausal, .layout = Layout::Padded},
      {.name = "sk_zero", .sq = 3, .sk = 0, .expect_masked_rows = true},
      {.name = "varlen", .batch = 4, .lens_q = {3, 0, 4, 2}, .lens_k = {5, 3, 0, 2}, .expect_masked_rows = true},
      {.name = "varlen_causal",
       .batch = 3,
       .lens_q = {4, 2, 5},
       .lens_k = {2, 6, 5},
       .mask = kMaskCausal,
       .expect_masked_rows = true},
      {.name = "varlen_window_bhsd",
       .batch = 3,
       .lens_q = {4, 0, 3},
       .lens_k = {6, 2, 3},
       .mask = kMaskSlidingWindow,
       .wl = 1,
       .wr = 0,
       .layout = Layout::Bhsd},
      {.name = "varlen_bias_alibi_gqa_padded",
       .batch = 3,
       .hq = 4,
       .hkv = 2,
       .lens_q = {3, 5, 0},
       .lens_k = {4, 2, 0},
       .bias = BiasKind::BroadcastHeads,
       .alibi = true,
       .layout = Layout::Padded},
      {.name = "everything",
       .sq = 5,
       .sk = 7,
       .hq = 4,
       .hkv = 2,
       .d = 8,
       .dv = 4,
       .mask = kMaskSlidingWindow,
       .wl = 2,
       .wr = 1,
       .bias = BiasKind::BroadcastBatch,
       .alibi = true,
       .softcap = 1.2,
       .scale = 0.5,
       .layout = Layout::Padded},
  };
  return cases;
}

// A case instantiated with random data. Bias values are generated logically as bias(b, h, i, j) and stored with
// the case's strides.
struct Instance {
  Case c;
  Seqs sq, sk;
  Buf q, k, v;
  std::vector<double> bias_store;
  std::vector<double> alibi;
  fo::Problem p;

  Instance(const Case& cs, std::mt19937_64& rng)
      : c(cs),
        sq(make_seqs(cs.batch, cs.sq, cs.lens_q)),
        sk(make_seqs(cs.batch, cs.sk, cs.lens_k)),
        q(make_buf(sq, cs.hq, cs.d, cs.layout)),
        k(make_buf(sk, cs.hkv, cs.d, cs.layout)),
        v(make_buf(sk, cs.hkv, cs.dv, cs.layout)) {
    fill_random(q, rng, -1.5, 1.5);
    fill_random(k, rng, -1.5, 1.5);
    fill_random(v, rng, -1.0, 1.0);
    p.batch = cs.batch;
    p.seqlen_q = cs.sq;
    p.seqlen_k = cs.sk;
    p.heads_q = cs.hq;
    p.heads_kv = cs.hkv;
    p.head_dim = cs.d;
    p.head_dim_v = cs.dv;
    if (sq.varlen) {
      p.cu_seqlens_q = offsets(sq);
      p.cu_seqlens_k = offsets(sk);
    }
    p.mask = cs.mask;
    p.window_left = cs.wl;
    p.window_right = cs.wr;
    p.softcap = cs.softcap;
    p.scale = cs.scale;
    if (cs.alibi) {
      std::uniform_real_distribution<double> slope(0.1, 1.0);
      for (int h = 0; h < cs.hq; ++h) alibi.push_back(slope(rng));
      p.alibi = alibi.data();
    }
    make_bias(rng);
  }
  Instance(const Instance&) = delete;
  Instance& operator=(const Instance&) = delete;

  void make_bias(std::mt19937_64& rng) {
    if (c.bias == BiasKind::None) return;
    const long long mq = sq.max_len, mk = sk.max_len, nh = c.hq, nb = c.batch;
    long long size = 0;
    switch (c.bias) {
      case BiasKind::Full:
        p.bias_sk = 1, p.bias_sq = mk, p.bias_sh = mq * mk, p.bias_sb = nh * mq * mk, size = nb * nh * mq * mk;
        break;
      case BiasKind::BroadcastBatch:
        p.bias_sk = 1, p.bias_sq = mk, p.bias_sh = mq * mk, p.bias_sb = 0, size = nh * mq * mk;
        break;
      case BiasKind::BroadcastHeads:
        p.bias_sk = 1, p.bias_sq = mk, p.bias_sh = 0, p.bias_sb = mq * mk, size = nb * mq * mk;
        break;
      case BiasKind::BroadcastBoth: p.bias_sk = 1, p.bias_sq = mk, p.bias_sh = 0, p.bias_sb = 0, size = mq * mk; break;
      case BiasKind::Transposed:
        p.bias_sq = 1, p.bias_sk = mq, p.bias_sh = mq * mk, p.bias_sb = nh * mq * mk, size = nb * nh * mq * mk;
        break;
      case BiasKind::None: break;
    }
    std::uniform_real_distribution<double> dist(-2.0, 2.0);
    bias_store.resize(static_cast<size_t>(size));
    for (double& x : bias_store) x = dist(rng);
    p.bias = bias_store.data();
  }

  // The logical bias value, from the case's own storage rule.
  double bias_at(int b, int h, int i, int j) const {
    const long long mq = sq.max_len, mk = sk.max_len, nh = c.hq;
    long long idx = 0;
    switch (c.bias) {
      case BiasKind::None: return 0.0;
      case BiasKind::Full: idx = ((b * nh + h) * mq + i) * mk + j; break;
      case BiasKind::BroadcastBatch: idx = (h * mq + i) * mk + j; break;
      case BiasKind::BroadcastHeads: idx = (b * mq + i) * mk + j; break;
      case BiasKind::BroadcastBoth: idx = i * mk + j; break;
      case BiasKind::Transposed: idx = ((b * nh + h) * mk + j) * mq + i; break;
    }
    return bias_store[static_cast<size_t>(idx)];
  }
};

// ---- the independent naive reference ---------------------------------------------------------------------------
using Matrix = std::vector<std::vector<double>>;

bool naive_hidden(const Case& c, int i, int j, int len_q, int len_k) {
  const int shift = len_k - len_q;  // bottom-right alignment: row i lines up with key i + shift
  if (c.mask == fo::kMaskCausal) return j - i > shift;
  if (c.mask == fo::kMaskSlidingWindow) {
    if (c.wl != -1 && (i + shift) - j > c.wl) return true;
    if (c.wr != -1 && j - (i + shift) > c.wr) return true;
  }
  return false;
}

// o (contiguous BSHD) and lse[b][h][i] of every case, computed from the full score matrix of each (b, h).
struct Naive {
  const Instance& in;
  Buf o;
  std::vector<std::vector<std::vector<double>>> lse;  // [b][h][i]

  explicit Naive(const Instance& inst) : in(inst), o(make_buf(inst.sq, inst.c.hq, inst.c.dv, Layout::Bshd)) {
    const Case& c = in.c;
    const double scale = c.scale != 0.0 ? c.scale : 1.0 / std::sqrt(static_cast<double>(c.d));
    lse.assign(static_cast<size_t>(c.batch), {});
    for (int b = 0; b < c.batch; ++b) {
      const size_t ub = static_cast<size_t>(b);
      const int lq = in.sq.lens[ub], lk = in.sk.lens[ub];
      lse[ub].assign(static_cast<size_t>(c.hq), std::vector<double>(static_cast<size_t>(lq), 0.0));
      for (int h = 0; h < c.hq; ++h) {
        const int g = h * c.hkv / c.hq;
        Matrix qm(static_cast<size_t>(lq)), km(static_cast<size_t>(lk)), vm(static_cast<size_t>(lk));
        for (int i = 0; i < lq; ++i)
          for (int d = 0; d < c.d; ++d) qm[static_cast<size_t>(i)].push_back(in.q.at(b, i, h, d));
        for (int j = 0; j < lk; ++j) {
          for (int d = 0; d < c.d; ++d) km[static_cast<size_t>(j)].push_back(in.k.at(b, j, g, d));
          for (int d = 0; d < c.dv; ++d) vm[static_cast<size_t>(j)].push_back(in.v.at(b, j, g, d));
        }
        // Full score matrix.
        Matrix s(static_cast<size_t>(lq), std::vector<double>(static_cast<size_t>(lk), 0.0));
        for (int i = 0; i < lq; ++i) {
          for (int j = 0; j < lk; ++j) {
            double x = 0.0;
            for (int d = 0; d < c.d; ++d)
              x += qm[static_cast<size_t>(i)][static_cast<size_t>(d)] *
                   km[static_cast<size_t>(j)][static_cast<size_t>(d)];
            x *= scale;
            if (c.softcap > 0.0) x = c.softcap * std::tanh(x / c.softcap);
            x += in.bias_at(b, h, i, j);
            if (c.alibi) x += -in.alibi[static_cast<size_t>(h)] * std::abs(i + lk - lq - j);
            if (naive_hidden(c, i, j, lq, lk)) x = -kInf;
            s[static_cast<size_t>(i)][static_cast<size_t>(j)] = x;
          }
        }
        // Row softmax and P V.
        for (int i = 0; i < lq; ++i) {
          const auto& row = s[static_cast<size_t>(i)];
          double mx = -kInf;
          for (double x : row) mx = std::max(mx, x);
          double& row_lse = lse[ub][static_cast<size_t>(h)][static_cast<size_t>(i)];
          for (int d = 0; d < c.dv; ++d) o.at(b, i, h, d) = 0.0;
          if (mx == -kInf) {
            row_lse = -kInf;
            continue;
          }
          double sum = 0.0;
          for (double x : row) sum += std::exp(x - mx);
          row_lse = mx + std::log(sum);
          for (int j = 0; j < lk; ++j) {
            const double pij = std::exp(row[static_cast<size_t>(j)] - mx) / sum;
            for (int d = 0; d < c.dv; ++d) o.at(b, i, h, d) += pij * vm[static_cast<size_t>(j)][static_cast<size_t>(d)];
          }
        }
      }
    }
  }
};

std::string seed_note(uint64_t seed) { return "seed=" + std::to_string(seed) + " (replay: FA_TEST_SEED)"; }

// ---- forward vs naive ------------------------------------------------------------------------------------------
class OracleCase : public ::testing::TestWithParam<Case> {};

TEST_P(OracleCase, ForwardMatchesNaive) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  const Instance in(GetParam(), rng);
  const Case& c = in.c;

  Buf o = make_buf(in.sq, c.hq, c.dv, c.layout);
  std::vector<double> lse(static_cast<size_t>(fo::lse_size(in.p)), kNaN);
  fo::forward(in.p, in.q.view(), in.k.view(), in.v.view(), o.mut(), lse.data());
  const Naive ref(in);

  EXPECT_EQ(o.touched_padding(), 0) << "the oracle wrote outside the valid region of o";
  const double err_o = fo::relative_error(o.gather(), ref.o.gather());
  EXPECT_LE(err_o, 1e-12) << "o";

  std::vector<double> got_lse, want_lse;
  int masked_rows = 0;
  for (int b = 0; b < c.batch; ++b) {
    const size_t ub = static_cast<size_t>(b);
    for (int h = 0; h < c.hq; ++h) {
      for (int i = 0; i < in.sq.lens[ub]; ++i) {
        const double want = ref.lse[ub][static_cast<size_t>(h)][static_cast<size_t>(i)];
        // LSE layout of fa.h: [batch, heads_q, seqlen_q], or [heads_q, total_q] in varlen mode.
        const long long idx =
            in.sq.varlen ? h * in.sq.total + in.sq.start[ub] + i : (static_cast<long long>(b) * c.hq + h) * c.sq + i;
        EXPECT_EQ(fo::lse_index(in.p, b, h, i), idx);
        const double got = lse[static_cast<size_t>(idx)];
        got_lse.push_back(got);
        want_lse.push_back(want);
        if (want == -kInf) {
          ++masked_rows;
          EXPECT_EQ(got, -kInf) << "fully masked row b=" << b << " h=" << h << " i=" << i;
          for (int d = 0; d < c.dv; ++d) {
            EXPECT_EQ(o.at(b, i, h, d), 0.0) << "fully masked row b=" << b << " h=" << h << " i=" << i;
          }
        }
      }
    }
  }
  EXPECT_EQ(static_cast<long long>(got_lse.size()), fo::lse_size(in.p)) << "lse layout covers every row once";
  for (double x : lse) EXPECT_FALSE(std::isnan(x)) << "an lse entry was not written";
  EXPECT_LE(fo::relative_error(got_lse, want_lse), 1e-12) << "lse";
  if (c.expect_masked_rows) { EXPECT_GT(masked_rows, 0) << "case should exercise fully masked rows"; }
}

// ---- backward vs central finite differences --------------------------------------------------------------------
double loss(const Instance& in, const Buf& dout) {
  Buf o = make_buf(in.sq, in.c.hq, in.c.dv, Layout::Bshd);
  fo::forward(in.p, in.q.view(), in.k.view(), in.v.view(), o.mut(), nullptr);
  double acc = 0.0;
  o.for_each_valid([&](int b, int t, int h, int d) { acc += o.at(b, t, h, d) * dout.at(b, t, h, d); });
  return acc;
}

// d loss / d x for every valid element of x (x is one of in.q, in.k, in.v), by central differences.
std::vector<double> numeric_grad(Instance& in, Buf& x, const Buf& dout) {
  constexpr double kStep = 1e-5;
  std::vector<double> grad;
  x.for_each_valid([&](int b, int t, int h, int d) {
    double& e = x.at(b, t, h, d);
    const double saved = e;
    e = saved + kStep;
    const double plus = loss(in, dout);
    e = saved - kStep;
    const double minus = loss(in, dout);
    e = saved;
    grad.push_back((plus - minus) / (2.0 * kStep));
  });
  return grad;
}

TEST_P(OracleCase, BackwardMatchesFiniteDifferences) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  Instance in(GetParam(), rng);
  const Case& c = in.c;

  Buf dout = make_buf(in.sq, c.hq, c.dv, c.layout);
  fill_random(dout, rng, -1.0, 1.0);
  Buf dq = make_buf(in.sq, c.hq, c.d, c.layout);
  Buf dk = make_buf(in.sk, c.hkv, c.d, c.layout);
  Buf dv = make_buf(in.sk, c.hkv, c.dv, c.layout);
  fo::backward(in.p, in.q.view(), in.k.view(), in.v.view(), dout.view(), dq.mut(), dk.mut(), dv.mut());
  EXPECT_EQ(dq.touched_padding(), 0);
  EXPECT_EQ(dk.touched_padding(), 0);
  EXPECT_EQ(dv.touched_padding(), 0);

  const std::vector<double> num_q = numeric_grad(in, in.q, dout);
  const std::vector<double> num_k = numeric_grad(in, in.k, dout);
  const std::vector<double> num_v = numeric_grad(in, in.v, dout);
  EXPECT_LE(fo::relative_error(dq.gather(), num_q), 1e-6) << "dq";
  EXPECT_LE(fo::relative_error(dk.gather(), num_k), 1e-6) << "dk";
  EXPECT_LE(fo::relative_error(dv.gather(), num_v), 1e-6) << "dv";
}

INSTANTIATE_TEST_SUITE_P(Cases, OracleCase, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<Case>& tp) { return std::string(tp.param.name); });

// ---- dense convenience overloads agree with the strided interface ----------------------------------------------
TEST(Oracle, DenseMatchesStrided) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  for (const char* name : {"everything", "varlen_causal"}) {
    SCOPED_TRACE(name);
    Case c;
    for (const Case& x : all_cases()) {
      if (std::string(x.name) == name) c = x;
    }
    c.layout = Layout::Bshd;  // dense == contiguous BSHD, so the buffers can be passed as they are
    Instance in(c, rng);
    Buf dout = make_buf(in.sq, c.hq, c.dv, c.layout);
    fill_random(dout, rng, -1.0, 1.0);

    Buf o = make_buf(in.sq, c.hq, c.dv, c.layout);
    std::vector<double> lse(static_cast<size_t>(fo::lse_size(in.p)), kNaN);
    fo::forward(in.p, in.q.view(), in.k.view(), in.v.view(), o.mut(), lse.data());
    const fo::DenseForward dense = fo::forward(in.p, in.q.data, in.k.data, in.v.data);
    EXPECT_EQ(fo::relative_error(dense.o, o.data), 0.0);
    EXPECT_EQ(fo::relative_error(dense.lse, lse), 0.0);

    Buf dq = make_buf(in.sq, c.hq, c.d, c.layout);
    Buf dk = make_buf(in.sk, c.hkv, c.d, c.layout);
    Buf dv = make_buf(in.sk, c.hkv, c.dv, c.layout);
    fo::backward(in.p, in.q.view(), in.k.view(), in.v.view(), dout.view(), dq.mut(), dk.mut(), dv.mut());
    const fo::DenseBackward grads = fo::backward(in.p, in.q.data, in.k.data, in.v.data, dout.data);
    EXPECT_EQ(fo::relative_error(grads.dq, dq.data), 0.0);
    EXPECT_EQ(fo::relative_error(grads.dk, dk.data), 0.0);
    EXPECT_EQ(fo::relative_error(grads.dv, dv.data), 0.0);

    EXPECT_THROW(fo::forward(in.p, std::span<const double>(in.q.data).first(1), in.k.data, in.v.data),
                 std::invalid_argument);
  }
}

// ---- user code (fa_mods callbacks) ------------------------------------------------------------------------------
// The oracle's backward with a mask_mod and a nonlinear score_mod (a softcap plus a relative bias, on top of a
// built-in softcap and causal mask) against central finite differences of its own forward: the derivative
// callback enters at the s the score_mod receives. A score_mod without its derivative is refused.
TEST(Oracle, ModsBackwardMatchesFiniteDifferences) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  fo::Problem p;
  p.batch = 2;
  p.seqlen_q = 9;
  p.seqlen_k = 11;
  p.heads_q = 4;
  p.heads_kv = 2;
  p.head_dim = 8;
  p.head_dim_v = 8;
  p.mask = fo::kMaskCausal;
  p.softcap = 2.5;
  p.scale = 0.9;
  const double cap = 1.7;
  p.mask_mod = [](int b, int h, int i, int j) { return (i + j + b + h) % 5 != 0 && !(i == 3 && b == 1); };
  p.score_mod = [cap](double s, int, int h, int i, int j) {
    return cap * std::tanh(s / cap) + 0.1 * h - 0.05 * (i - j);
  };
  p.score_mod_grad = [cap](double s, int, int, int, int) {
    const double t = std::tanh(s / cap);
    return 1.0 - t * t;
  };
  const size_t nq = size_t(p.batch) * p.seqlen_q * p.heads_q * p.head_dim;
  const size_t nk = size_t(p.batch) * p.seqlen_k * p.heads_kv * p.head_dim;
  std::vector<double> q(nq), k(nk), v(nk), dout(nq);
  for (auto* t : {&q, &k, &v, &dout})
    for (double& x : *t) x = dist(rng);
  const fo::DenseBackward g = fo::backward(p, q, k, v, dout);
  auto loss = [&]() {
    const fo::DenseForward f = fo::forward(p, q, k, v);
    double acc = 0.0;
    for (size_t n = 0; n < f.o.size(); ++n) acc += f.o[n] * dout[n];
    return acc;
  };
  auto numeric = [&](std::vector<double>& x) {
    std::vector<double> out;
    for (double& e : x) {
      const double saved = e;
      e = saved + 1e-5;
      const double plus = loss();
      e = saved - 1e-5;
      const double minus = loss();
      e = saved;
      out.push_back((plus - minus) / 2e-5);
    }
    return out;
  };
  EXPECT_LE(fo::relative_error(g.dq, numeric(q)), 1e-6) << "dq";
  EXPECT_LE(fo::relative_error(g.dk, numeric(k)), 1e-6) << "dk";
  EXPECT_LE(fo::relative_error(g.dv, numeric(v)), 1e-6) << "dv";
  const fo::DenseForward f = fo::forward(p, q, k, v);
  EXPECT_EQ(f.lse[size_t(1 * p.heads_q * p.seqlen_q + 0 * p.seqlen_q + 3)], -kInf) << "mask_mod hides row 3 of b 1";
  p.score_mod_grad = nullptr;
  EXPECT_THROW(fo::backward(p, q, k, v, dout), std::invalid_argument);
}

// ---- relative_error semantics ----------------------------------------------------------------------------------
TEST(Oracle, RelativeError) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<double> ref(64), got(64);
  for (double& x : ref) x = dist(rng);
  double diff2 = 0.0, ref2 = 0.0;
  for (size_t n = 0; n < ref.size(); ++n) {
    got[n] = ref[n] + 1e-3 * dist(rng);
    diff2 += (got[n] - ref[n]) * (got[n] - ref[n]);
    ref2 += ref[n] * ref[n];
  }
  EXPECT_NEAR(fo::relative_error(got, ref), std::sqrt(diff2 / ref2), 1e-15);
  EXPECT_EQ(fo::relative_error(ref, ref), 0.0);

  std::vector<float> gotf(got.begin(), got.end());
  EXPECT_NEAR(fo::relative_error(gotf, ref), std::sqrt(diff2 / ref2), 1e-6);

  std::vector<double> bad = ref;
  bad[7] = kNaN;
  EXPECT_EQ(fo::relative_error(bad, ref), kInf);
  EXPECT_EQ(fo::relative_error(ref, bad), kInf);
  EXPECT_EQ(fo::relative_error(bad, bad), kInf);  // NaN never passes, not even against itself
  bad[7] = kInf;
  EXPECT_EQ(fo::relative_error(bad, ref), kInf);
  std::vector<double> ref_inf = ref;
  ref_inf[7] = -kInf;
  EXPECT_EQ(fo::relative_error(bad, ref_inf), kInf);  // +inf vs -inf
  bad[7] = -kInf;
  EXPECT_EQ(fo::relative_error(bad, ref_inf), 0.0);  // same-signed infinities match (lse of masked rows)
  EXPECT_EQ(fo::relative_error(std::vector<double>(3, 0.0), std::vector<double>(3, 0.0)), 0.0);
  EXPECT_EQ(fo::relative_error(std::vector<double>{0.0, 1e-30}, std::vector<double>(2, 0.0)), kInf);
  EXPECT_EQ(fo::relative_error(std::vector<double>(3, 0.0), std::vector<double>(4, 0.0)), kInf);
  std::vector<float> badf = gotf;
  badf[3] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(fo::relative_error(badf, ref), kInf);
}

// ---- validation ------------------------------------------------------------------------------------------------
TEST(Oracle, RejectsInvalidProblems) {
  fo::Problem p;
  p.batch = 2, p.seqlen_q = 3, p.seqlen_k = 3, p.heads_q = 4, p.heads_kv = 2, p.head_dim = 8;
  EXPECT_NO_THROW(fo::validate(p));
  fo::Problem bad = p;
  bad.heads_kv = 3;
  EXPECT_THROW(fo::validate(bad), std::invalid_argument);
  bad = p;
  bad.cu_seqlens_q = {0, 2, 4};
  EXPECT_THROW(fo::validate(bad), std::invalid_argument);  // only one of the two
  bad.cu_seqlens_k = {0, 1};
  EXPECT_THROW(fo::validate(bad), std::invalid_argument);  // wrong size
  bad.cu_seqlens_k = {0, 3, 1};
  EXPECT_THROW(fo::validate(bad), std::invalid_argument);  // decreasing
  bad.cu_seqlens_k = {0, 1, 3};
  EXPECT_NO_THROW(fo::validate(bad));
  bad = p;
  bad.mask = 3;
  EXPECT_THROW(fo::validate(bad), std::invalid_argument);
  bad = p;
  bad.window_left = -2;
  EXPECT_THROW(fo::validate(bad), std::invalid_argument);
}

}  // namespace
