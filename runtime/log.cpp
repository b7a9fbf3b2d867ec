// log.cpp -- fa's stderr messages, once per distinct message or key (see log.h).
#include "runtime/log.h"

#include <cstdio>
#include <mutex>
#include <set>

namespace fa::rt {
namespace {

// Bounded, so that a process logging endless distinct messages (debug level) does not grow without end; past the
// bound messages are still printed, only no longer deduplicated.
constexpr size_t kMaxRemembered = 4096;

}  // namespace

bool parse_log_level(const std::string& text, LogLevel* out) {
  for (const LogLevel l : {LogLevel::kOff, LogLevel::kWarn, LogLevel::kInfo, LogLevel::kDebug}) {
    if (text == log_level_name(l)) {
      *out = l;
      return true;
    }
  }
  return false;
}

const char* log_level_name(LogLevel level) {
  switch (level) {
    case LogLevel::kOff: return "off";
    case LogLevel::kWarn: return "warn";
    case LogLevel::kInfo: return "info";
    case LogLevel::kDebug: return "debug";
  }
  return "?";
}

void log_line(LogLevel threshold, LogLevel level, const std::string& message, const std::string& once_key) {
  if (level == LogLevel::kOff || static_cast<int>(level) > static_cast<int>(threshold)) return;
  static std::mutex mu;
  static std::set<std::string>* printed = new std::set<std::string>();  // never destroyed: usable at exit
  try {
    std::lock_guard<std::mutex> lock(mu);
    const std::string& key = once_key.empty() ? message : once_key;
    if (printed->count(key) != 0) return;
    if (printed->size() < kMaxRemembered) printed->insert(key);
    const char* name = level == LogLevel::kWarn ? "warning" : log_level_name(level);
    std::fprintf(stderr, "fa: %s: %s\n", name, message.c_str());
  } catch (...) {
    // Out of memory while logging: drop the message.
  }
}

}  // namespace fa::rt
