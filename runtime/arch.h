// arch.h -- the SM versions fa compiles for, and THE parser of an arch given as text ($FA_ARCH, fa-tune --arch), so
// that the library and fa-tune accept the same spellings and share one default without a GPU.
#pragma once

#include <string>

namespace fa::rt {

// Without a GPU a context compiles for $FA_ARCH, else for this: sm_90, the GPU fa is tuned for today (H100 / H200).
// fa-tune --dry-run takes the same default.
inline constexpr int kDefaultArchWithoutDevice = 90;

// "80", "86", "89" or "90", optionally written with an "sm_" or "sm" prefix, and 90 also with an "a" suffix
// ("sm_90a", "90a": fa compiles sm_90 as sm_90a anyway). false, *arch untouched, for anything else.
bool parse_arch(const std::string& text, int* arch);
// What parse_arch accepts, for error messages.
const char* arch_expected();

}  // namespace fa::rt
