// test_forward_random.cpp -- fa_run against the float64 oracle on fresh random problems covering every feature:
// dtypes, head dims 8..256 (head_dim != head_dim_v), masks (bottom-right aligned, fully masked rows), windows,
// bias (broadcast, -inf entries), ALiBi, softcap, scale, GQA/MQA, varlen with empty sequences, seqlen_k = 0,
// odd lengths (1, 7, 127, 129, 1000), BSHD and BHSD with padded strides. Outputs and padding are poisoned first.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <thread>

#include "tests/gpu/gpu_support.h"

namespace fa::test {
namespace {

TEST(GpuForward, RandomProblemsMatchOracle) {
  Gpu& g = gpu();
  if (!g.ok()) GTEST_SKIP() << "no GPU: " << g.why;
  const int n = std::getenv("FA_TEST_CASES") ? std::atoi(std::getenv("FA_TEST_CASES")) : 240;
  std::mt19937_64 rng(test_seed());
  std::map<int, double> worst_o, worst_lse;
  std::map<int, int> count;
  int failures = 0;
  std::vector<std::unique_ptr<Case>> cases;
  for (int i = 0; i < n; ++i) {
    cases.push_back(std::make_unique<Case>());
    make_random_case(rng, CaseOptions{}, cases.back().get());
  }
  // Compile every kernel the cases need in parallel first (fa_prepare is thread-safe); failures show in fa_run.
  parallel_for(cases.size(), [&](size_t i) { fa_prepare(g.ctx, &cases[i]->params); });
  for (int i = 0; i < n; ++i) {
    Case& c = *cases[size_t(i)];
    CaseResult r = check_case(c);
    const double tol = tolerance(c.dtype);
    const bool ok = r.failure.empty() && r.err_o <= tol && r.err_lse <= 2e-3 && r.padding_intact;
    if (!ok) {
      ++failures;
      ADD_FAILURE() << "case " << i << " [" << c.desc << "]: " << (r.failure.empty() ? "" : r.failure) << " err_o "
                    << r.err_o << " (tol " << tol << ") err_lse " << r.err_lse << " padding "
                    << (r.padding_intact ? "intact" : "WRITTEN");
    }
    ++count[c.dtype];
    worst_o[c.dtype] = std::max(worst_o[c.dtype], r.err_o);
    worst_lse[c.dtype] = std::max(worst_lse[c.dtype], r.err_lse);
  }
  std::printf("GPU SUMMARY forward: device %s, %d random problems, %d failed;", g.name.c_str(), n, failures);
  for (auto& [dt, cnt] : count)
    std::printf(" %s: %d cases worst err_o %.3g err_lse %.3g;",
                dt == 1   ? "fp16"
                : dt == 2 ? "bf16"
                          : "fp32",
                cnt, worst_o[dt], worst_lse[dt]);
  std::printf("\n");
}

TEST(GpuForward, EdgeCases) {
  Gpu& g = gpu();
  if (!g.ok()) GTEST_SKIP() << "no GPU: " << g.why;
  std::mt19937_64 rng(test_seed() + 1);
  struct E {
    const char* name;
    int sq, sk, mask, wl, wr;
  };
  const E edges[] = {
      {"sk=0 gives zeros and -inf", 5, 0, 0, -1, -1},  {"causal sq>sk: first rows fully masked", 40, 9, 1, -1, -1},
      {"window (0,0) sq>sk", 33, 7, 2, 0, 0},          {"window left only", 129, 129, 2, 16, -1},
      {"window right only, sq<sk", 7, 1000, 2, -1, 3}, {"single row single key", 1, 1, 1, -1, -1},
  };
  for (int dt : {FA_DTYPE_FP16, FA_DTYPE_BF16, FA_DTYPE_FP32}) {
    for (const E& e : edges) {
      for (int d : {64, 128}) {
        Case c;
        c.dtype = dt;
        c.op.batch = 2;
        c.op.heads_q = 4;
        c.op.heads_kv = 2;
        c.op.head_dim = d;
        c.op.seqlen_q = e.sq;
        c.op.seqlen_k = e.sk;
        c.op.mask = e.mask;
        c.op.window_left = e.wl;
        c.op.window_right = e.wr;
        materialize(rng, &c);
        CaseResult r = check_case(c);
        EXPECT_TRUE(r.failure.empty()) << e.name << ": " << r.failure;
        EXPECT_LE(r.err_o, tolerance(dt)) << e.name << " [" << c.desc << "]";
        EXPECT_LE(r.err_lse, 2e-3) << e.name << " [" << c.desc << "]";
        EXPECT_TRUE(r.padding_intact) << e.name;
      }
    }
  }
}

// fa_run from a thread on which no CUDA context is current (a server's worker thread, a Python thread that never
// touched torch.cuda): fa binds its own context for every driver call, including the capture query of a new shape
// (which failed with CUDA_ERROR_INVALID_CONTEXT before). The shape is new to this process, so the call takes the
// slow path; the result is checked against the oracle on the test's thread.
TEST(GpuForward, CallFromThreadWithoutCurrentContext) {
  Gpu& g = gpu();
  if (!g.ok()) GTEST_SKIP() << "no GPU: " << g.why;
  std::mt19937_64 rng(test_seed() + 2);
  Case c;
  materialize_spec(rng, CaseSpec{FA_DTYPE_BF16, 128, 128, 4, 2, 1, 77, 301, false, false, false, false}, true, &c);
  fa_status st = FA_ERROR_INTERNAL;
  std::string err;
  bool had_context = true;
  std::thread worker([&] {
    CUcontext cur = nullptr;
    had_context = g.d->cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur != nullptr;
    st = fa_run(g.ctx, &c.params, g.stream);
    if (st != FA_OK) err = fa_last_error();
  });
  worker.join();
  EXPECT_FALSE(had_context) << "the worker thread was meant to start without a current context";
  ASSERT_EQ(st, FA_OK) << err;
  ASSERT_EQ(g.d->cuStreamSynchronize(g.stream), CUDA_SUCCESS);
  CaseResult r = compare_outputs(c);
  EXPECT_LE(r.err_o, tolerance(c.dtype)) << c.desc;
  EXPECT_LE(r.err_lse, 2e-3) << c.desc;
  EXPECT_TRUE(r.padding_intact);
}

}  // namespace
}  // namespace fa::test
