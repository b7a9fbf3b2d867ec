// config.cpp -- names, canonical keys, hashes and the rendering of a KernelConfig into a CUDA translation unit.
#include "generator/config.h"

#include <fmt/format.h>

#include <cstdio>

#include "generator/family.h"
#include "templates/embedded.h"

namespace fa::gen {

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::FwdRef: return "fwd_ref";
    case Kind::FwdMma: return "fwd_mma";
    case Kind::BwdPre: return "bwd_pre";
    case Kind::BwdRefDq: return "bwd_ref_dq";
    case Kind::BwdRefDkDv: return "bwd_ref_dkdv";
    case Kind::BwdMma: return "bwd_mma";
    case Kind::BwdPost: return "bwd_post";
  }
  return "unknown";
}

const char* dtype_name(int dtype) {
  switch (dtype) {
    case kFp16: return "fp16";
    case kBf16: return "bf16";
    case kFp32: return "fp32";
    default: return "unknown";
  }
}

const char* mask_name(int mask) {
  switch (mask) {
    case kMaskNone: return "none";
    case kMaskCausal: return "causal";
    case kMaskWindow: return "window";
    default: return "unknown";
  }
}

std::string semantic_key(const Semantic& s) {
  return fmt::format("{}.sm{}.{}.d{}.dv{}.{}.b{}a{}s{}v{}e{}l{}", kind_name(s.kind), s.arch, dtype_name(s.dtype),
                     s.head_dim, s.head_dim_v, mask_name(s.mask), int(s.has_bias), int(s.has_alibi),
                     int(s.has_softcap), int(s.varlen), int(s.even_k), int(s.has_lse));
}

std::string tunables_key(const Tunables& t) {
  return fmt::format("m{}.n{}.w{}.s{}.qr{}.x{}", t.block_m, t.block_n, t.warps, t.stages, t.q_in_regs, t.extra);
}

bool parse_tunables_key(const std::string& text, Tunables* out) {
  Tunables t;
  int consumed = 0;
  int n = std::sscanf(text.c_str(), "m%d.n%d.w%d.s%d.qr%d.x%d%n", &t.block_m, &t.block_n, &t.warps, &t.stages,
                      &t.q_in_regs, &t.extra, &consumed);
  if (n != 6 || consumed != static_cast<int>(text.size())) return false;
  if (tunables_key(t) != text) return false;  // canonical form only
  *out = t;
  return true;
}

std::string canonical_key(const KernelConfig& c) { return semantic_key(c.s) + "|" + tunables_key(c.t); }

std::string render_source(const KernelConfig& c) {
  const Semantic& s = c.s;
  const Tunables& t = c.t;
  auto b = [](bool v) { return v ? "true" : "false"; };
  std::string src;
  src += fmt::format("// fa generated kernel (generator v{})\n// key: {}\n", kGeneratorVersion, canonical_key(c));
  src += "namespace fa_cfg {\n";
  src += fmt::format("constexpr int kKind = {};\n", static_cast<int>(s.kind));
  src += fmt::format("constexpr int kArch = {};\n", s.arch);
  src += fmt::format("constexpr int kDtype = {};\n", s.dtype);
  src += fmt::format("constexpr int kHeadDim = {};\n", s.head_dim);
  src += fmt::format("constexpr int kHeadDimV = {};\n", s.head_dim_v);
  src += fmt::format("constexpr int kMask = {};\n", s.mask);
  src += fmt::format("constexpr bool kHasBias = {};\n", b(s.has_bias));
  src += fmt::format("constexpr bool kHasAlibi = {};\n", b(s.has_alibi));
  src += fmt::format("constexpr bool kHasSoftcap = {};\n", b(s.has_softcap));
  src += fmt::format("constexpr bool kVarlen = {};\n", b(s.varlen));
  src += fmt::format("constexpr bool kEvenK = {};\n", b(s.even_k));
  src += fmt::format("constexpr bool kHasLse = {};\n", b(s.has_lse));
  src += fmt::format("constexpr int kBlockM = {};\n", t.block_m);
  src += fmt::format("constexpr int kBlockN = {};\n", t.block_n);
  src += fmt::format("constexpr int kWarps = {};\n", t.warps);
  src += fmt::format("constexpr int kStages = {};\n", t.stages);
  src += fmt::format("constexpr bool kQInRegs = {};\n", b(t.q_in_regs != 0));
  src += fmt::format("constexpr int kExtra = {};\n", t.extra);
  src += "}  // namespace fa_cfg\n";
  src += "#include \"fa_args.cuh\"\n#include \"fa_common.cuh\"\n";
  src += fmt::format("#include \"{}\"\n", family(s.kind).template_name);
  return src;
}

uint64_t fnv1a64(const void* data, size_t n, uint64_t seed) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t h = seed;
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

uint64_t templates_hash() {
  static const uint64_t h = [] {
    uint64_t acc = fnv1a64("fa-templates", 12);
    for (int i = 0; i < templates::kCount; ++i) {
      std::string_view name = templates::kAll[i].name, src = templates::kAll[i].source;
      acc = fnv1a64(name.data(), name.size(), acc);
      acc = fnv1a64(src.data(), src.size(), acc);
    }
    return acc;
  }();
  return h;
}

uint64_t compile_hash(const KernelConfig& c, const std::string& extra) {
  std::string src = render_source(c);
  uint64_t h = fnv1a64(src.data(), src.size());
  const uint64_t th = templates_hash();
  h = fnv1a64(&th, sizeof th, h);
  const int gv = kGeneratorVersion;
  h = fnv1a64(&gv, sizeof gv, h);
  return fnv1a64(extra.data(), extra.size(), h);
}

std::string hex64(uint64_t v) { return fmt::format("{:016x}", v); }

}  // namespace fa::gen
