// arch.h -- the SM versions fa compiles for, and THE parser of an arch given as text ($FA_ARCH, fa-tune --arch), so
// that the library and fa-tune accept the same spellings and share one default without a GPU; and the arch of a
// device from its compute capability.
#pragma once

#include <string>

namespace fa::rt {

// Without a GPU a context compiles for $FA_ARCH, else for this: sm_90, the GPU fa is tuned for today (H100 / H200).
// fa-tune --dry-run takes the same default.
inline constexpr int kDefaultArchWithoutDevice = 90;

// The archs $FA_ARCH and fa-tune --arch name: Ampere (80, 86), Ada (89), Hopper (90) and Blackwell (100 / 103: B200,
// B300; 120 / 121: RTX 50xx, DGX Spark). NVRTC compiles each as sm_<arch> (90 as sm_90a, runtime/nvrtc_compiler.h).
inline constexpr int kKnownArchs[] = {80, 86, 89, 90, 100, 103, 120, 121};

// A known arch, optionally written with an "sm_" or "sm" prefix; those of 90 and later also with an "a" suffix
// ("sm_90a", "120a": the arch-specific target names the same GPU, and fa picks the target it compiles for itself).
// false, *arch untouched, for anything else.
bool parse_arch(const std::string& text, int* arch);
// What parse_arch accepts, for error messages.
const char* arch_expected();

// The arch of a device of compute capability major.minor (10.0 -> 100, 12.1 -> 121), whether fa knows it or not.
inline int arch_of_capability(int major, int minor) { return major * 10 + minor; }
// Whether arch is one of kKnownArchs.
bool known_arch(int arch);

}  // namespace fa::rt
