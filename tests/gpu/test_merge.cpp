// test_merge.cpp -- fa_merge_partials (issue 23) on the GPU against the float64 oracle: partial results of one causal
// problem over random disjoint key ranges (tests/oracle/merge_cases.h: -inf rows whose outputs hold NaN, empty
// ranges, up to 70 parts) merged into fp16 / bf16 / fp32 outputs in BSHD and BHSD strides, with and without lse;
// a row whose every part is -inf gives o = 0 and lse = -inf; a running merge (an fp32 output merged again as a part)
// equals the merge of all parts at once. Outputs are poisoned (all bits set) before every call.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "tests/gpu/gpu_support.h"
#include "tests/oracle/merge_cases.h"

namespace fa::test {
namespace {

using oracle::MergeCase;

struct MergeRun {
  std::vector<double> o;   // BSHD [batch, seqlen, heads, dim], decoded
  std::vector<float> lse;  // [batch, heads, seqlen]
  bool lse_untouched = true;
  std::string failure;
};

// Uploads the parts, poisons o and lse, merges on the test stream, downloads. bhsd: o strided [b, h, s, d].
MergeRun run_merge(const MergeCase& c, int dtype, bool bhsd, bool want_lse) {
  Gpu& g = gpu();
  MergeRun r;
  const size_t es = dtype == FA_DTYPE_FP32 ? 4 : 2, rows = c.rows(), on = rows * c.dim;
  DevBuf po(c.part_o.size() * 4), pl(c.part_lse.size() * 4), o(on * es), lse(rows * 4);
  po.upload(c.part_o.data(), c.part_o.size() * 4);
  pl.upload(c.part_lse.data(), c.part_lse.size() * 4);
  const std::vector<uint8_t> poison_o(on * es, 0xFF), poison_l(rows * 4, 0xFF);
  o.upload(poison_o.data(), poison_o.size());
  lse.upload(poison_l.data(), poison_l.size());
  fa_merge_params p;
  fa_merge_params_init(&p);
  p.dtype = dtype;
  p.num_parts = c.parts;
  p.batch = c.batch;
  p.heads = c.heads;
  p.seqlen = c.seqlen;
  p.head_dim = c.dim;
  p.part_o = static_cast<const float*>(po.get());
  p.part_lse = static_cast<const float*>(pl.get());
  p.o = o.get();
  const long long D = c.dim, H = c.heads, S = c.seqlen;
  if (bhsd) {
    p.o_stride_batch = H * S * D;
    p.o_stride_head = S * D;
    p.o_stride_seq = D;
  } else {
    p.o_stride_batch = S * H * D;
    p.o_stride_seq = H * D;
    p.o_stride_head = D;
  }
  p.lse = want_lse ? static_cast<float*>(lse.get()) : nullptr;
  if (fa_merge_partials(g.ctx, &p, g.stream) != FA_OK) {
    r.failure = fmt::format("fa_merge_partials: {}", fa_last_error());
    return r;
  }
  const CUresult cr = g.d->cuStreamSynchronize(g.stream);
  if (cr != CUDA_SUCCESS) {
    r.failure = rt::driver_error(*g.d, "cuStreamSynchronize", cr);
    return r;
  }
  std::vector<uint8_t> ob(on * es);
  o.download(ob.data(), ob.size());
  const std::vector<double> raw = decode(dtype, ob);
  r.o.assign(on, 0.0);
  for (long long b = 0; b < c.batch; ++b)
    for (long long i = 0; i < S; ++i)
      for (long long h = 0; h < H; ++h)
        for (long long d = 0; d < D; ++d)
          r.o[size_t(((b * S + i) * H + h) * D + d)] =
              raw[size_t(b * p.o_stride_batch + i * p.o_stride_seq + h * p.o_stride_head + d)];
  r.lse.assign(rows, 0.f);
  lse.download(r.lse.data(), rows * 4);
  for (float x : r.lse) {
    uint32_t bits;
    std::memcpy(&bits, &x, 4);
    r.lse_untouched = r.lse_untouched && bits == 0xFFFFFFFFu;
  }
  return r;
}

// Relative L2 error of o (NaN: +inf) and max LSE error scaled by max(1, |lse|) (-inf must match exactly).
void errors(const MergeCase& c, const MergeRun& r, double* eo, double* el) {
  *eo = oracle::relative_error(r.o, c.o);
  *el = 0;
  for (size_t k = 0; k < c.rows(); ++k) {
    const double want = c.lse[k], got = r.lse[k];
    if (std::isinf(want) || std::isnan(got) || std::isinf(got)) {
      if (want != got) *el = INFINITY;
      continue;
    }
    *el = std::max(*el, std::fabs(got - want) / std::max(1.0, std::fabs(want)));
  }
}

TEST(Merge, MatchesTheOnePassOracle) {
  if (!gpu().ok()) GTEST_SKIP() << gpu().why;
  std::mt19937_64 rng(test_seed() ^ 0x6d65726765ull);
  struct Shape {
    int batch, seqlen, heads, dim, parts;
    double scale;
  };
  const Shape shapes[] = {{1, 77, 2, 64, 1, 0.0}, {2, 128, 3, 128, 2, 0.0}, {1, 200, 2, 64, 5, 0.0},
                          {2, 65, 2, 8, 40, 0.0}, {1, 96, 4, 256, 3, 6.0},  {1, 50, 1, 512, 70, 0.5},
                          {3, 33, 5, 40, 4, 0.0}, {1, 64, 2, 128, 9, 0.0}};
  for (const Shape& s : shapes) {
    const MergeCase c = oracle::make_merge_case(rng, s.batch, s.seqlen, s.heads, s.dim, s.parts, s.scale);
    // Every dtype at d 128, bf16 elsewhere (each (dtype, dim) is a kernel of its own to compile).
    const std::vector<int> dtypes =
        s.dim == 128 ? std::vector<int>{FA_DTYPE_FP16, FA_DTYPE_BF16, FA_DTYPE_FP32} : std::vector<int>{FA_DTYPE_BF16};
    for (int dtype : dtypes) {
      for (bool bhsd : {false, true}) {
        const std::string what = fmt::format("b{} s{} h{} d{} parts {} dtype {} {}", s.batch, s.seqlen, s.heads, s.dim,
                                             s.parts, dtype, bhsd ? "bhsd" : "bshd");
        const MergeRun r = run_merge(c, dtype, bhsd, true);
        ASSERT_EQ(r.failure, "") << what;
        double eo = 0, el = 0;
        errors(c, r, &eo, &el);
        EXPECT_LT(eo, dtype == FA_DTYPE_FP32 ? 1e-5 : tolerance(dtype) / 4) << what;
        EXPECT_LT(el, 1e-5) << what;
      }
    }
    const MergeRun no_lse = run_merge(c, FA_DTYPE_BF16, false, false);
    ASSERT_EQ(no_lse.failure, "");
    EXPECT_TRUE(no_lse.lse_untouched);
    EXPECT_LT(oracle::relative_error(no_lse.o, c.o), tolerance(FA_DTYPE_BF16) / 4);
  }
}

TEST(Merge, EveryPartMinusInfinityGivesZeroAndMinusInfinity) {
  if (!gpu().ok()) GTEST_SKIP() << gpu().why;
  MergeCase c;
  c.batch = 2;
  c.heads = 3;
  c.seqlen = 45;
  c.dim = 128;
  c.parts = 33;
  c.part_o.assign(size_t(c.parts) * c.rows() * c.dim, std::numeric_limits<float>::quiet_NaN());
  c.part_lse.assign(size_t(c.parts) * c.rows(), -INFINITY);
  c.o.assign(c.rows() * c.dim, 0.0);
  c.lse.assign(c.rows(), -INFINITY);
  for (int dtype : {FA_DTYPE_BF16, FA_DTYPE_FP32}) {
    const MergeRun r = run_merge(c, dtype, false, true);
    ASSERT_EQ(r.failure, "");
    for (double x : r.o) ASSERT_EQ(x, 0.0);
    for (float x : r.lse) ASSERT_EQ(x, -INFINITY);
  }
}

TEST(Merge, RunningMergeEqualsOneMerge) {
  // Parts {0, 1} merged into an fp32 slot, that slot merged with part 2: the three-part merge (the ring's running
  // merge).
  if (!gpu().ok()) GTEST_SKIP() << gpu().why;
  std::mt19937_64 rng(test_seed() ^ 0x72756eull);
  const MergeCase c = oracle::make_merge_case(rng, 2, 150, 4, 128, 3, 0.0);
  const size_t rows = c.rows(), dim = size_t(c.dim);
  MergeCase first = c;
  first.parts = 2;
  first.part_o.resize(2 * rows * dim);
  first.part_lse.resize(2 * rows);
  // The first two parts' own one-pass answer is not known to the oracle case: only the final result is checked.
  const MergeRun a = run_merge(first, FA_DTYPE_FP32, true, true);  // [b, h, s, d]: the layout of a part slot
  ASSERT_EQ(a.failure, "");
  MergeCase second = c;
  second.parts = 2;
  second.part_o.assign(2 * rows * dim, 0.f);
  second.part_lse.assign(2 * rows, 0.f);
  for (long long b = 0; b < c.batch; ++b)
    for (long long h = 0; h < c.heads; ++h)
      for (long long i = 0; i < c.seqlen; ++i) {
        const size_t row = size_t((b * c.heads + h) * c.seqlen + i);
        second.part_lse[row] = a.lse[row];
        second.part_lse[rows + row] = c.part_lse[2 * rows + row];
        for (size_t d = 0; d < dim; ++d) {
          second.part_o[row * dim + d] =
              a.lse[row] == -INFINITY ? std::numeric_limits<float>::quiet_NaN()
                                      : static_cast<float>(a.o[size_t(((b * c.seqlen + i) * c.heads + h) * c.dim) + d]);
          second.part_o[(rows + row) * dim + d] = c.part_o[(2 * rows + row) * dim + d];
        }
      }
  const MergeRun r = run_merge(second, FA_DTYPE_BF16, false, true);
  ASSERT_EQ(r.failure, "");
  double eo = 0, el = 0;
  errors(c, r, &eo, &el);
  EXPECT_LT(eo, tolerance(FA_DTYPE_BF16) / 4);
  EXPECT_LT(el, 1e-5);
}

}  // namespace
}  // namespace fa::test
