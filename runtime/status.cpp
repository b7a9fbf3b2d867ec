// status.cpp -- status names and the per-thread last error.
#include "runtime/status.h"

namespace fa::rt {

namespace {
thread_local std::string t_last_error;
}

void set_last_error(const std::string& message) { t_last_error = message; }
const char* last_error() { return t_last_error.c_str(); }

fa_status finish(const Status& s) {
  if (s.ok()) t_last_error.clear();
  else t_last_error = std::string(fa_status_string(s.code)) + ": " + s.message;
  return s.code;
}

}  // namespace fa::rt
