// test_user_mods.cpp -- user code (fa_mods) on the GPU against the float64 oracle given the same functions as
// callbacks: a document mask read from a buffer, prefix-LM, sinks + window, chunked local attention, a relative
// bias table (score_mod reading a float buffer), a softcap score_mod, and mods that restate a built-in (causal,
// window, softcap, ALiBi), whose results and gradients must agree with the built-in's. The ready mods run through
// fa_run (the selected family: fwd_wgmma on sm_90) and through the plan of every tensor-core forward covering them
// (fwd_mma too); their backward against the oracle's gradients (score_mods with their derivative) through bwd_mma
// and bwd_ref. Fresh random inputs each run, outputs poisoned before every run.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>

#include "generator/family.h"
#include "generator/problem.h"
#include "runtime/context.h"
#include "runtime/validate.h"
#include "tests/gpu/gpu_support.h"
#include "tests/gpu/grad_support.h"
#include "tests/gpu/plan_support.h"

namespace fa::test {
namespace {

struct ModCase {
  const char* name;
  const char* mask_mod;             // or nullptr
  const char* score_mod;            // or nullptr
  const char* score_grad;           // score_mod's derivative (the backward), or nullptr
  int builtin_mask = FA_MASK_NONE;  // the built-in mask applied together with the mod
  std::function<bool(int b, int h, int i, int j)> mask;
  std::function<double(double s, int b, int h, int i, int j)> score;
  std::function<double(double s, int b, int h, int i, int j)> grad;
};

constexpr int kSq = 300, kSk = 300, kHq = 4, kHkv = 2, kD = 64;

// The ready mods (python/fa/mods.py) as C bodies with their oracle callbacks, over buffers of random contents:
// buffer 0 the document id per position (int32 [kSk], 5 documents of random lengths), buffer 1 a relative bias
// table (float32 [kHq, 129] over clamp(i - j, -64, 64)); iscalars prefix, sinks, window, chunk; scalar 0 a softcap.
struct ReadyMods {
  std::vector<int> doc = std::vector<int>(kSk);
  std::vector<float> rel = std::vector<float>(kHq * 129);
  DevBuf d_doc, d_rel;
  static constexpr int prefix = 37, sinks = 4, window = 50, chunk = 64;
  static constexpr float cap = 6.0f;
  std::vector<ModCase> cases;

