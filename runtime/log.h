// log.h -- fa's messages on stderr: levels chosen by $FA_LOG (api/env_options.h) or fa_context_options.verbose.
//
// Levels: off, warn (the default: cache trouble such as a file moved aside or not writable, a tuning that failed),
// info (decisions worth knowing, such as a problem sent to the reference kernel for its alignment), debug (every
// cache hit and store). Each distinct message (or once_key) is printed at most once per process, so a warning about
// a shared cache file or a problem class does not repeat call after call. Never fails, never throws.
#pragma once

#include <string>

namespace fa::rt {

enum class LogLevel : int { kOff = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

// "off", "warn", "info", "debug" (the names $FA_LOG takes); false for anything else.
bool parse_log_level(const std::string& text, LogLevel* out);
const char* log_level_name(LogLevel level);

// Writes "fa: <level>: <message>" and a newline to stderr when level is not above threshold and the message (or
// once_key, when not empty) was not printed before in this process.
void log_line(LogLevel threshold, LogLevel level, const std::string& message, const std::string& once_key = {});

}  // namespace fa::rt
