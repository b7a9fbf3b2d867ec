// test_background.cpp -- host-latency pieces that need no GPU: the tune policy's parsing (first_use_sync), the
// fast-path plan cache (signatures, generation invalidation), the background tuner's lifecycle (one job per key,
// stop() abandoning a job in flight without hanging), the chooser's background path with an injected runner (the
// defaults first, the winner swapped in after, the generation bumped), and the prior-winner order of candidates.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <random>
#include <thread>

#include "cache_db/cache_db.h"
#include "context_support.h"
#include "fa/fa.h"
#include "generator/family.h"
#include "runtime/context.h"
#include "runtime/plan_cache.h"
#include "tuner/background.h"
#include "tuner/bucket.h"
#include "tuner/cache_store.h"
#include "tuner/chooser.h"
#include "tuner/timer.h"
#include "tuner/tuner.h"
#include "tuner_support.h"

using namespace fa;

namespace {

using Clock = std::chrono::steady_clock;

gen::ProblemDesc problem(int dtype, int seqlen) { return test::tuner_problem(dtype, seqlen); }

// Times from a table; unknown keys fail.
struct TableTimer : tune::Timer {
  std::map<std::string, double> ms;
  std::atomic<int> calls{0};
  rt::Status time(const gen::KernelConfig& cfg, const rt::TuneRequest&, const tune::TimingPlan&,
                  double* median_ms) override {
    ++calls;
    auto it = ms.find(gen::tunables_key(cfg.s, cfg.t));
    if (it == ms.end()) return rt::error(FA_ERROR_INTERNAL, "unknown candidate");
    *median_ms = it->second;
    return rt::Status::Ok();
  }
};

}  // namespace

TEST(TunePolicy, FirstUseSyncIsParsedAndOutOfRangeValuesFail) {
  {
    test::ScopedEnv env("FA_TUNE_POLICY", "first_use_sync");
    fa_context c = test::make_context(":memory:", -1);
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(c->tune_policy, FA_TUNE_ON_FIRST_USE_SYNC);
    fa_context_destroy(c);
  }
  {
    test::ScopedEnv env("FA_TUNE_POLICY", "3");
    fa_context c = test::make_context(":memory:", -1);
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(c->tune_policy, FA_TUNE_ON_FIRST_USE_SYNC);
    fa_context_destroy(c);
  }
  {
    test::ScopedEnv env("FA_TUNE_POLICY", nullptr);
    fa_context c = test::make_context(":memory:", -1);
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(c->tune_policy, FA_TUNE_ON_FIRST_USE);  // the default: tuning in the background
    fa_context_destroy(c);
  }
  {
    const std::string err = test::context_create_error("FA_TUNE_POLICY", "sync");
    EXPECT_NE(err.find("first_use_sync"), std::string::npos) << err;
  }
  fa_context_options o;
  fa_context_options_init(&o);
  o.cache_path = ":memory:";
  // The message names the values fa.h documents (its enum, and the default fa_context_options_init sets), and no
  // number fa.h never mentions.
  for (int bad : {4, -2, 100}) {
    o.tune_policy = bad;
    fa_context c = nullptr;
    EXPECT_EQ(fa_context_create(&o, &c), FA_ERROR_INVALID_ARGUMENT);
    const std::string err = fa_last_error();
    for (const char* name : {"FA_TUNE_ON_FIRST_USE,", "FA_TUNE_DEFAULTS_ONLY", "FA_TUNE_REQUIRE_TUNED",
                             "FA_TUNE_ON_FIRST_USE_SYNC", "fa_context_options_init"}) {
      EXPECT_NE(err.find(name), std::string::npos) << name << ": " << err;
    }
    EXPECT_EQ(err.rfind("FA_ERROR_INVALID_ARGUMENT: tune_policy: expected ", 0), 0u) << err;
    EXPECT_EQ(err.substr(err.rfind(", got ")), ", got " + std::to_string(bad)) << err;
    EXPECT_EQ(err.find("-1"), std::string::npos) << err;
  }
}

