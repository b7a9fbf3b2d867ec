// background.h -- the background tuner of FA_TUNE_ON_FIRST_USE: one worker thread per context (rt::SerialWorker),
// started with the first job, that tunes keys queued by fa_run while fa_run goes on with the defaults. A job runs
// through `run` (the device runner below, or a fake in tests) and hands its outcome to `done` (the chooser swaps the
// winner in).
//
// Lifecycle: submit() queues a key once (a key already queued, running or done is ignored); stop() sets the cancel
// flag the job in flight polls (TuneOptions::cancelled: between compiles and timings), drops the queue and joins
// the thread; it is idempotent and the destructor calls it. Nothing here throws into the caller or aborts: a job
// that throws counts as failed.
#pragma once

#include <atomic>
#include <functional>
#include <mutex>
#include <string>

#include "generator/config.h"
#include "generator/problem.h"
#include "runtime/serial_worker.h"
#include "runtime/status.h"
#include "tuner/tuner.h"

namespace fa::tune {

struct BackgroundJob {
  std::string key;  // tuning key (bucket.h)
  gen::Semantic s;
  gen::ProblemDesc p;  // the call that queued it (fixed-length forward)
};

// Runs one job: tunes it and fills *out; polls cancelled() and gives up (any status) once it returns true.
using JobRunner =
    std::function<rt::Status(const BackgroundJob& job, const std::function<bool()>& cancelled, TuneOutcome* out)>;
// Receives a finished (not abandoned) job: its status and outcome. Runs on the worker thread.
using JobDone = std::function<void(const BackgroundJob& job, const rt::Status& st, const TuneOutcome& out)>;

struct BackgroundStats {
  long long submitted = 0, finished = 0, failed = 0, abandoned = 0;
};

class BackgroundTuner {
 public:
  BackgroundTuner(JobRunner run, JobDone done) : run_(std::move(run)), done_(std::move(done)) {}
  ~BackgroundTuner() { stop(); }
  BackgroundTuner(const BackgroundTuner&) = delete;
  BackgroundTuner& operator=(const BackgroundTuner&) = delete;

  // Queues a job; false when stopped or when its key was submitted before.
  bool submit(BackgroundJob job);
  // Cancels the job in flight, drops queued ones, joins the worker. Idempotent.
  void stop() { worker_.stop(); }
  // Waits until nothing is queued or running; false on timeout.
  bool wait_idle(double timeout_s) { return worker_.wait_idle(timeout_s); }
  bool idle() { return worker_.idle(); }
  BackgroundStats stats();

 private:
  void run_job(const BackgroundJob& job, const std::atomic<bool>& cancelled);

  JobRunner run_;
  JobDone done_;
  std::mutex mu_;            // guards stats_
  BackgroundStats stats_;    // abandoned: the jobs cancelled in flight (the worker counts the dropped ones)
  rt::SerialWorker worker_;  // last: stopped (joined) before the members its tasks use go away
};

}  // namespace fa::tune
