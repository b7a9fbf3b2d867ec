// device_problem.h -- device inputs for timing one fa-tune grid point: q, k, v (random, uniform in [-1, 1]), o, lse,
// optional bias ([seqlen_q, seqlen_k] broadcast over batch and heads) and ALiBi slopes, a reference output; all
// through the driver table (cuMemAlloc + cuMemcpyHtoD of a random host block), no cudart.
#pragma once

#include <cuda.h>

#include <memory>
#include <vector>

#include "fa/fa.h"
#include "runtime/context.h"
#include "tuner/fa_tune_args.h"

namespace fa::tune {

class DeviceProblem {
 public:
  // Allocates and fills the buffers of g on the context's device and creates a non-blocking stream (of the
  // device's lowest priority when low_priority: the background tuner's, so the caller's work goes first).
  static rt::Status create(fa_context c, const GridPoint& g, std::unique_ptr<DeviceProblem>* out,
                           bool low_priority = false);
  ~DeviceProblem();
  DeviceProblem(const DeviceProblem&) = delete;
  DeviceProblem& operator=(const DeviceProblem&) = delete;

  const fa_params& params() const { return params_; }
  CUstream stream() const { return stream_; }
  // The forward launcher on stream() plus a verifier: runs a candidate and the fwd_ref family into a scratch output
  // and returns max|o - o_ref| / max|o_ref|.
  rt::TuneRequest request(const fa_params& validated, const gen::ProblemDesc& d);

 private:
  explicit DeviceProblem(fa_context c) : c_(c) {}
  rt::Status alloc(size_t bytes, CUdeviceptr* out);
  rt::Status fill_random(CUdeviceptr p, size_t elems, int dtype, unsigned seed);
  rt::Status verify(const fa_params& validated, const gen::ProblemDesc& d, const gen::KernelConfig& cfg,
                    double* rel_error);

  fa_context c_;
  std::vector<CUdeviceptr> buffers_;
  CUstream stream_ = nullptr;
  fa_params params_{};
  CUdeviceptr o_ref_ = 0, lse_ref_ = 0;
  size_t o_elems_ = 0;
};

// Host conversions used for random fills and comparisons.
uint16_t float_to_half_bits(float f);
float half_bits_to_float(uint16_t h);
uint16_t float_to_bf16_bits(float f);
float bf16_bits_to_float(uint16_t b);

}  // namespace fa::tune
