// progress.cpp -- the progress bar / plain progress lines of fa-tune (or nothing: --no-progress).
#include "tuner/progress.h"

#include <fmt/format.h>

#include <algorithm>

namespace fa::tune {

Progress::Progress(std::FILE* f, ProgressMode mode, size_t total, std::string what)
    : f_(f), mode_(mode), total_(total), what_(std::move(what)), t0_(std::chrono::steady_clock::now()) {}

std::string Progress::clock(double seconds) {
  const long long s = static_cast<long long>(seconds + 0.5);
  if (s >= 3600) return fmt::format("{}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60);
  return fmt::format("{}:{:02}", s / 60, s % 60);
}

void Progress::step(const std::string& label) {
  if (mode_ == ProgressMode::kOff) return;
  std::lock_guard<std::mutex> lock(mu_);
  ++done_;
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  const double eta = done_ > 0 ? elapsed / static_cast<double>(done_) * static_cast<double>(total_ - std::min(done_, total_)) : 0;
  if (mode_ == ProgressMode::kBar) {
    constexpr size_t kWidth = 30;
    const size_t fill = total_ > 0 ? kWidth * done_ / total_ : kWidth;
    std::string shown = label.size() > 40 ? label.substr(0, 37) + "..." : label;
    fmt::print(f_, "\r{} [{}{}] {}/{} {:3}% elapsed {} ETA {}  {:<40}", what_, std::string(fill, '#'),
               std::string(kWidth - std::min(fill, kWidth), '.'), done_, total_,
               total_ > 0 ? 100 * done_ / total_ : 100, clock(elapsed), clock(eta), shown);
  } else {
    fmt::print(f_, "{} [{}/{}] {} (elapsed {}, ETA {})\n", what_, done_, total_, label, clock(elapsed), clock(eta));
  }
  std::fflush(f_);
}

void Progress::finish() {
  if (mode_ == ProgressMode::kOff) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (mode_ == ProgressMode::kBar && !finished_) fmt::print(f_, "\n");
  finished_ = true;
  std::fflush(f_);
}

}  // namespace fa::tune
