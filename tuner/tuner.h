// tuner.h -- the autotuner: candidates from THE validity predicate, compiled in parallel through the context's
// KernelCache (so cubins persist), pruned by ptxas (spills, registers), timed on the device, the winner verified
// once against the reference, every candidate's time stored in cache_db under the tuning key (bucket.h). The fastest
// few of the first pass and the default are re-timed in interleaved rounds (the finals, tuner.cpp) before one wins.
//
// Used by the context's chooser (first-use tuning inside fa_run / fa_prepare) and by the fa-tune command.
#pragma once

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "generator/config.h"
#include "generator/problem.h"
#include "runtime/context.h"
#include "runtime/nvrtc_compiler.h"
#include "tuner/timer.h"

namespace fa::tune {

// Compiles (or finds) one candidate and reports its ptxas info. The default goes through c->kernels.
using CompileFn = std::function<rt::Status(const gen::KernelConfig& cfg, rt::PtxasInfo* info)>;

struct CandidateResult;

struct TuneOptions {
  double budget_ms = -1.0;       // timing budget per tuning key; < 0: $FA_TUNE_BUDGET_MS, else 2000
  int threads = 0;               // compile threads; 0: default_compile_threads()
  Timer* timer = nullptr;        // nullptr: a device timer on the context (one per tune() call)
  CompileFn compile;             // empty: c->kernels->get (persists cubins through the context's store)
  bool use_cache = true;         // a stored result for the key is returned without timing
  bool store = true;             // write every candidate's row to the context's cache_db
  double verify_tolerance = -1;  // < 0: by dtype (fp32 1e-4, fp16 5e-3, bf16 2e-2)
  int max_candidates = 0;        // > 0: only the first N candidates (plus the default); for quick runs and tests
  // Finals (tuner.cpp): the first pass's fastest `finalists` candidates plus the default, re-timed in
  // `final_rounds` interleaved rounds, each timed run a burst of `final_burst` launches back to back (timer.h).
  // < 0: the defaults (3, 3 and 8); 0 rounds: no finals.
  int finalists = -1;
  int final_rounds = -1;
  int final_burst = -1;
  // Idle time after each timed run, in units of the run's time (timer.h: TimingPlan::idle_ratio, which keeps the
  // GPU under its power cap while it is timed); < 0: 1.0; 0: runs back to back.
  double idle_ratio = -1.0;
  // Polled between compiles and timings (the background tuner's stop): once true, tune() stops early, stores
  // nothing and fails with FA_ERROR_INTERNAL "tuning cancelled".
  std::function<bool()> cancelled;
  // Candidates that won other buckets of the same tuning semantic key in the store (this GPU's earlier tunings)
  // go first, right after the default, so max_candidates keeps them (order_by_prior_winners).
  bool prior_winners_first = true;
  // Called (from compile threads, serialised by the caller if needed) as each candidate's compile finishes.
  std::function<void(size_t index, const CandidateResult& r)> on_compiled;
};

struct CandidateResult {
  gen::Tunables t;
  std::string key;     // tunables_key
  std::string status;  // ok, compile_error, spill, registers, launch_error, verify_failed, not_timed,
                       // eliminated (timed in the first pass, not re-timed in the finals)
  double median_ms = std::nan("");
  rt::PtxasInfo ptxas;
  std::string detail;  // why it was rejected
  bool is_default = false;
};

struct TuneOutcome {
  gen::Semantic semantic;    // what was tuned (its family's schema reads the tunables)
  std::string semantic_key;  // tuning_semantic_key
  std::string bucket;        // shape_bucket
  std::vector<CandidateResult> candidates;
  bool from_cache = false;  // served from cache_db, nothing timed
  bool has_winner = false;
  gen::Tunables winner;
  double winner_ms = std::nan("");
  gen::Tunables defaults;
  double default_ms = std::nan("");
  double flops = 0.0;  // of the timed problem
  double winner_tflops = std::nan("");
  double default_tflops = std::nan("");
  bool verified = false;
  double verify_error = std::nan("");
  std::string verify_note;       // e.g. "no reference check available"
  int compiled = 0;              // candidates compiled (or found) without error
  int rejected = 0;              // compile errors + ptxas rejections
  double compile_seconds = 0.0;  // wall time of the parallel compile
  double timing_seconds = 0.0;
  int finalists = 0;  // candidates re-timed in the finals (0: no finals ran)
  int final_rounds = 0;
};

// Forward FLOPs of a problem (2 GEMMs, counting only visible (i, j) pairs under the mask); x2.5 for backward.
double attention_flops(const gen::ProblemDesc& p);

// The candidate configs of a semantic for a problem: valid_space(s, lim) (plus the family default when it is not
// in the space), finalized for p (even_k). The default comes first.
std::vector<gen::KernelConfig> candidate_configs(const gen::Semantic& s, const gen::ProblemDesc& p,
                                                 const gen::DeviceLimits& lim, int max_candidates = 0);

// The candidates reordered: configs[0] (the default) stays first, then those whose tunables key is in `winners`
// (in the order of `winners`: most buckets won first), then the rest in their order. Stable, nothing dropped.
std::vector<gen::KernelConfig> order_by_prior_winners(const std::vector<gen::KernelConfig>& configs,
                                                      const std::vector<std::string>& winners);

// Tunables keys that won buckets of `semantic_key` in the context's store, most buckets first (ties: faster first).
std::vector<std::string> prior_winners(fa_context c, const std::string& semantic_key);

// ptxas pruning: "" when the kernel is acceptable, else the status ("spill" / "registers") with *why filled.
std::string ptxas_verdict(const rt::PtxasInfo& info, const gen::KernelConfig& cfg, const gen::DeviceLimits& lim,
                          std::string* why);

// Compiles every config on a pool (options.threads) and applies ptxas_verdict; results in order of `configs`.
std::vector<CandidateResult> compile_candidates(fa_context c, const std::vector<gen::KernelConfig>& configs,
                                                const TuneOptions& o, double* wall_seconds);

// Tunes semantic s for problem p with the request's launcher: cached result (use_cache) or compile + time + verify +
// store. Fails only when no candidate could be timed (the message says why) or when the context has no device and
// a device timer would be needed.
rt::Status tune(fa_context c, const gen::Semantic& s, const gen::ProblemDesc& p, const rt::TuneRequest& req,
                const TuneOptions& o, TuneOutcome* out);

// $FA_TUNE_BUDGET_MS or 2000.
double default_budget_ms();

}  // namespace fa::tune
