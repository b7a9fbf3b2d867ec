// serial_worker.h -- one background thread per owner that runs queued tasks one at a time, each key once.
//
// Users: the background tuner (tuner/background.h: a key's tuning) and a context's sibling-kernel prefetch
// (fa_context_s::prefetch, api/forward.cpp: the kernels a new problem's other shape classes need, compiled and
// loaded ahead of the call that needs them; the kernel cache compiles each kernel once, so a call that needs one in
// flight waits for that compile instead of starting its own).
//
// Lifecycle: the thread starts with the first submit(); a key is taken once for the worker's life; stop() raises the
// cancel flag the task in flight may poll, drops the queue, lets the task in flight return (an NVRTC compile cannot
// be interrupted), joins the thread and is idempotent (the owner, the destructor, and process exit: an atexit hook
// stops every live worker before the CUDA driver's own teardown). A task that throws counts as done; nothing reaches
// the caller of submit().
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>

namespace fa::rt {

struct WorkerStats {
  long long submitted = 0, done = 0, dropped = 0;  // dropped: queued when stop() came
};

class SerialWorker {
 public:
  using Task = std::function<void(const std::atomic<bool>& cancelled)>;
  SerialWorker() = default;
  ~SerialWorker() { stop(); }
  SerialWorker(const SerialWorker&) = delete;
  SerialWorker& operator=(const SerialWorker&) = delete;

  // Queues `task` under `key`; false when stopped, when the key was submitted before, or when no thread starts.
  bool submit(const std::string& key, Task task);
  // Cancels the task in flight (its flag), drops queued tasks, joins the thread. Idempotent.
  void stop();
  // Waits until nothing is queued or running (true), or the timeout passes (false).
  bool wait_idle(double timeout_s);
  bool idle();
  WorkerStats stats();

 private:
  void loop();

  std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  std::deque<std::pair<std::string, Task>> queue_;
  std::set<std::string> seen_;
  bool stopping_ = false, running_ = false;
  std::thread thread_;
  std::atomic<bool> cancel_{false};
  WorkerStats stats_;
};

}  // namespace fa::rt
