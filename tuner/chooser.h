// chooser.h -- the context's TunableChooser: the tune policy over an in-memory map, cache_db and the tuner.
//
//   $FA_PIN_TUNABLES names s's family   -> the pin if the validity predicate admits it for the call, else
//                                          FA_ERROR_INVALID_ARGUMENT (runtime/pinned_tunables.h); nothing remembered
//   memory map hit                      -> that entry (any policy)
//   cache_db best row for the key       -> that entry, remembered in memory
//   FA_TUNE_REQUIRE_TUNED               -> FA_ERROR_NOT_TUNED
//   FA_TUNE_DEFAULTS_ONLY               -> family defaults (key recorded in c->untuned), remembered in memory
//   FA_TUNE_ON_FIRST_USE, tune != null, a fixed-length forward, not tune->synchronous
//                                       -> the defaults now (remembered), and the key queued once for the background
//                                          worker (background.h), which tunes it on its own buffers and stream and
//                                          swaps the winner in (publish(): kernels of the bucket's shape classes
//                                          loaded first, then memory, then c->plans.bump())
//   FA_TUNE_ON_FIRST_USE_SYNC (or FIRST_USE with tune->synchronous, a backward or, with no device and no injected
//   runner, any problem), tune != null
//                                       -> tune now (tuner.h), remember and store the winner; a failed tuning falls
//                                          back to the defaults with a warning
//   FA_TUNE_ON_FIRST_USE, varlen forward, not synchronous
//                                       -> defaults (key recorded in c->untuned; fa_prepare or fa-tune tune it)
//   either first-use policy, tune == null -> defaults (stream capture), key recorded in c->untuned
// Keys are tuning keys (bucket.h): a new length in a known bucket costs nothing. Tuning is serialised per chooser.
// Every hit is re-checked against the validity predicate for the call at hand (cheap: no formatting on success):
// a winner tuned at one length can be invalid at another length of the same key (e.g. FA2's d128 tile needs
// seqlen_k a multiple of 64). Such a call falls back to the fastest stored candidate of the key that serves it,
// else the family's default, remembered per key. So the chooser never returns a config the predicate rejects.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "runtime/context.h"
#include "tuner/background.h"
#include "tuner/tuner.h"

namespace fa::tune {

class TuningChooser : public rt::TunableChooser {
 public:
  TuningChooser() = default;
  ~TuningChooser() override { stop_background(); }
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

  // Background tuning (FA_TUNE_ON_FIRST_USE). Tests inject a runner (no device needed); the default runs jobs on
  // the context's device (background_device.h). Set before the first job.
  void set_background_runner(JobRunner run);
  // Waits until the background worker has nothing queued or running (true), or timeout_s passes (false).
  bool wait_background(double timeout_s);
  BackgroundStats background_stats();
  void stop_background() override;

  // Swaps a winner in for `key` (what the background worker does with a finished job): loads the kernels that the
  // bucket's shape classes will run (with a device), remembers it, and bumps c->plans' generation.
  void publish(fa_context c, const BackgroundJob& job, const TuneOutcome& outcome);

 private:
  bool lookup(fa_context c, const gen::Semantic& s, const gen::ProblemDesc& p, const std::string& key,
              gen::Tunables* out);
  // The best valid choice for a call that the key's winner does not serve.
  bool fallback(fa_context c, const gen::Semantic& s, const gen::ProblemDesc& p, const std::string& key,
                gen::Tunables* out);

  // The background tuner, created with the first job.
  std::shared_ptr<BackgroundTuner> background(fa_context c);
  // The fallback() choice for p computed without touching alternates_ (nullopt: none valid).
  bool pick_fallback(fa_context c, const gen::Semantic& s, const gen::ProblemDesc& p, gen::Tunables* out);

  std::mutex bg_mu_;  // guards background_ and runner_
  std::shared_ptr<BackgroundTuner> background_;
  JobRunner runner_;
  bool stopped_ = false;
  std::mutex mu_;       // guards memory_ and last_
  std::mutex tune_mu_;  // one tuning at a time
  std::map<std::string, gen::Tunables> memory_;
  std::map<std::string, gen::Tunables> alternates_;  // per key: the fallback for calls its winner does not serve
  TuneOutcome last_;
  TuneOptions options_;
};

}  // namespace fa::tune
