// test_tuner_select.cpp -- winner selection with a fake timer and fake compiler, storage of every candidate row in a
// temporary cache_db, cache hits without timing, and the chooser's tune policies on a context without a device.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <random>
#include <set>
#include <string>

#include "cache_db/cache_db.h"
#include "fa/fa.h"
#include "generator/family.h"
#include "runtime/context.h"
#include "tests/cpu/context_support.h"
#include "tests/cpu/tuner_support.h"
#include "tuner/bucket.h"
#include "tuner/cache_store.h"
#include "tuner/chooser.h"
#include "tuner/tuner.h"

using namespace fa;

namespace {

using test::make_context;

// Random times per tunables key; counts calls. `lucky` keys read their given time on their first call only (a
// drift or a clock spike during the first pass), their `ms` time afterwards. `back_to_back` keys read that time
// when timed in bursts (plan.burst > 1): a point whose single flushed launches rank it otherwise.
struct FakeTimer : tune::Timer {
  std::map<std::string, double> ms;
  std::map<std::string, double> lucky;
  std::map<std::string, double> back_to_back;
  std::map<std::string, int> calls_of;
  std::map<std::string, std::vector<int>> bursts_of;
  std::map<std::string, std::vector<bool>> flushes_of;
  std::map<std::string, std::vector<double>> idles_of;
  std::set<std::string> fail;
  int calls = 0;
  rt::Status time(const gen::KernelConfig& cfg, const rt::TuneRequest&, const tune::TimingPlan& plan,
                  double* median_ms) override {
    ++calls;
    EXPECT_GT(plan.budget_ms, 0.0);
    const std::string k = gen::tunables_key(cfg.s, cfg.t);
    bursts_of[k].push_back(plan.burst);
    flushes_of[k].push_back(plan.flush_l2);
    idles_of[k].push_back(plan.idle_ratio);
    if (fail.count(k)) return rt::error(FA_ERROR_LAUNCH, "fake launch failure");
    if (plan.burst > 1 && back_to_back.count(k)) {
      *median_ms = back_to_back[k];
      return rt::Status::Ok();
    }
    if (calls_of[k]++ == 0 && lucky.count(k)) {
      *median_ms = lucky[k];
      return rt::Status::Ok();
    }
    auto it = ms.find(k);
    if (it == ms.end()) return rt::error(FA_ERROR_INTERNAL, "fake timer: unknown candidate " + k);
    *median_ms = it->second;
    return rt::Status::Ok();
  }
};

gen::ProblemDesc problem(int dtype, int seqlen) { return test::tuner_problem(dtype, seqlen); }

struct Fixture {
  const test::TempDir tmp{"tuner_test"};
  std::string dir = tmp.path();
  std::string cache = dir + "/cache.sqlite";
};

// A forward problem on a fresh context that tunes on first use: its semantic and candidate space (empty without a
// context; each test asserts `c` and the space's size itself).
struct TuneCase {
  Fixture fx;
  fa_context c = make_context(fx.cache, FA_TUNE_ON_FIRST_USE);
  gen::ProblemDesc p;
  gen::Semantic s;
  std::vector<gen::KernelConfig> cands;
  TuneCase(int dtype, int seqlen) : p(problem(dtype, seqlen)) {
    if (c == nullptr) return;
    s = gen::select_forward(p, c->arch);
    cands = tune::candidate_configs(s, p, c->limits);
  }
  ~TuneCase() {
    if (c != nullptr) fa_context_destroy(c);
  }
  TuneCase(const TuneCase&) = delete;
  TuneCase& operator=(const TuneCase&) = delete;
};

// Fresh random times in [1, 2) ms for every candidate, set on `timer`; returns (time, tunables key), fastest first.
std::vector<std::pair<double, std::string>> random_times(const std::vector<gen::KernelConfig>& cands,
                                                         FakeTimer* timer) {
  std::mt19937 rng(std::random_device{}());
  std::vector<std::pair<double, std::string>> sorted;
  for (const auto& cfg : cands) {
    const double t = std::uniform_real_distribution<double>(1.0, 2.0)(rng);
    timer->ms[gen::tunables_key(cfg.s, cfg.t)] = t;
    sorted.emplace_back(t, gen::tunables_key(cfg.s, cfg.t));
  }
  std::sort(sorted.begin(), sorted.end());
  return sorted;
}

// Options that time with `timer` and compile every candidate cleanly (64 registers, no spill).
tune::TuneOptions clean_compile_options(FakeTimer* timer) {
  tune::TuneOptions o;
  o.timer = timer;
  o.compile = [](const gen::KernelConfig&, rt::PtxasInfo* info) {
    info->registers = 64;
    return rt::Status::Ok();
  };
  return o;
}

}  // namespace

