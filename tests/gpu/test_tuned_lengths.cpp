// test_tuned_lengths.cpp -- tuning on first use at one length, then calls at random lengths of the same tuning
// bucket (odd and even key counts, fixed-length and varlen, every mask): every call returns FA_OK with the oracle's
// answer, and nothing compiles after fa_prepare. The chooser re-checks a tuned winner for each call and falls back
// where the winner is invalid (tuner/chooser.h); fa_prepare compiles every shape class of the bucket.
#include <gtest/gtest.h>
#include <unistd.h>

#include <memory>

#include "runtime/context.h"
#include "tests/cpu/temp_dir.h"
#include "tests/gpu/gpu_support.h"
#include "tuner/chooser.h"

namespace fa::test {
namespace {

void fill(Case* c, int mask, bool varlen, int sq, int sk) {
  c->dtype = FA_DTYPE_BF16;
  c->force_aligned = true;
  c->op.heads_q = 4;
  c->op.heads_kv = 1;
  c->op.head_dim = 128;
  c->op.mask = mask;
  if (mask == 2) {
    c->op.window_left = 100;
    c->op.window_right = 7;
  }
  if (varlen) {  // two sequences, the longer at the maxima
    c->op.batch = 2;
    c->op.cu_seqlens_q = {0, sq / 3, sq / 3 + sq};
    c->op.cu_seqlens_k = {0, sk / 2, sk / 2 + sk};
  } else {
    c->op.batch = 1;
    c->op.seqlen_q = sq;
    c->op.seqlen_k = sk;
  }
}

TEST(GpuTunedLengths, RandomLengthsAfterTuningNeverFailNorCompile) {
  Gpu& g = gpu();
  if (!g.ok()) GTEST_SKIP() << "no GPU: " << g.why;
  const TempDir tmp("tuned_lengths");
  const std::string dir = tmp.path();
  fa_context_options o;
  fa_context_options_init(&o);
  const std::string cache = dir + "/cache.sqlite";
  o.cache_path = cache.c_str();
  o.tune_policy = FA_TUNE_ON_FIRST_USE;
  fa_context ctx = nullptr;
  ASSERT_EQ(fa_context_create(&o, &ctx), FA_OK) << fa_last_error();
  auto* chooser = dynamic_cast<tune::TuningChooser*>(ctx->chooser.get());
  ASSERT_NE(chooser, nullptr);
  chooser->options().max_candidates = 6;  // the default and FA2's tile come first; a short tuning per key
  chooser->options().budget_ms = 150;
  std::mt19937_64 rng(test_seed() + 7);
  int calls = 0, failures = 0;
  for (int mask = 0; mask < 3; ++mask) {
    for (bool varlen : {false, true}) {
      Case base;
      fill(&base, mask, varlen, 1024, 1024);
      materialize(rng, &base);
      ASSERT_EQ(fa_prepare(ctx, &base.params), FA_OK) << fa_last_error();  // tunes at 1024, compiles the bucket
      const long long compiles = ctx->kernels->stats().compiles;
      for (int i = 0; i < 6; ++i) {
        const int multiples[] = {1, 2, 32, 64, 128, 16};
        const int m = multiples[i];
        int sk = 1024 - m * static_cast<int>(rng() % static_cast<uint64_t>(511 / m));
        if (m == 1 && sk % 2 == 0) --sk;  // odd
        const int sq = 513 + static_cast<int>(rng() % 512);
        Case c;
        fill(&c, mask, varlen, sq, sk);
        materialize(rng, &c);
        ++calls;
        const fa_status st = fa_run(ctx, &c.params, g.stream);
        ASSERT_EQ(st, FA_OK) << fa_last_error() << " [" << c.desc << "]";
        ASSERT_EQ(g.d->cuStreamSynchronize(g.stream), CUDA_SUCCESS);
        const CaseResult r = compare_outputs(c);
        const bool ok = r.err_o <= tolerance(c.dtype) && r.err_lse <= 2e-3 && r.padding_intact;
        if (!ok) {
          ++failures;
          ADD_FAILURE() << "[" << c.desc << "] err_o " << r.err_o << " err_lse " << r.err_lse;
        }
      }
      EXPECT_EQ(ctx->kernels->stats().compiles, compiles)
          << "a call compiled after fa_prepare (mask " << mask << (varlen ? ", varlen" : "") << ")";
    }
  }
  std::printf("GPU SUMMARY tuned lengths: %d calls after tuning at 1024, %d failed\n", calls, failures);
  fa_context_destroy(ctx);
}

}  // namespace
}  // namespace fa::test
