// tuner_support.h -- the forward problem the tuner and chooser CPU tests tune (fp16/bf16/fp32, causal, d64, h8,
// batch 2, aligned, with LSE).
#pragma once

#include "generator/problem.h"

namespace fa::test {

inline gen::ProblemDesc tuner_problem(int dtype, int seqlen) {
  gen::ProblemDesc p;
  p.dtype = dtype;
  p.batch = 2;
  p.seqlen_q = p.seqlen_k = seqlen;
  p.heads_q = p.heads_kv = 8;
  p.head_dim = p.head_dim_v = 64;
  p.mask = gen::kMaskCausal;
  p.aligned16 = true;
  p.has_lse = true;
  return p;
}

}  // namespace fa::test