TEST(TunerSelect, FastestValidCandidateWinsAndEveryRowIsStored) {
  Fixture fx;
  fa_context c = make_context(fx.cache, FA_TUNE_ON_FIRST_USE);
  ASSERT_NE(c, nullptr);
  std::mt19937 rng(std::random_device{}());
  for (int dtype : {gen::kFp16, gen::kFp32}) {  // fwd_mma (when built) and fwd_ref spaces
    const gen::ProblemDesc p = problem(dtype, 1000 + static_cast<int>(rng() % 3000));
    const gen::Semantic s = gen::select_forward(p, c->arch);
    const std::vector<gen::KernelConfig> cands = tune::candidate_configs(s, p, c->limits);
    ASSERT_GE(cands.size(), 3u) << gen::semantic_key(s);

    // Times: random; the fastest spills, the second fastest fails to compile, the third fails to launch.
    FakeTimer timer;
    std::vector<double> times(cands.size());
    for (double& t : times) t = std::uniform_real_distribution<double>(0.5, 5.0)(rng);
    std::vector<size_t> order(cands.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return times[a] < times[b]; });
    const std::string spill_key = gen::tunables_key(s, cands[order[0]].t);
    const std::string error_key = gen::tunables_key(s, cands[order[1]].t);
    // (fwd_ref has only 3 points: then no launch failure, so that one candidate remains)
    const std::string launch_key = cands.size() >= 4 ? gen::tunables_key(s, cands[order[2]].t) : std::string("-");
    for (size_t i = 0; i < cands.size(); ++i) timer.ms[gen::tunables_key(cands[i].s, cands[i].t)] = times[i];
    timer.fail.insert(launch_key);
    std::string expected;
    double best = INFINITY;
    for (size_t i = 0; i < cands.size(); ++i) {
      const std::string k = gen::tunables_key(cands[i].s, cands[i].t);
      if (k == spill_key || k == error_key || k == launch_key) continue;
      if (times[i] < best) best = times[i], expected = k;
    }
    ASSERT_FALSE(expected.empty());

    tune::TuneOptions o;
    o.timer = &timer;
    o.threads = 2;
    int compiles = 0;
    std::mutex mu;
    o.compile = [&](const gen::KernelConfig& cfg, rt::PtxasInfo* info) -> rt::Status {
      {
        std::lock_guard<std::mutex> lock(mu);
        ++compiles;
      }
      const std::string k = gen::tunables_key(cfg.s, cfg.t);
      info->registers = 128;
      if (k == error_key) return rt::error(FA_ERROR_COMPILE, "fake NVRTC error");
      if (k == spill_key) info->spill_stores = info->spill_loads = 16;
      return rt::Status::Ok();
    };
    rt::TuneRequest req;  // the fake timer never launches
    tune::TuneOutcome out;
    rt::Status st = tune::tune(c, s, p, req, o, &out);
    ASSERT_TRUE(st.ok()) << st.message;
    EXPECT_FALSE(out.from_cache);
    EXPECT_EQ(compiles, static_cast<int>(cands.size()));
    // Spill and compile error are never timed; the finals re-time the fastest three and the default (when at
    // least two candidates were timed).
    const int timed_ok = static_cast<int>(cands.size()) - 2 - (launch_key != "-" ? 1 : 0);
    if (timed_ok >= 2) {
      EXPECT_GE(out.finalists, 2);
      EXPECT_LE(out.finalists, 4);
      EXPECT_EQ(out.final_rounds, 3);
    } else {
      EXPECT_EQ(out.finalists, 0);
    }
    EXPECT_EQ(timer.calls, static_cast<int>(cands.size()) - 2 + out.finalists * out.final_rounds);
    EXPECT_EQ(gen::tunables_key(out.semantic, out.winner), expected);
    EXPECT_DOUBLE_EQ(out.winner_ms, best);
    EXPECT_GT(out.winner_tflops, 0.0);
    EXPECT_EQ(out.flops, tune::attention_flops(p));
    EXPECT_FALSE(out.verify_note.empty());  // no verify function: noted

    // Every candidate is stored with its status; best() is the winner.
    cache::Db* db = tune::context_db(c);
    ASSERT_NE(db, nullptr);
    const auto rows = db->tune_rows(tune::tuning_semantic_key(s), tune::shape_bucket(p));
    ASSERT_EQ(rows.size(), cands.size());
    std::map<std::string, cache::TuneRow> by_key;
    for (const auto& r : rows) by_key[r.tunables] = r;
    EXPECT_EQ(by_key[spill_key].status, "spill");
    EXPECT_EQ(by_key[error_key].status, "compile_error");
    if (launch_key != "-") { EXPECT_EQ(by_key[launch_key].status, "launch_error"); }
    EXPECT_TRUE(std::isnan(by_key[spill_key].median_ms));
    int finalists = 0;
    for (size_t i = 0; i < cands.size(); ++i) {
      const std::string k = gen::tunables_key(cands[i].s, cands[i].t);
      if (by_key[k].status == "ok" || by_key[k].status == "eliminated") {
        EXPECT_DOUBLE_EQ(by_key[k].median_ms, times[i]);
        finalists += by_key[k].status == "ok";
      }
    }
    if (out.finalists > 0) { EXPECT_EQ(finalists, out.finalists); }
    auto b = db->best(tune::tuning_semantic_key(s), tune::shape_bucket(p));
    ASSERT_TRUE(b.has_value());
    EXPECT_EQ(b->tunables, expected);

    // Second call, another length in the same bucket: served from the cache, nothing compiled or timed.
    gen::ProblemDesc p2 = p;
    p2.seqlen_q = p2.seqlen_k = static_cast<int>(tune::pow2_ceil(p.seqlen_q));
    ASSERT_EQ(tune::shape_bucket(p2), tune::shape_bucket(p));
    const int calls = timer.calls, comp = compiles;
    tune::TuneOutcome again;
    ASSERT_TRUE(tune::tune(c, s, p2, req, o, &again).ok());
    EXPECT_TRUE(again.from_cache);
    EXPECT_EQ(gen::tunables_key(again.semantic, again.winner), expected);
    EXPECT_EQ(timer.calls, calls);
    EXPECT_EQ(compiles, comp);
    EXPECT_EQ(again.candidates.size(), cands.size());
  }
  fa_context_destroy(c);
}

