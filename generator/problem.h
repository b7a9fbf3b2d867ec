// problem.h -- a validated attention problem in host terms (no CUDA types), and the one selector.
#pragma once

#include <cstdint>
#include <string>

#include "config.h"
#include "family.h"

namespace fa::gen {

struct ProblemDesc {
  int dtype = kFp16;
  int batch = 1, seqlen_q = 1, seqlen_k = 1;  // varlen: the maxima
  int heads_q = 1, heads_kv = 1;
  int head_dim = 128, head_dim_v = 128;
  bool varlen = false;
  int total_q = 0, total_k = 0;
  int mask = kMaskNone;
  int win_left = -1, win_right = -1;  // as given (normalised in the kernel args)
  bool has_bias = false, has_alibi = false, has_softcap = false, has_lse = false;
  bool aligned16 = false;  // q/k/v/o (and bias) pointers 16-byte aligned and their row/head/batch strides
                           // multiples of 16 bytes: vectorised and cp.async paths allowed
  bool backward = false;
  bool deterministic = false;
};

// Whether a fast (tensor-core) forward family covers the problem on this arch; the reason when not.
bool fwd_mma_covers(const ProblemDesc& p, int arch, std::string* why);

// THE selector: which family runs the forward (fwd_mma where it covers, else fwd_ref) and its semantic part.
Semantic select_forward(const ProblemDesc& p, int arch);
// Completes a config for a concrete problem: fills the shape-class flags that depend on the tunables (even_k).
KernelConfig finalize(const Semantic& s, const Tunables& t, const ProblemDesc& p);

LaunchShape launch_shape(const ProblemDesc& p);

}  // namespace fa::gen
