// test_decode_fp8.cpp -- decode from an fp8 KV cache (fa_params version 3: kv_dtype e4m3 / e5m2 with k_scale /
// v_scale; the fwd_split family, issue 41) against the float64 oracle over the dequantized cache, on fresh random
// problems: both formats under bf16 and fp16 queries, contiguous and paged (16 / 64) caches, random used lengths (0, 1
// and the capacity included), GQA, split and unsplit (forced and automatic), per-tensor and per-head scales, masks and
// features; outputs poisoned (NaN) before every run, and the cache past the used lengths (and pages outside the
// table) NaN codes. Paged runs match the contiguous run bit for bit at the same split count.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>

#include "tests/gpu/decode_support.h"

namespace fa::test {
namespace {

#define REQUIRE_GPU() \
  Gpu& g = gpu();     \
  if (!g.ok()) GTEST_SKIP() << "no GPU: " << g.why

const char* kv_tag(int kv) { return kv == FA_DTYPE_E4M3 ? ".kv_e4m3" : ".kv_e5m2"; }

TEST(GpuDecodeFp8, PagedAndContiguousMatchTheOracleAtEverySplit) {
  REQUIRE_GPU();
  std::mt19937_64 rng(test_seed() + 4101);
  for (int kv : {FA_DTYPE_E4M3, FA_DTYPE_E5M2})
    for (int dtype : {FA_DTYPE_BF16, FA_DTYPE_FP16}) {
      DecodeSpec s;
      s.dtype = dtype;
      s.kv_dtype = kv;
      s.per_head_scale = dtype == FA_DTYPE_BF16;
      s.batch = 4;
      s.cap = 1000;
      s.hq = 32;
      s.hkv = 8;  // GQA 32 / 8, d 128: the decode shape of the benchmark
      DecodeData x;
      make_data(rng, s, &x);
      const std::vector<int> used = random_used(rng, s.batch, s.cap);
      std::vector<double> o_ref, lse_ref;
      oracle_of(x, used, {}, &o_ref, &lse_ref);
      for (int splits : {1, 3, 0}) {
        Cache flat;
        make_contiguous(x, used, &flat);
        set_used(&flat, used);
        const Out base = run(x, params_of(x, flat, true, splits));
        ASSERT_EQ(compare(x, base, o_ref, lse_ref), "") << describe(s) << " contiguous, splits " << splits;
        EXPECT_NE(base.key.find("fwd_split"), std::string::npos) << base.key;
        EXPECT_NE(base.key.find(kv_tag(kv)), std::string::npos) << base.key;
        for (int ps : {16, 64}) {
          Cache paged;
          make_paged(rng, x, used, ps, &paged);
          set_used(&paged, used);
          const Out r = run(x, params_of(x, paged, true, splits));
          ASSERT_TRUE(r.failure.empty()) << r.failure;
          EXPECT_TRUE(r.o_bytes == base.o_bytes && r.lse_bytes == base.lse_bytes)
              << describe(s) << " page size " << ps << " splits " << splits << ": paged differs from contiguous ("
              << compare(x, r, o_ref, lse_ref) << ")";
        }
      }
    }
}

TEST(GpuDecodeFp8, RandomUsedLengthsFeaturesAndShapes) {
  REQUIRE_GPU();
  std::mt19937_64 rng(test_seed() + 4102);
  const int n = case_count(48);
  Pick pick{rng};
  int failures = 0;
  for (int c = 0; c < n; ++c) {
    DecodeSpec s;
    s.dtype = pick({FA_DTYPE_BF16, FA_DTYPE_FP16});
    s.kv_dtype = pick({FA_DTYPE_E4M3, FA_DTYPE_E5M2});
    s.per_head_scale = c % 2 == 0;
    const int group = pick({1, 4, 8});
    s.hkv = pick({1, 2, 8});
    s.hq = s.hkv * group;
    const bool paged = c % 3 != 0;
    s.cap = pick({1, 17, 200, 900});
    random_features(pick, c, paged, &s);
    const int page_size = paged ? pick({16, 64}) : 0;
    const int splits = pick({0, 1, 3});
    std::string key;
    const std::string err = run_random_case(rng, s, page_size, splits, &key);
    if (!err.empty()) {
      ++failures;
      ADD_FAILURE() << "case " << c << " " << describe(s) << (paged ? fmt::format(" paged {}", page_size) : "")
                    << " splits " << splits << ": " << err;
    } else {
      EXPECT_NE(key.find(kv_tag(s.kv_dtype)), std::string::npos) << key;
    }
  }
  std::printf("GPU SUMMARY decode fp8: %d random fp8-cache problems, %d failed\n", n, failures);
}

// The scales are read on the device, per KV head: doubling one head's k_scale changes only that head's rows, and a
// v_scale of 2 doubles o exactly (a power of two) with the LSE unchanged.
TEST(GpuDecodeFp8, ScalesAreReadPerHead) {
  REQUIRE_GPU();
  std::mt19937_64 rng(test_seed() + 4103);
  DecodeSpec s;
  s.kv_dtype = FA_DTYPE_E4M3;
  s.per_head_scale = true;
  s.batch = 2;
  s.cap = 300;
  s.hq = 8;
  s.hkv = 2;
  DecodeData x;
  make_data(rng, s, &x);
  const std::vector<int> used(2, s.cap);
  Cache flat;
  make_contiguous(x, used, &flat);
  const Out base = run(x, params_of(x, flat, false, 1));
  ASSERT_TRUE(base.failure.empty()) << base.failure;
  for (auto& f : x.v_scale) f *= 2.0f;
  x.d_v_scale.upload(x.v_scale.data(), x.v_scale.size() * 4);
  const Out twice = run(x, params_of(x, flat, false, 1));
  ASSERT_TRUE(twice.failure.empty()) << twice.failure;
  EXPECT_EQ(twice.lse_bytes, base.lse_bytes);
  const std::vector<double> o1 = decode(s.dtype, base.o_bytes), o2 = decode(s.dtype, twice.o_bytes);
  for (size_t i = 0; i < o1.size(); ++i) ASSERT_EQ(o2[i], 2 * o1[i]) << i;
  x.k_scale[1] *= 2.0f;
  x.d_k_scale.upload(x.k_scale.data(), x.k_scale.size() * 4);
  const Out k2 = run(x, params_of(x, flat, false, 1));
  ASSERT_TRUE(k2.failure.empty()) << k2.failure;
  const std::vector<float> l1 = [&] {
    std::vector<float> l(x.lse_n);
    std::memcpy(l.data(), twice.lse_bytes.data(), x.lse_n * 4);
    return l;
  }();
  std::vector<float> l2(x.lse_n);
  std::memcpy(l2.data(), k2.lse_bytes.data(), x.lse_n * 4);
  for (int b = 0; b < s.batch; ++b)
    for (int h = 0; h < s.hq; ++h) {
      const size_t at = size_t(b * s.hq + h) * s.sq;
      if (h / (s.hq / s.hkv) == 0) EXPECT_EQ(l2[at], l1[at]) << "head " << h << " reads kv head 0's scale";
      else EXPECT_NE(l2[at], l1[at]) << "head " << h << " reads kv head 1's doubled scale";
    }
  std::vector<double> o_ref, lse_ref;
  oracle_of(x, used, {}, &o_ref, &lse_ref);
  EXPECT_EQ(compare(x, k2, o_ref, lse_ref), "");
}

}  // namespace
}  // namespace fa::test
