// test_chooser_validity.cpp -- the chooser never returns a config that the validity predicate rejects for the call
// at hand. A winner is tuned (stored) at one length; calls at other lengths of the same tuning key -- odd and even
// key counts, so both shape classes of every block_n -- must get a valid config: the winner where it serves, else
// the fastest stored candidate that does, else the family default. Every tuned family, every mask, plain / varlen /
// softcap, sm_80, sm_90, sm_100 and sm_120, every valid point as the stored winner. No device: the chooser reads the
// database.
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>
#include <string>

#include "cache_db/cache_db.h"
#include "fa/fa.h"
#include "generator/family.h"
#include "generator/problem.h"
#include "runtime/context.h"
#include "tests/cpu/context_support.h"
#include "tuner/bucket.h"
#include "tuner/cache_store.h"
#include "tuner/chooser.h"

using namespace fa;

namespace {

// Sets FA_ARCH for the scope (the context's arch without a device).
struct ArchEnv {
  explicit ArchEnv(int arch) { setenv("FA_ARCH", std::to_string(arch).c_str(), 1); }
  ~ArchEnv() { unsetenv("FA_ARCH"); }
};

fa_context make_context(const std::string& cache) { return test::make_context(cache, FA_TUNE_DEFAULTS_ONLY); }

gen::ProblemDesc problem(int mask, int feature, bool backward) {
  gen::ProblemDesc p;
  p.dtype = gen::kBf16;
  p.batch = 2;
  p.heads_q = 8;
  p.heads_kv = 2;
  p.head_dim = p.head_dim_v = 128;
  p.seqlen_q = p.seqlen_k = 1024;
  p.mask = mask;
  p.varlen = feature == 1;
  p.total_q = p.total_k = p.batch * 1024;
  p.has_softcap = feature == 2;
  p.has_lse = true;
  p.aligned16 = p.tma_ok = true;
  p.backward = backward;
  return p;
}

}  // namespace

TEST(ChooserValidity, StoredWinnersNeverServeACallTheyAreInvalidFor) {
  const test::TempDir tmp("chooser_validity");
  const std::string dir = tmp.path();
  std::mt19937 rng(std::random_device{}());
  int points = 0, calls = 0, fallbacks = 0;
  for (int arch : {80, 90, 100, 120}) {
    ArchEnv env(arch);
    fa_context c = make_context(dir + "/cache_" + std::to_string(arch) + ".sqlite");
    ASSERT_NE(c, nullptr);
    cache::Db* db = tune::context_db(c);
    ASSERT_NE(db, nullptr);
    for (gen::Role role : {gen::Role::Forward, gen::Role::Backward}) {
      for (const gen::Family* f : gen::ranked_families(role, arch)) {
        if (!f->tuned_on_first_use) continue;
        for (int mask = 0; mask < 3; ++mask) {
          for (int feature = 0; feature < 3; ++feature) {
            const gen::ProblemDesc p0 = problem(mask, feature, role == gen::Role::Backward);
            if (!gen::family_covers(*f, p0, arch, nullptr)) continue;
            const gen::Semantic s0 = gen::semantic_for(*f, p0, arch);
            for (const gen::Tunables& w : gen::valid_space(s0, c->limits)) {
              if (!gen::is_valid(gen::finalize(s0, w, p0), c->limits, nullptr)) continue;  // not tunable at p0
              ++points;
              // The winner of p0's key, stored as the tuner stores it; a fresh chooser reads it.
              const cache::TuneRow row{tune::tuning_semantic_key(s0), tune::shape_bucket(p0), gen::tunables_key(s0, w),
                                       0.5, "ok"};
              ASSERT_TRUE(db->put_tune_results({row}, true));
              tune::TuningChooser chooser;
              gen::Tunables t;
              ASSERT_TRUE(chooser.choose(c, s0, p0, nullptr, &t).ok());
              EXPECT_EQ(t, w) << gen::semantic_key(s0) << " " << gen::tunables_key(s0, w);
              for (int i = 0; i < 12; ++i) {
                gen::ProblemDesc p = p0;
                // (512, 1024]: the same bucket; odd lengths and multiples of 32, 64 and 128 alike
                const int multiples[] = {2, 32, 64, 128};
                const int m = multiples[i % 4];
                p.seqlen_k = 1024 - m * std::uniform_int_distribution<int>(0, 511 / m)(rng);
                if (i % 4 == 0) p.seqlen_k -= 1;  // odd
                p.seqlen_q = std::uniform_int_distribution<int>(513, 1024)(rng);
                ASSERT_EQ(tune::shape_bucket(p), tune::shape_bucket(p0));
                const gen::Semantic s = gen::semantic_for(*f, p, arch);
                ASSERT_TRUE(chooser.choose(c, s, p, nullptr, &t).ok());
                ++calls;
                const gen::KernelConfig cfg = gen::finalize(s, t, p);
                std::string why;
                EXPECT_TRUE(gen::is_valid(cfg, c->limits, &why))
                    << "winner " << gen::tunables_key(s0, w) << " at seqlen_k " << p.seqlen_k << " gave "
                    << gen::canonical_key(cfg) << ": " << why;
                if (t != w) ++fallbacks;
                // Every step of the plan is valid too.
                for (const auto& k : gen::make_plan(s, t, p).steps)
                  EXPECT_TRUE(gen::is_valid(k, c->limits, &why)) << gen::canonical_key(k) << ": " << why;
              }
            }
          }
        }
      }
    }
    fa_context_destroy(c);
  }
  // The space holds points that are valid only at even key counts (FA2's d128 tile on sm_90): some calls fell back.
  EXPECT_GT(points, 100);
  EXPECT_GT(fallbacks, 0);
  std::printf("ChooserValidity: %d stored winners, %d calls, %d fell back\n", points, calls, fallbacks);
}

