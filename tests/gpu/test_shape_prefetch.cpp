// test_shape_prefetch.cpp -- new sequence lengths after a problem's first fa_run compile nothing: the first call
// (even key count) hands the kernels of the other shape classes to the context's prefetcher
// (runtime/serial_worker.h), and once it is idle, calls at random new lengths (odd and even key counts) run
// without a compile and match the float64 oracle. Built-in masks (none, causal, window) and a mask_mod (the plan's
// classification step beside the forward); $FA_PREFETCH=0 shows the same calls do compile without it, so the test
// can fail. Fresh random inputs, outputs poisoned before every run.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "runtime/context.h"
#include "tests/gpu/gpu_support.h"

namespace fa::test {
namespace {

constexpr int kFirst = 2048;  // the first call's key count: a multiple of every block_n

fa_context make_ctx(bool prefetch) {
  const char* old = std::getenv("FA_PREFETCH");
  const std::string saved = old ? old : "";
  setenv("FA_PREFETCH", prefetch ? "1" : "0", 1);
  fa_context_options o;
  fa_context_options_init(&o);
  o.cache_path = ":memory:";
  o.tune_policy = FA_TUNE_DEFAULTS_ONLY;
  fa_context ctx = nullptr;
  EXPECT_EQ(fa_context_create(&o, &ctx), FA_OK) << fa_last_error();
  if (old) setenv("FA_PREFETCH", saved.c_str(), 1);
  else unsetenv("FA_PREFETCH");
  return ctx;
}

void fill(Case* c, int dtype, int d, int mask, bool mod, int sq, int sk) {
  c->dtype = dtype;
  c->force_aligned = true;
  c->op.batch = 1;
  c->op.seqlen_q = sq;
  c->op.seqlen_k = sk;
  c->op.heads_q = 1;
  c->op.heads_kv = 1;
  c->op.head_dim = c->op.head_dim_v = d;
  c->op.mask = mask;
  if (mask == FA_MASK_SLIDING_WINDOW) {
    c->op.window_left = 200;
    c->op.window_right = 0;
  }
  if (mod) c->op.mask_mod = [](int, int, int i, int j) { return j <= i && (j < 4 || i - j < 300); };
}

void attach(Case* c, bool mod, fa_mods* m) {
  if (!mod) return;
  fa_mods_init(m);
  m->mask_mod = "return j <= i && (j < 4 || i - j < 300);";
  m->mask_mod_depends = 0;
  c->params.mods = m;
}

struct Variant {
  int dtype, d, mask;
  bool mod;
};

// Runs the first call at kFirst keys, waits for the prefetcher, then `n` calls at new lengths; returns the compiles
// those calls made (oracle failures are test failures).
long long compiles_after_first(bool prefetch, const Variant& v, std::mt19937_64& rng, int n, int* calls) {
  Gpu& g = gpu();
  fa_context ctx = make_ctx(prefetch);
  if (ctx == nullptr) return -1;
  EXPECT_EQ(ctx->prefetch != nullptr, prefetch);
  fa_mods m;
  {
    Case c;
    fill(&c, v.dtype, v.d, v.mask, v.mod, kFirst, kFirst);
    materialize(rng, &c);
    attach(&c, v.mod, &m);
    EXPECT_EQ(fa_run(ctx, &c.params, g.stream), FA_OK) << fa_last_error();
    EXPECT_EQ(g.d->cuStreamSynchronize(g.stream), CUDA_SUCCESS);
    const CaseResult r = compare_outputs(c);
    EXPECT_TRUE(r.err_o <= tolerance(c.dtype) && r.padding_intact) << c.desc << " err_o " << r.err_o;
  }
  if (ctx->prefetch) { EXPECT_TRUE(ctx->prefetch->wait_idle(120.0)); }
  const long long before = ctx->kernels->stats().compiles;
  for (int i = 0; i < n; ++i) {
    int sk = 1025 + static_cast<int>(rng() % 1023);  // the first call's tuning bucket (1025..2047)
    if (i == 0 && sk % 2 == 0) --sk;                 // one odd count at least
    const int sq = sk - static_cast<int>(rng() % 64);
    Case c;
    fill(&c, v.dtype, v.d, v.mask, v.mod, sq, sk);
    materialize(rng, &c);
    attach(&c, v.mod, &m);
    ++*calls;
    EXPECT_EQ(fa_run(ctx, &c.params, g.stream), FA_OK) << fa_last_error() << " [" << c.desc << "]";
    EXPECT_EQ(g.d->cuStreamSynchronize(g.stream), CUDA_SUCCESS);
    const CaseResult r = compare_outputs(c);
    EXPECT_TRUE(r.err_o <= tolerance(c.dtype) && r.err_lse <= 2e-3 && r.padding_intact)
        << "[" << c.desc << "] err_o " << r.err_o << " err_lse " << r.err_lse;
  }
  const long long made = ctx->kernels->stats().compiles - before;
  fa_context_destroy(ctx);
  return made;
}

TEST(GpuShapePrefetch, NewLengthsAfterTheFirstCallCompileNothing) {
  Gpu& g = gpu();
  if (!g.ok()) GTEST_SKIP() << "no GPU: " << g.why;
  std::mt19937_64 rng(test_seed() + 31);
  const Variant variants[] = {{FA_DTYPE_BF16, 128, FA_MASK_CAUSAL, false},
                              {FA_DTYPE_FP16, 64, FA_MASK_NONE, false},
                              {FA_DTYPE_BF16, 128, FA_MASK_SLIDING_WINDOW, false},
                              {FA_DTYPE_BF16, 128, FA_MASK_NONE, true}};
  int calls = 0, without = 0;
  for (const Variant& v : variants) {
    const std::string what = fmt::format("dtype {} d {} mask {}{}", v.dtype, v.d, v.mask, v.mod ? " + mask_mod" : "");
    EXPECT_EQ(compiles_after_first(true, v, rng, 4, &calls), 0) << what << ": a new length compiled";
    const long long off = compiles_after_first(false, v, rng, 1, &calls);
    EXPECT_GE(off, 0) << what;
    without += static_cast<int>(off);
  }
  EXPECT_GT(without, 0) << "without the prefetcher no new length compiled either: the test cannot tell";
  std::printf(
      "GPU SUMMARY shape prefetch: %d calls at new lengths, 0 compiles expected with the prefetcher; "
      "%d compiles without it\n",
      calls, without);
}

}  // namespace
}  // namespace fa::test
