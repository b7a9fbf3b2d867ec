// registry.cpp -- the family registry, per-arch limits, THE validity predicate and the tunable spaces.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>

#include "generator/family.h"

// Every folder of generator/families/ (the list CMake generates: FA_FAMILY_FOLDER(name) per folder).
#include "generator/families_list.inc"

namespace fa::gen {

namespace {

std::vector<const Family*>& registry() {
  static std::vector<const Family*> r;
  return r;
}

void ensure_registered() {
  static std::once_flag once;
  std::call_once(once, [] {
#define FA_FAMILY_FOLDER_ENTRY(folder) fa_register_family_##folder();
    FA_FAMILY_FOLDERS(FA_FAMILY_FOLDER_ENTRY)
#undef FA_FAMILY_FOLDER_ENTRY
  });
}

bool fail(std::string* why, std::string msg) {
  if (why) *why = std::move(msg);
  return false;
}

}  // namespace

void register_family(const Family* f) {
  if (f == nullptr || f->name == nullptr || f->template_name == nullptr) return;
  for (const Family* g : registry())
    if (std::strcmp(g->name, f->name) == 0) return;  // registered once
  registry().push_back(f);
}

const std::vector<const Family*>& all_families() {
  ensure_registered();
  return registry();
}

const Family* find_family(std::string_view name) {
  for (const Family* f : all_families())
    if (name == f->name) return f;
  return nullptr;
}

const std::vector<const Family*>& ranked_families(Role role, int arch) {
  // Every fa_run asks (the selector): ranked once per (role, arch), the registry never changes after registration.
  static std::mutex mu;
  static std::map<std::pair<int, int>, std::vector<const Family*>> memo;
  const std::vector<const Family*>& all = all_families();
  std::lock_guard<std::mutex> lock(mu);
  auto [it, fresh] = memo.try_emplace({static_cast<int>(role), arch});
  if (fresh) {
    for (const Family* f : all)
      if (f->role == role && arch >= f->arch_min && arch <= f->arch_max) it->second.push_back(f);
    std::stable_sort(it->second.begin(), it->second.end(),
                     [](const Family* a, const Family* b) { return a->priority > b->priority; });
  }
  return it->second;
}

int Family::knob_index(std::string_view knob_name) const {
  for (size_t i = 0; i < knobs.size(); ++i)
    if (knob_name == knobs[i].name) return static_cast<int>(i);
  return -1;
}

int knob_value(const Semantic& s, const Tunables& t, std::string_view knob, int fallback) {
  if (s.family == nullptr) return fallback;
  const int i = s.family->knob_index(knob);
  return i < 0 ? fallback : t[i];
}

bool KernelParams::add(const void* data, size_t size, size_t align) {
  if (count >= kMax || align == 0 || align > 64 || (align & (align - 1)) != 0) return false;
  const size_t at = (used_ + align - 1) & ~(align - 1);
  if (at + size > sizeof storage_) return false;
  std::memcpy(storage_ + at, data, size);
  ptrs[count++] = storage_ + at;
  used_ = at + size;
  return true;
}

// Shared memory per block (opt-in) and resident threads per SM by compute capability, as NVIDIA's CUDA C++
// Programming Guide tables them ("Technical Specifications per Compute Capability"; the figures checked against
// the CUDA 13.0 toolkit's cuda_occupancy.h, whose shared-memory carveouts reach 228 KB per SM on 9.0 and 10.x and
// 100 KB on 8.6, 8.9 and 12.x, 1 KB of each reserved per block, and libcu++'s cuda/__device/arch_traits.h):
//   sm_80: 163 KB, 2048 threads     sm_86 / sm_89: 99 KB, 1536      sm_90: 227 KB, 2048
//   sm_100 / sm_103 (B200, B300): 227 KB (232448 bytes), 2048
//   sm_120 / sm_121 (RTX 50xx, DGX Spark): 99 KB (101376 bytes), 1536
// Registers: 64K per SM and 255 per thread everywhere. The SM counts are those of one part per arch (plans that
// size work by the device, e.g. split-KV, read the device's own count where there is one).
DeviceLimits limits_for_arch(int arch) {
  struct Row {
    int arch, smem_kb, threads, sms;
  };
  static constexpr Row kRows[] = {{80, 163, 2048, 108},  {86, 99, 1536, 84},
                                  {87, 163, 1536, 16},                          // A100; RTX 30xx class; Jetson AGX Orin
                                  {89, 99, 1536, 84},    {90, 227, 2048, 132},  // RTX 40xx class; H100 / H200
                                  {100, 227, 2048, 148}, {103, 227, 2048, 148},  // B200 (sm_103: B200's count)
                                  {120, 99, 1536, 170},  {121, 99, 1536, 48}};   // RTX 5090; DGX Spark (GB10)
  Row r{arch, 99, 1536, 84};  // an arch fa does not know: the smallest figures of those it does
  for (const Row& k : kRows)
    if (k.arch == arch) r = k;
  DeviceLimits l;
  l.arch = arch;
  l.max_smem_optin = r.smem_kb * 1024;
  l.max_threads_per_sm = r.threads;
  l.sm_count = r.sms;
  return l;
}

unsigned smem_of(const KernelConfig& c) {
  return c.s.family != nullptr && c.s.family->smem_bytes != nullptr ? c.s.family->smem_bytes(c) : 0u;
}

bool is_valid(const KernelConfig& c, const DeviceLimits& lim, std::string* why) {
  const Semantic& s = c.s;
  if (s.family == nullptr) return fail(why, "family: none set");
  const Family& f = *s.family;
  if (s.arch < 80) return fail(why, fmt::format("arch: expected >= 80 (Ampere or newer), got sm_{}", s.arch));
  if (s.arch < f.arch_min || s.arch > f.arch_max)
    return fail(why, fmt::format("arch: family {} runs on sm_{}..sm_{}, got sm_{}", f.name, f.arch_min,
                                 f.arch_max == INT_MAX ? 999 : f.arch_max, s.arch));
  if (s.arch != lim.arch)
    return fail(why, fmt::format("arch: config is sm_{} but device limits are sm_{}", s.arch, lim.arch));
  if (is_fp8(s.dtype)) {  // fp8 q / k / v: a family that reads them (Family::fp8_inputs), a 16-bit o
    if (!f.fp8_inputs)
      return fail(why, fmt::format("dtype: family {} takes no fp8 q / k / v, got {}", f.name, s.dtype));
    if (s.o_dtype != kFp16 && s.o_dtype != kBf16)
      return fail(why, fmt::format("o_dtype: expected 1 or 2 under fp8 inputs, got {}", s.o_dtype));
    if (s.arch < 89) return fail(why, fmt::format("dtype: fp8 needs sm_89 or newer, got sm_{}", s.arch));
  } else if (s.dtype < kFp16 || s.dtype > kFp32) {
    return fail(why, fmt::format("dtype: expected 1..5, got {}", s.dtype));
  }
  if (!head_dim_ok(s.head_dim))
    return fail(why, fmt::format("head_dim: expected a multiple of 8 in [8, {}], got {}", kMaxHeadDim, s.head_dim));
  if (!head_dim_ok(s.head_dim_v, kMaxHeadDimV))
    return fail(why,
                fmt::format("head_dim_v: expected a multiple of 8 in [8, {}], got {}", kMaxHeadDimV, s.head_dim_v));
  if (s.mask < kMaskNone || s.mask > kMaskWindow) return fail(why, fmt::format("mask: expected 0..2, got {}", s.mask));
  if (s.varlen && s.even_k) return fail(why, "even_k: expected false in varlen mode, got true");
  if (s.has_sinks && !f.sinks)
    return fail(why, fmt::format("sinks: family {} reads no attention sinks (expected none, got sinks)", f.name));
  for (size_t i = 0; i < f.knobs.size(); ++i) {
    const Knob& k = f.knobs[i];
    const int v = c.t[static_cast<int>(i)];
    if (std::find(k.values.begin(), k.values.end(), v) == k.values.end()) {
      if (why == nullptr) return false;
      std::string allowed;
      for (size_t j = 0; j < k.values.size(); ++j) allowed += (j ? ", " : "") + std::to_string(k.values[j]);
      return fail(why, fmt::format("{}: expected one of {} for {}, got {}", k.name, allowed, f.name, v));
    }
  }
  for (size_t i = f.knobs.size(); i < static_cast<size_t>(Tunables::kMaxKnobs); ++i)
    if (c.t[static_cast<int>(i)] != 0)
      return fail(why, fmt::format("tunables: {} has {} knobs, slot {} is set", f.name, f.knobs.size(), i));
  if (f.valid != nullptr && !f.valid(c, why)) return false;
  const unsigned smem = smem_of(c);
  if (smem > static_cast<unsigned>(lim.max_smem_optin))
    return fail(
        why, fmt::format("shared memory: expected <= {} bytes on sm_{}, got {}", lim.max_smem_optin, lim.arch, smem));
  return true;
}

namespace {

std::vector<Tunables> knob_product(const Semantic& s) {
  std::vector<Tunables> out(1);
  const auto& knobs = s.family->knobs;
  for (size_t i = 0; i < knobs.size(); ++i) {
    std::vector<Tunables> next;
    for (const Tunables& t : out)
      for (int v : knobs[i].values) {
        Tunables u = t;
        u[static_cast<int>(i)] = v;
        next.push_back(u);
      }
    out.swap(next);
  }
  return out;
}

std::vector<Tunables> only_valid(const Semantic& s, const DeviceLimits& lim, const std::vector<Tunables>& points) {
  std::vector<Tunables> out;
  for (const Tunables& t : points) {
    KernelConfig c{s, t};
    if (is_valid(c, lim, nullptr)) out.push_back(t);
  }
  return out;
}

}  // namespace

std::vector<Tunables> full_space(const Semantic& s) {
  if (s.family == nullptr) return {};
  if (s.family->space != nullptr) return s.family->space(s);
  return knob_product(s);
}

std::vector<Tunables> valid_space(const Semantic& s, const DeviceLimits& lim) {
  return only_valid(s, lim, full_space(s));
}

std::vector<Tunables> all_valid_points(const Semantic& s, const DeviceLimits& lim) {
  return s.family == nullptr ? std::vector<Tunables>{} : only_valid(s, lim, knob_product(s));
}

}  // namespace fa::gen
