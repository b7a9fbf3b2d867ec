// grad_support.h -- shared pieces of the backward GPU tests: gradient buffers (poisoned) with the float64
// oracle's gradients, the relative error over valid elements (NaN/Inf fail, padding must stay poisoned), and the
// per-dtype tolerance.
#pragma once

#include "tests/gpu/gpu_support.h"

namespace fa::test {

double bwd_tolerance(int dtype);

struct Grads {
  std::vector<double> dout;
  DevBuf d_dout, d_dq, d_dk, d_dv;
  fa_bwd_params b;
  std::vector<double> dq_ref, dk_ref, dv_ref;
};

// Random dO (NaN where the output is padding), poisoned dQ/dK/dV buffers with the case's strides, the params, and
// the oracle's gradients.
void setup_grads(std::mt19937_64& rng, Case& c, Grads& g);
// Re-poisons the gradient buffers (before another launch on the same Grads).
void poison_grads(const Case& c, Grads& g);
// Relative error over the valid elements (those the reference input had: non-NaN); padding must stay poisoned.
double grad_error(int dtype, const DevBuf& buf, const std::vector<double>& input, const std::vector<double>& ref,
                  bool* padding_ok);

}  // namespace fa::test
