// background.cpp -- the worker thread of the background tuner (see background.h).
#include "tuner/background.h"

#include <exception>

namespace fa::tune {

bool BackgroundTuner::submit(BackgroundJob job) {
  const std::string key = job.key;
  const bool queued = worker_.submit(
      key, [this, job = std::move(job)](const std::atomic<bool>& cancelled) { run_job(job, cancelled); });
  if (queued) {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.submitted;
  }
  return queued;
}

void BackgroundTuner::run_job(const BackgroundJob& job, const std::atomic<bool>& cancelled_flag) {
  TuneOutcome out;
  rt::Status st;
  const std::function<bool()> cancelled = [&cancelled_flag] { return cancelled_flag.load(std::memory_order_relaxed); };
  try {
    st = run_(job, cancelled, &out);
  } catch (const std::exception& e) {
    st = rt::error(FA_ERROR_INTERNAL, std::string("background tuning: ") + e.what());
  } catch (...) { st = rt::error(FA_ERROR_INTERNAL, "background tuning: unknown exception"); }
  const bool abandoned = cancelled();
  if (!abandoned) {
    try {
      done_(job, st, out);
    } catch (...) { st = rt::error(FA_ERROR_INTERNAL, "background tuning: the winner could not be swapped in"); }
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (abandoned) ++stats_.abandoned;
  else if (st.ok() && out.has_winner) ++stats_.finished;
  else ++stats_.failed;
}

BackgroundStats BackgroundTuner::stats() {
  BackgroundStats s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    s = stats_;
  }
  s.abandoned += worker_.stats().dropped;
  return s;
}

}  // namespace fa::tune