TEST(TunerSelect, WinnerFailingTheReferenceCheckIsReplacedByTheNextBest) {
  TuneCase tc(gen::kFp32, 777);
  ASSERT_NE(tc.c, nullptr);
  ASSERT_GE(tc.cands.size(), 2u);
  FakeTimer timer;
  const auto sorted = random_times(tc.cands, &timer);
  tune::TuneOptions o = clean_compile_options(&timer);
  rt::TuneRequest req;
  int verifies = 0;
  req.verify = [&](const gen::KernelConfig& cfg, double* err) {
    ++verifies;
    *err = gen::tunables_key(cfg.s, cfg.t) == sorted[0].second ? 0.5 : 1e-7;  // the fastest is wrong
    return rt::Status::Ok();
  };
  tune::TuneOutcome out;
  ASSERT_TRUE(tune::tune(tc.c, tc.s, tc.p, req, o, &out).ok());
  EXPECT_EQ(verifies, 2);
  EXPECT_EQ(gen::tunables_key(out.semantic, out.winner), sorted[1].second);
  EXPECT_TRUE(out.verified);
  EXPECT_LE(out.verify_error, 1e-6);
  const auto rows = tune::context_db(tc.c)->tune_rows(tune::tuning_semantic_key(tc.s), tune::shape_bucket(tc.p));
  bool saw_failed = false;
  for (const auto& r : rows) saw_failed |= r.tunables == sorted[0].second && r.status == "verify_failed";
  EXPECT_TRUE(saw_failed);
}