TEST(PlanCache, SignatureSeesEveryFieldAndRole) {
  const gen::ProblemDesc base = problem(gen::kBf16, 1000);
  const rt::ShapeSignature s0 = rt::shape_signature(gen::Role::Forward, base);
  EXPECT_EQ(s0, rt::shape_signature(gen::Role::Forward, base));
  EXPECT_FALSE(s0 == rt::shape_signature(gen::Role::Backward, base));
  std::vector<gen::ProblemDesc> variants;
  auto vary = [&](auto f) {
    gen::ProblemDesc d = base;
    f(d);
    variants.push_back(d);
  };
  vary([](gen::ProblemDesc& d) { d.dtype = gen::kFp16; });
  vary([](gen::ProblemDesc& d) { d.batch = 3; });
  vary([](gen::ProblemDesc& d) { d.seqlen_q = 999; });
  vary([](gen::ProblemDesc& d) { d.seqlen_k = 1001; });
  vary([](gen::ProblemDesc& d) { d.heads_q = 16; });
  vary([](gen::ProblemDesc& d) { d.heads_kv = 4; });
  vary([](gen::ProblemDesc& d) { d.head_dim = 128; });
  vary([](gen::ProblemDesc& d) { d.head_dim_v = 128; });
  vary([](gen::ProblemDesc& d) { d.mask = gen::kMaskNone; });
  vary([](gen::ProblemDesc& d) { d.win_left = 5; });
  vary([](gen::ProblemDesc& d) { d.win_right = 7; });
  vary([](gen::ProblemDesc& d) { d.varlen = true; });
  vary([](gen::ProblemDesc& d) { d.total_q = 77; });
  vary([](gen::ProblemDesc& d) { d.total_k = 78; });
  vary([](gen::ProblemDesc& d) { d.has_bias = true; });
  vary([](gen::ProblemDesc& d) { d.has_alibi = true; });
  vary([](gen::ProblemDesc& d) { d.has_softcap = true; });
  vary([](gen::ProblemDesc& d) { d.has_lse = false; });
  vary([](gen::ProblemDesc& d) { d.aligned16 = false; });
  vary([](gen::ProblemDesc& d) { d.tma_ok = true; });
  vary([](gen::ProblemDesc& d) { d.deterministic = true; });
  for (size_t i = 0; i < variants.size(); ++i) {
    EXPECT_FALSE(s0 == rt::shape_signature(gen::Role::Forward, variants[i])) << "variant " << i;
  }
}

TEST(PlanCache, HitsUntilTheGenerationIsBumped) {
  rt::PlanCache cache;
  std::mt19937 rng(std::random_device{}());
  std::vector<rt::ShapeSignature> sigs;
  for (int i = 0; i < 40; ++i) {
    sigs.push_back(rt::shape_signature(gen::Role::Forward, problem(gen::kBf16, 1 + static_cast<int>(rng() % 30000))));
  }
  const uint64_t g0 = cache.generation();
  for (const auto& s : sigs) {
    auto e = std::make_shared<rt::CachedPlan>();
    e->sig = s;
    e->generation = g0;
    cache.insert(e);
  }
  size_t hits = 0;
  for (const auto& s : sigs) {
    auto e = cache.find(s);
    if (e) {
      EXPECT_EQ(e->sig, s);  // never another shape's plan, collisions included
      ++hits;
    }
  }
  EXPECT_GE(hits, cache.size());  // each held entry is found (a collision may have replaced an older one)
  EXPECT_GT(hits, 0u);
  EXPECT_EQ(cache.find(rt::shape_signature(gen::Role::Forward, problem(gen::kFp32, 5))), nullptr);
  // A winner swapped in: every entry is stale, and an entry built from choices made before the bump is refused.
  cache.bump();
  for (const auto& s : sigs) EXPECT_EQ(cache.find(s), nullptr);
  auto stale = std::make_shared<rt::CachedPlan>();
  stale->sig = sigs[0];
  stale->generation = g0;
  cache.insert(stale);
  EXPECT_EQ(cache.find(sigs[0]), nullptr);
  auto fresh = std::make_shared<rt::CachedPlan>();
  fresh->sig = sigs[0];
  fresh->generation = cache.generation();
  cache.insert(fresh);
  EXPECT_EQ(cache.find(sigs[0]), fresh);
}

TEST(BackgroundTuner, OneJobPerKeyAndEveryFinishedJobReported) {
  std::atomic<int> runs{0}, dones{0};
  tune::BackgroundTuner bg(
      [&](const tune::BackgroundJob&, const std::function<bool()>&, tune::TuneOutcome* out) {
        ++runs;
        out->has_winner = true;
        return rt::Status::Ok();
      },
      [&](const tune::BackgroundJob&, const rt::Status& st, const tune::TuneOutcome& out) {
        EXPECT_TRUE(st.ok());
        EXPECT_TRUE(out.has_winner);
        ++dones;
      });
  EXPECT_TRUE(bg.idle());
  EXPECT_TRUE(bg.submit({"a", {}, {}}));
  EXPECT_TRUE(bg.submit({"b", {}, {}}));
  EXPECT_FALSE(bg.submit({"a", {}, {}}));  // queued, running or done: once
  ASSERT_TRUE(bg.wait_idle(10.0));
  EXPECT_FALSE(bg.submit({"b", {}, {}}));
  EXPECT_EQ(runs.load(), 2);
  EXPECT_EQ(dones.load(), 2);
  const tune::BackgroundStats s = bg.stats();
  EXPECT_EQ(s.submitted, 2);
  EXPECT_EQ(s.finished, 2);
  EXPECT_EQ(s.failed, 0);
  bg.stop();
  bg.stop();  // idempotent
  EXPECT_FALSE(bg.submit({"c", {}, {}}));
}

