// test_tuner_bucket.cpp -- tuning keys: power-of-two buckets of (seqlen_q, seqlen_k, batch*heads_q); lengths never
// enter compile keys.
#include <gtest/gtest.h>

#include <random>

#include "generator/family.h"
#include "runtime/nvrtc_compiler.h"
#include "tuner/bucket.h"

using namespace fa;

namespace {

gen::ProblemDesc desc(int b, int sq, int sk, int hq) {
  gen::ProblemDesc p;
  p.dtype = gen::kBf16;
  p.batch = b;
  p.seqlen_q = sq;
  p.seqlen_k = sk;
  p.heads_q = hq;
  p.heads_kv = hq;
  p.head_dim = p.head_dim_v = 128;
  p.mask = gen::kMaskCausal;
  p.aligned16 = true;
  p.has_lse = true;
  return p;
}

}  // namespace

TEST(TunerBucket, Pow2Ceil) {
  std::mt19937 rng(std::random_device{}());
  for (int i = 0; i < 200; ++i) {
    const long long n = std::uniform_int_distribution<long long>(1, 1LL << 30)(rng);
    const long long p = tune::pow2_ceil(n);
    EXPECT_GE(p, n);
    EXPECT_LT(p / 2, n);
    EXPECT_EQ(p & (p - 1), 0) << p;
  }
  EXPECT_EQ(tune::pow2_ceil(0), 0);
  EXPECT_EQ(tune::pow2_ceil(1), 1);
}

TEST(TunerBucket, NearbyLengthsShareABucketFarOnesDoNot) {
  std::mt19937 rng(std::random_device{}());
  for (int i = 0; i < 100; ++i) {
    const int k = std::uniform_int_distribution<int>(6, 14)(rng);  // bucket 2^k
    const int lo = (1 << (k - 1)) + 1, hi = 1 << k;
    const int a = std::uniform_int_distribution<int>(lo, hi)(rng), b = std::uniform_int_distribution<int>(lo, hi)(rng);
    EXPECT_EQ(tune::shape_bucket(desc(2, a, a, 16)), tune::shape_bucket(desc(2, b, b, 16))) << a << " vs " << b;
    // 4x longer is always another bucket, for q and for k separately.
    EXPECT_NE(tune::shape_bucket(desc(2, a, a, 16)), tune::shape_bucket(desc(2, 4 * a, a, 16)));
    EXPECT_NE(tune::shape_bucket(desc(2, a, a, 16)), tune::shape_bucket(desc(2, a, 4 * a, 16)));
  }
  // batch*heads is bucketed as a product: 2x8 == 4x4, 2x8 != 8x8.
  EXPECT_EQ(tune::shape_bucket(desc(2, 512, 512, 8)), tune::shape_bucket(desc(4, 512, 512, 4)));
  EXPECT_NE(tune::shape_bucket(desc(2, 512, 512, 8)), tune::shape_bucket(desc(8, 512, 512, 8)));
  // Boundaries: 1024 and 1025 differ, 513 and 1024 agree.
  EXPECT_NE(tune::shape_bucket(desc(1, 1024, 1024, 1)), tune::shape_bucket(desc(1, 1025, 1025, 1)));
  EXPECT_EQ(tune::shape_bucket(desc(1, 513, 513, 1)), tune::shape_bucket(desc(1, 1024, 1024, 1)));
}

TEST(TunerBucket, TuningKeyIgnoresEvenKAndLseAndLengthsNeverEnterCompileKeys) {
  std::mt19937 rng(std::random_device{}());
  for (int arch : {80, 90}) {
    const gen::ProblemDesc p1 = desc(3, 1000, 2048, 16);
    const gen::Semantic s = gen::select_forward(p1, arch);
    const gen::Tunables t = s.family->defaults(s);
    for (int i = 0; i < 20; ++i) {
      const int m = std::uniform_int_distribution<int>(1, 64)(rng);
      const int sk = m * 128;  // a multiple of every block_n: the same even_k class as 2048
      const int sq = std::uniform_int_distribution<int>(1000, 20000)(rng);  // 4-5 digits: never part of a key
      const int b = std::uniform_int_distribution<int>(1, 64)(rng);
      const gen::ProblemDesc p2 = desc(b, sq, sk, 16);
      const gen::KernelConfig c1 = gen::finalize(s, t, p1), c2 = gen::finalize(gen::select_forward(p2, arch), t, p2);
      EXPECT_EQ(gen::canonical_key(c1), gen::canonical_key(c2));
      EXPECT_EQ(rt::compile_hash_for(c1), rt::compile_hash_for(c2));
      EXPECT_EQ(gen::canonical_key(c2).find(std::to_string(sq)), std::string::npos) << gen::canonical_key(c2);
    }
    gen::Semantic e = s;
    e.even_k = true;
    EXPECT_EQ(tune::tuning_semantic_key(e), tune::tuning_semantic_key(s));
    // fa-tune tunes with LSE; an inference forward without it finds the same entry (its compile key differs)
    gen::ProblemDesc no_lse = p1;
    no_lse.has_lse = false;
    const gen::Semantic n = gen::select_forward(no_lse, arch);
    ASSERT_EQ(n.family, s.family);
    EXPECT_FALSE(n.has_lse);
    EXPECT_EQ(tune::tuning_key(n, no_lse), tune::tuning_key(s, p1));
    EXPECT_NE(gen::canonical_key(gen::finalize(n, t, no_lse)), gen::canonical_key(gen::finalize(s, t, p1)));
    EXPECT_NE(tune::tuning_key(s, desc(1, 512, 512, 8)), tune::tuning_key(s, desc(1, 8192, 8192, 8)));
  }
}
