// progress.h -- fa-tune's progress display: a one-line bar with ETA, a plain line per item, or nothing.
#pragma once

#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>

namespace fa::tune {

enum class ProgressMode { kOff, kLines, kBar };

class Progress {
 public:
  Progress(std::FILE* f, ProgressMode mode, size_t total, std::string what);
  // One more item done (thread-safe).
  void step(const std::string& label);
  // Ends the bar's line.
  void finish();
  // "1:05" / "2:03:04" for a number of seconds.
  static std::string clock(double seconds);

 private:
  std::FILE* f_;
  ProgressMode mode_;
  size_t total_, done_ = 0;
  std::string what_;
  std::chrono::steady_clock::time_point t0_;
  std::mutex mu_;
  bool finished_ = false;
};

}  // namespace fa::tune
