// selector.cpp -- THE selector: which kernel family serves a problem (the covering family of highest priority),
// the problem's semantic part for it, and the plan of the call.
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>

#include "generator/problem.h"

namespace fa::gen {

namespace {

bool env_on(const char* name) {
  const char* e = std::getenv(name);
  return e && *e && *e != '0';
}

}  // namespace

Semantic semantic_for(const Family& f, const ProblemDesc& p, int arch) {
  Semantic s;
  s.family = &f;
  s.arch = arch;
  s.dtype = p.dtype;
  s.kv_dtype = p.kv_dtype;
  s.o_dtype = p.o_dtype;
  s.head_dim = p.head_dim;
  s.head_dim_v = p.head_dim_v;
  s.mask = p.mask;
  s.has_bias = p.has_bias;
  s.has_alibi = p.has_alibi;
  s.has_softcap = p.has_softcap;
  s.varlen = p.varlen;
  s.paged = p.paged;
  s.mods = p.mods;
  s.has_sinks = p.has_sinks;
  if (f.role == Role::Forward) {
    s.has_lse = p.has_lse;
    s.even_k = !p.varlen && p.seqlen_k > 0 && p.seqlen_k % 64 == 0;  // a hint; finalize() sets the real flag
  } else {
    s.has_lse = true;  // the backward reads the forward's LSE
    s.even_k = false;
  }
  return s;
}

bool family_covers(const Family& f, const ProblemDesc& p, int arch, std::string* why) {
  if (arch < f.arch_min || arch > f.arch_max) {
    if (why) *why = fmt::format("{}: runs on sm_{}+, device is sm_{}", f.name, f.arch_min, arch);
    return false;
  }
  if (is_fp8(p.kv_dtype) && !f.fp8_kv_cache) {
    if (why) *why = fmt::format("{}: reads no fp8 KV cache (kv_dtype {})", f.name, dtype_name(p.kv_dtype));
    return false;
  }
  if (p.has_sinks && !f.sinks) {
    if (why) *why = fmt::format("{}: takes no attention sinks", f.name);
    return false;
  }
  if (is_fp8(p.dtype) && !f.fp8_inputs) {
    if (why) *why = fmt::format("{}: takes no fp8 q / k / v (dtype {})", f.name, dtype_name(p.dtype));
    return false;
  }
  if (f.covers == nullptr) return true;
  std::string reason;
  if (f.covers(p, arch, why ? &reason : nullptr)) return true;
  if (why) *why = reason;
  return false;
}

Semantic select(Role role, const ProblemDesc& p, int arch, std::string* why) {
  // FA_FORCE_REFERENCE=1 (read once) routes every forward to the reference kernel, FA_FORCE_REFERENCE_BWD=1 (read
  // per call: the tests compare the two paths) every backward: field switches for suspected kernel bugs; results
  // are the same by construction, only slower.
  static const bool force_ref_fwd = env_on("FA_FORCE_REFERENCE");
  const bool force_ref =
      role == Role::Forward ? force_ref_fwd : role == Role::Backward && env_on("FA_FORCE_REFERENCE_BWD");
  const Family* fallback = nullptr;
  for (const Family* f : ranked_families(role, arch)) {
    if (f->reference) fallback = fallback ? fallback : f;
    if (force_ref && !f->reference) continue;
    std::string reason;
    if (family_covers(*f, p, arch, why ? &reason : nullptr)) return semantic_for(*f, p, arch);
    if (why) *why += (why->empty() ? "" : "; ") + reason;
  }
  // No family covers the problem (not reachable while a reference family covers everything): the reference, whose
  // validity check then says why. Never for fp8, which no reference reads (fp8_support says so before this runs):
  // no family, so that nothing launches.
  if (is_fp8(p.dtype) || is_fp8(p.kv_dtype)) return Semantic{};
  return fallback ? semantic_for(*fallback, p, arch) : Semantic{};
}

bool fp8_support(Role role, const ProblemDesc& p, int arch, std::string* why) {
  const bool inputs = is_fp8(p.dtype), cache = is_fp8(p.kv_dtype);
  if (!inputs && !cache) return true;
  const char* what = inputs ? "dtype" : "kv_dtype";
  const int dt = inputs ? p.dtype : p.kv_dtype;
  if (arch < 89) {
    *why = fmt::format("{} {}: fp8 needs fp8 tensor cores (sm_89 or newer), the arch is sm_{}", what, dtype_name(dt),
                       arch);
    return false;
  }
  std::string reasons;
  const Semantic s = select(role, p, arch, &reasons);
  if (s.family != nullptr) return true;
  *why = inputs ? fmt::format("no fp8 forward kernel yet for {} q / k / v (d {} / dv {}, sm_{}): {}", dtype_name(dt),
                              p.head_dim, p.head_dim_v, arch, reasons)
                : fmt::format(
                      "no fp8 forward kernel yet for a {} KV cache with these features (d {} / dv {}, "
                      "{} query rows per KV head, sm_{}): {}",
                      dtype_name(dt), p.head_dim, p.head_dim_v,
                      static_cast<long long>(p.seqlen_q) * (p.heads_q / std::max(1, p.heads_kv)), arch, reasons);
  return false;
}

KernelConfig finalize(const Semantic& s, const Tunables& t, const ProblemDesc& p) {
  KernelConfig c{s, t};
  c.s.even_k = false;
  if (s.family != nullptr && s.family->finalize != nullptr) s.family->finalize(&c, p);
  return c;
}

Plan make_plan(const Semantic& s, const Tunables& t, const ProblemDesc& p) {
  const KernelConfig main = finalize(s, t, p);
  if (s.family != nullptr && s.family->plan != nullptr) return s.family->plan(main, p);
  Plan plan;
  plan.steps.push_back(main);
  plan.tuned_step = 0;
  return plan;
}

Plan make_plan(const Semantic& s, const ProblemDesc& p) { return make_plan(s, s.family->defaults(s), p); }

LaunchShape launch_shape(const ProblemDesc& p) {
  LaunchShape l;
  l.batch = p.batch;
  l.max_seqlen_q = p.seqlen_q;
  l.max_seqlen_k = p.seqlen_k;
  l.heads_q = p.heads_q;
  l.heads_kv = p.heads_kv;
  l.total_q = p.varlen ? p.total_q : p.batch * p.seqlen_q;
  l.total_k = p.varlen ? p.total_k : p.batch * p.seqlen_k;
  l.sm_count = p.sm_count;
  return l;
}

}  // namespace fa::gen