// A candidate whose first-pass time was a fluke (here 40% below its real time, e.g. a clock spike) reaches the
// finals, where it is re-timed next to the others and loses to the really fastest one; the stored figures agree.
TEST(TunerSelect, FinalsOverruleAFlukeInTheFirstPass) {
  TuneCase tc(gen::kFp16, 1500);
  ASSERT_NE(tc.c, nullptr);
  ASSERT_GE(tc.cands.size(), 4u);
  FakeTimer timer;
  const auto sorted = random_times(tc.cands, &timer);
  const std::string fastest = sorted[0].second, fluke = sorted.back().second;  // the slowest, once fast
  timer.lucky[fluke] = 0.6 * sorted[0].first;
  tune::TuneOptions o = clean_compile_options(&timer);
  rt::TuneRequest req;
  tune::TuneOutcome out;
  ASSERT_TRUE(tune::tune(tc.c, tc.s, tc.p, req, o, &out).ok());
  EXPECT_GE(out.finalists, 2);
  EXPECT_EQ(out.final_rounds, 3);
  EXPECT_EQ(gen::tunables_key(out.semantic, out.winner), fastest);
  EXPECT_EQ(timer.calls_of[fluke], 1 + out.final_rounds);
  const auto rows = tune::context_db(tc.c)->tune_rows(tune::tuning_semantic_key(tc.s), tune::shape_bucket(tc.p));
  for (const auto& r : rows) {
    if (r.tunables == fluke) {
      EXPECT_EQ(r.status, "ok");  // a finalist, stored with its finals time
      EXPECT_NEAR(r.median_ms, timer.ms[fluke], 1e-12);
    }
  }
  auto b = tune::context_db(tc.c)->best(tune::tuning_semantic_key(tc.s), tune::shape_bucket(tc.p));
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->tunables, fastest);

  // With the finals off, the fluke wins: the test above can fail.
  Fixture fx2;
  fa_context c2 = make_context(fx2.cache, FA_TUNE_ON_FIRST_USE);
  ASSERT_NE(c2, nullptr);
  timer.calls_of.clear();
  o.final_rounds = 0;
  tune::TuneOutcome off;
  ASSERT_TRUE(tune::tune(c2, tc.s, tc.p, req, o, &off).ok());
  EXPECT_EQ(off.finalists, 0);
  EXPECT_EQ(gen::tunables_key(off.semantic, off.winner), fluke);
  fa_context_destroy(c2);
}

// The finals time bursts of launches back to back (8 by default), the first pass single launches. A point that
// is fastest in single launches and slower back to back than the default (seen on the H200: a persistent point at
// bf16 d 128 causal 4k) loses the finals to the default; with bursts of one it would win.
TEST(TunerSelect, FinalsTimeUnflushedBurstsBackToBack) {
  TuneCase tc(gen::kFp16, 1500);
  ASSERT_NE(tc.c, nullptr);
  ASSERT_GE(tc.cands.size(), 4u);
  const std::string def = gen::tunables_key(tc.s, tc.s.family->defaults(tc.s));
  auto run = [&](int final_burst, FakeTimer* timer) {
    const auto sorted = random_times(tc.cands, timer);
    std::string single_best = sorted[0].second == def ? sorted[1].second : sorted[0].second;
    timer->ms[def] = 1.5 * sorted[0].first;  // the default: slower in single launches than every finalist
    timer->ms[single_best] = 0.5 * sorted[0].first;
    timer->back_to_back[single_best] = 2.0 * sorted[0].first;
    timer->back_to_back[def] = 0.4 * sorted[0].first;
    tune::TuneOptions o = clean_compile_options(timer);
    o.use_cache = false;  // the second run tunes again on the same context
    o.final_burst = final_burst;
    rt::TuneRequest req;
    tune::TuneOutcome out;
    EXPECT_TRUE(tune::tune(tc.c, tc.s, tc.p, req, o, &out).ok());
    return std::make_pair(gen::tunables_key(out.semantic, out.winner), single_best);
  };
  FakeTimer t8;
  const auto [win8, single8] = run(-1, &t8);
  EXPECT_EQ(win8, def);
  EXPECT_NE(win8, single8);
  for (const auto& [k, bursts] : t8.bursts_of) {
    ASSERT_FALSE(bursts.empty());
    EXPECT_EQ(bursts[0], 1) << k;  // the first pass: single launches
    for (size_t i = 1; i < bursts.size(); ++i) EXPECT_EQ(bursts[i], 8) << k;
    const std::vector<bool>& flushes = t8.flushes_of[k];
    ASSERT_EQ(flushes.size(), bursts.size()) << k;
    EXPECT_TRUE(flushes[0]) << k;  // the first pass after an L2 flush, the finals in the L2 the runs before left
    for (size_t i = 1; i < flushes.size(); ++i) EXPECT_FALSE(flushes[i]) << k;
  }
  EXPECT_EQ(t8.bursts_of[def].size(), 4u);  // first pass + 3 rounds
  FakeTimer t1;
  const auto [win1, single1] = run(1, &t1);
  EXPECT_EQ(win1, single1);  // bursts of one: the single-launch ranking stands
}

