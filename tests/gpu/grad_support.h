// grad_support.h -- shared pieces of the backward GPU tests: gradient buffers (poisoned) with the float64
// oracle's gradients, the relative error over valid elements (NaN/Inf fail, padding must stay poisoned), and the
// per-dtype tolerance.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>

#include <gtest/gtest.h>

#include "generator/config.h"
#include "generator/problem.h"
#include "tests/gpu/gpu_support.h"

namespace fa::test {

double bwd_tolerance(int dtype);

struct Grads {
  std::vector<double> dout;
  DevBuf d_dout, d_dq, d_dk, d_dv;
  fa_bwd_params b;
  std::vector<double> dq_ref, dk_ref, dv_ref;
  DevBuf d_dsinks;                 // a case with sinks: float32 [heads_q], poisoned (NaN) before each run
  std::vector<double> dsinks_ref;  // the oracle's; empty without sinks
};

// Random dO (NaN where the output is padding), poisoned dQ/dK/dV buffers with the case's strides, the params, and
// the oracle's gradients.
void setup_grads(std::mt19937_64& rng, Case& c, Grads& g);
// The hand-picked problem `spec` (aligned strides, LSE on) materialized, its forward run by fa_run on the test
// stream, its gradients set up (setup_grads) and the backward params validated: *d is the backward's problem.
::testing::AssertionResult forward_with_grads(std::mt19937_64& rng, const CaseSpec& spec, Case* c, Grads* g,
                                              gen::ProblemDesc* d);
// Re-poisons the gradient buffers (before another launch on the same Grads).
void poison_grads(const Case& c, Grads& g);
// The sinks' gradient of g's last backward (synced) against the oracle's: relative, with an RMS floor of 1e-3 as
// grad_error; NaN or Inf (the poison left) fails.
double dsinks_error(const Grads& g);
// Relative error over the valid elements (those the reference input had: non-NaN); padding must stay poisoned.
double grad_error(int dtype, const DevBuf& buf, const std::vector<double>& input, const std::vector<double>& ref,
                  bool* padding_ok);

struct GradResult {
  double dq = INFINITY, dk = INFINITY, dv = INFINITY;
  double dsinks = 0;  // a case with sinks: dsinks_error
  bool padding_ok = true;
  std::string failure;  // empty: fa_run_backward returned FA_OK
  double worst() const { return std::max(std::max(dq, dsinks), std::max(dk, dv)); }
  bool ok(int dtype) const { return failure.empty() && padding_ok && worst() <= bwd_tolerance(dtype); }
  std::string describe() const;  // "dq .. dk .. dv .. <failure> padding <ok>", for a failed expectation
};
// fa_run_backward of g (the case's forward already ran: its o and lse are on the device) on the test stream, with
// the gradients poisoned first, against the oracle's gradients.
GradResult check_grads(const Case& c, Grads& g);
// The same through rt::run_backward_at: the backward family `family`'s plan at tunables t (the deterministic mode
// as g.b says), the run's error in .failure.
GradResult check_grads_at(const Case& c, Grads& g, const gen::Tunables& t, const char* family);
// The gradients of a backward already enqueued on the test stream (after poison_grads) against the oracle's: syncs,
// then the errors and the padding.
GradResult measure_grads(const Case& c, Grads& g);
// Gradient buffers of a case's extents for fa_prepare_backward, which (under a tuning policy) times candidates on
// the params' buffers: it reads dout and writes dq / dk / dv as fa_run_backward would.
struct PrepareGrads {
  DevBuf dq, dk, dv, dsinks;
};
// The backward params for preparing p (whose buffers are c's or share c's extents): dout = p's o, the gradients in
// *scratch (allocated here, on the calling thread: keep it alive until fa_prepare_backward returns).
fa_bwd_params prepare_bwd_params(const Case& c, const fa_params& p, PrepareGrads* scratch);
// Compiles (and, by policy, tunes) the kernels of these problems' forward and backward (fa_prepare,
// fa_prepare_backward) in parallel, so that the serial checks after it only launch. problems[i]'s buffers are
// owners[i]'s (its extents size the gradient scratch). LSE must be set.
void prepare_in_parallel(const std::vector<const fa_params*>& problems, const std::vector<const Case*>& owners);

}  // namespace fa::test
