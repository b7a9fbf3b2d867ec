// test_forward_fp8.cpp -- the Hopper fp8 forward (fa_params version 3: q, k, v e4m3 / e5m2 with descale_q / k / v, o
// bf16 / fp16; fwd_wgmma's fp8 variant, issue 41) against the float64 oracle over the dequantized inputs:
// - KeyOrderIsExact: one-hot attention (Hadamard keys, each query equal to one of them: every other key's weight
//   below 1e-13) makes O exactly descale_v times the matched key's V row and the LSE the matched score, at every
//   valid tunable point (spread): any slip in the V transpose, the key order of P and V^T, the 128-key chunks of
//   V^T or the descales' indexing shows as a wrong row, bit for bit;
// - RandomProblemsWithinTheRoundingBound: random problems (both formats, both output dtypes, head dims 64 / 128 /
//   256 and 192 / 128, GQA, masks, ALiBi, softcap, varlen, LSE, N(0, 1) data and data with outliers, per-tensor and
//   per-(batch, KV head) descales, sharp and flat attention) within the bound P's rounding allows
//   (tests/gpu/fp8_forward_support.h), the worst error and its share of the rounding bound printed;
// - EveryValidTunablePoint: the fp8 tuning space, every valid point (spread, at most 40 per problem) of a few problems.
// Outputs are poisoned (NaN) before every run. Skips without an sm_90 GPU.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>

#include "generator/family.h"
#include "generator/problem.h"
#include "runtime/launch.h"
#include "runtime/validate.h"
#include "tests/gpu/fp8_forward_support.h"
#include "tests/oracle/fp8.h"