  explicit ReadyMods(std::mt19937_64& rng) : d_doc(kSk * 4), d_rel(kHq * 129 * 4) {
    int id = 0, left = 0;
    for (int j = 0; j < kSk; ++j) {
      if (left == 0) {
        ++id;
        left = 20 + static_cast<int>(rng() % 100);
      }
      doc[static_cast<size_t>(j)] = id;
      --left;
    }
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (float& x : rel) x = nd(rng);
    d_doc.upload(doc.data(), doc.size() * 4);
    d_rel.upload(rel.data(), rel.size() * 4);
    auto one = [](double, int, int, int, int) { return 1.0; };
    cases = {
        {"document+causal",
         "const fa_buf0_t* d = static_cast<const fa_buf0_t*>(u.buf[0]);\nreturn d[i] == d[j];",
         nullptr,
         nullptr,
         FA_MASK_CAUSAL,
         [this](int, int, int i, int j) { return doc[size_t(i)] == doc[size_t(j)]; },
         {},
         {}},
        {"prefix_lm",
         "return j <= i || j < u.iscalar[0];",
         nullptr,
         nullptr,
         FA_MASK_NONE,
         [](int, int, int i, int j) { return j <= i || j < prefix; },
         {},
         {}},
        {"sinks+window",
         "return j < u.iscalar[1] || (j <= i && i - j < u.iscalar[2]);",
         nullptr,
         nullptr,
         FA_MASK_NONE,
         [](int, int, int i, int j) { return j < sinks || (j <= i && i - j < window); },
         {},
         {}},
        {"chunked",
         "return i / u.iscalar[3] == j / u.iscalar[3] && j <= i;",
         nullptr,
         nullptr,
         FA_MASK_NONE,
         [](int, int, int i, int j) { return i / chunk == j / chunk && j <= i; },
         {},
         {}},
        {"relative_bias",
         nullptr,
         "const float* t = static_cast<const float*>(u.buf[1]);\n"
         "int r = min(max(i - j, -64), 64) + 64;\nreturn s + t[h * u.stride[1][0] + r];",
         "return 1.0f;",
         FA_MASK_CAUSAL,
         {},
         [this](double s, int, int h, int i, int j) {
           const int r = std::min(std::max(i - j, -64), 64) + 64;
           return s + static_cast<double>(rel[size_t(h * 129 + r)]);
         },
         one},
        {"softcap",
         nullptr,
         "return u.scalar[0] * tanhf(s / u.scalar[0]);",
         "const float t = tanhf(s / u.scalar[0]);\nreturn 1.0f - t * t;",
         FA_MASK_NONE,
         {},
         [](double s, int, int, int, int) { return cap * std::tanh(s / cap); },
         [](double s, int, int, int, int) {
           const double t = std::tanh(s / cap);
           return 1.0 - t * t;
         }},
    };
  }
  // The case's problem (fresh random inputs) with mc's mod in the params (`m` holds it) and in the oracle.
  void make(std::mt19937_64& rng, const ModCase& mc, int dtype, Case* c, fa_mods* m, int d = kD) const {
    c->dtype = dtype;
    c->op.batch = 2;
    c->op.seqlen_q = kSq;
    c->op.seqlen_k = kSk;
    c->op.heads_q = kHq;
    c->op.heads_kv = kHkv;
    c->op.head_dim = d;
    c->op.head_dim_v = d;
    c->op.mask = mc.builtin_mask;
    c->op.mask_mod = mc.mask;
    c->op.score_mod = mc.score;
    c->op.score_mod_grad = mc.grad;
    c->want_lse = true;
    c->force_aligned = true;
    materialize(rng, c);
    c->desc = fmt::format("{} dtype {} d {}", mc.name, dtype, d);  // materialize writes its generic description
    fa_mods_init(m);
    m->mask_mod = mc.mask_mod;
    m->score_mod = mc.score_mod;
    m->score_mod_grad = mc.score_grad;
    m->num_buffers = 2;
    m->buffers[0] = fa_user_buffer{d_doc.get(), FA_USER_I32, 1, {kSk}, {1}};
    m->buffers[1] = fa_user_buffer{d_rel.get(), FA_USER_F32, 2, {kHq, 129}, {129, 1}};
    m->iscalars[0] = prefix;
    m->iscalars[1] = sinks;
    m->iscalars[2] = window;
    m->iscalars[3] = chunk;
    m->scalars[0] = cap;
    c->params.mods = m;
  }
};

TEST(GpuUserMods, ReadyModsMatchTheOracle) {
  Gpu& g = gpu();
  if (!g.ok()) GTEST_SKIP() << "no GPU: " << g.why;
  std::mt19937_64 rng(test_seed() + 22);
  const ReadyMods ready(rng);
  // every case first (oracle results), then every family's plan compiled in parallel, then the runs one by one
  struct Run {
    Case c;
    fa_mods m;
  };
  std::vector<std::unique_ptr<Run>> runs;
  for (const ModCase& mc : ready.cases)
    for (int dtype : {FA_DTYPE_FP16, FA_DTYPE_BF16}) {
      runs.push_back(std::make_unique<Run>());
      ready.make(rng, mc, dtype, &runs.back()->c, &runs.back()->m);
    }
  std::vector<Case*> all;
  for (auto& r : runs) all.push_back(&r->c);
  const int failures = check_every_family(all);
  EXPECT_EQ(failures, 0);
}

// The backward of each ready mod at head dims 64 and 128 against the oracle's gradients (score_mods with their
// derivative; the forward's output checked on the way), through the selected tensor-core backward (printed; block
// skipping for the masks; bwd_wgmma on sm_90 where it covers, i.e. the non-deterministic cases) and the reference one
// (FA_FORCE_REFERENCE_BWD), the deterministic mode on every other case. Kernels compile in parallel first.
TEST(GpuUserMods, ReadyModsGradientsMatchTheOracle) {
  Gpu& g = gpu();
  if (!g.ok()) GTEST_SKIP() << "no GPU: " << g.why;
  std::mt19937_64 rng(test_seed() + 24);
  const ReadyMods ready(rng);
  std::vector<std::unique_ptr<Case>> cases;
  std::vector<std::unique_ptr<fa_mods>> mods;
  std::vector<const fa_params*> problems;
  std::vector<const Case*> owners;
  for (const ModCase& mc : ready.cases)
    for (int d : {kD, 128})  // head dims 64 and 128: the Hopper backward's (bwd_wgmma on sm_90, non-deterministic)
      for (int dtype : {FA_DTYPE_FP16, FA_DTYPE_BF16}) {
        cases.push_back(std::make_unique<Case>());
        mods.push_back(std::make_unique<fa_mods>());
        ready.make(rng, mc, dtype, cases.back().get(), mods.back().get(), d);
        problems.push_back(&cases.back()->params);
        owners.push_back(cases.back().get());
      }
  prepare_in_parallel(problems, owners);
  setenv("FA_FORCE_REFERENCE_BWD", "1", 1);
  prepare_in_parallel(problems, owners);
  unsetenv("FA_FORCE_REFERENCE_BWD");
  int failures = 0;
  for (size_t n = 0; n < cases.size(); ++n) {
    Case& c = *cases[n];
    const CaseResult fwd = check_case(c);
    const bool fwd_ok =
        fwd.failure.empty() && fwd.err_o <= tolerance(c.dtype) && fwd.err_lse <= 1e-3 && fwd.padding_intact;
    Grads gr;
    setup_grads(rng, c, gr);
    gr.b.deterministic = static_cast<int>(n % 2);
    rt::BwdView view;
    gen::ProblemDesc pd;
    ASSERT_TRUE(rt::validate_backward(&gr.b, &view, &pd).ok());
    const char* selected = gen::select_backward(pd, g.ctx->arch).family->name;
    for (bool reference : {false, true}) {
      if (reference) setenv("FA_FORCE_REFERENCE_BWD", "1", 1);
      const GradResult r = check_grads(c, gr);
      if (reference) unsetenv("FA_FORCE_REFERENCE_BWD");
      const bool ok = fwd_ok && r.ok(c.dtype);
      if (!ok) ++failures;
      std::printf("  %-30s %-9s det %d %s err_o %.2e dq %.2e dk %.2e dv %.2e%s %s%s\n", c.desc.c_str(),
                  reference ? "bwd_ref" : selected, gr.b.deterministic, ok ? "ok  " : "FAIL", fwd.err_o, r.dq, r.dk,
                  r.dv, r.padding_ok ? "" : " PADDING WRITTEN", fwd.failure.c_str(), r.failure.c_str());
    }
  }
  EXPECT_EQ(failures, 0);
}

// Mods that restate a built-in give the built-in's result and gradients (both against the oracle, and against each
// other; score_mods with their derivative).
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
    const char* score_grad;
  };
  // sk - sq is iscalar[0]; the softcap is scalar[0]; slopes are buffer 0.
  const Restated cases[] = {
      {"causal", FA_MASK_CAUSAL, -1, -1, false, false, "return j <= i + u.iscalar[0];", nullptr, nullptr},
      {"window(37,5)", FA_MASK_SLIDING_WINDOW, 37, 5, false, false,
       "int diag = i + u.iscalar[0];\nreturn j >= diag - 37 && j <= diag + 5;", nullptr, nullptr},
      {"softcap", FA_MASK_NONE, -1, -1, true, false, nullptr, "return u.scalar[0] * tanhf(s / u.scalar[0]);",
       "const float t = tanhf(s / u.scalar[0]);\nreturn 1.0f - t * t;"},
      {"alibi", FA_MASK_NONE, -1, -1, false, true, nullptr,
       "const float* sl = static_cast<const float*>(u.buf[0]);\nreturn s - sl[h] * fabsf((float)(i + u.iscalar[0] - "
       "j));",
       "return 1.0f;"},
  };
  // The built-in problems, and each one's params with the mod instead of the built-in feature (the oracle's answer
  // stays the same); their kernels compile in parallel first.
  struct Item {
    std::unique_ptr<Case> c;
    fa_mods m;
    fa_params mod_params;
    DevBuf slopes;  // buffer 0: the built-in's slopes (materialize drew them)
  };
  std::vector<std::unique_ptr<Item>> items;
  std::vector<const fa_params*> problems;
  std::vector<const Case*> owners;
  for (const Restated& rc : cases)
    for (int sk : {300, 417}) {
      items.push_back(std::make_unique<Item>());
      Item& it = *items.back();
      it.c = std::make_unique<Case>();
      Case& c = *it.c;
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
      std::vector<float> slopes(kHq, 0.0f);
      if (rc.alibi)
        for (int h = 0; h < kHq; ++h) slopes[size_t(h)] = c.alibi_f[size_t(h)];
      it.slopes = DevBuf(slopes.size() * 4);
      it.slopes.upload(slopes.data(), slopes.size() * 4);
      fa_mods& m = it.m;
      fa_mods_init(&m);
      m.mask_mod = rc.mask_mod;
      m.score_mod = rc.score_mod;
      m.score_mod_grad = rc.score_grad;
      m.num_buffers = 1;
      m.buffers[0] = fa_user_buffer{it.slopes.get(), FA_USER_F32, 1, {kHq}, {1}};
      m.iscalars[0] = sk - 300;
      m.scalars[0] = 30.0f;
      it.mod_params = c.params;
      it.mod_params.mods = &m;
      it.mod_params.mask = FA_MASK_NONE;
      it.mod_params.window_left = it.mod_params.window_right = -1;
      it.mod_params.softcap = 0.0f;
      it.mod_params.alibi_slopes = nullptr;
      problems.push_back(&c.params);
      problems.push_back(&it.mod_params);
      owners.push_back(&c);
      owners.push_back(&c);
    }
  prepare_in_parallel(problems, owners);
  int failures = 0;
  for (auto& item : items) {
    {  // one built-in problem and its restatement
      Case& c = *item->c;
      const CaseResult builtin = check_case(c);
      std::vector<uint8_t> o_builtin(c.o_n * 2);
      c.d_o.download(o_builtin.data(), o_builtin.size());
      Grads gr;  // the built-in's gradients (the oracle's are the mod's too)
      setup_grads(rng, c, gr);
      const GradResult gb = check_grads(c, gr);
      std::vector<double> builtin_grad[3];
      for (int n = 0; n < 3; ++n) {
        const DevBuf& buf = n == 0 ? gr.d_dq : n == 1 ? gr.d_dk : gr.d_dv;
        std::vector<uint8_t> bytes(buf.bytes);
        buf.download(bytes.data(), bytes.size());
        builtin_grad[n] = decode(FA_DTYPE_BF16, bytes);
      }
      // Now the mod: the built-in feature off in the params (the oracle's answer stays the same).
      c.params = item->mod_params;
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
      // The mod's gradients against the oracle, then against the built-in's (relative, over valid elements).
      const GradResult gm = check_grads(c, gr);
      bool pad = true;
      const double gdiff = std::max({grad_error(c.dtype, gr.d_dq, c.q, builtin_grad[0], &pad),
                                     grad_error(c.dtype, gr.d_dk, c.k, builtin_grad[1], &pad),
                                     grad_error(c.dtype, gr.d_dv, c.v, builtin_grad[2], &pad)});
      const bool ok = builtin.failure.empty() && mod.failure.empty() && builtin.err_o <= tol && mod.err_o <= tol &&
                      mod.err_lse <= 1e-3 && diff <= tol && !std::isnan(diff) && gb.ok(c.dtype) && gm.ok(c.dtype) &&
                      gdiff <= bwd_tolerance(c.dtype);
      if (!ok) ++failures;
      char key[256] = "?";
      fa_problem_key(g.ctx, &c.params, key, sizeof key);
      const std::string family = std::string(key).substr(0, std::string(key).find('.'));  // which forward ran the mod
      std::printf(
          "  %-18s %s %s: built-in err %.2e, mod err %.2e, |mod - built-in| %.2e; grads: built-in %.2e, mod "
          "%.2e, mod vs built-in %.2e %s%s%s%s\n",
          c.desc.c_str(), ok ? "ok  " : "FAIL", family.c_str(), builtin.err_o, mod.err_o, diff, gb.worst(), gm.worst(),
          gdiff, builtin.failure.c_str(), mod.failure.c_str(), gb.failure.c_str(), gm.failure.c_str());
    }
  }
  EXPECT_EQ(failures, 0);
}

}  // namespace
}  // namespace fa::test