TEST(BackgroundTuner, StopAbandonsTheJobInFlightAndDropsTheQueue) {
  std::atomic<bool> started{false};
  std::atomic<int> dones{0};
  tune::BackgroundTuner bg(
      [&](const tune::BackgroundJob& job, const std::function<bool()>& cancelled, tune::TuneOutcome*) {
        if (job.key == "throws") throw std::runtime_error("boom");
        started = true;
        while (!cancelled()) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // a long tuning
        return rt::error(FA_ERROR_INTERNAL, "tuning cancelled");
      },
      [&](const tune::BackgroundJob&, const rt::Status&, const tune::TuneOutcome&) { ++dones; });
  ASSERT_TRUE(bg.submit({"throws", {}, {}}));  // an exception in a job: counted as failed, the worker goes on
  ASSERT_TRUE(bg.submit({"slow", {}, {}}));
  ASSERT_TRUE(bg.submit({"queued", {}, {}}));
  const auto t0 = Clock::now();
  while (!started && Clock::now() - t0 < std::chrono::seconds(10))
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_TRUE(started.load());
  EXPECT_FALSE(bg.wait_idle(0.05));
  const auto t1 = Clock::now();
  bg.stop();
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t1).count(), 5.0);
  const tune::BackgroundStats s = bg.stats();
  EXPECT_EQ(s.submitted, 3);
  EXPECT_EQ(s.failed, 1);      // the throwing job
  EXPECT_EQ(s.abandoned, 2);   // the slow one in flight and the queued one
  EXPECT_EQ(dones.load(), 1);  // only the throwing job reached done (abandoned ones never do)
}

TEST(BackgroundTuner, ChooserServesDefaultsThenSwapsTheWinnerIn) {
  const test::TempDir tmp("background");
  const std::string dir = tmp.path();
  fa_context c = test::make_context(dir + "/cache.sqlite", FA_TUNE_ON_FIRST_USE);
  ASSERT_NE(c, nullptr);
  auto* chooser = dynamic_cast<tune::TuningChooser*>(c->chooser.get());
  ASSERT_NE(chooser, nullptr);
  std::mt19937 rng(std::random_device{}());
  const gen::ProblemDesc p = problem(gen::kFp16, 500 + static_cast<int>(rng() % 1000));
  const gen::Semantic s = gen::select_forward(p, c->arch);
  const auto cands = tune::candidate_configs(s, p, c->limits);
  ASSERT_GE(cands.size(), 3u);
  // The fastest is a random candidate other than the default.
  TableTimer timer;
  const size_t fast = 1 + rng() % (cands.size() - 1);
  for (size_t i = 0; i < cands.size(); ++i)
    timer.ms[gen::tunables_key(cands[i].s, cands[i].t)] = i == fast ? 0.5 : 1.0 + 0.01 * static_cast<double>(i);
  const std::string winner = gen::tunables_key(s, cands[fast].t);
  std::atomic<bool> release{false};
  chooser->set_background_runner(
      [&](const tune::BackgroundJob& job, const std::function<bool()>& cancelled, tune::TuneOutcome* out) {
        while (!release && !cancelled()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        tune::TuneOptions o;
        o.timer = &timer;
        o.compile = [](const gen::KernelConfig&, rt::PtxasInfo* info) {
          info->registers = 64;
          return rt::Status::Ok();
        };
        o.cancelled = cancelled;
        return tune::tune(c, job.s, job.p, rt::TuneRequest{}, o, out);
      });
  const uint64_t g0 = c->plans.generation();
  rt::TuneRequest req;  // a call outside capture
  gen::Tunables t;
  ASSERT_TRUE(c->chooser->choose(c, s, p, &req, &t).ok());
  EXPECT_EQ(t, s.family->defaults(s));  // the first call returns at once with the defaults
  gen::ProblemDesc p2 = p;
  p2.seqlen_q = p2.seqlen_k = p.seqlen_k + 1;  // same bucket: no second job
  ASSERT_TRUE(c->chooser->choose(c, s, p2, &req, &t).ok());
  EXPECT_EQ(t, s.family->defaults(s));
  EXPECT_EQ(chooser->background_stats().submitted, 1);
  EXPECT_EQ(c->plans.generation(), g0);
  release = true;
  ASSERT_TRUE(chooser->wait_background(30.0));
  EXPECT_EQ(chooser->background_stats().finished, 1);
  EXPECT_GT(c->plans.generation(), g0);  // the fast path's entries are stale now
  ASSERT_TRUE(c->chooser->choose(c, s, p, &req, &t).ok());
  EXPECT_EQ(gen::tunables_key(s, t), winner);
  // Stored as any tuning: a new context on the file starts with the winner.
  auto best = tune::context_db(c)->best(tune::tuning_semantic_key(s), tune::shape_bucket(p));
  ASSERT_TRUE(best.has_value());
  EXPECT_EQ(best->tunables, winner);
  // A varlen call never queues a job: defaults, remembered.
  gen::ProblemDesc v = problem(gen::kFp16, 20000);
  v.varlen = true;
  v.total_q = v.total_k = 40000;
  ASSERT_TRUE(c->chooser->choose(c, s, v, &req, &t).ok());
  EXPECT_EQ(chooser->background_stats().submitted, 1);
  // Capturing (no request): defaults, no job.
  ASSERT_TRUE(c->chooser->choose(c, s, problem(gen::kFp16, 9000), nullptr, &t).ok());
  EXPECT_EQ(t, s.family->defaults(s));
  EXPECT_EQ(chooser->background_stats().submitted, 1);
  fa_context_destroy(c);
}

TEST(BackgroundTuner, DestroyWhileTuningReturnsAndStoresNothing) {
  const test::TempDir tmp("background_destroy");
  const std::string dir = tmp.path();
  fa_context c = test::make_context(dir + "/cache.sqlite", FA_TUNE_ON_FIRST_USE);
  ASSERT_NE(c, nullptr);
  auto* chooser = dynamic_cast<tune::TuningChooser*>(c->chooser.get());
  ASSERT_NE(chooser, nullptr);
  std::atomic<bool> started{false};
  chooser->set_background_runner(
      [&](const tune::BackgroundJob&, const std::function<bool()>& cancelled, tune::TuneOutcome*) {
        started = true;
        while (!cancelled()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        return rt::error(FA_ERROR_INTERNAL, "tuning cancelled");
      });
  const gen::ProblemDesc p = problem(gen::kFp16, 3000);
  const gen::Semantic s = gen::select_forward(p, c->arch);
  rt::TuneRequest req;
  gen::Tunables t;
  ASSERT_TRUE(c->chooser->choose(c, s, p, &req, &t).ok());
  const auto t0 = Clock::now();
  while (!started && Clock::now() - t0 < std::chrono::seconds(10))
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_TRUE(started.load());
  const auto t1 = Clock::now();
  fa_context_destroy(c);
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t1).count(), 5.0);
}

