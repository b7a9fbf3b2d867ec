// config.cpp -- names, canonical keys, hashes and the rendering of a KernelConfig into a CUDA translation unit.
#include "generator/config.h"

#include <fmt/format.h>

#include <cstdio>
#include <map>
#include <mutex>
#include <set>
#include <string_view>
#include <tuple>

#include "generator/family.h"
#include "generator/user_mods.h"
#include "templates/embedded.h"

namespace fa::gen {

const char* family_name(const Semantic& s) { return s.family != nullptr ? s.family->name : "none"; }

const char* dtype_name(int dtype) {
  switch (dtype) {
    case kFp16: return "fp16";
    case kBf16: return "bf16";
    case kFp32: return "fp32";
    case kE4m3: return "e4m3";
    case kE5m2: return "e5m2";
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
  std::string key = fmt::format("{}.sm{}.{}.d{}.dv{}.{}.b{}a{}s{}v{}e{}l{}", family_name(s), s.arch,
                                dtype_name(s.dtype), s.head_dim, s.head_dim_v, mask_name(s.mask), int(s.has_bias),
                                int(s.has_alibi), int(s.has_softcap), int(s.varlen), int(s.even_k), int(s.has_lse));
  if (s.paged) key += ".paged";
  if (s.kv_dtype != 0) key += fmt::format(".kv_{}", dtype_name(s.kv_dtype));
  if (s.o_dtype != 0) key += fmt::format(".o_{}", dtype_name(s.o_dtype));
  if (s.has_sinks) key += ".sinks";
  if (s.mods != nullptr) key += fmt::format(".{}", user_mods_tag(*s.mods));
  return key;
}

std::string tunables_key(const Semantic& s, const Tunables& t) {
  std::string out;
  if (s.family == nullptr) return out;
  const auto& knobs = s.family->knobs;
  for (size_t i = 0; i < knobs.size(); ++i) {
    if (i) out += '.';
    out += knobs[i].tag;
    out += std::to_string(t[static_cast<int>(i)]);
  }
  return out;
}

namespace {

// "tag<int>" pieces split on '.'; false on any malformed piece.
bool split_pieces(const std::string& text, std::vector<std::pair<std::string, int>>* out) {
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find('.', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view piece(text.data() + pos, end - pos);
    size_t digit = 0;
    while (digit < piece.size() && (piece[digit] < '0' || piece[digit] > '9') && piece[digit] != '-') ++digit;
    if (digit == 0 || digit == piece.size()) return false;
    int value = 0;
    int consumed = 0;
    const std::string num(piece.substr(digit));
    if (std::sscanf(num.c_str(), "%d%n", &value, &consumed) != 1 || consumed != static_cast<int>(num.size()))
      return false;
    out->emplace_back(std::string(piece.substr(0, digit)), value);
    pos = end + 1;
  }
  return !out->empty();
}

bool parse_legacy(const Family& f, const std::string& text, Tunables* out) {
  int m, n, w, st, qr, x, consumed = 0;
  if (std::sscanf(text.c_str(), "m%d.n%d.w%d.s%d.qr%d.x%d%n", &m, &n, &w, &st, &qr, &x, &consumed) != 6 ||
      consumed != static_cast<int>(text.size()))
    return false;
  if (fmt::format("m{}.n{}.w{}.s{}.qr{}.x{}", m, n, w, st, qr, x) != text) return false;  // canonical only
  const std::pair<const char*, int> fields[] = {{"block_m", m}, {"block_n", n},    {"warps", w},
                                                {"stages", st}, {"q_in_regs", qr}, {f.legacy_x, x}};
  Tunables t;
  std::vector<bool> set(f.knobs.size(), false);
  for (const auto& [name, value] : fields) {
    if (name == nullptr) continue;
    const int i = f.knob_index(name);
    if (i < 0) continue;  // a field this family has no knob for (it was a fixed filler before the schema)
    t[i] = value;
    set[static_cast<size_t>(i)] = true;
  }
  for (bool b : set)
    if (!b) return false;  // a knob the old key cannot fill: a clean miss
  *out = t;
  return true;
}

}  // namespace

bool parse_tunables_key(const Semantic& s, const std::string& text, Tunables* out) {
  if (s.family == nullptr) return false;
  const Family& f = *s.family;
  std::vector<std::pair<std::string, int>> pieces;
  if (split_pieces(text, &pieces) && pieces.size() == f.knobs.size()) {
    Tunables t;
    bool ok = true;
    for (size_t i = 0; i < pieces.size() && ok; ++i) {
      ok = pieces[i].first == f.knobs[i].tag;
      t[static_cast<int>(i)] = pieces[i].second;
    }
    if (ok && tunables_key(s, t) == text) {
      *out = t;
      return true;
    }
  }
  return parse_legacy(f, text, out);
}

bool ConfigLess::operator()(const KernelConfig& a, const KernelConfig& b) const {
  auto tie = [](const KernelConfig& c) {
    const Semantic& s = c.s;
    return std::tie(s.family, s.arch, s.dtype, s.head_dim, s.head_dim_v, s.mask, s.has_bias, s.has_alibi, s.has_softcap,
                    s.varlen, s.even_k, s.has_lse, s.paged, s.mods, s.kv_dtype, s.o_dtype, s.has_sinks, c.t.v);
  };
  return tie(a) < tie(b);
}

std::string canonical_key(const KernelConfig& c) { return semantic_key(c.s) + "|" + tunables_key(c.s, c.t); }

std::string render_source(const KernelConfig& c) {
  const Semantic& s = c.s;
  auto b = [](bool v) { return v ? "true" : "false"; };
  std::string src;
  src += fmt::format("// fa generated kernel (generator v{})\n// key: {}\n", kGeneratorVersion, canonical_key(c));
  src += "namespace fa_cfg {\n";
  src += fmt::format("constexpr int kArch = {};\n", s.arch);
  src += fmt::format("constexpr int kDtype = {};\n", s.dtype);
  src += fmt::format("constexpr int kKvDtype = {};\n", s.kv_dtype != 0 ? s.kv_dtype : s.dtype);
  src += fmt::format("constexpr int kODtype = {};\n", s.o_dtype != 0 ? s.o_dtype : s.dtype);
  src += fmt::format("constexpr int kHeadDim = {};\n", s.head_dim);
  src += fmt::format("constexpr int kHeadDimV = {};\n", s.head_dim_v);
  src += fmt::format("constexpr int kMask = {};\n", s.mask);
  src += fmt::format("constexpr bool kHasBias = {};\n", b(s.has_bias));
  src += fmt::format("constexpr bool kHasAlibi = {};\n", b(s.has_alibi));
  src += fmt::format("constexpr bool kHasSoftcap = {};\n", b(s.has_softcap));
  src += fmt::format("constexpr bool kVarlen = {};\n", b(s.varlen));
  src += fmt::format("constexpr bool kEvenK = {};\n", b(s.even_k));
  src += fmt::format("constexpr bool kHasLse = {};\n", b(s.has_lse));
  src += fmt::format("constexpr bool kPaged = {};\n", b(s.paged));
  src += fmt::format("constexpr bool kHasMaskMod = {};\n", b(has_mask_mod(s.mods)));
  src += fmt::format("constexpr bool kHasScoreMod = {};\n", b(has_score_mod(s.mods)));
  src += fmt::format("constexpr bool kHasSinks = {};\n", b(s.has_sinks));
  if (s.family != nullptr) {
    const auto& knobs = s.family->knobs;
    for (size_t i = 0; i < knobs.size(); ++i) {
      const int v = c.t[static_cast<int>(i)];
      if (knobs[i].boolean) src += fmt::format("constexpr bool {} = {};\n", knobs[i].cname, b(v != 0));
      else src += fmt::format("constexpr int {} = {};\n", knobs[i].cname, v);
    }
    if (s.family->render_constants != nullptr) s.family->render_constants(c, &src);
  }
  src += "}  // namespace fa_cfg\n";
  src += "#include \"fa_args.cuh\"\n#include \"fa_common.cuh\"\n";
  src += render_user_mods(s.mods);
  if (s.family != nullptr) src += fmt::format("#include \"{}\"\n", s.family->template_name);
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

namespace {

// Adds `name` and every embedded template it #includes (transitively) to `seen`.
void include_closure(std::string_view name, std::set<std::string>* seen) {
  const templates::Template* t = templates::find(name);
  if (t == nullptr || !seen->insert(std::string(name)).second) return;
  std::string_view src = t->source;
  size_t pos = 0;
  while ((pos = src.find("#include \"", pos)) != std::string_view::npos) {
    pos += 10;
    const size_t end = src.find('"', pos);
    if (end == std::string_view::npos) break;
    include_closure(src.substr(pos, end - pos), seen);
    pos = end;
  }
}

uint64_t hash_files(const std::set<std::string>& files) {
  uint64_t acc = fnv1a64("fa-templates", 12);
  for (const std::string& name : files) {
    const templates::Template* t = templates::find(name);
    acc = fnv1a64(name.data(), name.size(), acc);
    acc = fnv1a64(t->source, std::char_traits<char>::length(t->source), acc);
  }
  return acc;
}

}  // namespace

uint64_t templates_hash(const Family& f) {
  static std::mutex mu;
  static std::map<const Family*, uint64_t> memo;
  std::lock_guard<std::mutex> lock(mu);
  auto it = memo.find(&f);
  if (it != memo.end()) return it->second;
  std::set<std::string> files;  // sorted: the hash does not depend on include order
  for (const char* root : {"fa_args.cuh", "fa_common.cuh", f.template_name}) include_closure(root, &files);
  return memo[&f] = hash_files(files);
}

uint64_t shared_templates_hash() {
  static const uint64_t h = [] {
    std::set<std::string> files;
    for (const char* root : {"fa_args.cuh", "fa_common.cuh"}) include_closure(root, &files);
    return hash_files(files);
  }();
  return h;
}

uint64_t compile_hash(const KernelConfig& c, const std::string& extra) {
  std::string src = render_source(c);
  uint64_t h = fnv1a64(src.data(), src.size());
  const uint64_t th = c.s.family != nullptr ? templates_hash(*c.s.family) : 0;
  h = fnv1a64(&th, sizeof th, h);
  const int gv = kGeneratorVersion;
  h = fnv1a64(&gv, sizeof gv, h);
  return fnv1a64(extra.data(), extra.size(), h);
}

std::string hex64(uint64_t v) { return fmt::format("{:016x}", v); }

}  // namespace fa::gen
