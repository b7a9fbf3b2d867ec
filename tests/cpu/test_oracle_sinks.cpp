// test_oracle_sinks.cpp -- the float64 oracle with attention sinks (Problem::sinks) against the formula written out
// directly: each row's softmax over its visible keys plus one column of logit sink_h without a value, o and lse;
// a fully masked row gives o = 0 and lse = sink_h; a sink of -inf is no sink (bitwise); the backward's dq, dk, dv
// and dsinks against central finite differences of the loss sum(o * dout), dsinks also against its closed form
// -sum_{b,i} exp(sink_h - lse_i) D_i.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tests/oracle/oracle.h"

namespace {

namespace fo = fa::oracle;
constexpr double kInf = std::numeric_limits<double>::infinity();

uint64_t fresh_seed() {
  if (const char* e = std::getenv("FA_TEST_SEED")) return std::strtoull(e, nullptr, 10);
  return std::random_device{}();
}

struct Data {
  fo::Problem p;
  std::vector<double> q, k, v, dout, sinks;
};

// batch 2 fixed length (sq 5, sk 7) or varlen (lengths 4/6 and 3/0: a sequence without keys), GQA 4 / 2, the
// mask given; sinks: a typical value, a large one (dominates its rows), -inf and a negative one.
Data make(std::mt19937_64& rng, int mask, bool varlen) {
  Data x;
  fo::Problem& p = x.p;
  p.batch = 2;
  p.heads_q = 4;
  p.heads_kv = 2;
  p.head_dim = 8;
  p.head_dim_v = 6;
  p.mask = mask;
  if (mask == fo::kMaskSlidingWindow) {
    p.window_left = 1;
    p.window_right = 0;
  }
  if (varlen) {
    p.cu_seqlens_q = {0, 4, 7};
    p.cu_seqlens_k = {0, 6, 6};
  } else {
    p.seqlen_q = 5;
    p.seqlen_k = 7;
  }
  p.scale = 0.7;
  std::uniform_real_distribution<double> u(-1.5, 1.5);
  auto fill = [&](std::vector<double>& t, long long n) {
    t.resize(static_cast<size_t>(n));
    for (double& e : t) e = u(rng);
  };
  fill(x.q, fo::tokens_q(p) * p.heads_q * p.head_dim);
  fill(x.k, fo::tokens_k(p) * p.heads_kv * p.head_dim);
  fill(x.v, fo::tokens_k(p) * p.heads_kv * p.head_dim_v);
  fill(x.dout, fo::tokens_q(p) * p.heads_q * p.head_dim_v);
  x.sinks = {u(rng), 20.0 + u(rng), -kInf, -3.0 + u(rng)};
  p.sinks = x.sinks.data();
  return x;
}

// o and lse of the dense problem by the formula: per row, the exponentials of the visible scores and of the sink,
// normalized by their sum.
fo::DenseForward direct(const Data& x) {
  const fo::Problem& p = x.p;
  const int dv = p.head_dim_v, group = p.heads_q / p.heads_kv;
  fo::DenseForward out;
  out.o.assign(static_cast<size_t>(fo::tokens_q(p) * p.heads_q * dv), 0.0);
  out.lse.assign(static_cast<size_t>(fo::lse_size(p)), 0.0);
  for (int b = 0; b < p.batch; ++b) {
    const int sq = fo::seqlen_q_of(p, b), sk = fo::seqlen_k_of(p, b);
    const long long tq0 = fo::is_varlen(p) ? p.cu_seqlens_q[size_t(b)] : (long long)b * sq;
    const long long tk0 = fo::is_varlen(p) ? p.cu_seqlens_k[size_t(b)] : (long long)b * sk;
    for (int h = 0; h < p.heads_q; ++h)
      for (int i = 0; i < sq; ++i) {
        std::vector<double> s;
        std::vector<int> js;
        for (int j = 0; j < sk; ++j) {
          if (!fo::key_visible(p, i, j, sq, sk)) continue;
          double dot = 0.0;
          for (int d = 0; d < p.head_dim; ++d)
            dot += x.q[size_t(((tq0 + i) * p.heads_q + h) * p.head_dim + d)] *
                   x.k[size_t(((tk0 + j) * p.heads_kv + h / group) * p.head_dim + d)];
          s.push_back(p.scale * dot);
          js.push_back(j);
        }
        double mx = x.sinks[size_t(h)];
        for (double e : s) mx = std::max(mx, e);
        if (mx == -kInf) {  // no visible key and no sink (head 2's -inf): o = 0, lse = -inf
          out.lse[size_t(fo::lse_index(p, b, h, i))] = -kInf;
          continue;
        }
        double den = std::exp(x.sinks[size_t(h)] - mx);
        for (double e : s) den += std::exp(e - mx);
        out.lse[size_t(fo::lse_index(p, b, h, i))] = mx + std::log(den);
        for (size_t n = 0; n < s.size(); ++n)
          for (int d = 0; d < dv; ++d)
            out.o[size_t(((tq0 + i) * p.heads_q + h) * dv + d)] +=
                std::exp(s[n] - mx) / den * x.v[size_t(((tk0 + js[n]) * p.heads_kv + h / group) * dv + d)];
      }
  }
  return out;
}

double loss(const Data& x) {
  const fo::DenseForward f = fo::forward(x.p, x.q, x.k, x.v);
  double acc = 0.0;
  for (size_t n = 0; n < f.o.size(); ++n) acc += f.o[n] * x.dout[n];
  return acc;
}

std::vector<double> numeric(Data& x, std::vector<double>& t) {
  std::vector<double> out;
  for (double& e : t) {
    if (std::isinf(e)) {  // a -inf sink: no column, no gradient
      out.push_back(0.0);
      continue;
    }
    const double saved = e;
    e = saved + 1e-5;
    const double plus = loss(x);
    e = saved - 1e-5;
    const double minus = loss(x);
    e = saved;
    out.push_back((plus - minus) / 2e-5);
  }
  return out;
}

struct Shape {
  int mask;
  bool varlen;
};
class OracleSinks : public ::testing::TestWithParam<Shape> {};

TEST_P(OracleSinks, ForwardMatchesTheFormula) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed) + " (replay: FA_TEST_SEED)");
  std::mt19937_64 rng(seed);
  Data x = make(rng, GetParam().mask, GetParam().varlen);
  const fo::DenseForward got = fo::forward(x.p, x.q, x.k, x.v), want = direct(x);
  EXPECT_LE(fo::relative_error(got.o, want.o), 1e-13);
  EXPECT_LE(fo::relative_error(got.lse, want.lse), 1e-13);
  // Head 1's sink (about 20) dominates: its rows' outputs are small, their LSE close to the sink.
  for (int b = 0; b < x.p.batch; ++b)
    for (int i = 0; i < fo::seqlen_q_of(x.p, b); ++i)
      EXPECT_NEAR(got.lse[size_t(fo::lse_index(x.p, b, 1, i))], x.sinks[1], 1e-4);
  // Head 2's sink is -inf: exactly the problem without sinks there.
  fo::Problem none = x.p;
  none.sinks = nullptr;
  const fo::DenseForward plain = fo::forward(none, x.q, x.k, x.v);
  for (int b = 0; b < x.p.batch; ++b)
    for (int i = 0; i < fo::seqlen_q_of(x.p, b); ++i) {
      const size_t r = size_t(fo::lse_index(x.p, b, 2, i));
      EXPECT_EQ(got.lse[r], plain.lse[r]);
    }
}

