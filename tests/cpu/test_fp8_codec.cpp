// test_fp8_codec.cpp -- the oracle's fp8 codecs (tests/oracle/fp8.h) against the OCP FP8 specification: every one of
// the 256 codes of each format decoded (values from the spec's definition and its table entries, NaN and infinity
// codes, symmetry, order), the encoder's round to nearest even at every midpoint, its saturating and torch-like
// overflow, and the oracle over fp8 inputs (descales factor out of the scores and the output as fa.h states).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "tests/oracle/fp8.h"

namespace {

using fa::oracle::fp8_decode;
using fa::oracle::fp8_encode;
using fa::oracle::Fp8Overflow;
using fa::oracle::kFp8E4m3;
using fa::oracle::kFp8E5m2;

// The spec's value of a code, built from its fields by powers of two (mbits mantissa bits, bias; the top exponent of
// e4m3 holds finite values except mantissa 111; e5m2's top exponent is inf / NaN).
double spec_value(uint8_t code, int mbits, int bias) {
  const int e = (code & 0x7F) >> mbits, m = code & ((1 << mbits) - 1);
  double mag = 0.0;
  if (e == 0) {
    mag = m;  // m * 2^(1 - bias - mbits)
    for (int i = 0; i < bias - 1 + mbits; ++i) mag /= 2.0;
  } else {
    mag = (1 << mbits) + m;  // (2^mbits + m) * 2^(e - bias - mbits)
    for (int i = 0; i < e - bias - mbits; ++i) mag *= 2.0;
    for (int i = 0; i > e - bias - mbits; --i) mag /= 2.0;
  }
  return (code & 0x80) ? -mag : mag;
}

TEST(Fp8Codec, E4m3EveryCode) {
  int nans = 0;
  for (int c = 0; c < 256; ++c) {
    const auto code = static_cast<uint8_t>(c);
    const double v = fp8_decode(code, kFp8E4m3);
    EXPECT_FALSE(std::isinf(v)) << "e4m3fn has no infinities: code " << c;
    if ((c & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(v)) << c;
      ++nans;
      continue;
    }
    EXPECT_EQ(v, spec_value(code, 3, 7)) << "code " << c;
    EXPECT_EQ(std::signbit(v), (c & 0x80) != 0) << c;
    if (c > 0 && c < 0x7F) { EXPECT_GT(v, fp8_decode(static_cast<uint8_t>(c - 1), kFp8E4m3)) << "increasing at " << c; }
  }
  EXPECT_EQ(nans, 2);  // 0x7F and 0xFF only
  // Table entries of the spec (OCP FP8 v1.0, E4M3).
  EXPECT_EQ(fp8_decode(0x7E, kFp8E4m3), 448.0);
  EXPECT_EQ(fp8_decode(0xFE, kFp8E4m3), -448.0);
  EXPECT_EQ(fp8_decode(0x08, kFp8E4m3), 0.015625);     // 2^-6, smallest normal
  EXPECT_EQ(fp8_decode(0x07, kFp8E4m3), 0.013671875);  // 0.875 x 2^-6, largest subnormal
  EXPECT_EQ(fp8_decode(0x01, kFp8E4m3), 0.001953125);  // 2^-9, smallest subnormal
  EXPECT_EQ(fp8_decode(0x38, kFp8E4m3), 1.0);
  EXPECT_EQ(fp8_decode(0x77, kFp8E4m3), 240.0);
  EXPECT_EQ(fp8_decode(0x00, kFp8E4m3), 0.0);
  EXPECT_TRUE(std::signbit(fp8_decode(0x80, kFp8E4m3)));
}

TEST(Fp8Codec, E5m2EveryCode) {
  int nans = 0, infs = 0;
  for (int c = 0; c < 256; ++c) {
    const auto code = static_cast<uint8_t>(c);
    const double v = fp8_decode(code, kFp8E5m2);
    if ((c & 0x7C) == 0x7C) {  // exponent 11111
      if ((c & 3) == 0) {
        EXPECT_EQ(v, (c & 0x80) ? -INFINITY : INFINITY) << c;
        ++infs;
      } else {
        EXPECT_TRUE(std::isnan(v)) << c;
        ++nans;
      }
      continue;
    }
    EXPECT_EQ(v, spec_value(code, 2, 15)) << "code " << c;
    if (c > 0 && c < 0x7C) { EXPECT_GT(v, fp8_decode(static_cast<uint8_t>(c - 1), kFp8E5m2)) << "increasing at " << c; }
  }
  EXPECT_EQ(nans, 6);
  EXPECT_EQ(infs, 2);
  EXPECT_EQ(fp8_decode(0x7B, kFp8E5m2), 57344.0);
  EXPECT_EQ(fp8_decode(0x04, kFp8E5m2), 6.103515625e-05);    // 2^-14, smallest normal
  EXPECT_EQ(fp8_decode(0x01, kFp8E5m2), 1.52587890625e-05);  // 2^-16, smallest subnormal
  EXPECT_EQ(fp8_decode(0x3C, kFp8E5m2), 1.0);
  EXPECT_EQ(fp8_decode(0xC0, kFp8E5m2), -2.0);
}

TEST(Fp8Codec, EncoderRoundTripsAndRoundsToNearestEven) {
  for (int format : {kFp8E4m3, kFp8E5m2}) {
    const uint8_t last = format == kFp8E4m3 ? 0x7E : 0x7B;
    for (int c = 0; c <= 0xFF; ++c) {
      const auto code = static_cast<uint8_t>(c);
      const double v = fp8_decode(code, format);
      if (std::isnan(v)) {
        EXPECT_EQ(fp8_encode(v, format) & 0x7F, 0x7F) << "NaN stays NaN";
        continue;
      }
      if (std::isinf(v)) continue;
      EXPECT_EQ(fp8_encode(v, format), code) << "format " << format << " code " << c;
      if ((c & 0x7F) >= last) continue;
      // Between this code and the next one up in magnitude: the midpoint goes to the even code, a hair off it to
      // the nearer one.
      const auto up = static_cast<uint8_t>(c + 1);
      const double w = fp8_decode(up, format);
      const double mid = (v + w) / 2;  // exact in double
      const uint8_t even = (c & 1) == 0 ? code : up;
      EXPECT_EQ(fp8_encode(mid, format), even) << "format " << format << " midpoint above code " << c;
      EXPECT_EQ(fp8_encode(std::nextafter(mid, v), format), code) << c;
      EXPECT_EQ(fp8_encode(std::nextafter(mid, w), format), up) << c;
    }
  }
  EXPECT_EQ(fp8_encode(1e-30, kFp8E4m3), 0x00);
  EXPECT_EQ(fp8_encode(-1e-30, kFp8E4m3), 0x80);                    // the sign of a zero result kept
  EXPECT_EQ(fp8_encode(std::ldexp(1.0, -10), kFp8E4m3), 0x00);      // half the smallest subnormal: ties to 0
  EXPECT_EQ(fp8_encode(3 * std::ldexp(1.0, -10), kFp8E4m3), 0x02);  // 1.5 quanta: ties to 2
}

TEST(Fp8Codec, OverflowSaturatesOrFollowsTorch) {
  // e4m3: 448 is the largest; 464 is the midpoint to the (absent) 480: ties to 448; past it the value has no code.
  for (double x : {448.0, 450.0, 464.0}) {
    EXPECT_EQ(fp8_encode(x, kFp8E4m3, Fp8Overflow::kSaturate), 0x7E) << x;
    EXPECT_EQ(fp8_encode(x, kFp8E4m3, Fp8Overflow::kTorch), 0x7E) << x;
  }
  for (double x : {464.5, 479.0, 480.0, 1e6, double(INFINITY)}) {
    EXPECT_EQ(fp8_encode(x, kFp8E4m3, Fp8Overflow::kSaturate), 0x7E) << x;
    EXPECT_EQ(fp8_encode(-x, kFp8E4m3, Fp8Overflow::kSaturate), 0xFE) << x;
    EXPECT_EQ(fp8_encode(x, kFp8E4m3, Fp8Overflow::kTorch), 0x7F) << "torch's cast gives NaN: " << x;
    EXPECT_EQ(fp8_encode(-x, kFp8E4m3, Fp8Overflow::kTorch), 0xFF) << x;
  }
  // e5m2: 57344 the largest, 61440 the midpoint to 65536 (inf's place): ties away to the even (inf) code.
  EXPECT_EQ(fp8_encode(61439.0, kFp8E5m2, Fp8Overflow::kTorch), 0x7B);
  EXPECT_EQ(fp8_encode(61440.0, kFp8E5m2, Fp8Overflow::kTorch), 0x7C);
  EXPECT_EQ(fp8_encode(-1e9, kFp8E5m2, Fp8Overflow::kTorch), 0xFC);
  EXPECT_EQ(fp8_encode(double(INFINITY), kFp8E5m2, Fp8Overflow::kTorch), 0x7C);
  EXPECT_EQ(fp8_encode(61440.0, kFp8E5m2, Fp8Overflow::kSaturate), 0x7B);
  EXPECT_EQ(fp8_encode(-double(INFINITY), kFp8E5m2, Fp8Overflow::kSaturate), 0xFB);
  EXPECT_EQ(fp8_encode(NAN, kFp8E5m2) & 0x7F, 0x7F);
  EXPECT_THROW(fp8_encode(1.0, 3), std::invalid_argument);
  EXPECT_THROW(fp8_decode(0, 1), std::invalid_argument);
}

// A problem of batch 2, 3 queries, 7 keys, 4 query heads over 2 KV heads, d 16, dense BSHD fp8 codes.
struct Fp8Problem {
  fa::oracle::Problem p;
  std::vector<uint8_t> q, k, v;
  Fp8Problem() {
    p.batch = 2;
    p.seqlen_q = 3;
    p.seqlen_k = 7;
    p.heads_q = 4;
    p.heads_kv = 2;
    p.head_dim = 16;
    std::mt19937 rng(7);
    std::normal_distribution<double> n01(0.0, 1.0);
    auto fill = [&](std::vector<uint8_t>& t, size_t n, int format) {
      t.resize(n);
      for (auto& c : t) c = fp8_encode(n01(rng), format);
    };
    fill(q, 2 * 3 * 4 * 16, kFp8E4m3);
    fill(k, 2 * 7 * 2 * 16, kFp8E4m3);
    fill(v, 2 * 7 * 2 * 16, kFp8E5m2);
  }
  fa::oracle::Fp8Tensor4 tq(int format = kFp8E4m3) const { return {q.data(), 3 * 4 * 16, 4 * 16, 16, format}; }
  fa::oracle::Fp8Tensor4 tk() const { return {k.data(), 7 * 2 * 16, 2 * 16, 16, kFp8E4m3}; }
  fa::oracle::Fp8Tensor4 tv() const { return {v.data(), 7 * 2 * 16, 2 * 16, 16, kFp8E5m2}; }
  fa::oracle::DenseForward run(const fa::oracle::Fp8Tensor4& a, const fa::oracle::Fp8Tensor4& b,
                               const fa::oracle::Fp8Tensor4& c, const fa::oracle::Problem& pp) const {
    fa::oracle::DenseForward out;
    out.o.assign(2 * 3 * 4 * 16, 0.0);
    out.lse.assign(fa::oracle::lse_size(pp), 0.0);
    fa::oracle::forward_fp8(pp, a, b, c, {out.o.data(), 3 * 4 * 16, 4 * 16, 16}, out.lse.data());
    return out;
  }
};

TEST(Fp8Oracle, DescalesFactorOutOfScoresAndOutput) {
  Fp8Problem f;
  const fa::oracle::DenseForward base = f.run(f.tq(), f.tk(), f.tv(), f.p);
  for (double x : base.o) ASSERT_TRUE(std::isfinite(x));
  // descale_k = 2 for every (b, g): the scores double, i.e. softmax_scale x 2 on the unscaled codes.
  const double two[4] = {2.0, 2.0, 2.0, 2.0};
  fa::oracle::Fp8Tensor4 k2 = f.tk();
  k2.scale = two;
  k2.scale_sb = 2;
  k2.scale_sh = 1;
  fa::oracle::Problem doubled = f.p;
  doubled.scale = 2.0 / 4.0;  // 2 / sqrt(16)
  const fa::oracle::DenseForward a = f.run(f.tq(), k2, f.tv(), f.p);
  const fa::oracle::DenseForward b = f.run(f.tq(), f.tk(), f.tv(), doubled);
  EXPECT_LT(fa::oracle::relative_error(a.o, b.o), 1e-15);
  EXPECT_LT(fa::oracle::relative_error(a.lse, b.lse), 1e-15);
  // Per-(batch, kv head) descale_v: each head's output scales by its own factor, the LSE stays.
  const double dv[4] = {0.5, 3.0, 0.25, 8.0};  // [b][g]
  fa::oracle::Fp8Tensor4 v2 = f.tv();
  v2.scale = dv;
  v2.scale_sb = 2;
  v2.scale_sh = 1;
  const fa::oracle::DenseForward c = f.run(f.tq(), f.tk(), v2, f.p);
  EXPECT_EQ(c.lse, base.lse);
  for (int bi = 0; bi < 2; ++bi)
    for (int i = 0; i < 3; ++i)
      for (int h = 0; h < 4; ++h)
        for (int d = 0; d < 16; ++d) {
          const size_t at = static_cast<size_t>(((bi * 3 + i) * 4 + h) * 16 + d);
          const double want = base.o[at] * dv[bi * 2 + h / 2];
          EXPECT_NEAR(c.o[at], want, 1e-14 * std::fabs(want)) << bi << " " << i << " " << h << " " << d;
        }
  // descale_q per (b, kv head) on the query side: head h reads the factor of its KV head h / 2.
  const double dq[4] = {1.0, 4.0, 1.0, 1.0};
  fa::oracle::Fp8Tensor4 q2 = f.tq();
  q2.scale = dq;
  q2.scale_sb = 2;
  q2.scale_sh = 1;
  const fa::oracle::DenseForward e = f.run(q2, f.tk(), f.tv(), f.p);
  EXPECT_NE(e.o, base.o);
  EXPECT_EQ(e.lse[0], base.lse[0]) << "batch 0, head 0 reads descale 1";
}

TEST(Fp8Oracle, CacheOverSixteenBitQueries) {
  Fp8Problem f;
  // The query's doubles are the dequantized q codes: the cache form must equal the all-fp8 form.
  const std::vector<double> qd = fa::oracle::fp8_dequantize(f.p, f.tq(), true, 4, 16);
  const double ks[2] = {0.5, 2.0};
  fa::oracle::Fp8Tensor4 k = f.tk(), v = f.tv();
  k.scale = ks;
  k.scale_sh = 1;  // vLLM: per KV head, scale_sb 0
  v.scale = ks;
  std::vector<double> o(qd.size()), lse(fa::oracle::lse_size(f.p));
  fa::oracle::forward_fp8_cache(f.p, {qd.data(), 3 * 4 * 16, 4 * 16, 16}, k, v, {o.data(), 3 * 4 * 16, 4 * 16, 16},
                                lse.data());
  const fa::oracle::DenseForward ref = f.run(f.tq(), k, v, f.p);
  EXPECT_EQ(o, ref.o);
  EXPECT_EQ(lse, ref.lse);
}

}  // namespace
