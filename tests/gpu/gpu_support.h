// gpu_support.h -- shared pieces of the GPU tests: the device (or the reason there is none), device buffers over
// the dlopen'ed driver, dtype conversions, and random attention problems with their float64 oracle results.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "fa/fa.h"
#include "runtime/driver.h"
#include "tests/oracle/oracle.h"

namespace fa::test {

struct Gpu {
  fa_context ctx = nullptr;
  const rt::Driver* d = nullptr;
  CUcontext cuctx = nullptr;
  CUstream stream = nullptr;
  std::string name;
  std::string why;  // non-empty: no device
  bool ok() const { return why.empty(); }
};
// The process-wide test device (primary context of device 0 made current on the calling thread).
Gpu& gpu();
// Seed of this run (from std::random_device, or $FA_TEST_SEED), printed once.
uint64_t test_seed();

struct DevBuf {
  CUdeviceptr ptr = 0;
  size_t bytes = 0;
  DevBuf() = default;
  explicit DevBuf(size_t n);
  ~DevBuf();
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  DevBuf(DevBuf&& o) noexcept : ptr(o.ptr), bytes(o.bytes) {
    o.ptr = 0;
    o.bytes = 0;
  }
  DevBuf& operator=(DevBuf&& o) noexcept {
    std::swap(ptr, o.ptr);
    std::swap(bytes, o.bytes);
    return *this;
  }
  void upload(const void* src, size_t n);
  void download(void* dst, size_t n) const;
  void* get() const { return reinterpret_cast<void*>(ptr); }
};

uint16_t f32_to_f16(float f);
float f16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);
float bf16_to_f32(uint16_t h);
// Rounds x to the dtype's precision (what the kernel sees).
double round_to(int dtype, double x);
// Host bytes of a double array in the dtype (NaN where poison[i]).
std::vector<uint8_t> encode(int dtype, const std::vector<double>& v);
std::vector<double> decode(int dtype, const std::vector<uint8_t>& bytes);
bool is_poison_bits(int dtype, const uint8_t* p);  // all 0xFF bytes

// One attention problem with host data, device buffers and the oracle's answer.
struct Case {
  std::string desc;
  int dtype = FA_DTYPE_FP16;
  oracle::Problem op;
  bool bhsd = false, want_lse = true;
  bool force_aligned = false;  // strides multiples of 8 elements (else 3 in 4 layouts are): fast paths eligible
  // host copies (double, rounded to the dtype), laid out with the same strides as on the device
  std::vector<double> q, k, v, o_ref, lse_ref, bias, alibi;
  long long q_sb, q_ss, q_sh, k_sb, k_ss, k_sh, v_sb, v_ss, v_sh, o_sb, o_ss, o_sh;
  size_t q_n, k_n, v_n, o_n, lse_n;
  std::vector<uint8_t> o_valid;  // 1 where the output element is part of the result
  DevBuf dq, dk, dv, d_o, d_lse, d_bias, d_alibi, d_cuq, d_cuk;
  fa_params params;
  std::vector<float> alibi_f;
  // Attention sinks: set with_sinks before materialize (which draws them: random_sinks) for a case with sinks.
  bool with_sinks = false;
  std::vector<double> sinks;  // [heads_q], the float values the kernel reads
  std::vector<float> sinks_f;
  DevBuf d_sinks;
};

// Sink logits for `heads` query heads, as a user's could be: typical values in [-2, 4] (head 0 always), and at random
// a large one that dominates its rows (up to 12 in fp16, whose outputs would otherwise underflow, else up to 30),
// -inf (no sink) and -inf-ish ones (-1e4, -80); each exactly a float.
std::vector<double> random_sinks(std::mt19937_64& rng, int heads, int dtype);

struct CaseOptions {
  bool allow_fp32 = true;
  int max_seq = 300;           // cap on random lengths (odd lengths 1, 7, 127, 129, 1000 also drawn)
  double max_work = 4e7;       // cap on b*hq*sq*sk*(d+dv) so the float64 oracle stays fast
  bool force_aligned = false;  // strides multiples of 8 elements and 16-byte pointers (fast path eligible)
};

// Builds a random problem (fresh random inputs, outputs poisoned on the device) and the oracle result.
void make_random_case(std::mt19937_64& rng, const CaseOptions& opt, Case* c);
// Uploads inputs, poisons outputs, computes the oracle result (call after filling c->op etc. by hand too).
void materialize(std::mt19937_64& rng, Case* c);

// A hand-picked problem for the tests that sweep tunable points: batch 2 (3 varlen sequences of lengths 100/130,
// 0/1, 190/200 when varlen), window (37, 5) for mask 2, softcap 30 when on.
struct CaseSpec {
  int dtype, head_dim, head_dim_v, heads_q, heads_kv, mask, seqlen_q, seqlen_k;
  bool bias, alibi, softcap, varlen;
};
// Fills c->op from `spec` and materializes it (LSE wanted; aligned strides when `aligned`).
void materialize_spec(std::mt19937_64& rng, const CaseSpec& spec, bool aligned, Case* c);

struct CaseResult {
  double err_o = 0, err_lse = 0;
  bool padding_intact = true;
  std::string failure;  // empty: fa_run returned FA_OK
};
// Runs fa_run (or a caller-given launcher) on the test stream, syncs, and compares with the oracle.
CaseResult check_case(Case& c);
CaseResult compare_outputs(Case& c);
double tolerance(int dtype);
// Runs fn(0..n-1) on up to hardware_concurrency threads (kernels compile in parallel before the serial checks).
void parallel_for(size_t n, const std::function<void(size_t)>& fn);

}  // namespace fa::test
