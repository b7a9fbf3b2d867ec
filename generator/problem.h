// problem.h -- a validated attention problem in host terms (no CUDA types), THE selector and the plans.
#pragma once

#include <cstdint>
#include <string>

#include "config.h"
#include "family.h"

namespace fa::gen {

struct ProblemDesc {
  int dtype = kFp16;
  int kv_dtype = 0;  // of k and v when not dtype (fa_params version 3: an fp8 KV cache), else 0
  int o_dtype = 0;   // of o when not dtype (fp8 inputs: bf16 / fp16), else 0
  int batch = 1, seqlen_q = 1, seqlen_k = 1;  // varlen: the maxima
  int heads_q = 1, heads_kv = 1;
  int head_dim = 128, head_dim_v = 128;
  bool varlen = false;
  int total_q = 0, total_k = 0;
  int mask = kMaskNone;
  int win_left = -1, win_right = -1;  // as given (normalised in the kernel args)
  bool has_bias = false, has_alibi = false, has_softcap = false, has_lse = false;
  bool has_sinks = false;  // fa_params.sinks (attention sinks): a semantic feature, in the key
  bool aligned16 = false;  // q/k/v/o (and bias) pointers 16-byte aligned and their row/head/batch strides
                           // multiples of 16 bytes: vectorised and cp.async paths allowed
  bool tma_ok = false;     // aligned16, and q/k/v (and o, fixed length) describable as TMA tensors: every dimension
                           // of extent > 1 has a positive byte stride below 2^40
  bool v_in_k = false;     // v is k's first head_dim_v columns (the same pointer and strides: MLA's latent cache)
  bool backward = false;
  bool deterministic = false;
  // KV cache (fa_params version 2)
  bool seqused = false;            // seqused_k given: the keys each sequence uses are read on the device
  bool paged = false;              // block_table given: k / v are page pools
  int page_size = 0;               // rows per page (paged)
  int num_splits = 0;              // split-KV count forced by the caller (0: the family's heuristic; 1: no split)
  int sm_count = 0;                // the device's SMs, for plans that size work by the device (split-KV); 0: unknown
  const UserMods* mods = nullptr;  // user code (fa_mods), interned (user_mods.h); nullptr: none
  int mask_mod_depends = 3;        // FA_MOD_DEPENDS_* bits of fa_mods (a value: the block classification's sharing)
};

// The semantic part of problem p for family f on arch: the problem's dtype, head dims, mask and features. Forward
// families get p's has_lse and, as a hint for their default tables (a shape class, not a length), whether seqlen_k
// is a multiple of 64 (finalize() replaces it with the real flag); backward families and steps read the LSE
// (has_lse) and have no even_k.
Semantic semantic_for(const Family& f, const ProblemDesc& p, int arch);

// THE selector: the covering family of `role` with the highest priority on arch (FA_FORCE_REFERENCE=1 for the
// forward, FA_FORCE_REFERENCE_BWD=1 for the backward: only reference families), and the problem's semantic part
// for it. fa_run, fa_run_backward, fa_is_supported, fa_problem_key, the tuner and fa-tune all go through it.
// *why (optional) lists why each higher-ranked family passed.
Semantic select(Role role, const ProblemDesc& p, int arch, std::string* why = nullptr);
inline Semantic select_forward(const ProblemDesc& p, int arch) { return select(Role::Forward, p, arch); }
inline Semantic select_backward(const ProblemDesc& p, int arch) { return select(Role::Backward, p, arch); }
// Whether an fp8 problem (dtype or kv_dtype e4m3 / e5m2) can run on arch: fp8 tensor cores (sm_89+) and a family of
// `role` that reads it (Family::fp8_kv_cache / fp8_inputs). false with *why ("no fp8 forward kernel yet for ...",
// naming the dtype and the arch); true for every 16-bit problem.
bool fp8_support(Role role, const ProblemDesc& p, int arch, std::string* why);
// Whether family f (by name) covers p on arch: in its arch range and its coverage predicate holds.
bool family_covers(const Family& f, const ProblemDesc& p, int arch, std::string* why);

// Completes a config for a concrete problem: fills the shape-class flags that depend on the tunables (even_k).
KernelConfig finalize(const Semantic& s, const Tunables& t, const ProblemDesc& p);

// The plan of a call whose top-level family is s.family, its own step at tunables t (Family::plan).
Plan make_plan(const Semantic& s, const Tunables& t, const ProblemDesc& p);
// The same at the family's default tunables.
Plan make_plan(const Semantic& s, const ProblemDesc& p);

LaunchShape launch_shape(const ProblemDesc& p);

}  // namespace fa::gen
