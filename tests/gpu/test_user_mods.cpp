// test_user_mods.cpp -- user code (fa_mods) on the GPU against the float64 oracle given the same functions as
// callbacks: a document mask read from a buffer, prefix-LM, sinks + window, chunked local attention, a relative
// bias table (score_mod reading a float buffer), and mods that restate a built-in (causal, window, softcap, ALiBi),
// whose results must agree with the built-in's. The ready mods run through fa_run (the selected family: fwd_wgmma on
// sm_90) and through the plan of every tensor-core forward covering them (fwd_mma too). Fresh random inputs each
// run, outputs poisoned before every run.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>
#include <memory>

#include "tests/gpu/gpu_support.h"
#include "tests/gpu/plan_support.h"

namespace fa::test {
namespace {

struct ModCase {
  const char* name;
  const char* mask_mod;   // or nullptr
  const char* score_mod;  // or nullptr
  int builtin_mask = FA_MASK_NONE;  // the built-in mask applied together with the mod
  std::function<bool(int b, int h, int i, int j)> mask;
  std::function<double(double s, int b, int h, int i, int j)> score;
};

constexpr int kSq = 300, kSk = 300, kHq = 4, kHkv = 2, kD = 64;

TEST(GpuUserMods, ReadyModsMatchTheOracle) {
  Gpu& g = gpu();
  if (!g.ok()) GTEST_SKIP() << "no GPU: " << g.why;
  std::mt19937_64 rng(test_seed() + 22);
  // Buffer 0: document id per position (int32 [kSk]): 5 documents of random lengths.
  std::vector<int> doc(kSk);
  {
    int id = 0, left = 0;
    for (int j = 0; j < kSk; ++j) {
      if (left == 0) {
        ++id;
        left = 20 + static_cast<int>(rng() % 100);
      }
      doc[static_cast<size_t>(j)] = id;
      --left;
    }
  }
  // Buffer 1: a relative bias table float32 [kHq, 129] over clamp(i - j, -64, 64).
  std::vector<float> rel(kHq * 129);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (float& x : rel) x = nd(rng);
  DevBuf d_doc(doc.size() * 4), d_rel(rel.size() * 4);
  d_doc.upload(doc.data(), doc.size() * 4);
  d_rel.upload(rel.data(), rel.size() * 4);
  const int prefix = 37, sinks = 4, window = 50, chunk = 64;

  const ModCase cases[] = {
      {"document+causal", "const fa_buf0_t* d = static_cast<const fa_buf0_t*>(u.buf[0]);\nreturn d[i] == d[j];",
       nullptr, FA_MASK_CAUSAL, [&](int, int, int i, int j) { return doc[size_t(i)] == doc[size_t(j)]; }, {}},
      {"prefix_lm", "return j <= i || j < u.iscalar[0];", nullptr, FA_MASK_NONE,
       [&](int, int, int i, int j) { return j <= i || j < prefix; }, {}},
      {"sinks+window", "return j < u.iscalar[1] || (j <= i && i - j < u.iscalar[2]);", nullptr, FA_MASK_NONE,
       [&](int, int, int i, int j) { return j < sinks || (j <= i && i - j < window); }, {}},
      {"chunked", "return i / u.iscalar[3] == j / u.iscalar[3] && j <= i;", nullptr, FA_MASK_NONE,
       [&](int, int, int i, int j) { return i / chunk == j / chunk && j <= i; }, {}},
      {"relative_bias", nullptr,
       "const float* t = static_cast<const float*>(u.buf[1]);\n"
       "int r = min(max(i - j, -64), 64) + 64;\nreturn s + t[h * u.stride[1][0] + r];",
       FA_MASK_CAUSAL, {},
       [&](double s, int, int h, int i, int j) {
         const int r = std::min(std::max(i - j, -64), 64) + 64;
         return s + static_cast<double>(rel[size_t(h * 129 + r)]);
       }},
  };
  // every case first (oracle results), then every family's plan compiled in parallel, then the runs one by one
  struct Run {
    Case c;
    fa_mods m;
  };
  std::vector<std::unique_ptr<Run>> runs;
  for (const ModCase& mc : cases)
    for (int dtype : {FA_DTYPE_FP16, FA_DTYPE_BF16}) {
      runs.push_back(std::make_unique<Run>());
      Case& c = runs.back()->c;
      fa_mods& m = runs.back()->m;

      c.dtype = dtype;
      c.op.batch = 2;
      c.op.seqlen_q = kSq;
      c.op.seqlen_k = kSk;
      c.op.heads_q = kHq;
      c.op.heads_kv = kHkv;
      c.op.head_dim = kD;
      c.op.head_dim_v = kD;
      c.op.mask = mc.builtin_mask;
      c.op.mask_mod = mc.mask;
      c.op.score_mod = mc.score;
      c.want_lse = true;
      c.force_aligned = true;
      materialize(rng, &c);
      c.desc = fmt::format("{} dtype {}", mc.name, dtype);  // after materialize, which names the problem
      fa_mods_init(&m);
      m.mask_mod = mc.mask_mod;
      m.score_mod = mc.score_mod;
      m.num_buffers = 2;
      m.buffers[0] = fa_user_buffer{d_doc.get(), FA_USER_I32, 1, {kSk}, {1}};
      m.buffers[1] = fa_user_buffer{d_rel.get(), FA_USER_F32, 2, {kHq, 129}, {129, 1}};
      m.iscalars[0] = prefix;
      m.iscalars[1] = sinks;
      m.iscalars[2] = window;
      m.iscalars[3] = chunk;
      c.params.mods = &m;
    }
  std::vector<Case*> all;
  for (auto& r : runs) all.push_back(&r->c);
  const int failures = check_every_family(all);
  EXPECT_EQ(failures, 0);
}

// Mods that restate a built-in give the built-in's result (both against the oracle, and against each other).
TEST(GpuUserMods, RestatedBuiltinsAgreeWithTheBuiltins) {
  Gpu& g = gpu();
  if (!g.ok()) GTEST_SKIP() << "no GPU: " << g.why;
  std::mt19937_64 rng(test_seed() + 23);
  struct Restated {
    const char* name;
    int mask;
    int wl, wr;
    bool softcap, alibi;
    const char* mask_mod;
    const char* score_mod;
  };
  // sk - sq is iscalar[0]; the softcap is scalar[0]; slopes are buffer 0.
  const Restated cases[] = {
      {"causal", FA_MASK_CAUSAL, -1, -1, false, false, "return j <= i + u.iscalar[0];", nullptr},
      {"window(37,5)", FA_MASK_SLIDING_WINDOW, 37, 5, false, false,
       "int diag = i + u.iscalar[0];\nreturn j >= diag - 37 && j <= diag + 5;", nullptr},
      {"softcap", FA_MASK_NONE, -1, -1, true, false, nullptr, "return u.scalar[0] * tanhf(s / u.scalar[0]);"},
      {"alibi", FA_MASK_NONE, -1, -1, false, true, nullptr,
       "const float* sl = static_cast<const float*>(u.buf[0]);\nreturn s - sl[h] * fabsf((float)(i + u.iscalar[0] - j));"},
  };
  // Every case first: the built-in problem and, on the same inputs, the mod instead of the built-in feature (the
  // oracle's answer stays the same); both prepared (compiled) in parallel, then run one by one.
  struct Run {
    Case c;
    fa_mods m;
    fa_params builtin, mod;
    DevBuf slopes;
  };
  std::vector<std::unique_ptr<Run>> runs;
  for (const Restated& rc : cases)
    for (int sk : {300, 417}) {
      runs.push_back(std::make_unique<Run>());
      Run& r = *runs.back();
      Case& c = r.c;
      c.dtype = FA_DTYPE_BF16;
      c.op.batch = 2;
      c.op.seqlen_q = 300;
      c.op.seqlen_k = sk;
      c.op.heads_q = kHq;
      c.op.heads_kv = kHkv;
      c.op.head_dim = kD;
      c.op.head_dim_v = kD;
      c.op.mask = rc.mask;
      c.op.window_left = rc.wl;
      c.op.window_right = rc.wr;
      c.op.softcap = rc.softcap ? 30.0 : 0.0;
      if (rc.alibi) c.alibi.assign(1, 0.0);
      c.want_lse = true;
      c.force_aligned = true;
      materialize(rng, &c);
      c.desc = fmt::format("{} sk {}", rc.name, sk);  // after materialize, which names the problem
      // the slopes buffer holds the built-in's slopes (materialize drew them)
      std::vector<float> slopes(kHq, 0.0f);
      if (rc.alibi)
        for (int h = 0; h < kHq; ++h) slopes[size_t(h)] = c.alibi_f[size_t(h)];
      r.slopes = DevBuf(slopes.size() * 4);
      r.slopes.upload(slopes.data(), slopes.size() * 4);
      fa_mods_init(&r.m);
      r.m.mask_mod = rc.mask_mod;
      r.m.score_mod = rc.score_mod;
      r.m.num_buffers = 1;
      r.m.buffers[0] = fa_user_buffer{r.slopes.get(), FA_USER_F32, 1, {kHq}, {1}};
      r.m.iscalars[0] = sk - 300;
      r.m.scalars[0] = 30.0f;
      r.builtin = c.params;
      r.mod = c.params;
      r.mod.mods = &r.m;
      r.mod.mask = FA_MASK_NONE;
      r.mod.window_left = r.mod.window_right = -1;
      r.mod.softcap = 0.0f;
      r.mod.alibi_slopes = nullptr;
    }
  parallel_for(2 * runs.size(), [&](size_t n) {
    fa_prepare(g.ctx, n % 2 ? &runs[n / 2]->mod : &runs[n / 2]->builtin);
  });
  int failures = 0;
  for (auto& run : runs) {
    Case& c = run->c;
    c.params = run->builtin;
    const CaseResult builtin = check_case(c);
    std::vector<uint8_t> o_builtin(c.o_n * 2);
    c.d_o.download(o_builtin.data(), o_builtin.size());
    c.params = run->mod;  // the mod: the built-in feature off in the params
    {  // poison o and lse again: the mod's run must write every element itself
      std::vector<uint8_t> poison(c.o_n * 2, 0xff);
      c.d_o.upload(poison.data(), poison.size());
      std::vector<float> nan_lse(c.lse_n, std::nanf(""));
      if (c.lse_n) c.d_lse.upload(nan_lse.data(), c.lse_n * 4);
    }
    const CaseResult mod = check_case(c);
    std::vector<uint8_t> o_mod(c.o_n * 2);
    c.d_o.download(o_mod.data(), o_mod.size());
    double diff = 0;
    const std::vector<double> a = decode(FA_DTYPE_BF16, o_builtin), b = decode(FA_DTYPE_BF16, o_mod);
    for (size_t e = 0; e < a.size(); ++e)
      if (c.o_valid[e]) diff = std::max(diff, std::fabs(a[e] - b[e]));
    const double tol = tolerance(FA_DTYPE_BF16);
    const bool ok = builtin.failure.empty() && mod.failure.empty() && builtin.err_o <= tol && mod.err_o <= tol &&
                    mod.err_lse <= 1e-3 && diff <= tol && !std::isnan(diff);
    if (!ok) ++failures;
    char key[256] = "?";
    fa_problem_key(g.ctx, &c.params, key, sizeof key);
    const std::string family = std::string(key).substr(0, std::string(key).find('.'));  // which forward ran the mod
    std::printf("  %-18s %s %s: built-in err %.2e, mod err %.2e, |mod - built-in| %.2e %s%s\n", c.desc.c_str(),
                ok ? "ok  " : "FAIL", family.c_str(), builtin.err_o, mod.err_o, diff, builtin.failure.c_str(),
                mod.failure.c_str());
  }
  EXPECT_EQ(failures, 0);
}

}  // namespace
}  // namespace fa::test
