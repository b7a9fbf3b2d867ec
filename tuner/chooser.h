// chooser.h -- the context's TunableChooser: the tune policy over an in-memory map, cache_db and the tuner.
//
//   memory map hit                      -> that entry (any policy)
//   cache_db best row for the key       -> that entry, remembered in memory
//   FA_TUNE_REQUIRE_TUNED               -> FA_ERROR_NOT_TUNED
//   FA_TUNE_DEFAULTS_ONLY               -> family defaults (key recorded in c->untuned), remembered in memory
//   FA_TUNE_ON_FIRST_USE, tune != null  -> tune now (tuner.h), remember and store the winner; a failed tuning falls
//                                          back to the defaults with a warning
//   FA_TUNE_ON_FIRST_USE, tune == null  -> defaults (stream capture), key recorded in c->untuned
// Keys are tuning keys (bucket.h): a new length in a known bucket costs nothing. Tuning is serialised per chooser.
// Every hit is re-checked against the validity predicate for the call at hand (cheap: no formatting on success):
// a winner tuned at one length can be invalid at another length of the same key (e.g. FA2's d128 tile needs
// seqlen_k a multiple of 64). Such a call falls back to the fastest stored candidate of the key that serves it,
// else the family's default, remembered per key. So the chooser never returns a config the predicate rejects.
#pragma once

#include <map>
#include <mutex>
#include <string>

#include "runtime/context.h"
#include "tuner/tuner.h"

namespace fa::tune {

class TuningChooser : public rt::TunableChooser {
 public:
  TuningChooser() = default;
  rt::Status choose(fa_context c, const gen::Semantic& s, const gen::ProblemDesc& p, const rt::TuneRequest* tune,
                    gen::Tunables* out) override;

  // Options used for first-use tuning (tests inject a fake timer / compile function here).
  TuneOptions& options() { return options_; }
  size_t remembered() {
    std::lock_guard<std::mutex> lock(mu_);
    return memory_.size();
  }
  // The outcome of the last tuning this chooser ran (for diagnostics and tests).
  TuneOutcome last_outcome() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_;
  }

 private:
  bool lookup(fa_context c, const gen::Semantic& s, const gen::ProblemDesc& p, const std::string& key,
              gen::Tunables* out);
  // The best valid choice for a call that the key's winner does not serve.
  bool fallback(fa_context c, const gen::Semantic& s, const gen::ProblemDesc& p, const std::string& key,
                gen::Tunables* out);

  std::mutex mu_;        // guards memory_ and last_
  std::mutex tune_mu_;   // one tuning at a time
  std::map<std::string, gen::Tunables> memory_;
  std::map<std::string, gen::Tunables> alternates_;  // per key: the fallback for calls its winner does not serve
  TuneOutcome last_;
  TuneOptions options_;
};

}  // namespace fa::tune
