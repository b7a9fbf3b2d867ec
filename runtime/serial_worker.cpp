// serial_worker.cpp -- the thread of serial_worker.h.
#include "runtime/serial_worker.h"

#include <chrono>
#include <cstdlib>
#include <exception>

namespace fa::rt {

namespace {

// Live workers with a thread. At process exit (atexit runs before the CUDA driver's own teardown, registered earlier
// at cuInit) every worker is stopped and joined: a process that exits without fa_context_destroy (Python's default
// context, say) must not have a worker inside a driver or NVRTC call while the driver goes away (seen on an H200: a
// segmentation fault at exit).
std::mutex& registry_mu() {
  static std::mutex* m = new std::mutex;  // never destroyed: usable from atexit
  return *m;
}
std::set<SerialWorker*>& registry() {
  static auto* r = new std::set<SerialWorker*>;
  return *r;
}
void stop_all_at_exit() {
  std::set<SerialWorker*> live;
  {
    std::lock_guard<std::mutex> lock(registry_mu());
    live = registry();
  }
  for (SerialWorker* w : live) w->stop();  // outside the lock: stop() withdraws itself
}
void enroll(SerialWorker* w) {
  static const bool hooked = std::atexit(stop_all_at_exit) == 0;
  (void)hooked;
  std::lock_guard<std::mutex> lock(registry_mu());
  registry().insert(w);
}
void withdraw(SerialWorker* w) {
  std::lock_guard<std::mutex> lock(registry_mu());
  registry().erase(w);
}

}  // namespace

bool SerialWorker::submit(const std::string& key, Task task) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_ || !seen_.insert(key).second) return false;
  queue_.emplace_back(key, std::move(task));
  if (!thread_.joinable()) {
    try {
      enroll(this);
      thread_ = std::thread([this] { loop(); });
    } catch (const std::exception&) {  // no thread: the work is left to whoever needs it
      queue_.pop_back();
      return false;
    }
  }
  ++stats_.submitted;
  cv_.notify_all();
  return true;
}

void SerialWorker::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (stopping_) break;
    Task task = std::move(queue_.front().second);
    queue_.pop_front();
    running_ = true;
    lock.unlock();
    try {
      task(cancel_);
    } catch (...) {  // the task's owner accounts for its failures; the worker goes on
    }
    lock.lock();
    running_ = false;
    ++stats_.done;
    idle_cv_.notify_all();
  }
  running_ = false;
  idle_cv_.notify_all();
}

void SerialWorker::stop() {
  std::thread t;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    cancel_.store(true);
    stats_.dropped += static_cast<long long>(queue_.size());
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

bool SerialWorker::idle() {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.empty() && !running_;
}

bool SerialWorker::wait_idle(double timeout_s) {
  std::unique_lock<std::mutex> lock(mu_);
  return idle_cv_.wait_for(lock, std::chrono::duration<double>(timeout_s),
                           [&] { return (queue_.empty() && !running_) || stopping_; });
}

WorkerStats SerialWorker::stats() {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace fa::rt
