// arch.cpp -- the arch parser shared by $FA_ARCH and fa-tune --arch (see arch.h).
#include "runtime/arch.h"

namespace fa::rt {

bool parse_arch(const std::string& text, int* arch) {
  std::string t = text;
  if (t.rfind("sm_", 0) == 0) t = t.substr(3);
  else if (t.rfind("sm", 0) == 0) t = t.substr(2);
  if (t == "90a") t = "90";
  for (const int known : {80, 86, 89, 90}) {
    if (t == std::to_string(known)) {
      *arch = known;
      return true;
    }
  }
  return false;
}

const char* arch_expected() { return "80, 86, 89 or 90 (also written sm_90, sm90 or 90a)"; }

}  // namespace fa::rt
