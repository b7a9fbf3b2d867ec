// context_support.h -- helpers shared by the CPU tests that open contexts on a temporary cache file.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "fa/fa.h"
#include "tests/cpu/temp_dir.h"

namespace fa::test {

// A context without a device on the cache file `cache` with tune policy `policy` (nullptr and a test failure when
// it cannot be made).
inline fa_context make_context(const std::string& cache, int policy) {
  fa_context_options o;
  fa_context_options_init(&o);
  o.cache_path = cache.c_str();
  o.tune_policy = policy;
  fa_context c = nullptr;
  EXPECT_EQ(fa_context_create(&o, &c), FA_OK) << fa_last_error();
  return c;
}

// How often `what` occurs in `text`.
inline size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

// Sets (or, with nullptr, unsets) an environment variable for the scope; the old value comes back after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr) setenv(name, value, 1);
    else unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_) setenv(name_.c_str(), old_->c_str(), 1);
    else unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

// fa_context_create under `variable`=`value`: expects FA_ERROR_INVALID_ARGUMENT with the out-parameter left NULL
// and returns fa_last_error() (which the caller checks for the variable, the expected and the actual value).
inline std::string context_create_error(const char* variable, const char* value) {
  ScopedEnv env(variable, value);
  fa_context_options o;
  fa_context_options_init(&o);
  o.cache_path = ":memory:";
  fa_context c = nullptr;
  EXPECT_EQ(fa_context_create(&o, &c), FA_ERROR_INVALID_ARGUMENT) << variable << "=" << value;
  EXPECT_EQ(c, nullptr);
  fa_context_destroy(c);
  return fa_last_error();
}

}  // namespace fa::test
