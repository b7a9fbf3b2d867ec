// test_backward_random.cpp -- fa_run_backward against the float64 oracle's gradients on fresh random problems
// covering every feature (the forward's random generator), gradients poisoned first; the deterministic mode is
// bitwise stable over 10 runs; caller-provided workspace and the size query.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <set>

#include <fmt/format.h>

#include "cache_db/cache_db.h"
#include "runtime/context.h"
#include "tests/gpu/grad_support.h"
#include "tuner/cache_store.h"
#include "tuner/chooser.h"

namespace fa::test {
namespace {

TEST(GpuBackward, RandomProblemsMatchOracle) {
  Gpu& gp = gpu();
  if (!gp.ok()) GTEST_SKIP() << "no GPU: " << gp.why;
  const int n = std::getenv("FA_TEST_CASES") ? std::max(20, std::atoi(std::getenv("FA_TEST_CASES")) / 2) : 120;
  std::mt19937_64 rng(test_seed() + 7);
  std::map<int, double> worst;
  std::map<int, std::string> worst_case;
  std::map<int, int> count;
  int failures = 0;
  std::vector<std::unique_ptr<Case>> cases;
  for (int i = 0; i < n; ++i) {
    cases.push_back(std::make_unique<Case>());
    Case& c = *cases.back();
    CaseOptions opt;
    opt.max_work = 1.5e7;
    make_random_case(rng, opt, &c);
    c.want_lse = true;  // the backward needs the forward's LSE
    c.params.lse = reinterpret_cast<float*>(c.d_lse.get());
  }
  // Compile (and, by policy, tune) the forward and backward kernels in parallel; tuning the backward times
  // candidates on the params' buffers, hence real gradient scratch of each case's extents.
  std::vector<PrepareGrads> scratch(cases.size());
  std::vector<fa_bwd_params> prep(cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    prep[i] = prepare_bwd_params(*cases[i], cases[i]->params, &scratch[i]);
    prep[i].deterministic = (i % 3 == 0) ? 1 : 0;
  }
  parallel_for(cases.size(), [&](size_t i) {
    fa_prepare(gp.ctx, &cases[i]->params);
    fa_prepare_backward(gp.ctx, &prep[i]);
  });
  gp.d->cuCtxSynchronize();
  scratch.clear();
  for (int i = 0; i < n; ++i) {
    Case& c = *cases[size_t(i)];
    ASSERT_EQ(fa_run(gp.ctx, &c.params, gp.stream), FA_OK) << fa_last_error() << " [" << c.desc << "]";
    Grads g;
    setup_grads(rng, c, g);
    g.b.deterministic = (i % 3 == 0) ? 1 : 0;
    fa_status st = fa_run_backward(gp.ctx, &g.b, gp.stream);
    bool pad = true;
    double e = INFINITY;
    std::string why;
    if (st != FA_OK) {
      why = fa_last_error();
    } else {
      gp.d->cuStreamSynchronize(gp.stream);
      const double eq = grad_error(c.dtype, g.d_dq, c.q, g.dq_ref, &pad);
      const double ek = grad_error(c.dtype, g.d_dk, c.k, g.dk_ref, &pad);
      const double ev = grad_error(c.dtype, g.d_dv, c.v, g.dv_ref, &pad);
      e = std::max({eq, ek, ev});
      why = fmt::format("dq {:.3g} dk {:.3g} dv {:.3g}", eq, ek, ev);
    }
    const bool ok = st == FA_OK && e <= bwd_tolerance(c.dtype) && pad;
    if (!ok) {
      ++failures;
      ADD_FAILURE() << "case " << i << " [" << c.desc << " det" << g.b.deterministic << "]: " << why << " (tol "
                    << bwd_tolerance(c.dtype) << ") padding " << (pad ? "intact" : "WRITTEN");
    }
    ++count[c.dtype];
    if (!(e <= worst[c.dtype])) {
      worst[c.dtype] = e;
      worst_case[c.dtype] = fmt::format("case {} [{} det{}]: {}", i, c.desc, g.b.deterministic, why);
    }
  }
  std::printf("GPU SUMMARY backward: device %s, %d random problems, %d failed;", gp.name.c_str(), n, failures);
  for (auto& [dt, cnt] : count)
    std::printf(" %s: %d cases worst grad err %.3g;", dt == 1 ? "fp16" : dt == 2 ? "bf16" : "fp32", cnt, worst[dt]);
  std::printf("\n");
  for (auto& [dt, text] : worst_case)
    std::printf("GPU worst backward %s: %s\n", dt == 1 ? "fp16" : dt == 2 ? "bf16" : "fp32", text.c_str());
}

// The default policy: fa_prepare_backward, or else the first fa_run_backward of a new class, tunes synchronously,
// timing candidates on the params' buffers (fa.h). The tuned backward matches the oracle, its tuning rows are
// stored, and the context runs on afterwards. (The shared test context runs defaults: see gpu_support.cpp.)
TEST(GpuBackward, FirstUseTuningInPrepareAndRunMatchesOracle) {
  Gpu& gp = gpu();
  if (!gp.ok()) GTEST_SKIP() << "no GPU: " << gp.why;
  fa_context_options o;
  fa_context_options_init(&o);
  o.cache_path = ":memory:";
  o.tune_policy = FA_TUNE_ON_FIRST_USE;
  fa_context ctx = nullptr;
  ASSERT_EQ(fa_context_create(&o, &ctx), FA_OK) << fa_last_error();
  auto* chooser = dynamic_cast<tune::TuningChooser*>(ctx->chooser.get());
  ASSERT_NE(chooser, nullptr);
  chooser->options().max_candidates = 4;  // a short tuning per key
  chooser->options().budget_ms = 150;
  std::mt19937_64 rng(test_seed() + 13);
  const CaseSpec specs[] = {
      // dtype, d, dv, hq, hkv, mask, sq, sk, bias, alibi, softcap, varlen
      {FA_DTYPE_BF16, 96, 96, 2, 1, FA_MASK_SLIDING_WINDOW, 200, 100, false, false, false, false},
      {FA_DTYPE_FP16, 64, 64, 4, 2, FA_MASK_CAUSAL, 300, 517, false, false, false, false},
      {FA_DTYPE_BF16, 128, 128, 2, 2, FA_MASK_NONE, 129, 300, false, false, true, false},
  };
  int n = 0;
  for (const CaseSpec& spec : specs)
    for (int det : {0, 1}) {
      Case c;
      materialize_spec(rng, spec, false, &c);
      ASSERT_EQ(fa_run(ctx, &c.params, gp.stream), FA_OK) << fa_last_error() << " [" << c.desc << "]";
      Grads g;
      setup_grads(rng, c, g);
      g.b.deterministic = det;
      const bool in_prepare = n++ % 2 == 0;
      if (in_prepare) { ASSERT_EQ(fa_prepare_backward(ctx, &g.b), FA_OK) << fa_last_error() << " [" << c.desc << "]"; }
      poison_grads(c, g);  // what tuning wrote there is not the answer
      ASSERT_EQ(fa_run_backward(ctx, &g.b, gp.stream), FA_OK) << fa_last_error() << " [" << c.desc << "]";
      const GradResult r = measure_grads(c, g);
      EXPECT_TRUE(r.ok(c.dtype)) << "[" << c.desc << " det" << det
                                 << (in_prepare ? ", tuned in prepare" : ", tuned in run") << "]: " << r.describe();
    }
  auto* store = dynamic_cast<tune::CacheStore*>(ctx->store.get());
  ASSERT_NE(store, nullptr);
  std::set<std::string> tuned;
  for (const auto& rec : store->db()->list_tune_rows())
    if (rec.row.semantic_key.find("bwd") != std::string::npos)
      tuned.insert(rec.row.semantic_key + " " + rec.row.bucket);
  std::printf("GPU SUMMARY backward first-use tuning: %d problems, %zu backward keys tuned\n", n, tuned.size());
  EXPECT_GE(tuned.size(), 3u) << "the backward keys were not tuned on first use";
  fa_context_destroy(ctx);
}

TEST(GpuBackward, DeterministicModeIsBitwiseStable) {
  Gpu& gp = gpu();
  if (!gp.ok()) GTEST_SKIP() << "no GPU: " << gp.why;
  std::mt19937_64 rng(test_seed() + 11);
  for (int dt : {FA_DTYPE_BF16, FA_DTYPE_FP16}) {
    Case c;
    c.dtype = dt;
    c.op.batch = 2;
    c.op.heads_q = 8;
    c.op.heads_kv = 2;
    c.op.head_dim = 128;
    c.op.seqlen_q = 300;
    c.op.seqlen_k = 517;
    c.op.mask = 1;
    c.want_lse = true;
    materialize(rng, &c);
    ASSERT_EQ(fa_run(gp.ctx, &c.params, gp.stream), FA_OK) << fa_last_error();
    Grads g;
    setup_grads(rng, c, g);
    g.b.deterministic = 1;
    std::vector<uint8_t> first, now;
    const size_t es = 2;
    for (int run = 0; run < 10; ++run) {
      ASSERT_EQ(fa_run_backward(gp.ctx, &g.b, gp.stream), FA_OK) << fa_last_error();
      gp.d->cuStreamSynchronize(gp.stream);
      now.resize((c.q_n + c.k_n + c.v_n) * es);
      g.d_dq.download(now.data(), c.q_n * es);
      g.d_dk.download(now.data() + c.q_n * es, c.k_n * es);
      g.d_dv.download(now.data() + (c.q_n + c.k_n) * es, c.v_n * es);
      if (run == 0) first = now;
      else ASSERT_EQ(std::memcmp(first.data(), now.data(), now.size()), 0) << "run " << run << " differs bitwise";
    }
    bool pad = true;
    EXPECT_LE(grad_error(dt, g.d_dq, c.q, g.dq_ref, &pad), bwd_tolerance(dt));
  }
}

TEST(GpuBackward, CallerWorkspaceAndSizeQuery) {
  Gpu& gp = gpu();
  if (!gp.ok()) GTEST_SKIP() << "no GPU: " << gp.why;
  std::mt19937_64 rng(test_seed() + 13);
  Case c;
  c.dtype = FA_DTYPE_BF16;
  c.op.batch = 1;
  c.op.heads_q = 4;
  c.op.heads_kv = 4;
  c.op.head_dim = 64;
  c.op.seqlen_q = 129;
  c.op.seqlen_k = 129;
  c.want_lse = true;
  materialize(rng, &c);
  ASSERT_EQ(fa_run(gp.ctx, &c.params, gp.stream), FA_OK) << fa_last_error();
  Grads g;
  setup_grads(rng, c, g);
  size_t bytes = 0;
  ASSERT_EQ(fa_backward_workspace_size(gp.ctx, &g.b, &bytes), FA_OK) << fa_last_error();
  DevBuf ws(bytes + 256);
  g.b.workspace = ws.get();
  g.b.workspace_size = bytes - (bytes > 0 ? 1 : 0);
  if (bytes > 0) {
    EXPECT_EQ(fa_run_backward(gp.ctx, &g.b, gp.stream), FA_ERROR_INVALID_ARGUMENT) << "a short workspace is rejected";
  }
  g.b.workspace_size = bytes;
  ASSERT_EQ(fa_run_backward(gp.ctx, &g.b, gp.stream), FA_OK) << fa_last_error();
  gp.d->cuStreamSynchronize(gp.stream);
  bool pad = true;
  EXPECT_LE(grad_error(c.dtype, g.d_dq, c.q, g.dq_ref, &pad), bwd_tolerance(c.dtype));
  EXPECT_LE(grad_error(c.dtype, g.d_dk, c.k, g.dk_ref, &pad), bwd_tolerance(c.dtype));
  EXPECT_LE(grad_error(c.dtype, g.d_dv, c.v, g.dv_ref, &pad), bwd_tolerance(c.dtype));
  EXPECT_TRUE(pad);
}

}  // namespace
}  // namespace fa::test

