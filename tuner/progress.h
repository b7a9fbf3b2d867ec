// progress.h -- fa-tune's progress display: a one-line bar with ETA on a terminal, otherwise a final line (and a
// line a minute for long runs), a plain line per item when asked, or nothing; and counted nouns ("1 grid point").
#pragma once

#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>

namespace fa::tune {

// kFinal: one line when done ("compile: 254 done in 0:12"), and a line a minute while a long run goes on.
enum class ProgressMode { kOff, kFinal, kLines, kBar };

// The mode of fa-tune's --progress flags: 0 --no-progress, 1 --progress (the bar), 2 --progress=lines, 3
// --progress=final; -1 (not given): the bar when `terminal` (stderr is one), else kFinal.
ProgressMode progress_mode(int flag, bool terminal);

// "1 grid point", "0 grid points", "254 kernels": n and the noun, which takes an s unless n is 1.
std::string counted(size_t n, const std::string& noun);

class Progress {
 public:
  // heartbeat_s: in kFinal mode, the least time between two lines before the final one.
  Progress(std::FILE* f, ProgressMode mode, size_t total, std::string what, double heartbeat_s = 60.0);
  // One more item done (thread-safe).
  void step(const std::string& label);
  // Ends the bar's line, or prints the final line.
  void finish();
  // "1:05" / "2:03:04" for a number of seconds.
  static std::string clock(double seconds);
  // The texts each mode prints (without the bar's leading carriage return or any newline).
  static std::string bar_text(const std::string& what, size_t done, size_t total, double elapsed,
                              const std::string& label);
  static std::string line_text(const std::string& what, size_t done, size_t total, double elapsed,
                               const std::string& label);
  static std::string final_text(const std::string& what, size_t done, size_t total, double elapsed);

 private:
  std::FILE* f_;
  ProgressMode mode_;
  size_t total_, done_ = 0;
  std::string what_;
  double heartbeat_s_;
  double last_line_s_ = 0;  // kFinal: when the last heartbeat line was printed
  std::chrono::steady_clock::time_point t0_;
  std::mutex mu_;
  bool finished_ = false;
};

}  // namespace fa::tune
