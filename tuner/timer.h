// timer.h -- how a candidate is timed. The Timer interface lets CPU tests inject a fake; the device timer records
// CUDA events around the TuneRequest's launcher on the request's stream.
//
// Device protocol per candidate: `warmup` untimed runs, one timed run to estimate the cost, then
// reps = clamp(budget_ms / estimate, min_reps, max_reps) timed runs, each preceded by an L2 flush when flush_l2 (a
// 256 MiB cuMemsetD8Async of a scratch buffer allocated once per timer, i.e. per tuning session); the result is the
// median.
// With burst > 1 a timed run is `burst` launches back to back between its two events (after the flush, if any) and
// reads the mean per launch: the steady state in which a model runs its layers and benchmarks time kernels. The finals
// time that way, unflushed: on the H200 (bf16 d 128 causal, 4k) single flushed launches ranked a persistent point 4%
// ahead of the default, which ran 6% ahead of it back to back, and flushed bursts still read non-persistent points 2-3%
// slow against the benchmarks' calls (tuner.cpp, run_finals). (Bursts in the first pass too, flushed in session 16 and
// unflushed in session 17, picked worse points: docs/design_notes.md.) Long timing runs hold the GPU at its power cap
// (H200: 1680-1740 MHz against 1980 at boost), where a benchmark's short bursts are not: docs/design_notes.md,
// "Measuring". At the cap points that differ at boost read alike (H200, session 19: bf16 d 128 causal 1k / 2k, the
// non-persistent point ran 10-15% ahead of the persistent one in bursts at boost; timed back to back for seconds, at
// 1545-1965 MHz under the cap, the two read within 3%), so ranking at the cap picked the persistent point and cost the
// boost regime that much. Hence `idle_ratio`: after each timed run the timer waits for it and leaves the GPU idle for
// idle_ratio times the run's time (the host sleeps), holding the GPU's average power under its cap so that every run
// starts at boost clocks, as a benchmark's cell does. The budget covers the idle time too (reps = budget / (estimate *
// (1 + idle_ratio)): timed_reps), so tuning takes as long as before with fewer, cooler runs.
#pragma once

#include <memory>

#include "generator/config.h"
#include "runtime/context.h"

namespace fa::tune {

struct TimingPlan {
  int warmup = 1;
  int min_reps = 3;
  int max_reps = 30;
  double budget_ms = 50.0;  // for this candidate's timed runs
  bool flush_l2 = true;
  int burst = 1;            // launches per timed run (back to back); the run's time is divided by it
  double idle_ratio = 0.0;  // idle time after each timed run, in units of that run's time (0: runs back to back)
};

// The count of timed runs for a budget: clamp(budget_ms / (run_ms * (1 + idle_ratio)), min_reps, max_reps), where
// run_ms is one timed run's estimated time (a burst's, all its launches).
int timed_reps(const TimingPlan& plan, double run_ms);

class Timer {
 public:
  virtual ~Timer() = default;
  // The median milliseconds of req.launch(cfg); an error when a launch (or an event call) fails.
  virtual rt::Status time(const gen::KernelConfig& cfg, const rt::TuneRequest& req, const TimingPlan& plan,
                          double* median_ms) = 0;
};

// Events on req.stream through c->drv inside a CtxGuard. The L2 scratch buffer and events are created on first use
// and released by the destructor (which needs the context alive).
std::unique_ptr<Timer> make_device_timer(fa_context c);

// Median of a non-empty list (the mean of the two middle values for even sizes).
double median_of(std::vector<double> v);

}  // namespace fa::tune
