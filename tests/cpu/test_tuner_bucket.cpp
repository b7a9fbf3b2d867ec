// test_tuner_bucket.cpp -- tuning keys: power-of-two buckets of (seqlen_q, seqlen_k, batch*heads_q); lengths never
// enter compile keys.
#include <gtest/gtest.h>

#include <random>
#include <set>
#include <string>
#include <vector>

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
  for (int arch : {80, 90, 100, 120}) {
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

// fa_prepare, the sibling prefetch and the background winner's swap compile the kernels of bucket_class_lengths:
// every length of the bucket must find its kernel among them. For every forward and backward family covering a
// fixed-length problem on sm_80, sm_90, sm_100 and sm_120 and every point of its space, the compile keys over the class
// lengths are those over every length of the bucket. (The bucket of 2048: fwd_wgmma's tiles of 80, 160 and 176 keys
// have multiples there, 2000 and 1920, that no power-of-two offset from the top reaches; a kernel compiled for one of
// those lengths' class was missing, so a random length compiled after fa_prepare.)
TEST(TunerBucket, ClassLengthsMeetEveryCompileKeyOfTheBucket) {
  for (int top : {64, 2048}) {
    std::vector<gen::ProblemDesc> all;
    for (int sk = top / 2 + 1; sk <= top; ++sk) all.push_back(desc(2, top, sk, 8));
    const std::vector<int> lengths = tune::bucket_class_lengths(all.back());
    for (int sk : lengths) {
      EXPECT_GT(sk, top / 2);
      EXPECT_LE(sk, top);
    }
    for (int arch : {80, 90, 100, 120}) {
      for (gen::Role role : {gen::Role::Forward, gen::Role::Backward}) {
        for (const gen::Family* f : gen::ranked_families(role, arch)) {
          gen::ProblemDesc p0 = all.back();
          p0.backward = role == gen::Role::Backward;
          p0.tma_ok = true;
          if (!gen::family_covers(*f, p0, arch, nullptr)) continue;
          const gen::Semantic s = gen::semantic_for(*f, p0, arch);
          const gen::DeviceLimits lim = gen::limits_for_arch(arch);
          int points = 0;
          for (const gen::Tunables& t : gen::valid_space(s, lim)) {
            std::set<std::string> from_classes, from_all;
            for (int sk : lengths) {
              gen::ProblemDesc q = p0;
              q.seqlen_k = sk;
              from_classes.insert(gen::canonical_key(gen::finalize(s, t, q)));
            }
            for (const gen::ProblemDesc& a : all) {
              gen::ProblemDesc q = p0;
              q.seqlen_k = a.seqlen_k;
              from_all.insert(gen::canonical_key(gen::finalize(s, t, q)));
            }
            EXPECT_EQ(from_classes, from_all)
                << f->name << " sm_" << arch << " " << gen::tunables_key(s, t) << " bucket " << top;
            ++points;
          }
          EXPECT_GT(points, 0) << f->name;
        }
      }
    }
  }
}