TEST_P(OracleSinks, BackwardMatchesFiniteDifferences) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed) + " (replay: FA_TEST_SEED)");
  std::mt19937_64 rng(seed);
  Data x = make(rng, GetParam().mask, GetParam().varlen);
  const fo::DenseBackward g = fo::backward(x.p, x.q, x.k, x.v, x.dout);
  ASSERT_EQ(g.dsinks.size(), size_t(x.p.heads_q));
  EXPECT_LE(fo::relative_error(g.dq, numeric(x, x.q)), 1e-6) << "dq";
  EXPECT_LE(fo::relative_error(g.dk, numeric(x, x.k)), 1e-6) << "dk";
  EXPECT_LE(fo::relative_error(g.dv, numeric(x, x.v)), 1e-6) << "dv";
  EXPECT_LE(fo::relative_error(g.dsinks, numeric(x, x.sinks)), 1e-6) << "dsinks";
  EXPECT_EQ(g.dsinks[2], 0.0) << "a -inf sink has no gradient";
  // The closed form: -sum_{b,i} exp(sink_h - lse_i) * dot(dout_i, o_i).
  const fo::DenseForward f = fo::forward(x.p, x.q, x.k, x.v);
  const int dv = x.p.head_dim_v;
  std::vector<double> closed(size_t(x.p.heads_q), 0.0);
  for (int b = 0; b < x.p.batch; ++b) {
    const long long t0 = fo::is_varlen(x.p) ? x.p.cu_seqlens_q[size_t(b)] : (long long)b * x.p.seqlen_q;
    for (int h = 0; h < x.p.heads_q; ++h)
      for (int i = 0; i < fo::seqlen_q_of(x.p, b); ++i) {
        double dd = 0.0;
        for (int d = 0; d < dv; ++d) {
          const size_t at = size_t(((t0 + i) * x.p.heads_q + h) * dv + d);
          dd += x.dout[at] * f.o[at];
        }
        const double lse = f.lse[size_t(fo::lse_index(x.p, b, h, i))];
        if (lse == -kInf) continue;  // no key and no sink: no term
        closed[size_t(h)] -= std::exp(x.sinks[size_t(h)] - lse) * dd;
      }
  }
  EXPECT_LE(fo::relative_error(g.dsinks, closed), 1e-12);
}

