// test_pinned_tunables.cpp -- $FA_PIN_TUNABLES (runtime/pinned_tunables.h): every pinnable family's key parses
// back, bad values fail naming the variable, the expected and the actual text, a pin is checked against the
// validity predicate for the call at hand, and the chooser takes a pin before its cached winner and its policy.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "cache_db/cache_db.h"
#include "fa/fa.h"
#include "generator/family.h"
#include "generator/problem.h"
#include "runtime/context.h"
#include "runtime/pinned_tunables.h"
#include "tests/cpu/context_support.h"
#include "tuner/bucket.h"
#include "tuner/cache_store.h"
#include "tuner/chooser.h"

using namespace fa;

namespace {

// The key of the point that takes each knob's first allowed value (valid syntax for f, values in range).
std::string first_point_key(const gen::Family& f) {
  gen::Semantic s;
  s.family = &f;
  gen::Tunables t;
  for (size_t i = 0; i < f.knobs.size(); ++i) t[static_cast<int>(i)] = f.knobs[i].values.front();
  return gen::tunables_key(s, t);
}

bool pinnable(const gen::Family& f) { return f.role != gen::Role::Step && f.tuned_on_first_use; }

// A fixed-length bf16 forward that the Hopper forward serves on sm_90.
gen::ProblemDesc hopper_forward() {
  gen::ProblemDesc p;
  p.dtype = gen::kBf16;
  p.batch = 2;
  p.heads_q = p.heads_kv = 8;
  p.head_dim = p.head_dim_v = 128;
  p.seqlen_q = p.seqlen_k = 1024;
  p.total_q = p.total_k = 2048;
  p.mask = gen::kMaskCausal;
  p.has_lse = true;
  p.aligned16 = p.tma_ok = true;
  return p;
}

// A valid point of s at p other than `other` (a test failure when there is none).
gen::Tunables another_valid_point(const gen::Semantic& s, const gen::ProblemDesc& p, const gen::DeviceLimits& lim,
                                  const gen::Tunables& other) {
  for (const gen::Tunables& t : gen::valid_space(s, lim))
    if (t != other && gen::is_valid(gen::finalize(s, t, p), lim, nullptr)) return t;
  ADD_FAILURE() << "no second valid point for " << gen::semantic_key(s);
  return other;
}

// A point of s's knobs that the predicate rejects at p (a test failure when every point is valid).
gen::Tunables invalid_point(const gen::Semantic& s, const gen::ProblemDesc& p, const gen::DeviceLimits& lim) {
  for (const gen::Tunables& t : gen::full_space(s))
    if (!gen::is_valid(gen::finalize(s, t, p), lim, nullptr)) return t;
  ADD_FAILURE() << "every point of " << gen::semantic_key(s) << " is valid";
  return gen::Tunables{};
}

// The Hopper forward on sm_90: the problem, its semantic, the default point, another valid point and one that the
// predicate rejects at the problem.
struct HopperCase {
  gen::DeviceLimits lim = gen::limits_for_arch(90);
  gen::ProblemDesc p = hopper_forward();
  gen::Semantic s = gen::select_forward(p, 90);
  gen::Tunables def, other, bad;
  HopperCase() {
    if (s.family == nullptr) {
      ADD_FAILURE() << "no forward family for the sm_90 problem";
      return;
    }
    def = s.family->defaults(s);
    other = another_valid_point(s, p, lim, def);
    bad = invalid_point(s, p, lim);
  }
  std::string pin(const gen::Tunables& t) const { return std::string(s.family->name) + ":" + gen::tunables_key(s, t); }
};

void expect_names_variable(const rt::Status& st, const std::string& actual) {
  EXPECT_EQ(st.code, FA_ERROR_INVALID_ARGUMENT) << st.message;
  EXPECT_NE(st.message.find("FA_PIN_TUNABLES: expected "), std::string::npos) << st.message;
  EXPECT_NE(st.message.find(", got '" + actual), std::string::npos) << st.message;
}

}  // namespace