// Every timed run of both passes is followed by idle time (timer.h: the GPU is timed under its power cap, at boost
// clocks, as benchmarks' cells run): one run's time by default, what TuneOptions::idle_ratio says otherwise.
TEST(TunerSelect, BothPassesLeaveTheGpuIdleBetweenTimedRuns) {
  TuneCase tc(gen::kFp16, 1500);
  ASSERT_NE(tc.c, nullptr);
  ASSERT_GE(tc.cands.size(), 4u);
  for (const double want : {-1.0, 0.0, 2.5}) {
    FakeTimer timer;
    random_times(tc.cands, &timer);
    tune::TuneOptions o = clean_compile_options(&timer);
    o.use_cache = false;
    o.idle_ratio = want;
    rt::TuneRequest req;
    tune::TuneOutcome out;
    ASSERT_TRUE(tune::tune(tc.c, tc.s, tc.p, req, o, &out).ok());
    size_t finals = 0;
    for (const auto& [k, idles] : timer.idles_of) {
      finals += idles.size() > 1;
      for (double idle : idles) EXPECT_EQ(idle, want < 0 ? 1.0 : want) << k;
    }
    EXPECT_GE(finals, 2u);  // the finals' plans were seen too
  }
}

// The budget pays for the idle time: reps = clamp(budget / (run * (1 + idle)), min, max).
TEST(TunerSelect, TimedRepsPayForTheIdleTimeOutOfTheBudget) {
  tune::TimingPlan plan;
  plan.min_reps = 3;
  plan.max_reps = 30;
  plan.budget_ms = 100.0;
  EXPECT_EQ(tune::timed_reps(plan, 2.0), 30);  // 50 runs fit, clamped
  EXPECT_EQ(tune::timed_reps(plan, 5.0), 20);
  plan.idle_ratio = 1.0;
  EXPECT_EQ(tune::timed_reps(plan, 2.0), 25);
  EXPECT_EQ(tune::timed_reps(plan, 5.0), 10);
  EXPECT_EQ(tune::timed_reps(plan, 40.0), 3);  // at least min_reps
  plan.idle_ratio = 3.0;
  EXPECT_EQ(tune::timed_reps(plan, 5.0), 5);
}

