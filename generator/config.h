// config.h -- a kernel configuration: what the generator renders, the runtime compiles and the tuner searches.
//
// A KernelConfig is a Semantic part (changes results: which kernel family, arch, dtype, head dims, mask, features)
// plus a Tunables part (never changes results: tiles, warps, stages, where Q lives). render_source() turns it into a
// CUDA translation unit: a block of constexpr values in namespace fa_cfg, then #includes of the fixed templates.
// Nothing in this module depends on CUDA.
#pragma once

#include <cstdint>
#include <string>

namespace fa::gen {

// Bumped whenever rendering or any template's meaning changes; part of every compile key.
inline constexpr int kGeneratorVersion = 1;

enum class Kind : int {
  FwdRef = 0,      // reference forward, any dtype (templates/fwd_ref.cuh)
  FwdMma = 1,      // tensor-core forward, fp16/bf16, sm_80+ (templates/fwd_mma.cuh)
  BwdPre = 2,      // Delta = rowsum(O * dO) and accumulator clearing (templates/bwd_pre.cuh)
  BwdRefDq = 3,    // reference backward, dQ per query row (templates/bwd_ref.cuh)
  BwdRefDkDv = 4,  // reference backward, dK/dV per key row, summed over the GQA group (templates/bwd_ref.cuh)
  BwdMma = 5,      // tensor-core backward: K/V blocks outer, Q blocks inner (templates/bwd_mma.cuh)
  BwdPost = 6,     // float32 accumulators -> dtype (templates/bwd_post.cuh)
};
inline constexpr int kNumKinds = 7;

enum Dtype : int { kFp16 = 1, kBf16 = 2, kFp32 = 3 };  // values equal fa_dtype
enum Mask : int { kMaskNone = 0, kMaskCausal = 1, kMaskWindow = 2 };  // values equal fa_mask

struct Semantic {
  Kind kind = Kind::FwdRef;
  int arch = 80;          // SM version: 80, 86, 89, 90 (90 compiles for sm_90a)
  int dtype = kFp16;
  int head_dim = 128;     // of q, k: multiple of 8 in [8, 256]
  int head_dim_v = 128;   // of v, o
  int mask = kMaskNone;
  bool has_bias = false;
  bool has_alibi = false;
  bool has_softcap = false;
  bool varlen = false;
  bool even_k = false;    // fixed-length and seqlen_k % block_n == 0: no key-boundary predicates
  bool has_lse = true;    // the kernel writes LSE (backward needs it; fa_run may pass lse == null)
  bool operator==(const Semantic&) const = default;
};

struct Tunables {
  int block_m = 0;     // query rows per CTA
  int block_n = 0;     // keys per inner iteration
  int warps = 0;       // warps per CTA
  int stages = 1;      // shared-memory pipeline depth for K/V
  int q_in_regs = 0;   // 1: Q fragments held in registers for the whole CTA
  int extra = 0;       // family-specific knob (documented by the family); 0 = default
  bool operator==(const Tunables&) const = default;
};

struct KernelConfig {
  Semantic s;
  Tunables t;
  bool operator==(const KernelConfig&) const = default;
};

const char* kind_name(Kind k);        // "fwd_ref", "fwd_mma", ...
const char* dtype_name(int dtype);    // "fp16", "bf16", "fp32"
const char* mask_name(int mask);      // "none", "causal", "window"

// "fwd_mma.sm90.bf16.d128.dv128.causal.b0a0s0v0e1l1|m128.n64.w4.s2.qr1.x0" -- stable, human-readable, complete.
std::string canonical_key(const KernelConfig& c);
std::string semantic_key(const Semantic& s);
std::string tunables_key(const Tunables& t);
// Parses canonical_key / tunables_key back; false on any malformed input (used when reading caches).
bool parse_tunables_key(const std::string& text, Tunables* out);

// The translation unit: a header comment with the key, namespace fa_cfg { constexpr ... }, then the includes.
std::string render_source(const KernelConfig& c);
// The name of the __global__ entry point in the rendered source (extern "C"): always "fa_kernel".
inline constexpr const char* kEntryName = "fa_kernel";

// FNV-1a 64 of the rendered source, every embedded template, the generator version and `extra` (NVRTC version,
// options): the compile key of the persistent cache.
uint64_t fnv1a64(const void* data, size_t n, uint64_t seed = 1469598103934665603ull);
uint64_t templates_hash();  // hash of all embedded templates
uint64_t compile_hash(const KernelConfig& c, const std::string& extra);
std::string hex64(uint64_t v);

}  // namespace fa::gen
