// tune_env.h -- the tuner's environment variables, parsed in one place: $FA_TUNE_THREADS (compile threads) and
// $FA_TUNE_BUDGET_MS (the timing budget per tuning key). fa_context_create (api/env_options.h) fails on a bad value
// with the variable, the expected and the actual value, so the readers (thread_pool.h, tuner.h) never meet one.
#pragma once

namespace fa::tune {

// What each variable takes, for error messages.
extern const char* const kTuneThreadsExpected;
extern const char* const kTuneBudgetExpected;

// $FA_TUNE_THREADS: null or "": *out = 0 (automatic); else a whole number in [1, 256] (fa-tune --threads' range).
// false for anything else (*out untouched).
bool parse_tune_threads(const char* text, int* out);
// $FA_TUNE_BUDGET_MS: null or "": *out = 0 (the default, 2000 ms); else milliseconds in (0, 3600000] (fa-tune
// --budget-ms' range). false for anything else (*out untouched).
bool parse_tune_budget_ms(const char* text, double* out);

}  // namespace fa::tune
