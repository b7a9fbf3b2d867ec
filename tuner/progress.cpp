// progress.cpp -- the progress bar / final line / plain progress lines of fa-tune (or nothing: --no-progress).
#include "tuner/progress.h"

#include <fmt/format.h>

#include <algorithm>

namespace fa::tune {

ProgressMode progress_mode(int flag, bool terminal) {
  switch (flag) {
    case 0: return ProgressMode::kOff;
    case 1: return ProgressMode::kBar;
    case 2: return ProgressMode::kLines;
    case 3: return ProgressMode::kFinal;
    default: return terminal ? ProgressMode::kBar : ProgressMode::kFinal;
  }
}

std::string counted(size_t n, const std::string& noun) { return fmt::format("{} {}{}", n, noun, n == 1 ? "" : "s"); }

Progress::Progress(std::FILE* f, ProgressMode mode, size_t total, std::string what, double heartbeat_s)
    : f_(f),
      mode_(mode),
      total_(total),
      what_(std::move(what)),
      heartbeat_s_(heartbeat_s),
      t0_(std::chrono::steady_clock::now()) {}

std::string Progress::clock(double seconds) {
  const long long s = static_cast<long long>(seconds + 0.5);
  if (s >= 3600) return fmt::format("{}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60);
  return fmt::format("{}:{:02}", s / 60, s % 60);
}

namespace {
double eta_of(size_t done, size_t total, double elapsed) {
  return done > 0 ? elapsed / static_cast<double>(done) * static_cast<double>(total - std::min(done, total)) : 0;
}
}  // namespace

std::string Progress::bar_text(const std::string& what, size_t done, size_t total, double elapsed,
                               const std::string& label) {
  constexpr size_t kWidth = 30;
  const size_t fill = total > 0 ? std::min(kWidth, kWidth * done / total) : kWidth;
  const std::string shown = label.size() > 40 ? label.substr(0, 37) + "..." : label;
  return fmt::format("{} [{}{}] {}/{} {:3}% elapsed {} ETA {}  {:<40}", what, std::string(fill, '#'),
                     std::string(kWidth - fill, '.'), done, total, total > 0 ? 100 * done / total : 100, clock(elapsed),
                     clock(eta_of(done, total, elapsed)), shown);
}

std::string Progress::line_text(const std::string& what, size_t done, size_t total, double elapsed,
                                const std::string& label) {
  return fmt::format("{} [{}/{}] {} (elapsed {}, ETA {})", what, done, total, label, clock(elapsed),
                     clock(eta_of(done, total, elapsed)));
}

std::string Progress::final_text(const std::string& what, size_t done, size_t total, double elapsed) {
  if (done == total) return fmt::format("{}: {} done in {}", what, done, clock(elapsed));
  return fmt::format("{}: {} of {} done in {}", what, done, total, clock(elapsed));
}

void Progress::step(const std::string& label) {
  if (mode_ == ProgressMode::kOff) return;
  std::lock_guard<std::mutex> lock(mu_);
  ++done_;
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  if (mode_ == ProgressMode::kBar) {
    fmt::print(f_, "\r{}", bar_text(what_, done_, total_, elapsed, label));
  } else if (mode_ == ProgressMode::kLines) {
    fmt::print(f_, "{}\n", line_text(what_, done_, total_, elapsed, label));
  } else {
    if (done_ >= total_ || elapsed - last_line_s_ < heartbeat_s_) return;  // the final line says the rest
    last_line_s_ = elapsed;
    fmt::print(f_, "{}\n", line_text(what_, done_, total_, elapsed, label));
  }
  std::fflush(f_);
}

void Progress::finish() {
  if (mode_ == ProgressMode::kOff) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (finished_) return;
  finished_ = true;
  if (mode_ == ProgressMode::kBar) {
    fmt::print(f_, "\n");
  } else if (mode_ == ProgressMode::kFinal) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    fmt::print(f_, "{}\n", final_text(what_, done_, total_, elapsed));
  }
  std::fflush(f_);
}

}  // namespace fa::tune
