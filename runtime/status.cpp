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

extern "C" FA_API const char* fa_status_string(fa_status status) {
  switch (status) {
    case FA_OK: return "FA_OK";
    case FA_ERROR_INVALID_ARGUMENT: return "FA_ERROR_INVALID_ARGUMENT";
    case FA_ERROR_INVALID_VERSION: return "FA_ERROR_INVALID_VERSION";
    case FA_ERROR_NOT_SUPPORTED: return "FA_ERROR_NOT_SUPPORTED";
    case FA_ERROR_NOT_TUNED: return "FA_ERROR_NOT_TUNED";
    case FA_ERROR_NO_DEVICE: return "FA_ERROR_NO_DEVICE";
    case FA_ERROR_DRIVER: return "FA_ERROR_DRIVER";
    case FA_ERROR_OUT_OF_MEMORY: return "FA_ERROR_OUT_OF_MEMORY";
    case FA_ERROR_COMPILE: return "FA_ERROR_COMPILE";
    case FA_ERROR_NVRTC_UNAVAILABLE: return "FA_ERROR_NVRTC_UNAVAILABLE";
    case FA_ERROR_LAUNCH: return "FA_ERROR_LAUNCH";
    case FA_ERROR_STREAM_CAPTURING: return "FA_ERROR_STREAM_CAPTURING";
    case FA_ERROR_CACHE: return "FA_ERROR_CACHE";
    case FA_ERROR_INTERNAL: return "FA_ERROR_INTERNAL";
  }
  return "FA_ERROR_UNKNOWN_STATUS";
}

extern "C" FA_API const char* fa_last_error(void) { return fa::rt::last_error(); }

extern "C" FA_API const char* fa_version_string(void) { return "0.1.0"; }
