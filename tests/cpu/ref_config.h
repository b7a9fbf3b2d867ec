// ref_config.h -- a small kernel config for the CPU tests that compile through NVRTC: fwd_ref (quick to compile) at
// sm_80 for one head dim, at its defaults.
#pragma once

#include "generator/family.h"

namespace fa::test {

inline gen::KernelConfig ref_config(int head_dim, int dtype = gen::kFp16) {
  gen::KernelConfig c;
  c.s.family = gen::find_family("fwd_ref");
  c.s.arch = 80;
  c.s.dtype = dtype;
  c.s.head_dim = c.s.head_dim_v = head_dim;
  c.t = c.s.family->defaults(c.s);
  return c;
}

}  // namespace fa::test