TEST(TunerChooser, PoliciesWithoutADevice) {
  Fixture fx;
  const gen::ProblemDesc p = problem(gen::kFp16, 2048);
  // DEFAULTS_ONLY: the family defaults, key recorded as untuned.
  {
    fa_context c = make_context(fx.cache, FA_TUNE_DEFAULTS_ONLY);
    ASSERT_NE(c, nullptr);
    const gen::Semantic s = gen::select_forward(p, c->arch);
    gen::Tunables t;
    rt::TuneRequest req;
    ASSERT_TRUE(c->chooser->choose(c, s, p, &req, &t).ok());
    const gen::Tunables def = s.family->defaults(s);
    EXPECT_EQ(t, def);
    EXPECT_EQ(c->untuned.count(tune::tuning_key(s, p)), 1u);
    // Remembered: a second call is a memory hit (no database query).
    auto* chooser = dynamic_cast<tune::TuningChooser*>(c->chooser.get());
    ASSERT_NE(chooser, nullptr);
    EXPECT_EQ(chooser->remembered(), 1u);
    ASSERT_TRUE(c->chooser->choose(c, s, p, &req, &t).ok());
    EXPECT_EQ(t, def);
    EXPECT_EQ(chooser->remembered(), 1u);
    fa_context_destroy(c);
  }
  // REQUIRE_TUNED: FA_ERROR_NOT_TUNED with nothing cached; ok once a row is seeded.
  std::string seeded;
  {
    fa_context c = make_context(fx.cache, FA_TUNE_REQUIRE_TUNED);
    ASSERT_NE(c, nullptr);
    const gen::Semantic s = gen::select_forward(p, c->arch);
    gen::Tunables t;
    rt::Status st = c->chooser->choose(c, s, p, nullptr, &t);
    EXPECT_EQ(st.code, FA_ERROR_NOT_TUNED);
    EXPECT_NE(st.message.find(tune::tuning_semantic_key(s)), std::string::npos) << st.message;
    // Seed: the last valid candidate (not the default), as the tuner would store it.
    const auto cands = tune::candidate_configs(s, p, c->limits);
    ASSERT_GE(cands.size(), 2u);
    seeded = gen::tunables_key(s, cands.back().t);
    cache::TuneRow row{tune::tuning_semantic_key(s), tune::shape_bucket(p), seeded, 0.25, "ok"};
    ASSERT_TRUE(tune::context_db(c)->put_tune_results({row}));
    st = c->chooser->choose(c, s, p, nullptr, &t);
    ASSERT_TRUE(st.ok()) << st.message;
    EXPECT_EQ(gen::tunables_key(s, t), seeded);
    // Another length in the same bucket is served from memory too.
    gen::ProblemDesc p2 = p;
    p2.seqlen_q = p2.seqlen_k = 1500;
    ASSERT_TRUE(c->chooser->choose(c, s, p2, nullptr, &t).ok());
    EXPECT_EQ(gen::tunables_key(s, t), seeded);
    // A far bucket is not tuned.
    p2.seqlen_q = p2.seqlen_k = 16384;
    EXPECT_EQ(c->chooser->choose(c, s, p2, nullptr, &t).code, FA_ERROR_NOT_TUNED);
    fa_context_destroy(c);
  }
  // A new context on the same file (DEFAULTS_ONLY) takes the cached tuned entry.
  {
    fa_context c = make_context(fx.cache, FA_TUNE_DEFAULTS_ONLY);
    ASSERT_NE(c, nullptr);
    const gen::Semantic s = gen::select_forward(p, c->arch);
    gen::Tunables t;
    ASSERT_TRUE(c->chooser->choose(c, s, p, nullptr, &t).ok());
    EXPECT_EQ(gen::tunables_key(s, t), seeded);
    EXPECT_EQ(c->untuned.size(), 0u);
    fa_context_destroy(c);
  }
}

TEST(TunerChooser, FirstUseTunesOnceThenServesFromMemory) {
  Fixture fx;
  fa_context c = make_context(fx.cache, FA_TUNE_ON_FIRST_USE);
  ASSERT_NE(c, nullptr);
  auto* chooser = dynamic_cast<tune::TuningChooser*>(c->chooser.get());
  ASSERT_NE(chooser, nullptr);
  const gen::ProblemDesc p = problem(gen::kFp32, 300);
  const gen::Semantic s = gen::select_forward(p, c->arch);
  FakeTimer timer;
  std::mt19937 rng(std::random_device{}());
  std::string fastest;
  double best = INFINITY;
  for (const auto& cfg : tune::candidate_configs(s, p, c->limits)) {
    const double t = std::uniform_real_distribution<double>(1.0, 9.0)(rng);
    timer.ms[gen::tunables_key(cfg.s, cfg.t)] = t;
    if (t < best) best = t, fastest = gen::tunables_key(cfg.s, cfg.t);
  }
  chooser->options().timer = &timer;
  chooser->options().compile = [](const gen::KernelConfig&, rt::PtxasInfo* info) {
    info->registers = 40;
    return rt::Status::Ok();
  };
  gen::Tunables t;
  // Capturing (no TuneRequest): defaults, recorded as untuned, nothing timed.
  ASSERT_TRUE(c->chooser->choose(c, s, p, nullptr, &t).ok());
  EXPECT_EQ(t, s.family->defaults(s));
  EXPECT_EQ(timer.calls, 0);
  EXPECT_EQ(c->untuned.count(tune::tuning_key(s, p)), 1u);
  // First use with a request: tuned.
  rt::TuneRequest req;
  ASSERT_TRUE(c->chooser->choose(c, s, p, &req, &t).ok());
  EXPECT_EQ(gen::tunables_key(s, t), fastest);
  const int calls = timer.calls;
  EXPECT_GT(calls, 0);
  ASSERT_TRUE(c->chooser->choose(c, s, p, &req, &t).ok());
  EXPECT_EQ(timer.calls, calls);
  EXPECT_EQ(chooser->remembered(), 1u);
  fa_context_destroy(c);
}