TEST(TunerPrune, PriorWinnersComeRightAfterTheDefault) {
  const test::TempDir tmp("prune");
  const std::string dir = tmp.path();
  fa_context c = test::make_context(dir + "/cache.sqlite", FA_TUNE_DEFAULTS_ONLY);
  ASSERT_NE(c, nullptr);
  const gen::ProblemDesc p = problem(gen::kFp16, 4096);
  const gen::Semantic s = gen::select_forward(p, c->arch);
  const auto cands = tune::candidate_configs(s, p, c->limits);
  ASSERT_GE(cands.size(), 5u);
  const std::string sem = tune::tuning_semantic_key(s);
  auto key = [&](size_t i) { return gen::tunables_key(s, cands[i].t); };
  // Candidate 4 won two buckets, candidate 3 one; candidate 2 lost everywhere.
  std::vector<cache::TuneRow> rows = {
      {sem, "b1", key(4), 1.0, "ok"},
      {sem, "b1", key(2), 2.0, "ok"},
      {sem, "b2", key(4), 1.5, "ok"},
      {sem, "b2", key(3), 1.6, "ok"},
      {sem, "b3", key(3), 0.5, "ok"},
      {sem, "b3", key(2), 0.4, "spill"},
      {"other|semantic", "b1", key(2), 0.1, "ok"},
  };
  ASSERT_TRUE(tune::context_db(c)->put_tune_results(rows));
  const std::vector<std::string> winners = tune::prior_winners(c, sem);
  ASSERT_EQ(winners.size(), 2u);
  EXPECT_EQ(winners[0], key(4));
  EXPECT_EQ(winners[1], key(3));
  const auto ordered = tune::order_by_prior_winners(cands, winners);
  ASSERT_EQ(ordered.size(), cands.size());
  EXPECT_EQ(gen::tunables_key(s, ordered[0].t), key(0));  // the default stays first
  EXPECT_EQ(gen::tunables_key(s, ordered[1].t), key(4));
  EXPECT_EQ(gen::tunables_key(s, ordered[2].t), key(3));
  EXPECT_EQ(gen::tunables_key(s, ordered[3].t), key(1));
  EXPECT_EQ(gen::tunables_key(s, ordered[4].t), key(2));
  fa_context_destroy(c);
}