namespace fa::test {
namespace {

// A large backward (seqlen 4k, 16 heads, d128, causal and not) through the tensor-core plan, plain and
// deterministic, checked against the reference backward plan on the same inputs (the float64 oracle is too slow at
// this size); the deterministic run twice, bitwise equal. 16 x 32 key blocks exceed one wave of CTAs, so the causal
// grid's last pairs run key-block-major (templates/bwd_mma_tiling.cuh: fa_bwd_cta) in both modes.
TEST(GpuBackward, LargeProblemMatchesTheReferencePath) {
  Gpu& gp = gpu();
  if (!gp.ok()) GTEST_SKIP() << "no GPU: " << gp.why;
  std::mt19937_64 rng(test_seed() + 17);
  double worst = 0;
  for (int causal : {0, 1}) {
    const int S = 4096, H = 16, D = 128, dt = FA_DTYPE_BF16;
    const size_t n = size_t(S) * H * D;
    std::vector<double> host(n);
    std::uniform_real_distribution<double> u(-1, 1);
    DevBuf q(n * 2), k(n * 2), v(n * 2), o(n * 2), dout(n * 2), lse(size_t(S) * H * 4);
    // path 0: tensor-core, 1: reference, 2 and 3: tensor-core deterministic (twice)
    DevBuf dq[4] = {DevBuf(n * 2), DevBuf(n * 2), DevBuf(n * 2), DevBuf(n * 2)};
    DevBuf dk[4] = {DevBuf(n * 2), DevBuf(n * 2), DevBuf(n * 2), DevBuf(n * 2)};
    DevBuf dv[4] = {DevBuf(n * 2), DevBuf(n * 2), DevBuf(n * 2), DevBuf(n * 2)};
    for (DevBuf* b : {&q, &k, &v, &dout}) {
      for (auto& x : host) x = u(rng);
      b->upload(encode(dt, host).data(), n * 2);
    }
    fa_params p;
    fa_params_init(&p);
    p.dtype = dt;
    p.batch = 1;
    p.seqlen_q = p.seqlen_k = S;
    p.heads_q = p.heads_kv = H;
    p.head_dim = D;
    p.q = q.get();
    p.k = k.get();
    p.v = v.get();
    p.o = o.get();
    p.lse = reinterpret_cast<float*>(lse.get());
    p.q_stride_batch = p.k_stride_batch = p.v_stride_batch = p.o_stride_batch = int64_t(n);
    p.q_stride_seq = p.k_stride_seq = p.v_stride_seq = p.o_stride_seq = int64_t(H) * D;
    p.q_stride_head = p.k_stride_head = p.v_stride_head = p.o_stride_head = D;
    p.mask = causal ? FA_MASK_CAUSAL : FA_MASK_NONE;
    ASSERT_EQ(fa_run(gp.ctx, &p, gp.stream), FA_OK) << fa_last_error();
    for (int path = 0; path < 4; ++path) {
      fa_bwd_params b;
      fa_bwd_params_init(&b);
      b.fwd = &p;
      b.dout = dout.get();
      b.dout_stride_batch = int64_t(n);
      b.dout_stride_seq = int64_t(H) * D;
      b.dout_stride_head = D;
      b.dq = dq[path].get();
      b.dk = dk[path].get();
      b.dv = dv[path].get();
      b.dq_stride_batch = b.dk_stride_batch = b.dv_stride_batch = int64_t(n);
      b.dq_stride_seq = b.dk_stride_seq = b.dv_stride_seq = int64_t(H) * D;
      b.dq_stride_head = b.dk_stride_head = b.dv_stride_head = D;
      b.deterministic = path >= 2 ? 1 : 0;
      if (path == 1) setenv("FA_FORCE_REFERENCE_BWD", "1", 1);
      ASSERT_EQ(fa_run_backward(gp.ctx, &b, gp.stream), FA_OK) << fa_last_error();
      unsetenv("FA_FORCE_REFERENCE_BWD");
    }
    gp.d->cuStreamSynchronize(gp.stream);
    for (DevBuf* grad : {dq, dk, dv}) {
      std::vector<uint8_t> r(n * 2), a(n * 2), again(n * 2);
      grad[1].download(r.data(), r.size());
      const auto dr = decode(dt, r);
      for (int path : {0, 2}) {
        grad[path].download(a.data(), a.size());
        const auto da = decode(dt, a);
        const double e = oracle::relative_error(std::span<const double>(da), std::span<const double>(dr));
        worst = std::max(worst, e);
        EXPECT_LE(e, 3e-2) << "causal " << causal << (path == 2 ? " deterministic" : "");
      }
      grad[3].download(again.data(), again.size());
      EXPECT_EQ(std::memcmp(a.data(), again.data(), a.size()), 0)
          << "causal " << causal << ": deterministic runs differ";
    }
  }
  std::printf(
      "GPU SUMMARY backward large: tensor-core (plain, deterministic) vs reference backward at seqlen 4k d128 h16, "
      "worst rel err %.3g\n",
      worst);
}

}  // namespace
}  // namespace fa::test
