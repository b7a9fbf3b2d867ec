// guarded.h -- every C entry point runs its body through guarded(): the status becomes the per-thread last error
// (finish), and no C++ exception crosses the C ABI (host allocation failures become FA_ERROR_OUT_OF_MEMORY).
#pragma once

#include <new>
#include <stdexcept>
#include <string>

#include "runtime/status.h"

namespace fa::api {

template <class F>
fa_status guarded(const char* fn, F&& f) {
  try {
    return rt::finish(f());
  } catch (const std::bad_alloc&) {
    return rt::finish(rt::error(FA_ERROR_OUT_OF_MEMORY, std::string(fn) + ": host allocation failed"));
  } catch (const std::exception& e) {
    return rt::finish(rt::error(FA_ERROR_INTERNAL, std::string(fn) + ": " + e.what()));
  }
}

inline rt::Status check_context(fa_context c) {
  if (c == nullptr) return rt::invalid("context", "a context from fa_context_create", "NULL");
  return rt::Status::Ok();
}

}  // namespace fa::api
