// test_sinks.cpp -- attention sinks (fa_params.sinks, fa_bwd_params.dsinks) on the GPU against the float64 oracle,
// on fresh random inputs with outputs poisoned first, sinks drawn per head as a user's could be (random_sinks:
// typical, large enough to dominate their rows, -inf and -inf-ish):
//   - every forward family: fa_run and each tensor-core family's plan (fwd_mma, fwd_wgmma on sm_90) and fwd_ref,
//     random problems (GQA, causal, windows, varlen with empty sequences, bias, ALiBi, softcap) and the fully masked
//     rows (o = 0, lse = sink);
//   - decode (fwd_split: contiguous and paged caches, used lengths 0 / 1 / full, GQA packing, forced splits whose
//     combine adds the sink once, automatic splits), MLA's latent cache (fwd_mla on sm_90, the wide fwd_split
//     kernel elsewhere) and an fp8 cache (sm_89+);
//   - the backward: dq / dk / dv / dsinks of every backward family covering a problem (bwd_wgmma on sm_90, bwd_mma,
//     bwd_ref) and of random problems, and dsinks bitwise the same run to run, deterministic mode or not.
// Every test skips without a GPU.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>

#include <fmt/format.h>

#include "generator/family.h"
#include "generator/problem.h"
#include "runtime/context.h"
#include "tests/gpu/decode_support.h"
#include "tests/gpu/grad_support.h"
#include "tests/gpu/plan_support.h"

