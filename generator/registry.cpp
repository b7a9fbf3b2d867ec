// registry.cpp -- the family table, per-arch limits, THE validity predicate and the valid tunable space.
#include <fmt/format.h>

#include "generator/family.h"

namespace fa::gen {

extern const Family kFwdRefFamily;
extern const Family kFwdMmaFamily;
extern const Family kBwdPreFamily;
extern const Family kBwdRefDqFamily;
extern const Family kBwdRefDkDvFamily;
extern const Family kBwdMmaFamily;
extern const Family kBwdPostFamily;

namespace {
const Family* lookup(Kind k) {
  switch (k) {
    case Kind::FwdRef: return &kFwdRefFamily;
    case Kind::FwdMma: return &kFwdMmaFamily;
    case Kind::BwdPre: return &kBwdPreFamily;
    case Kind::BwdRefDq: return &kBwdRefDqFamily;
    case Kind::BwdRefDkDv: return &kBwdRefDkDvFamily;
    case Kind::BwdMma: return &kBwdMmaFamily;
    case Kind::BwdPost: return &kBwdPostFamily;
  }
  return nullptr;
}
}  // namespace

bool family_available(Kind k) { return lookup(k) != nullptr && lookup(k)->template_name != nullptr; }

const Family& family(Kind k) {
  const Family* f = lookup(k);
  return f ? *f : kFwdRefFamily;  // callers check family_available() / is_valid() first
}

DeviceLimits limits_for_arch(int arch) {
  DeviceLimits l;
  l.arch = arch;
  if (arch == 80 || arch == 87) {
    l.max_smem_optin = 163 * 1024;
    l.sm_count = 108;
  } else if (arch >= 90 && arch < 120) {
    l.max_smem_optin = 227 * 1024;
    l.sm_count = 132;
  } else {  // 86, 89, 120: 99 KB
    l.max_smem_optin = 99 * 1024;
    l.sm_count = 84;
  }
  return l;
}

static bool fail(std::string* why, std::string msg) {
  if (why) *why = std::move(msg);
  return false;
}

bool is_valid(const KernelConfig& c, const DeviceLimits& lim, std::string* why) {
  const Semantic& s = c.s;
  const Tunables& t = c.t;
  const int kind = static_cast<int>(s.kind);
  if (kind < 0 || kind >= kNumKinds) return fail(why, fmt::format("kind: expected 0..{}, got {}", kNumKinds - 1, kind));
  if (!family_available(s.kind)) return fail(why, fmt::format("kind: family {} is not built in", kind_name(s.kind)));
  if (s.arch < 80) return fail(why, fmt::format("arch: expected >= 80 (Ampere or newer), got sm_{}", s.arch));
  if (s.arch != lim.arch) return fail(why, fmt::format("arch: config is sm_{} but device limits are sm_{}", s.arch, lim.arch));
  if (s.dtype < kFp16 || s.dtype > kFp32) return fail(why, fmt::format("dtype: expected 1..3, got {}", s.dtype));
  for (int d : {s.head_dim, s.head_dim_v})
    if (d < 8 || d > 256 || d % 8 != 0)
      return fail(why, fmt::format("head_dim: expected a multiple of 8 in [8, 256], got {}", d));
  if (s.mask < kMaskNone || s.mask > kMaskWindow) return fail(why, fmt::format("mask: expected 0..2, got {}", s.mask));
  if (s.varlen && s.even_k) return fail(why, "even_k: expected false in varlen mode, got true");
  if (t.warps < 1 || t.warps > 16) return fail(why, fmt::format("warps: expected 1..16, got {}", t.warps));
  if (t.stages < 1 || t.stages > 4) return fail(why, fmt::format("stages: expected 1..4, got {}", t.stages));
  const Family& f = family(s.kind);
  if (!f.valid(c, why)) return false;
  const unsigned smem = f.smem_bytes(c);
  if (smem > static_cast<unsigned>(lim.max_smem_optin))
    return fail(why, fmt::format("shared memory: expected <= {} bytes on sm_{}, got {}", lim.max_smem_optin, lim.arch, smem));
  return true;
}

std::vector<Tunables> valid_space(const Semantic& s, const DeviceLimits& lim) {
  std::vector<Tunables> out;
  if (!family_available(s.kind)) return out;
  for (const Tunables& t : family(s.kind).space(s)) {
    KernelConfig c{s, t};
    if (is_valid(c, lim, nullptr)) out.push_back(t);
  }
  return out;
}

}  // namespace fa::gen
