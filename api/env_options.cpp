// env_options.cpp -- the environment variables of fa_context_create (see env_options.h).
#include "api/env_options.h"

#include <cstdlib>
#include <string>

#include "runtime/arch.h"
#include "runtime/mask_cache.h"
#include "tuner/tune_env.h"

namespace fa::rt {

Status read_cache_readonly_env(fa_context c) {
  const char* v = std::getenv("FA_CACHE_READONLY");
  const std::string text = v != nullptr ? v : "";
  if (text.empty() || text == "0") {
    c->cache_read_only = false;
  } else if (text == "1") {
    c->cache_read_only = true;
  } else {
    return invalid("FA_CACHE_READONLY", "0 or 1", "'" + text + "'");
  }
  return Status::Ok();
}

Status read_arch_env(fa_context c) {
  const char* v = std::getenv("FA_ARCH");
  const std::string text = v != nullptr ? v : "";
  int arch = kDefaultArchWithoutDevice;
  if (!text.empty() && !parse_arch(text, &arch)) return invalid("FA_ARCH", arch_expected(), "'" + text + "'");
  c->arch = arch;
  c->limits = gen::limits_for_arch(arch);
  return Status::Ok();
}

Status read_mask_cache_env(fa_context c) {
  const char* v = std::getenv("FA_MASK_CACHE_MB");
  if (!parse_mask_cache_mb(v, &c->mask_cache_bytes))
    return invalid("FA_MASK_CACHE_MB", "a whole number of MiB (0: no classification cache; default 64)",
                   std::string("'") + v + "'");
  return Status::Ok();
}

Status read_prefetch_env(fa_context c) {
  const char* v = std::getenv("FA_PREFETCH");
  const std::string text = v != nullptr ? v : "";
  if (text.empty() || text == "1") c->prefetch_enabled = true;
  else if (text == "0") c->prefetch_enabled = false;
  else return invalid("FA_PREFETCH", "0 or 1", "'" + text + "'");
  return Status::Ok();
}

Status read_log_env(fa_context c) {
  const char* v = std::getenv("FA_LOG");
  const std::string text = v != nullptr ? v : "";
  LogLevel level = LogLevel::kWarn;
  if (!text.empty() && !parse_log_level(text, &level)) {
    return invalid("FA_LOG", "off, warn, info or debug", "'" + text + "'");
  }
  if (c->verbose != 0 && static_cast<int>(level) < static_cast<int>(LogLevel::kInfo)) level = LogLevel::kInfo;
  c->log_level = level;
  return Status::Ok();
}

Status read_tune_env() {
  const char* threads = std::getenv("FA_TUNE_THREADS");
  if (int n = 0; !tune::parse_tune_threads(threads, &n)) {
    return invalid("FA_TUNE_THREADS", tune::kTuneThreadsExpected, std::string("'") + threads + "'");
  }
  const char* budget = std::getenv("FA_TUNE_BUDGET_MS");
  if (double ms = 0; !tune::parse_tune_budget_ms(budget, &ms)) {
    return invalid("FA_TUNE_BUDGET_MS", tune::kTuneBudgetExpected, std::string("'") + budget + "'");
  }
  return Status::Ok();
}

Status read_pin_tunables_env(fa_context c) { return parse_pinned_tunables(std::getenv(kPinTunablesVar), &c->pinned); }

}  // namespace fa::rt
