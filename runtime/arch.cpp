// arch.cpp -- the arch parser shared by $FA_ARCH and fa-tune --arch (see arch.h).
#include "runtime/arch.h"

namespace fa::rt {

bool known_arch(int arch) {
  for (const int known : kKnownArchs)
    if (arch == known) return true;
  return false;
}

bool parse_arch(const std::string& text, int* arch) {
  std::string t = text;
  if (t.rfind("sm_", 0) == 0) t = t.substr(3);
  else if (t.rfind("sm", 0) == 0) t = t.substr(2);
  const bool suffix = !t.empty() && t.back() == 'a';
  if (suffix) t.pop_back();
  for (const int known : kKnownArchs) {
    if (t == std::to_string(known) && (!suffix || known >= 90)) {
      *arch = known;
      return true;
    }
  }
  return false;
}

const char* arch_expected() {
  return "80, 86, 89, 90, 100, 103, 120 or 121 (also written sm_120 or sm120; 90 and later also with an 'a' suffix, "
         "as 90a or sm_100a)";
}

}  // namespace fa::rt