TEST(PinnedTunables, EveryPinnableFamilysKeyParsesBack) {
  int pinnable_families = 0;
  for (const gen::Family* f : gen::all_families()) {
    if (!pinnable(*f)) continue;
    ++pinnable_families;
    const std::string text = std::string(f->name) + ":" + first_point_key(*f);
    rt::PinnedTunables pins;
    ASSERT_TRUE(rt::parse_pinned_tunables(text.c_str(), &pins).ok()) << text;
    ASSERT_EQ(pins.pins.size(), 1u);
    EXPECT_EQ(pins.pins[0].first, f);
    gen::Semantic s;
    s.family = f;
    EXPECT_EQ(gen::tunables_key(s, pins.pins[0].second), first_point_key(*f));
    EXPECT_EQ(pins.text, text);
  }
  EXPECT_GE(pinnable_families, 4);  // fwd_mma, fwd_wgmma, bwd_mma, bwd_wgmma at least
}

TEST(PinnedTunables, SeveralFamiliesOrNone) {
  rt::PinnedTunables none;
  ASSERT_TRUE(rt::parse_pinned_tunables(nullptr, &none).ok());
  EXPECT_TRUE(none.empty());
  ASSERT_TRUE(rt::parse_pinned_tunables("", &none).ok());
  EXPECT_TRUE(none.empty());

  const gen::Family* fwd = gen::find_family("fwd_wgmma");
  const gen::Family* bwd = gen::find_family("bwd_wgmma");
  ASSERT_NE(fwd, nullptr);
  ASSERT_NE(bwd, nullptr);
  const std::string text = "fwd_wgmma:" + first_point_key(*fwd) + ",bwd_wgmma:" + first_point_key(*bwd);
  rt::PinnedTunables pins;
  ASSERT_TRUE(rt::parse_pinned_tunables(text.c_str(), &pins).ok()) << text;
  ASSERT_EQ(pins.pins.size(), 2u);
  ASSERT_NE(pins.find(fwd), nullptr);
  ASSERT_NE(pins.find(bwd), nullptr);
  EXPECT_EQ(pins.find(gen::find_family("fwd_mma")), nullptr);
}

TEST(PinnedTunables, BadValuesNameTheVariableTheExpectedAndTheActual) {
  const gen::Family* fwd = gen::find_family("fwd_wgmma");
  const gen::Family* pre = gen::find_family("bwd_pre");
  const gen::Family* ref = gen::find_family("bwd_ref_dq");
  ASSERT_NE(fwd, nullptr);
  ASSERT_NE(pre, nullptr);
  ASSERT_NE(ref, nullptr);
  ASSERT_FALSE(pinnable(*pre));
  ASSERT_FALSE(pinnable(*ref));
  const std::string good = "fwd_wgmma:" + first_point_key(*fwd);
  std::string out_of_range = good;  // the first knob (consumers) at a value it never takes
  out_of_range.replace(out_of_range.find(':') + 2, 1, "9");
  struct Case {
    std::string value, actual;
  };
  const std::vector<Case> cases = {
      {"fwd_wgmma", "fwd_wgmma"},                                                    // no key
      {":" + first_point_key(*fwd), ":"},                                            // no family
      {"fwd_wgmma:", "fwd_wgmma:"},                                                  // empty key
      {"no_such_family:c1", "no_such_family"},                                       // unknown family
      {"bwd_pre:" + first_point_key(*pre), "bwd_pre"},                               // a plan step: never chosen
      {"bwd_ref_dq:" + first_point_key(*ref), "bwd_ref_dq"},                         // not tuned: never chosen
      {"fwd_wgmma:c2.n128", "fwd_wgmma:c2.n128"},                                    // knobs missing
      {good + "x", good + "x"},                                                      // trailing garbage
      {"fwd_wgmma:" + first_point_key(*gen::find_family("bwd_mma")), "fwd_wgmma:"},  // another family's key
      {out_of_range, out_of_range},            // a value outside the knob's values
      {good + "," + good, good + "," + good},  // a family twice
      {good + ",", good + ","},                // an empty last entry
      {good + ",,", ""},                       // an empty entry
  };
  for (const Case& c : cases) {
    rt::PinnedTunables pins;
    pins.text = "untouched";
    const rt::Status st = rt::parse_pinned_tunables(c.value.c_str(), &pins);
    SCOPED_TRACE(c.value);
    expect_names_variable(st, c.actual);
    EXPECT_EQ(pins.text, "untouched");
    EXPECT_TRUE(pins.empty());
  }
}

