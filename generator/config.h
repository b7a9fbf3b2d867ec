// config.h -- a kernel configuration: what the generator renders, the runtime compiles and the tuner searches.
//
// A KernelConfig is a Semantic part (changes results: which kernel family, arch, dtype, head dims, mask, features)
// plus a Tunables part (never changes results: the values of the family's named knobs -- tiles, warps, stages...,
// declared by the family's schema in family.h). render_source() turns it into a CUDA translation unit: a block of
// constexpr values in namespace fa_cfg (the semantic constants, then each knob under its constexpr name, then the
// family's own constants), then #includes of the fixed templates. Nothing in this module depends on CUDA.
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace fa::gen {

struct Family;    // family.h
struct UserMods;  // user_mods.h

// Bumped whenever rendering or any template's meaning changes; part of every compile key.
inline constexpr int kGeneratorVersion = 4;

enum Dtype : int { kFp16 = 1, kBf16 = 2, kFp32 = 3, kE4m3 = 4, kE5m2 = 5 };  // values equal fa_dtype
inline bool is_fp8(int dtype) { return dtype == kE4m3 || dtype == kE5m2; }
enum Mask : int { kMaskNone = 0, kMaskCausal = 1, kMaskWindow = 2 };  // values equal fa_mask

// Head dims a kernel may be asked for: multiples of 8 in [8, kMaxHeadDim] for q / k and [8, kMaxHeadDimV] for v / o
// (the API validates the same rule; MLA decode is d 576 / dv 512). Families state their own limits in covers():
// the tensor-core prefill and backward families stop at kMaxHeadDimFast.
inline constexpr int kMaxHeadDim = 576;
inline constexpr int kMaxHeadDimV = 512;
inline constexpr int kMaxHeadDimFast = 256;
inline bool head_dim_ok(int d, int max = kMaxHeadDim) { return d >= 8 && d <= max && d % 8 == 0; }

struct Semantic {
  const Family* family = nullptr;  // which kernel family (registered in family.h's registry)
  int arch = 80;         // SM version: 80, 86, 89, 90, 100, 103, 120, 121 (runtime/arch.h; 90 compiles as sm_90a)
  int dtype = kFp16;     // of q (and of k, v, o unless the two below say otherwise)
  int kv_dtype = 0;      // of k and v when it differs from dtype (an fp8 KV cache: kE4m3 / kE5m2), else 0
  int o_dtype = 0;       // of o when it differs from dtype (fp8 inputs: kBf16 / kFp16), else 0
  int head_dim = 128;    // of q, k: multiple of 8 in [8, kMaxHeadDim] (head_dim_ok; families cover less)
  int head_dim_v = 128;  // of v, o: multiple of 8 in [8, kMaxHeadDimV]
  int mask = kMaskNone;
  bool has_bias = false;
  bool has_alibi = false;
  bool has_softcap = false;
  bool varlen = false;
  bool even_k = false;             // fixed-length and seqlen_k % block_n == 0: no key-boundary predicates
  bool has_lse = true;             // the kernel writes LSE (backward needs it; fa_run may pass lse == null)
  bool paged = false;              // k / v read through a block table of pages (fa_params.block_table)
  const UserMods* mods = nullptr;  // user code (fa_mods), interned; nullptr: none
  bool has_sinks = false;          // attention sinks (fa_params.sinks): only families that declare Family::sinks
  bool operator==(const Semantic&) const = default;
};

// The values of a family's knobs, in the order of its schema (Family::knobs); unused slots are 0.
struct Tunables {
  static constexpr int kMaxKnobs = 8;
  std::array<int, kMaxKnobs> v{};
  int& operator[](int i) { return v[static_cast<size_t>(i)]; }
  int operator[](int i) const { return v[static_cast<size_t>(i)]; }
  bool operator==(const Tunables&) const = default;
  auto operator<=>(const Tunables&) const = default;
};

struct KernelConfig {
  Semantic s;
  Tunables t;
  bool operator==(const KernelConfig&) const = default;
};

// A strict weak order over configs (for maps keyed by config, e.g. the memo of compile keys).
struct ConfigLess {
  bool operator()(const KernelConfig& a, const KernelConfig& b) const;
};

const char* family_name(const Semantic& s);  // "fwd_ref", "fwd_mma", ... ("none" without a family)
const char* dtype_name(int dtype);           // "fp16", "bf16", "fp32", "e4m3", "e5m2"
const char* mask_name(int mask);             // "none", "causal", "window"

// "fwd_mma.sm90.bf16.d128.dv128.causal.b0a0s0v0e1l1|m128.n64.w4.s2.qr0.kj1" -- stable, human-readable, complete
// (".kv_e4m3" / ".o_bf16" after the features when kv_dtype / o_dtype are set, ".sinks" with attention sinks).
std::string canonical_key(const KernelConfig& c);
std::string semantic_key(const Semantic& s);
// The knobs of s's family by their key tags, in schema order ("m128.n64.w4.s2.qr0.kj1").
std::string tunables_key(const Semantic& s, const Tunables& t);
// Parses tunables_key back for s's family; false on any malformed input (used when reading caches). Keys written
// before the knob schema ("m%d.n%d.w%d.s%d.qr%d.x%d") still parse: their fields map to the knobs named block_m,
// block_n, warps, stages, q_in_regs and the family's legacy `x` knob; fields the family has no knob for are dropped.
bool parse_tunables_key(const Semantic& s, const std::string& text, Tunables* out);

// The translation unit: a header comment with the key, namespace fa_cfg { constexpr ... }, then the includes.
std::string render_source(const KernelConfig& c);
// The name of the __global__ entry point in the rendered source (extern "C"): always "fa_kernel".
inline constexpr const char* kEntryName = "fa_kernel";

// FNV-1a 64 of the rendered source, the templates the family's template includes (transitively), the generator
// version and `extra` (NVRTC version, options): the compile key of the persistent cache.
uint64_t fnv1a64(const void* data, size_t n, uint64_t seed = 1469598103934665603ull);
uint64_t templates_hash(const Family& f);  // hash of the embedded templates f's kernels include (cached per family)
// Hash of the templates every kernel includes (the kernel ABI and the common helpers): the persistent cache's
// environment. A family's own template is covered by its compile keys, so editing it invalidates only its cubins.
uint64_t shared_templates_hash();
uint64_t compile_hash(const KernelConfig& c, const std::string& extra);
std::string hex64(uint64_t v);

}  // namespace fa::gen
