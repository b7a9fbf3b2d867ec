// cache_path.cpp -- where the cache lives by default (see default_cache_path in cache_db.h).
#include <pwd.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "cache_db/cache_db.h"

namespace fa::cache {
namespace {

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::string(v) : std::string();
}

std::string home_directory() {
  std::string home = env_or_empty("HOME");
  if (!home.empty()) return home;
  long size = sysconf(_SC_GETPW_R_SIZE_MAX);
  std::vector<char> buf(static_cast<size_t>(size > 0 ? size : 16384));
  passwd pw{};
  passwd* result = nullptr;
  if (getpwuid_r(getuid(), &pw, buf.data(), buf.size(), &result) == 0 && result != nullptr &&
      result->pw_dir != nullptr) {
    home = result->pw_dir;
  }
  return home;
}

}  // namespace

std::string default_cache_path() {
  std::string p = env_or_empty("FA_CACHE_PATH");
  if (!p.empty()) return p;
  // The XDG base directory spec ignores relative values.
  const std::string xdg = env_or_empty("XDG_CACHE_HOME");
  if (!xdg.empty() && xdg.front() == '/') return xdg + "/fa/cache.sqlite";
  const std::string home = home_directory();
  if (!home.empty()) return home + "/.cache/fa/cache.sqlite";
  return ":memory:";
}

}  // namespace fa::cache
