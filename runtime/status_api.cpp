// status_api.cpp -- fa_status_string, fa_last_error, fa_version_string: the C face of status.h (in the core: the
// runtime and the tuner name statuses through it).
#include "runtime/status.h"

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
