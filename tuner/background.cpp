// background.cpp -- the worker thread of the background tuner (see background.h).
#include "tuner/background.h"

#include <chrono>
#include <cstdlib>
#include <exception>

namespace fa::tune {

namespace {

// Live tuners with a worker thread. At process exit (atexit runs before the CUDA driver's own teardown, which was
// registered earlier, at cuInit) every worker is stopped and joined: a process that exits without
// fa_context_destroy (Python's default context, say) must not have a worker in a driver call while the driver
// goes away (seen on an H200: a segmentation fault at exit).
std::mutex& registry_mu() {
  static std::mutex* m = new std::mutex;  // never destroyed: usable from atexit
  return *m;
}
std::set<BackgroundTuner*>& registry() {
  static auto* s = new std::set<BackgroundTuner*>;
  return *s;
}
void stop_all_at_exit() {
  std::set<BackgroundTuner*> live;
  {
    std::lock_guard<std::mutex> lock(registry_mu());
    live = registry();
  }
  for (BackgroundTuner* t : live) t->stop();
}
void enroll(BackgroundTuner* t) {
  static const bool registered = std::atexit(stop_all_at_exit) == 0;
  (void)registered;
  std::lock_guard<std::mutex> lock(registry_mu());
  registry().insert(t);
}
void withdraw(BackgroundTuner* t) {
  std::lock_guard<std::mutex> lock(registry_mu());
  registry().erase(t);
}

}  // namespace

bool BackgroundTuner::submit(BackgroundJob job) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_ || !seen_.insert(job.key).second) return false;
  queue_.push_back(std::move(job));
  ++stats_.submitted;
  if (!thread_.joinable()) {
    try {
      enroll(this);
      thread_ = std::thread([this] { loop(); });
    } catch (const std::exception&) {  // no thread: the key stays at its defaults
      queue_.pop_back();
      ++stats_.failed;
      return false;
    }
  }
  cv_.notify_all();
  return true;
}

void BackgroundTuner::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (stopping_) break;
    BackgroundJob job = std::move(queue_.front());
    queue_.pop_front();
    running_ = true;
    lock.unlock();
    TuneOutcome out;
    rt::Status st;
    const std::function<bool()> cancelled = [this] { return cancel_.load(std::memory_order_relaxed); };
    try {
      st = run_(job, cancelled, &out);
    } catch (const std::exception& e) {
      st = rt::error(FA_ERROR_INTERNAL, std::string("background tuning: ") + e.what());
    } catch (...) {
      st = rt::error(FA_ERROR_INTERNAL, "background tuning: unknown exception");
    }
    const bool abandoned = cancelled();
    if (!abandoned) {
      try {
        done_(job, st, out);
      } catch (...) {
        st = rt::error(FA_ERROR_INTERNAL, "background tuning: the winner could not be swapped in");
      }
    }
    lock.lock();
    running_ = false;
    if (abandoned) ++stats_.abandoned;
    else if (st.ok() && out.has_winner) ++stats_.finished;
    else ++stats_.failed;
    idle_cv_.notify_all();
  }
  running_ = false;
  idle_cv_.notify_all();
}

void BackgroundTuner::stop() {
  std::thread t;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    cancel_.store(true);
    stats_.abandoned += static_cast<long long>(queue_.size());
    queue_.clear();
    t = std::move(thread_);
  }
  cv_.notify_all();
  idle_cv_.notify_all();
  if (t.joinable()) {
    if (t.get_id() == std::this_thread::get_id()) t.detach();  // never from the worker itself; defensive
    else t.join();
  }
  withdraw(this);
}

bool BackgroundTuner::idle() {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.empty() && !running_;
}

bool BackgroundTuner::wait_idle(double timeout_s) {
  std::unique_lock<std::mutex> lock(mu_);
  return idle_cv_.wait_for(lock, std::chrono::duration<double>(timeout_s),
                           [&] { return (queue_.empty() && !running_) || stopping_; });
}

BackgroundStats BackgroundTuner::stats() {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace fa::tune