namespace fa::test {
namespace {

#define REQUIRE_HOPPER()                                                       \
  Gpu& g = gpu();                                                              \
  if (!g.ok()) GTEST_SKIP() << "no GPU: " << g.why;                            \
  if (g.ctx->arch != 90) GTEST_SKIP() << "the fp8 forward runs on sm_90 only"; \
  (void)g

int env_cases(int fallback) {
  const char* e = std::getenv("FA_TEST_CASES");
  return e != nullptr ? std::max(1, std::atoi(e)) : fallback;
}

// At most `most` of fwd_wgmma's valid points for c, evenly spread, the default among them.
std::vector<gen::Tunables> spread_points(const Fp8Case& c, size_t most) {
  Gpu& g = gpu();
  fa_params p;
  gen::ProblemDesc pd;
  std::vector<gen::Tunables> out;
  if (!rt::validate_forward(&c.params, &p, &pd).ok()) return out;
  const gen::Family& f = *gen::find_family("fwd_wgmma");
  const gen::Semantic s = gen::semantic_for(f, pd, g.ctx->arch);
  const std::vector<gen::Tunables> all = gen::all_valid_points(s, g.ctx->limits);
  const size_t step = std::max<size_t>(1, (all.size() + most - 1) / most);
  for (size_t i = 0; i < all.size(); i += step) out.push_back(all[i]);
  const gen::Tunables def = f.defaults(s);
  if (std::find(out.begin(), out.end(), def) == out.end()) out.push_back(def);
  // compile them all first (in parallel), the launches follow one by one
  parallel_for(out.size(), [&](size_t i) {
    for (const gen::KernelConfig& k : gen::make_plan(s, out[i], pd).steps) {
      std::shared_ptr<rt::Kernel> kk;
      rt::kernel_for(g.ctx, k, true, &kk);
    }
  });
  return out;
}

std::string points_key(const Fp8Case& c, const gen::Tunables& t) {
  fa_params p;
  gen::ProblemDesc pd;
  rt::validate_forward(&c.params, &p, &pd);
  const gen::Semantic s = gen::semantic_for(*gen::find_family("fwd_wgmma"), pd, gpu().ctx->arch);
  return gen::canonical_key(gen::finalize(s, t, pd));
}

// An fp8 code of N(0, 16^2) redrawn until its magnitude is at least 2^-6. The other keys' weights are not 0 in
// exact arithmetic: they reach O through the float32 rescaling of earlier key blocks (below 2^-40 of the sum of
// |V|), which rounding to bf16 / fp16 absorbs only beside a matched value of some size: a zero V[match] would give
// O = -4e-27, the true result, not 0.
uint8_t away_from_zero(std::mt19937_64& rng, std::normal_distribution<double>& nd, int dtype) {
  for (;;) {
    const uint8_t code = oracle::fp8_encode(nd(rng) * 16.0, dtype);
    if (std::fabs(oracle::fp8_decode(code, dtype)) >= 0x1p-6) return code;
  }
}

// One-hot attention: keys are the rows of a Sylvester Hadamard matrix of order hd (the largest power of two <= d, the
// other columns 0) and their negations, in a random order; each query is one of the keys. Scores are hd 2^e (match),
// 0 or -hd 2^e, so at softmax_scale 1 every other key weighs below exp(-32): O is descale_v times the matched V row,
// exactly (fp8 values times a power of two are bf16 / fp16 values; V's entries at least 2^-6 in magnitude, so the
// other keys' share rounds away), and the LSE is the matched score. The descales
// differ per (batch, kv head) (powers of two; q / k's product 1/2 or 1).
void hadamard_case(std::mt19937_64& rng, int d, int dv, int dtype, int o_dtype, bool varlen, Fp8Case* c,
                   std::vector<int>* match) {
  Fp8Spec s;
  s.dtype = dtype;
  s.o_dtype = o_dtype;
  s.batch = 2;
  s.hq = 4;
  s.hkv = 2;
  s.d = d;
  s.dv = dv;
  int hd = 1;
  while (hd * 2 <= d) hd *= 2;
  s.sq = 150;
  s.sk = 2 * hd;
  s.scale = 1.f;
  s.varlen = varlen;
  c->s = s;
  layout_fp8_case(rng, c);
  if (varlen) {  // every sequence holds all 2 hd keys (the queries pick among them)
    for (int b = 0; b <= s.batch; ++b) c->cu_k[size_t(b)] = b * 2 * hd;
    c->op.cu_seqlens_k = c->cu_k;
    c->tk = c->cu_k.back();
    c->k.assign(size_t(c->tk * s.hkv * d), 0);
    c->v.assign(size_t(c->tk * s.hkv * dv), 0);
  }
  const uint8_t one = oracle::fp8_encode(1.0, dtype), minus = oracle::fp8_encode(-1.0, dtype);
  std::normal_distribution<double> nd(0.0, 1.0);
  match->clear();
  for (int b = 0; b < s.batch; ++b) {
    const long long k0 = varlen ? c->cu_k[size_t(b)] : (long long)b * c->tk;
    const long long q0 = varlen ? c->cu_q[size_t(b)] : (long long)b * c->tq;
    const int sq = varlen ? c->cu_q[size_t(b) + 1] - c->cu_q[size_t(b)] : s.sq;
    for (int g = 0; g < s.hkv; ++g) {
      std::vector<int> order(size_t(2 * hd));
      for (int j = 0; j < 2 * hd; ++j) order[size_t(j)] = j;
      std::shuffle(order.begin(), order.end(), rng);  // key j holds Hadamard row order[j] % hd, negated past hd
      for (int j = 0; j < 2 * hd; ++j) {
        const int r = order[size_t(j)] % hd;
        const bool neg = order[size_t(j)] >= hd;
        for (int e = 0; e < hd; ++e) {
          const bool plus = (__builtin_popcount(unsigned(r & e)) % 2 == 0) != neg;
          c->k[size_t(((k0 + j) * s.hkv + g) * d + e)] = plus ? one : minus;
        }
        for (int e = 0; e < dv; ++e) c->v[size_t(((k0 + j) * s.hkv + g) * dv + e)] = away_from_zero(rng, nd, dtype);
      }
      for (int h = g * (s.hq / s.hkv); h < (g + 1) * (s.hq / s.hkv); ++h)
        for (int i = 0; i < sq; ++i) {
          const int j = std::uniform_int_distribution<int>(0, 2 * hd - 1)(rng);
          for (int e = 0; e < d; ++e)
            c->q[size_t(((q0 + i) * s.hq + h) * d + e)] = c->k[size_t(((k0 + j) * s.hkv + g) * d + e)];
          match->push_back(j);
        }
      const int a = (b + g) % 3 - 1;  // descale_q 2^a, descale_k 2^(-a) or 2^(-a-1): q.k = hd or hd / 2
      c->descale_q[size_t(b * s.hkv + g)] = std::ldexp(1.f, a);
      c->descale_k[size_t(b * s.hkv + g)] = std::ldexp(1.f, -a - ((b + 2 * g) % 2));
      c->descale_v[size_t(b * s.hkv + g)] = std::ldexp(1.f, -2 - (b * s.hkv + g));
    }
  }
  finish(c);
}

// "" when c's last output is exactly descale_v V[match] and its LSE the matched score.
std::string check_one_hot(Fp8Case& c, const std::vector<int>& match) {
  const Fp8Spec& s = c.s;
  const std::vector<double> o = fp8_output(c);
  std::vector<float> lse(c.lse_n);
  c.d_lse.download(lse.data(), c.lse_n * 4);
  size_t m = 0;
  for (int b = 0; b < s.batch; ++b) {
    const long long k0 = s.varlen ? c.cu_k[size_t(b)] : (long long)b * c.tk;
    const long long q0 = s.varlen ? c.cu_q[size_t(b)] : (long long)b * c.tq;
    const int sq = s.varlen ? c.cu_q[size_t(b) + 1] - c.cu_q[size_t(b)] : s.sq;
    for (int g = 0; g < s.hkv; ++g)
      for (int h = g * (s.hq / s.hkv); h < (g + 1) * (s.hq / s.hkv); ++h)
        for (int i = 0; i < sq; ++i, ++m) {
          const int j = match[m];
          const double dvs = c.descale_v[size_t(b * s.hkv + g)];
          for (int e = 0; e < s.dv; ++e) {
            const double want = dvs * oracle::fp8_decode(c.v[size_t(((k0 + j) * s.hkv + g) * s.dv + e)], s.dtype);
            const double got = o[size_t(((q0 + i) * s.hq + h) * s.dv + e)];
            if (got != want)
              return fmt::format("o[b {} h {} row {} col {}] = {}, expected {} (key {})", b, h, i, e, got, want, j);
          }
          int hd = 1;
          while (hd * 2 <= s.d) hd *= 2;
          const double score = hd * double(c.descale_q[size_t(b * s.hkv + g)]) * c.descale_k[size_t(b * s.hkv + g)];
          const float l = lse[size_t(oracle::lse_index(c.op, b, h, i))];
          if (!(std::fabs(l - score) <= 1e-5 * score))
            return fmt::format("lse[b {} h {} row {}] = {}, expected {}", b, h, i, l, score);
        }
  }
  return "";
}

TEST(GpuForwardFp8, KeyOrderIsExact) {
  REQUIRE_HOPPER();
  std::mt19937_64 rng(test_seed() + 4201);
  int runs = 0;
  const std::pair<int, int> dims[] = {{64, 64}, {128, 128}, {256, 256}, {192, 128}};
  int n = 0;
  for (const auto& [d, dv] : dims)
    for (int dtype : {FA_DTYPE_E4M3, FA_DTYPE_E5M2}) {
      const int o_dtype = (n % 2) ? FA_DTYPE_FP16 : FA_DTYPE_BF16;
      const bool varlen = (n++ % 3) == 2;
      Fp8Case c;
      std::vector<int> match;
      hadamard_case(rng, d, dv, dtype, o_dtype, varlen, &c, &match);
      const Fp8Result r0 = run_fp8(c);
      ASSERT_EQ(r0.failure, "") << describe(c.s);
      EXPECT_NE(r0.key.find("fwd_wgmma"), std::string::npos) << r0.key;
      EXPECT_EQ(check_one_hot(c, match), "") << describe(c.s) << " fa_run " << r0.key;
      for (const gen::Tunables& t : spread_points(c, dtype == FA_DTYPE_E4M3 ? 24 : 6)) {
        const Fp8Result r = run_fp8(c, &t);
        ASSERT_EQ(r.failure, "") << points_key(c, t);
        EXPECT_EQ(check_one_hot(c, match), "") << points_key(c, t);
        ++runs;
      }
    }
  std::printf("GPU SUMMARY fp8 one-hot: %d runs at tunable points exact\n", runs);
}

TEST(GpuForwardFp8, RandomProblemsWithinTheRoundingBound) {
  REQUIRE_HOPPER();
  std::mt19937_64 rng(test_seed() + 4202);
  const int n = env_cases(60);
  auto pick = [&](std::initializer_list<int> xs) {
    return *(xs.begin() + std::uniform_int_distribution<size_t>(0, xs.size() - 1)(rng));
  };
  std::map<std::string, std::pair<double, double>> worst;  // format -> (err_o, ratio)
  int failures = 0;
  for (int i = 0; i < n; ++i) {
    Fp8Spec s;
    s.dtype = i % 3 == 2 ? FA_DTYPE_E5M2 : FA_DTYPE_E4M3;
    s.o_dtype = pick({FA_DTYPE_BF16, FA_DTYPE_FP16});
    const int dims = pick({0, 1, 2, 3});
    s.d = dims == 0 ? 64 : dims == 1 ? 128 : dims == 2 ? 256 : 192;
    s.dv = dims == 3 ? 128 : s.d;
    s.hkv = pick({1, 2});
    s.hq = s.hkv * pick({1, 2, 4});
    s.batch = pick({1, 2, 3});
    s.sq = pick({1, 17, 64, 129, 300, 700});
    s.sk = pick({1, 17, 64, 129, 300, 700, 1000});
    while (double(s.batch) * s.hq * s.sq * s.sk * (s.d + s.dv) > 4e7) s.sk = std::max(1, s.sk / 2);
    s.mask = pick({0, 1, 2});
    if (s.mask == FA_MASK_SLIDING_WINDOW) {
      s.wl = pick({-1, 0, 40, 200});
      s.wr = pick({-1, 0, 7});
    }
    s.alibi = i % 4 == 1;
    s.softcap = i % 4 == 3 ? float(pick({5, 30})) : 0.f;
    s.varlen = i % 5 == 4;
    s.outliers = i % 2 == 1;
    s.per_head_descale = (i / 2) % 2 == 0;
    s.lse = i % 7 != 3;
    s.scale = i % 6 == 5 ? 4.f / std::sqrt(float(s.d)) : 0.f;  // sharp attention: a few keys carry each row
    Fp8Case c;
    make_fp8_case(rng, s, &c);
    const Fp8Result r = run_fp8(c);
    const std::string fmt_key = fmt::format("{} -> {}", s.dtype == FA_DTYPE_E4M3 ? "e4m3" : "e5m2",
                                            s.o_dtype == FA_DTYPE_BF16 ? "bf16" : "fp16");
    auto& w = worst[fmt_key];
    w.first = std::max(w.first, r.err_o);
    w.second = std::max(w.second, r.ratio);
    if (!r.failure.empty()) {
      ++failures;
      ADD_FAILURE() << "case " << i << " [" << describe(s) << "] " << r.key << ": " << r.failure;
    } else if (r.key.find("fwd_wgmma") == std::string::npos) {
      ++failures;
      ADD_FAILURE() << "case " << i << " ran " << r.key << ", expected fwd_wgmma";
    }
  }
  std::printf("GPU SUMMARY fp8 forward: %d random problems, %d failed;", n, failures);
  for (const auto& [k, w] : worst)
    std::printf(" %s worst |err| %.3g (%.2f of the P-rounding bound);", k.c_str(), w.first, w.second);
  std::printf("\n");
}

TEST(GpuForwardFp8, EveryValidTunablePoint) {
  REQUIRE_HOPPER();
  std::mt19937_64 rng(test_seed() + 4203);
  std::vector<Fp8Spec> specs(4);
  specs[0].d = specs[0].dv = 64;  // e4m3 -> bf16, causal, 257 x 257
  specs[0].mask = FA_MASK_CAUSAL;
  specs[0].sq = specs[0].sk = 257;
  specs[1].dtype = FA_DTYPE_E5M2;  // e5m2 -> fp16, d 128, window, varlen, ALiBi, softcap
  specs[1].o_dtype = FA_DTYPE_FP16;
  specs[1].mask = FA_MASK_SLIDING_WINDOW;
  specs[1].wl = 37;
  specs[1].wr = 5;
  specs[1].varlen = true;
  specs[1].batch = 3;
  specs[1].sq = 190;
  specs[1].sk = 200;
  specs[1].alibi = true;
  specs[1].softcap = 30.f;
  specs[2].d = specs[2].dv = 256;  // e4m3 -> bf16, d 256, 130 x 190, outliers
  specs[2].sq = 130;
  specs[2].sk = 190;
  specs[2].outliers = true;
  specs[3].d = 192;  // e4m3 -> fp16, 192 / 128, causal, MQA
  specs[3].dv = 128;
  specs[3].o_dtype = FA_DTYPE_FP16;
  specs[3].mask = FA_MASK_CAUSAL;
  specs[3].hkv = 1;
  specs[3].sq = 100;
  specs[3].sk = 333;
  int points = 0, failures = 0;
  for (const Fp8Spec& s : specs) {
    Fp8Case c;
    make_fp8_case(rng, s, &c);
    for (const gen::Tunables& t : spread_points(c, 40)) {
      const Fp8Result r = run_fp8(c, &t);
      ++points;
      if (!r.failure.empty()) {
        ++failures;
        ADD_FAILURE() << points_key(c, t) << " [" << describe(s) << "]: " << r.failure;
      }
    }
  }
  std::printf("GPU SUMMARY fp8 tunables: %d (problem, tunable point) pairs within the bound, %d failed\n", points,
              failures);
}

}  // namespace
}  // namespace fa::test