TEST(PinnedTunables, ACallTakesAValidPinAndFailsOnAnInvalidOne) {
  const HopperCase h;
  ASSERT_NE(h.s.family, nullptr);
  rt::PinnedTunables pins;
  ASSERT_TRUE(rt::parse_pinned_tunables(h.pin(h.other).c_str(), &pins).ok()) << h.pin(h.other);
  bool pinned = false;
  gen::Tunables t = h.def;
  ASSERT_TRUE(rt::pinned_for_call(pins, h.s, h.p, h.lim, &pinned, &t).ok());
  EXPECT_TRUE(pinned);
  EXPECT_EQ(t, h.other);

  // A family without a pin: nothing happens.
  gen::ProblemDesc pb = h.p;
  pb.backward = true;
  const gen::Semantic sb = gen::select_backward(pb, 90);
  ASSERT_NE(sb.family, nullptr);
  t = h.def;
  ASSERT_TRUE(rt::pinned_for_call(pins, sb, pb, h.lim, &pinned, &t).ok());
  EXPECT_FALSE(pinned);
  EXPECT_EQ(t, h.def);

  // A point the predicate rejects at this call fails it, naming the semantic and the pin.
  rt::PinnedTunables bad_pins;
  ASSERT_TRUE(rt::parse_pinned_tunables(h.pin(h.bad).c_str(), &bad_pins).ok()) << h.pin(h.bad);
  const rt::Status st = rt::pinned_for_call(bad_pins, h.s, h.p, h.lim, &pinned, &t);
  expect_names_variable(st, h.pin(h.bad));
  EXPECT_NE(st.message.find(gen::semantic_key(gen::finalize(h.s, h.bad, h.p).s)), std::string::npos) << st.message;
  EXPECT_EQ(t, h.def);
}

TEST(PinnedTunables, TheChooserTakesThePinBeforeItsWinnerAndItsPolicy) {
  test::ScopedEnv arch("FA_ARCH", "90");
  const HopperCase h;
  ASSERT_NE(h.s.family, nullptr);
  const test::TempDir tmp("pinned_tunables");
  const std::string dir = tmp.path();

  // A context with a malformed pin is never made.
  const std::string err = test::context_create_error("FA_PIN_TUNABLES", "fwd_wgmma:nonsense");
  EXPECT_NE(err.find("FA_PIN_TUNABLES: expected "), std::string::npos) << err;
  EXPECT_NE(err.find("fwd_wgmma:nonsense"), std::string::npos) << err;

  test::ScopedEnv env("FA_PIN_TUNABLES", h.pin(h.other).c_str());
  for (int policy : {FA_TUNE_DEFAULTS_ONLY, FA_TUNE_REQUIRE_TUNED}) {
    fa_context c = test::make_context(dir + "/cache_" + std::to_string(policy) + ".sqlite", policy);
    ASSERT_NE(c, nullptr);
    // The stored winner of the key is the default: the pin still wins; under require, no NOT_TUNED.
    cache::Db* db = tune::context_db(c);
    ASSERT_NE(db, nullptr);
    if (policy == FA_TUNE_DEFAULTS_ONLY) {
      const cache::TuneRow row{tune::tuning_semantic_key(h.s), tune::shape_bucket(h.p), gen::tunables_key(h.s, h.def),
                               0.1, "ok"};
      ASSERT_TRUE(db->put_tune_results({row}, true));
    }
    tune::TuningChooser chooser;
    gen::Tunables t;
    const rt::Status st = chooser.choose(c, h.s, h.p, nullptr, &t);
    ASSERT_TRUE(st.ok()) << st.message;
    EXPECT_EQ(t, h.other) << gen::tunables_key(h.s, t);
    EXPECT_EQ(chooser.remembered(), 0u);  // nothing pinned is remembered

    // The same chooser at a context whose pin is invalid for the call fails that call.
    test::ScopedEnv bad_env("FA_PIN_TUNABLES", h.pin(h.bad).c_str());
    fa_context cb = test::make_context(dir + "/bad_" + std::to_string(policy) + ".sqlite", policy);
    ASSERT_NE(cb, nullptr);
    const rt::Status bst = chooser.choose(cb, h.s, h.p, nullptr, &t);
    EXPECT_EQ(bst.code, FA_ERROR_INVALID_ARGUMENT) << bst.message;
    EXPECT_NE(bst.message.find("FA_PIN_TUNABLES"), std::string::npos) << bst.message;
    fa_context_destroy(cb);
    fa_context_destroy(c);
  }
}
