// test_merge.cpp -- the merge of partial attention results (fa_merge_partials, issue 23) on the CPU: the shared merge
// math of templates/common/combine.cuh, compiled here for the host and driven as the fwd_combine kernel drives it
// (lane-strided LSE accumulation, the butterfly join across 32 lanes, the weighted sum skipping -inf parts), against
// the float64 oracle's one-pass answer on fresh random inputs; -inf parts (their outputs poisoned with NaN), all-(-inf)
// rows and huge LSEs; and the C entry point's validation (each rejection names the field) on a context without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "fa/fa.h"
#include "tests/cpu/params_support.h"
#include "tests/oracle/merge_cases.h"

#define FA_DEVICE inline
#include "templates/common/combine.cuh"
#undef FA_DEVICE

namespace {

using fa::oracle::MergeCase;

// The fwd_combine kernel's arithmetic for every row, on the host: o [rows, dim] (row = (b, h, i), [batch, heads,
// seqlen] order) and lse [rows].
void merge_like_the_kernel(const MergeCase& c, std::vector<float>* o, std::vector<float>* lse) {
  const size_t rows = c.rows();
  o->assign(rows * c.dim, -1.0f);
  lse->assign(rows, -1.0f);
  for (size_t r = 0; r < rows; ++r) {
    FaLseMerge lane[32];
    for (int l = 0; l < 32; ++l) {
      lane[l] = fa_lse_merge_init();
      for (int s = l; s < c.parts; s += 32) lane[l] = fa_lse_merge_add(lane[l], c.part_lse[size_t(s) * rows + r]);
    }
    for (int off = 1; off < 32; off <<= 1) {
      FaLseMerge next[32];
      for (int l = 0; l < 32; ++l) next[l] = fa_lse_merge_join(lane[l], lane[l ^ off]);
      for (int l = 0; l < 32; ++l) lane[l] = next[l];
    }
    const float total = fa_lse_merge_total(lane[0]);
    for (int d = 0; d < c.dim; ++d) {
      float x = 0.f;
      if (total != -INFINITY) {
        for (int s = 0; s < c.parts; ++s) {
          const float l = c.part_lse[size_t(s) * rows + r];
          if (l == -INFINITY) continue;
          x += fa_lse_merge_weight(fa_lse_merge_weights(lane[0]), l) *
               c.part_o[(size_t(s) * rows + r) * c.dim + size_t(d)];
        }
      }
      (*o)[r * c.dim + size_t(d)] = x;
    }
    (*lse)[r] = total;
  }
}

// Max relative error of o (the merge's [rows, dim] against the oracle's BSHD) and max LSE error scaled by
// max(1, |lse|); NaN anywhere, or an infinity that does not match, is +inf.
void compare(const MergeCase& c, const std::vector<float>& o, const std::vector<float>& lse, double* err_o,
             double* err_lse) {
  double num = 0, den = 0;
  *err_lse = 0;
  for (int b = 0; b < c.batch; ++b)
    for (int h = 0; h < c.heads; ++h)
      for (int i = 0; i < c.seqlen; ++i) {
        const size_t r = (size_t(b) * c.heads + size_t(h)) * c.seqlen + size_t(i);
        const double want = c.lse[r], got = lse[r];
        if (std::isnan(got) || (std::isinf(want) != std::isinf(got)) || (std::isinf(want) && want != got)) {
          *err_lse = INFINITY;
        } else if (!std::isinf(want)) {
          *err_lse = std::max(*err_lse, std::fabs(got - want) / std::max(1.0, std::fabs(want)));
        }
        for (int d = 0; d < c.dim; ++d) {
          const double w = c.o[((size_t(b) * c.seqlen + size_t(i)) * c.heads + size_t(h)) * c.dim + size_t(d)];
          const double g = o[r * c.dim + size_t(d)];
          if (std::isnan(g)) num = INFINITY;
          num += (g - w) * (g - w);
          den += w * w;
        }
      }
  *err_o = den > 0 ? std::sqrt(num / den) : (num == 0 ? 0 : INFINITY);
}

std::mt19937_64& rng() {
  static std::mt19937_64 r{std::random_device{}()};
  return r;
}

TEST(MergeMath, MatchesTheOnePassOracle) {
  struct Shape {
    int batch, seqlen, heads, dim, parts;
    double scale;
  };
  const Shape shapes[] = {{1, 37, 2, 8, 1, 0.0},  {2, 64, 3, 16, 2, 0.0}, {1, 90, 1, 32, 5, 0.0},
                          {2, 33, 2, 8, 40, 0.0}, {1, 70, 2, 24, 3, 6.0}, {1, 50, 1, 64, 70, 0.5}};
  for (const Shape& s : shapes) {
    const MergeCase c = fa::oracle::make_merge_case(rng(), s.batch, s.seqlen, s.heads, s.dim, s.parts, s.scale);
    std::vector<float> o, lse;
    merge_like_the_kernel(c, &o, &lse);
    double eo = 0, el = 0;
    compare(c, o, lse, &eo, &el);
    EXPECT_LT(eo, 2e-6) << s.parts << " parts, dim " << s.dim;
    EXPECT_LT(el, 2e-6) << s.parts << " parts, dim " << s.dim;
  }
}

TEST(MergeMath, OnePartIsItselfAndDroppingAPartIsSeen) {
  const MergeCase c = fa::oracle::make_merge_case(rng(), 1, 40, 2, 16, 1, 0.0);
  std::vector<float> o, lse;
  merge_like_the_kernel(c, &o, &lse);
  for (size_t r = 0; r < c.rows(); ++r) EXPECT_EQ(lse[r], c.part_lse[r]);
  for (size_t e = 0; e < o.size(); ++e) EXPECT_FLOAT_EQ(o[e], c.part_o[e]);
  // The comparison sees a wrong merge: the same parts with one (non-empty) part left out.
  MergeCase m = fa::oracle::make_merge_case(rng(), 1, 64, 2, 16, 3, 0.0);
  const size_t rows = m.rows();
  int drop = -1;
  for (int s = 0; s < m.parts && drop < 0; ++s)
    if (m.part_lse[size_t(s) * rows + rows - 1] != -INFINITY) drop = s;
  ASSERT_GE(drop, 0);
  for (size_t r = 0; r < rows; ++r) m.part_lse[size_t(drop) * rows + r] = -INFINITY;
  merge_like_the_kernel(m, &o, &lse);
  double eo = 0, el = 0;
  compare(m, o, lse, &eo, &el);
  EXPECT_GT(eo + el, 1e-3);
}

TEST(MergeMath, MinusInfinityNeverGivesNaN) {
  MergeCase c;
  c.batch = 1;
  c.heads = 1;
  c.seqlen = 3;
  c.dim = 8;
  c.parts = 37;
  const size_t rows = c.rows();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  c.part_o.assign(size_t(c.parts) * rows * c.dim, nan);  // every -inf part's output is poison
  c.part_lse.assign(size_t(c.parts) * rows, -INFINITY);
  // row 0: every part empty; row 1: one part (the 34th, past the first 32 lanes); row 2: two parts 1e4 apart from
  // zero, LSEs where exp() overflows float.
  c.part_lse[33 * rows + 1] = 2.5f;
  for (int d = 0; d < c.dim; ++d) c.part_o[(33 * rows + 1) * c.dim + size_t(d)] = float(d);
  c.part_lse[0 * rows + 2] = 10000.0f;
  c.part_lse[36 * rows + 2] = 10000.0f + std::log(3.0f);
  for (int d = 0; d < c.dim; ++d) {
    c.part_o[(0 * rows + 2) * c.dim + size_t(d)] = 1.0f;
    c.part_o[(36 * rows + 2) * c.dim + size_t(d)] = 5.0f;
  }
  std::vector<float> o, lse;
  merge_like_the_kernel(c, &o, &lse);
  EXPECT_EQ(lse[0], -INFINITY);
  for (int d = 0; d < c.dim; ++d) EXPECT_EQ(o[size_t(d)], 0.0f);
  EXPECT_FLOAT_EQ(lse[1], 2.5f);
  for (int d = 0; d < c.dim; ++d) EXPECT_FLOAT_EQ(o[c.dim + size_t(d)], float(d));
  // The float64 answer for the float32 LSEs as stored (10000 + log 3 is not exact in float32).
  const double l0 = c.part_lse[0 * rows + 2], l1 = c.part_lse[36 * rows + 2];
  const double total = l0 + std::log1p(std::exp(l1 - l0)), w0 = std::exp(l0 - total), w1 = std::exp(l1 - total);
  EXPECT_NEAR(lse[2], total, 1e-6 * total);
  for (int d = 0; d < c.dim; ++d) EXPECT_NEAR(o[2 * c.dim + size_t(d)], w0 * 1.0 + w1 * 5.0, 1e-5);
  for (float x : o) EXPECT_FALSE(std::isnan(x));
}

// ---- the C entry point: validation on a context without a device --------------------------------------------------

class MergeApi : public ::testing::Test {
 protected:
  void SetUp() override {
    fa_context_options o;
    fa_context_options_init(&o);
    o.cache_path = ":memory:";
    ASSERT_EQ(fa_context_create(&o, &ctx), FA_OK) << fa_last_error();
    ASSERT_EQ(fa_merge_params_init(&p), FA_OK);
    p.dtype = FA_DTYPE_BF16;
    p.num_parts = 3;
    p.batch = 2;
    p.heads = 4;
    p.seqlen = 100;
    p.head_dim = 64;
    p.part_o = static_cast<const float*>(fa::test::fake_addr(0x10000000));
    p.part_lse = static_cast<const float*>(fa::test::fake_addr(0x20000000));
    p.o = fa::test::fake_addr(0x30000000);
    p.o_stride_batch = 100 * 4 * 64;
    p.o_stride_seq = 4 * 64;
    p.o_stride_head = 64;
    p.lse = static_cast<float*>(fa::test::fake_addr(0x40000000));
  }
  void TearDown() override { fa_context_destroy(ctx); }
  // The status of fa_merge_partials(q) and its message.
  fa_status run(const fa_merge_params& q, std::string* msg) {
    const fa_status st = fa_merge_partials(ctx, &q, nullptr);
    *msg = fa_last_error();
    return st;
  }
  fa_context ctx = nullptr;
  fa_merge_params p;
};

TEST_F(MergeApi, InitSetsVersionAndSize) {
  EXPECT_EQ(p.struct_size, sizeof(fa_merge_params));
  EXPECT_EQ(p.version, uint32_t(FA_MERGE_PARAMS_VERSION));
  EXPECT_EQ(fa_merge_params_init(nullptr), FA_ERROR_INVALID_ARGUMENT);
}

TEST_F(MergeApi, EachBadFieldIsNamed) {
  struct Bad {
    const char* field;
    void (*edit)(fa_merge_params*);
    fa_status code;
  };
  const Bad cases[] = {
      {"version", [](fa_merge_params* q) { q->version = 7; }, FA_ERROR_INVALID_VERSION},
      {"struct_size", [](fa_merge_params* q) { q->struct_size -= 8; }, FA_ERROR_INVALID_VERSION},
      {"dtype", [](fa_merge_params* q) { q->dtype = 9; }, FA_ERROR_INVALID_ARGUMENT},
      {"num_parts", [](fa_merge_params* q) { q->num_parts = 0; }, FA_ERROR_INVALID_ARGUMENT},
      {"batch", [](fa_merge_params* q) { q->batch = 70000; }, FA_ERROR_INVALID_ARGUMENT},
      {"heads", [](fa_merge_params* q) { q->heads = 0; }, FA_ERROR_INVALID_ARGUMENT},
      {"seqlen", [](fa_merge_params* q) { q->seqlen = -1; }, FA_ERROR_INVALID_ARGUMENT},
      {"seqlen",
       [](fa_merge_params* q) {
         q->heads = 1 << 16;
         q->seqlen = 1 << 15;
       },
       FA_ERROR_INVALID_ARGUMENT},
      {"head_dim", [](fa_merge_params* q) { q->head_dim = 12; }, FA_ERROR_INVALID_ARGUMENT},
      {"head_dim", [](fa_merge_params* q) { q->head_dim = 520; }, FA_ERROR_INVALID_ARGUMENT},
      {"part_o", [](fa_merge_params* q) { q->part_o = nullptr; }, FA_ERROR_INVALID_ARGUMENT},
      {"part_o", [](fa_merge_params* q) { q->part_o += 1; }, FA_ERROR_INVALID_ARGUMENT},
      {"part_lse", [](fa_merge_params* q) { q->part_lse = nullptr; }, FA_ERROR_INVALID_ARGUMENT},
      {"part_lse", [](fa_merge_params* q) { q->part_lse = q->part_o + 64; }, FA_ERROR_INVALID_ARGUMENT},
      {"o", [](fa_merge_params* q) { q->o = nullptr; }, FA_ERROR_INVALID_ARGUMENT},
      {"o", [](fa_merge_params* q) { q->o = static_cast<char*>(q->o) + 1; }, FA_ERROR_INVALID_ARGUMENT},
      {"o", [](fa_merge_params* q) { q->o = const_cast<float*>(q->part_o) + 1000; }, FA_ERROR_INVALID_ARGUMENT},
      {"o_stride_seq", [](fa_merge_params* q) { q->o_stride_seq = -4; }, FA_ERROR_INVALID_ARGUMENT},
      {"o_stride_head", [](fa_merge_params* q) { q->o_stride_head = 8; }, FA_ERROR_INVALID_ARGUMENT},
      {"lse", [](fa_merge_params* q) { q->lse = static_cast<float*>(q->o) + 4; }, FA_ERROR_INVALID_ARGUMENT},
      {"lse", [](fa_merge_params* q) { q->lse = const_cast<float*>(q->part_lse) + 8; }, FA_ERROR_INVALID_ARGUMENT},
      {"lse", [](fa_merge_params* q) { q->lse = reinterpret_cast<float*>(reinterpret_cast<char*>(q->lse) + 2); },
       FA_ERROR_INVALID_ARGUMENT},
  };
  for (const Bad& b : cases) {
    fa_merge_params q = p;
    b.edit(&q);
    std::string msg;
    EXPECT_EQ(run(q, &msg), b.code) << b.field << ": " << msg;
    EXPECT_NE(msg.find(std::string(b.field) + ": expected"), std::string::npos) << b.field << ": " << msg;
    EXPECT_NE(msg.find("expected"), std::string::npos) << msg;
  }
  std::string msg;
  EXPECT_EQ(fa_merge_partials(nullptr, &p, nullptr), FA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(fa_last_error()).find("context"), std::string::npos);
  EXPECT_EQ(fa_merge_partials(ctx, nullptr, nullptr), FA_ERROR_INVALID_ARGUMENT);
}

TEST_F(MergeApi, ValidParamsReachTheDevice) {
  // Every dtype, with and without lse: validation and the kernel's config pass, only the missing GPU stops it.
  if (fa_context_has_device(ctx)) GTEST_SKIP() << "a GPU is present: tests/gpu/test_merge.cpp runs the merge";
  for (int dtype : {FA_DTYPE_FP16, FA_DTYPE_BF16, FA_DTYPE_FP32}) {
    for (bool with_lse : {true, false}) {
      fa_merge_params q = p;
      q.dtype = dtype;
      if (!with_lse) q.lse = nullptr;
      std::string msg;
      EXPECT_EQ(run(q, &msg), FA_ERROR_NO_DEVICE) << msg;
    }
  }
  fa_merge_params q = p;
  q.num_parts = 1;
  q.head_dim = 512;
  q.o_stride_batch = 100 * 4 * 512;
  q.o_stride_seq = 4 * 512;
  q.o_stride_head = 512;
  std::string msg;
  EXPECT_EQ(run(q, &msg), FA_ERROR_NO_DEVICE) << msg;
}

}  // namespace
