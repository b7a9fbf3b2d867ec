// status.h -- internal error values and the per-thread last-error message behind fa_last_error().
#pragma once

#include <fmt/format.h>

#include <string>

#include "fa/fa.h"

namespace fa::rt {

struct Status {
  fa_status code = FA_OK;
  std::string message;
  bool ok() const { return code == FA_OK; }
  static Status Ok() { return {}; }
};

inline Status error(fa_status code, std::string message) { return Status{code, std::move(message)}; }

// "<field>: expected <expected>, got <actual>"
template <class A>
Status invalid(const char* field, const std::string& expected, const A& actual) {
  return Status{FA_ERROR_INVALID_ARGUMENT, fmt::format("{}: expected {}, got {}", field, expected, actual)};
}

// Per-thread last error.
void set_last_error(const std::string& message);
const char* last_error();
// Records the status as the thread's last error (clears it on success) and returns the code.
fa_status finish(const Status& s);

}  // namespace fa::rt
