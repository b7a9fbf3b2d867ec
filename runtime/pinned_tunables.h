// pinned_tunables.h -- $FA_PIN_TUNABLES: tunables pinned per kernel family, for tests and benchmarks that measure a
// fixed point of a family's space instead of what the tune policy would pick.
//
//   FA_PIN_TUNABLES="FAMILY:TUNABLES[,FAMILY:TUNABLES...]"      e.g. "fwd_wgmma:c2.n128.s2.pp1.ov1.p1"
//
// TUNABLES is the family's tunables key as gen::tunables_key prints it (fa-tune's winner column, the cache's rows)
// and gen::parse_tunables_key reads it. FAMILY is a Forward or Backward family the chooser serves (its tunables are
// tuned: not a plan step such as bwd_pre, not the reference backward). Parsed at fa_context_create
// (api/env_options.h): an unknown or unpinnable family, a key that does not parse for its family, a knob value
// outside the knob's values or a family named twice fails the create with FA_ERROR_INVALID_ARGUMENT naming the
// variable, the expected and the actual text. At a call whose selected family has a pin, the chooser
// (tuner/chooser.h) takes it before its memory, SQLite or tuning, once pinned_for_call has checked it against the
// validity predicate for the call at hand: a pin that is invalid there fails the call the same way, never falls back
// (fa_prepare, which also readies the bucket's other shape classes, warns and skips a class the pin is invalid for:
// the calls at those lengths fail). A call whose family has no pin chooses as usual. Nothing pinned is remembered or
// stored.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "generator/family.h"
#include "generator/problem.h"
#include "runtime/status.h"

namespace fa::rt {

inline constexpr const char* kPinTunablesVar = "FA_PIN_TUNABLES";

struct PinnedTunables {
  std::string text;  // the variable's value as given (for messages)
  std::vector<std::pair<const gen::Family*, gen::Tunables>> pins;
  bool empty() const { return pins.empty(); }
  const gen::Tunables* find(const gen::Family* f) const;  // nullptr: f has no pin
};

// Parses the variable's value (nullptr or "": no pins). On error *out is unchanged.
Status parse_pinned_tunables(const char* text, PinnedTunables* out);

// The pin for s's family at problem p: *pinned = false when the family has none (out untouched); else the pin
// checked against the validity predicate (gen::is_valid of the finalized config under `lim`): OK with *out = the
// pin, or FA_ERROR_INVALID_ARGUMENT naming FA_PIN_TUNABLES, the semantic key with the predicate's reason, and the pin.
Status pinned_for_call(const PinnedTunables& pins, const gen::Semantic& s, const gen::ProblemDesc& p,
                       const gen::DeviceLimits& lim, bool* pinned, gen::Tunables* out);

}  // namespace fa::rt