INSTANTIATE_TEST_SUITE_P(Shapes, OracleSinks,
                         ::testing::Values(Shape{fo::kMaskNone, false}, Shape{fo::kMaskCausal, false},
                                           Shape{fo::kMaskSlidingWindow, false}, Shape{fo::kMaskCausal, true}),
                         [](const ::testing::TestParamInfo<Shape>& tp) {
                           return std::string(tp.param.mask == 0   ? "none"
                                              : tp.param.mask == 1 ? "causal"
                                                                   : "window") +
                                  (tp.param.varlen ? "_varlen" : "");
                         });

// Rows that see no key (a sequence without keys, a causal row above the diagonal) give o = 0 and lse = the sink.
TEST(OracleSinks, FullyMaskedRowsGiveTheSink) {
  std::mt19937_64 rng(7);
  Data x = make(rng, fo::kMaskCausal, true);  // sequence 1 has 3 queries and no keys
  const fo::DenseForward f = fo::forward(x.p, x.q, x.k, x.v);
  const int dv = x.p.head_dim_v;
  for (int h = 0; h < x.p.heads_q; ++h)
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(f.lse[size_t(fo::lse_index(x.p, 1, h, i))], x.sinks[size_t(h)]) << "h " << h << " i " << i;
      for (int d = 0; d < dv; ++d) EXPECT_EQ(f.o[size_t(((4 + i) * x.p.heads_q + h) * dv + d)], 0.0);
    }
  const fo::DenseBackward g = fo::backward(x.p, x.q, x.k, x.v, x.dout);
  for (double e : g.dsinks) EXPECT_TRUE(std::isfinite(e));
  fo::Problem none = x.p;
  none.sinks = nullptr;
  std::vector<double> dummy(size_t(x.p.heads_q));
  EXPECT_THROW(fo::backward(none, {x.q.data(), 0, 4 * 8, 8}, {x.k.data(), 0, 2 * 8, 8}, {x.v.data(), 0, 2 * 6, 6},
                            {x.dout.data(), 0, 4 * 6, 6}, {nullptr, 0, 0, 0}, {nullptr, 0, 0, 0}, {nullptr, 0, 0, 0},
                            dummy.data()),
               std::invalid_argument);
}

}  // namespace