namespace fa::test {
namespace {

#define REQUIRE_GPU() \
  if (!gpu().ok()) GTEST_SKIP() << "no GPU: " << gpu().why

// check_every_family's runs plus fwd_ref's plan on each case; returns the failures.
int check_with_reference(const std::vector<Case*>& cases) {
  int failures = check_every_family(cases);
  const gen::Family& ref = *gen::find_family("fwd_ref");
  for (Case* c : cases) {
    const CaseResult r = run_plan(*c, ref, nullptr);
    const bool ok = r.failure.empty() && r.err_o <= tolerance(c->dtype) && r.err_lse <= 1e-3 && r.padding_intact;
    if (!ok) ++failures;
    EXPECT_TRUE(ok) << "fwd_ref [" << c->desc << "] err_o " << r.err_o << " err_lse " << r.err_lse << " " << r.failure;
  }
  return failures;
}

TEST(GpuSinks, ForwardEveryFamilyMatchesTheOracle) {
  REQUIRE_GPU();
  std::mt19937_64 rng(test_seed() + 4201);
  const int n = case_count(60);
  std::vector<std::unique_ptr<Case>> owned;
  std::vector<Case*> cases;
  for (int i = 0; i < n; ++i) {
    owned.push_back(std::make_unique<Case>());
    owned.back()->with_sinks = true;
    CaseOptions opt;
    opt.force_aligned = i % 2 == 0;  // the fast families' layouts half the time
    make_random_case(rng, opt, owned.back().get());
    cases.push_back(owned.back().get());
  }
  const int failures = check_with_reference(cases);
  EXPECT_EQ(failures, 0);
  std::printf("GPU SUMMARY sinks forward: %d random problems, %d failed runs\n", n, failures);
}

// Rows that see no key: o = 0 and lse = the sink (or -inf where the sink is -inf), in every family.
TEST(GpuSinks, FullyMaskedRowsGiveTheSink) {
  REQUIRE_GPU();
  std::mt19937_64 rng(test_seed() + 4202);
  struct E {
    int sq, sk, mask, wl, wr;
  };
  const E edges[] = {{5, 0, 0, -1, -1}, {40, 9, 1, -1, -1}, {33, 7, 2, 0, 0}, {129, 300, 2, 3, 0}};
  std::vector<std::unique_ptr<Case>> owned;
  std::vector<Case*> cases;
  for (int dt : {FA_DTYPE_FP16, FA_DTYPE_BF16, FA_DTYPE_FP32})
    for (const E& e : edges)
      for (int d : {64, 128}) {
        owned.push_back(std::make_unique<Case>());
        Case& c = *owned.back();
        c.dtype = dt;
        c.with_sinks = true;
        c.force_aligned = true;
        c.op.batch = 2;
        c.op.heads_q = 6;
        c.op.heads_kv = 2;
        c.op.head_dim = d;
        c.op.seqlen_q = e.sq;
        c.op.seqlen_k = e.sk;
        c.op.mask = e.mask;
        c.op.window_left = e.wl;
        c.op.window_right = e.wr;
        materialize(rng, &c);
        cases.push_back(&c);
      }
  EXPECT_EQ(check_with_reference(cases), 0);
}

// One decode problem of spec s (sinks on) at `splits` against the oracle; "" when it matches.
std::string decode_case(std::mt19937_64& rng, DecodeSpec s, int page_size, int splits, std::string* key) {
  s.sinks = true;
  return run_random_case(rng, s, page_size, splits, key);
}

TEST(GpuSinks, DecodeContiguousAndPagedMatchTheOracle) {
  REQUIRE_GPU();
  std::mt19937_64 rng(test_seed() + 4203);
  Pick pick{rng};
  const int n = case_count(48);
  int failures = 0;
  for (int c = 0; c < n; ++c) {
    DecodeSpec s;
    s.dtype = pick({FA_DTYPE_BF16, FA_DTYPE_FP16});
    s.hkv = pick({1, 2});
    s.hq = s.hkv * pick({1, 4, 8});
    const bool paged = c % 2 == 1;
    s.cap = pick({17, 200, 640, 3000});
    random_features(pick, c, paged, &s);
    const int page_size = paged ? pick({1, 16, 64, 256}) : 0;
    const int splits = c % 3 == 0 ? 1 : c % 3 == 1 ? pick({2, 3, 7}) : 0;  // unsplit, forced (the combine), automatic
    std::string key;
    const std::string err = decode_case(rng, s, page_size, splits, &key);
    if (!err.empty()) {
      ++failures;
      ADD_FAILURE() << "case " << c << " " << describe(s) << " sinks"
                    << (paged ? fmt::format(" paged {}", page_size) : "") << " splits " << splits << ": " << err;
    } else {
      EXPECT_NE(key.find("fwd_split"), std::string::npos) << key;
      EXPECT_NE(key.find(".sinks"), std::string::npos) << key;
    }
  }
  std::printf("GPU SUMMARY sinks decode: %d random KV-cache problems, %d failed\n", n, failures);
}

TEST(GpuSinks, Fp8CacheDecodeMatchesTheOracle) {
  REQUIRE_GPU();
  if (gpu().ctx->arch < 89) GTEST_SKIP() << "fp8 caches need sm_89 or newer";
  std::mt19937_64 rng(test_seed() + 4204);
  for (int c = 0; c < 8; ++c) {
    DecodeSpec s;
    s.kv_dtype = c % 2 ? FA_DTYPE_E5M2 : FA_DTYPE_E4M3;
    s.per_head_scale = c % 3 == 0;
    s.hq = 8;
    s.hkv = 2;
    s.d = s.dv = c % 4 < 2 ? 128 : 64;
    s.mask = c % 3;
    std::string key;
    EXPECT_EQ(decode_case(rng, s, c % 2 ? 16 : 0, c % 4 == 0 ? 3 : 1, &key), "") << describe(s) << " [" << key << "]";
  }
}

// MLA shapes (d 576 / dv 512, one latent KV head): with the latent layout (fwd_mla on sm_90) and a separate v (the
// wide fwd_split kernel), contiguous and paged, unsplit, forced and automatic splits.
TEST(GpuSinks, MlaDecodeMatchesTheOracle) {
  REQUIRE_GPU();
  std::mt19937_64 rng(test_seed() + 4205);
  for (bool latent : {true, false})
    for (int batch_heads : {128, 16}) {
      DecodeSpec s = mla_spec(3, 700);
      s.hq = batch_heads;
      s.sq = batch_heads == 16 ? 3 : 1;
      s.mask = s.sq > 1 ? FA_MASK_CAUSAL : FA_MASK_NONE;
      s.sinks = true;
      DecodeData x;
      make_data(rng, s, &x);
      if (latent) make_latent(&x);
      const std::vector<int> used = random_used(rng, s.batch, s.cap);
      std::vector<double> o_ref, lse_ref;
      oracle_of(x, used, {}, &o_ref, &lse_ref);
      for (int page_size : {0, 64}) {
        Cache cache;
        if (page_size > 0) make_paged(rng, x, used, page_size, &cache);
        else make_contiguous(x, used, &cache);
        cache.latent = latent;
        set_used(&cache, used);
        for (int splits : {1, 2, 0}) {
          const Out r = run(x, params_of(x, cache, true, splits));
          EXPECT_EQ(compare(x, r, o_ref, lse_ref), "")
              << describe(s) << (latent ? " latent" : "") << " page " << page_size << " splits " << splits;
          EXPECT_NE(r.key.find(".sinks"), std::string::npos) << r.key;
        }
      }
    }
}

// The backward of hand-picked problems through every backward family that covers them (at its defaults) and
// fa_run_backward's choice: dq, dk, dv and dsinks against the oracle.
TEST(GpuSinks, BackwardEveryFamilyMatchesTheOracle) {
  REQUIRE_GPU();
  Gpu& gp = gpu();
  std::mt19937_64 rng(test_seed() + 4206);
  // dtype, d, dv, heads q/kv, mask (2: window 37 / 5), sq, sk, bias, alibi, softcap, varlen
  const CaseSpec problems[] = {
      {FA_DTYPE_BF16, 128, 128, 8, 2, 1, 333, 333, false, false, false, false},
      {FA_DTYPE_FP16, 64, 64, 4, 4, 0, 257, 200, false, false, false, false},
      {FA_DTYPE_BF16, 64, 64, 6, 2, 2, 300, 300, false, false, false, false},
      {FA_DTYPE_FP16, 128, 128, 4, 1, 1, 40, 9, false, false, false, false},  // fully masked rows
      {FA_DTYPE_BF16, 96, 96, 4, 2, 1, 0, 0, false, true, true, true},        // varlen, ALiBi, softcap
      {FA_DTYPE_FP32, 64, 64, 2, 1, 0, 70, 90, true, false, false, false},
  };
  int runs = 0;
  for (const CaseSpec& pr : problems) {
    for (bool det : {false, true}) {
      Case c;
      c.with_sinks = true;
      Grads g;
      gen::ProblemDesc d;
      ASSERT_TRUE(forward_with_grads(rng, pr, &c, &g, &d));
      ASSERT_FALSE(g.dsinks_ref.empty());
      g.b.deterministic = det ? 1 : 0;
      d.deterministic = det;
      const GradResult r = check_grads(c, g);
      EXPECT_TRUE(r.ok(c.dtype)) << "fa_run_backward " << r.describe() << "[" << c.desc << "] det " << det;
      ++runs;
      for (const gen::Family* f : gen::ranked_families(gen::Role::Backward, gp.ctx->arch)) {
        if (!gen::family_covers(*f, d, gp.ctx->arch, nullptr)) continue;
        const gen::Semantic s = gen::semantic_for(*f, d, gp.ctx->arch);
        const GradResult rf = check_grads_at(c, g, f->defaults(s), f->name);
        EXPECT_TRUE(rf.ok(c.dtype)) << f->name << " " << rf.describe() << "[" << c.desc << "] det " << det;
        ++runs;
      }
    }
  }
  std::printf("GPU SUMMARY sinks backward: %d runs over %zu problems\n", runs, std::size(problems));
}

TEST(GpuSinks, BackwardRandomProblemsMatchTheOracle) {
  REQUIRE_GPU();
  Gpu& gp = gpu();
  std::mt19937_64 rng(test_seed() + 4207);
  const int n = std::max(10, case_count(40) / 2);
  int failures = 0;
  for (int i = 0; i < n; ++i) {
    Case c;
    c.with_sinks = true;
    CaseOptions opt;
    opt.max_work = 1.5e7;
    opt.force_aligned = i % 2 == 0;
    make_random_case(rng, opt, &c);
    c.want_lse = true;
    c.params.lse = reinterpret_cast<float*>(c.d_lse.get());
    ASSERT_EQ(fa_run(gp.ctx, &c.params, gp.stream), FA_OK) << fa_last_error() << " [" << c.desc << "]";
    Grads g;
    setup_grads(rng, c, g);
    g.b.deterministic = i % 3 == 0 ? 1 : 0;
    const GradResult r = check_grads(c, g);
    if (!r.ok(c.dtype)) {
      ++failures;
      ADD_FAILURE() << "case " << i << " " << r.describe() << "[" << c.desc << "] det " << g.b.deterministic;
    }
  }
  std::printf("GPU SUMMARY sinks backward random: %d problems, %d failed\n", n, failures);
}

// dsinks (written by bwd_sinks from bwd_pre's partials in a fixed order) is bitwise the same over repeated runs, in
// the deterministic mode and out of it; with the deterministic mode dq too.
TEST(GpuSinks, DsinksBitwiseRepeatable) {
  REQUIRE_GPU();
  std::mt19937_64 rng(test_seed() + 4208);
  for (bool det : {false, true}) {
    Case c;
    c.with_sinks = true;
    Grads g;
    gen::ProblemDesc d;
    ASSERT_TRUE(forward_with_grads(
        rng, CaseSpec{FA_DTYPE_BF16, 128, 128, 8, 2, 1, 1000, 1000, false, false, false, false}, &c, &g, &d));
    g.b.deterministic = det ? 1 : 0;
    std::vector<float> first(g.dsinks_ref.size()), now(first.size());
    const size_t dq_bytes = c.q_n * 2;
    std::vector<uint8_t> dq_first(dq_bytes), dq_now(dq_bytes);
    for (int run = 0; run < 5; ++run) {
      const GradResult r = check_grads(c, g);
      ASSERT_TRUE(r.ok(c.dtype)) << r.describe() << "[" << c.desc << "]";
      g.d_dsinks.download(run == 0 ? first.data() : now.data(), first.size() * 4);
      g.d_dq.download(run == 0 ? dq_first.data() : dq_now.data(), dq_bytes);
      if (run == 0) continue;
      EXPECT_EQ(std::memcmp(first.data(), now.data(), first.size() * 4), 0) << "dsinks differs in run " << run;
      if (det) { EXPECT_TRUE(dq_first == dq_now) << "dq differs in run " << run << " (deterministic)"; }
    }
  }
}

}  // namespace
}  // namespace fa::test
