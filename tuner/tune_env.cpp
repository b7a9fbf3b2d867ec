// tune_env.cpp -- $FA_TUNE_THREADS and $FA_TUNE_BUDGET_MS (see tune_env.h).
#include "tuner/tune_env.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace fa::tune {

const char* const kTuneThreadsExpected = "a whole number of compile threads in [1, 256] (unset: automatic)";
const char* const kTuneBudgetExpected = "milliseconds in (0, 3600000] (unset: 2000)";

bool parse_tune_threads(const char* text, int* out) {
  if (text == nullptr || *text == '\0') {
    *out = 0;
    return true;
  }
  errno = 0;
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v < 1 || v > 256) return false;
  *out = static_cast<int>(v);
  return true;
}

bool parse_tune_budget_ms(const char* text, double* out) {
  if (text == nullptr || *text == '\0') {
    *out = 0;
    return true;
  }
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  if (end == text || *end != '\0' || !std::isfinite(v) || !(v > 0) || v > 3.6e6) return false;
  *out = v;
  return true;
}

}  // namespace fa::tune