// The case that failed on an H200: FA2's d128 tile tuned for a causal bf16 key at an even length, then a call at a
// ragged length of the same bucket.
TEST(ChooserValidity, Fa2TileTunedAtEvenLengthFallsBackAtRaggedLength) {
  const test::TempDir tmp("chooser_fa2");
  const std::string dir = tmp.path();
  ArchEnv env(90);
  fa_context c = make_context(dir + "/cache.sqlite");
  ASSERT_NE(c, nullptr);
  gen::ProblemDesc p = problem(gen::kMaskCausal, 0, false);
  p.tma_ok = false;  // fwd_mma serves on sm_90 (the Hopper family needs TMA tensors)
  const gen::Semantic s = gen::select_forward(p, 90);
  ASSERT_STREQ(gen::family_name(s), "fwd_mma");
  gen::Tunables fa2;
  ASSERT_TRUE(gen::parse_tunables_key(s, "m128.n64.w4.s2.qr0.kj1", &fa2));
  ASSERT_TRUE(gen::is_valid(gen::finalize(s, fa2, p), c->limits, nullptr));
  // A slower stored candidate that serves ragged lengths.
  gen::Tunables other;
  ASSERT_TRUE(gen::parse_tunables_key(s, "m128.n32.w4.s3.qr0.kj1", &other));
  ASSERT_TRUE(tune::context_db(c)->put_tune_results(
      {{tune::tuning_semantic_key(s), tune::shape_bucket(p), gen::tunables_key(s, fa2), 0.5, "ok"},
       {tune::tuning_semantic_key(s), tune::shape_bucket(p), gen::tunables_key(s, other), 0.6, "ok"}}));
  gen::Tunables t;
  ASSERT_TRUE(c->chooser->choose(c, s, p, nullptr, &t).ok());
  EXPECT_EQ(t, fa2);
  p.seqlen_k = 1000;
  const gen::Semantic s2 = gen::select_forward(p, 90);
  ASSERT_TRUE(c->chooser->choose(c, s2, p, nullptr, &t).ok());
  EXPECT_EQ(t, other) << gen::tunables_key(s2, t);
  std::string why;
  EXPECT_TRUE(gen::is_valid(gen::finalize(s2, t, p), c->limits, &why)) << why;
  // Back at an even length: the winner again (memory).
  p.seqlen_k = 960;
  ASSERT_TRUE(c->chooser->choose(c, gen::select_forward(p, 90), p, nullptr, &t).ok());
  EXPECT_EQ(t, fa2);
  fa_context_destroy(c);
}

// fa-tune tunes the forward with LSE; an inference call asks for none. The winner stored for the one serves the
// other, also where a miss is an error (FA_TUNE_REQUIRE_TUNED), and never where it is invalid for the call.
TEST(ChooserValidity, AWinnerTunedWithLseServesTheForwardWithoutIt) {
  const test::TempDir tmp("chooser_lse");
  const std::string dir = tmp.path();
  for (int arch : {80, 90, 100, 120}) {
    ArchEnv env(arch);
    fa_context c = test::make_context(dir + "/cache_" + std::to_string(arch) + ".sqlite", FA_TUNE_REQUIRE_TUNED);
    ASSERT_NE(c, nullptr);
    for (int mask = 0; mask < 3; ++mask) {
      const gen::ProblemDesc tuned = problem(mask, 0, false);  // has_lse: as fa-tune times it
      gen::ProblemDesc call = tuned;
      call.has_lse = false;
      const gen::Semantic st = gen::select_forward(tuned, arch), sc = gen::select_forward(call, arch);
      ASSERT_EQ(st.family, sc.family);
      ASSERT_NE(gen::semantic_key(st), gen::semantic_key(sc));
      // the default is never the stored winner, so a result equal to it proves the lookup
      const gen::Tunables def = st.family->defaults(st);
      gen::Tunables winner = def;
      for (const gen::Tunables& w : gen::valid_space(st, c->limits))
        if (w != def && gen::is_valid(gen::finalize(st, w, tuned), c->limits, nullptr) &&
            gen::is_valid(gen::finalize(sc, w, call), c->limits, nullptr)) {
          winner = w;
          break;
        }
      ASSERT_NE(winner, def) << gen::semantic_key(st);
      ASSERT_TRUE(tune::context_db(c)->put_tune_results(
          {{tune::tuning_semantic_key(st), tune::shape_bucket(tuned), gen::tunables_key(st, winner), 0.5, "ok"}},
          true));
      tune::TuningChooser chooser;
      gen::Tunables t;
      const rt::Status s = chooser.choose(c, sc, call, nullptr, &t);
      ASSERT_TRUE(s.ok()) << s.message;
      EXPECT_EQ(t, winner) << gen::semantic_key(sc);
    }
    fa_context_destroy(c);
  }
}
