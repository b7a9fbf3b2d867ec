// device_problem.cpp -- device buffers for fa-tune timing and the reference check of winners.
#include "tuner/device_problem.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "generator/family.h"
#include "runtime/driver.h"
#include "runtime/launch.h"
#include "runtime/validate.h"
#include "tuner/problem_layout.h"

namespace fa::tune {

uint16_t float_to_half_bits(float f) {
  uint32_t x = 0;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const int exp = static_cast<int>((x >> 23) & 0xff) - 127 + 15;
  uint32_t mant = x & 0x7fffffu;
  if (((x >> 23) & 0xff) == 0xff) return static_cast<uint16_t>(sign | 0x7c00u | (mant ? 0x200u : 0u));
  if (exp >= 31) return static_cast<uint16_t>(sign | 0x7c00u);
  if (exp <= 0) {
    if (exp < -10) return static_cast<uint16_t>(sign);
    mant |= 0x800000u;
    const int shift = 14 - exp;
    uint32_t h = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1u))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  uint32_t h = (static_cast<uint32_t>(exp) << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // may carry into the exponent: still correct
  return static_cast<uint16_t>(sign | h);
}

float half_bits_to_float(uint16_t h) {
  const uint32_t sign = (static_cast<uint32_t>(h) & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  float f;
  if (exp == 0) {
    f = std::ldexp(static_cast<float>(mant), -24);
  } else if (exp == 31) {
    f = mant ? std::nanf("") : INFINITY;
  } else {
    f = std::ldexp(static_cast<float>(mant | 0x400u), static_cast<int>(exp) - 25);
  }
  return sign ? -f : f;
}

uint16_t float_to_bf16_bits(float f) {
  uint32_t x = 0;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

float bf16_bits_to_float(uint16_t b) {
  const uint32_t x = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

DeviceProblem::~DeviceProblem() {
  if (!c_->has_device) return;
  rt::CtxGuard g(c_);
  if (!g.status().ok()) return;
  const rt::Driver& d = *c_->drv;
  if (stream_ != nullptr) {
    d.cuStreamSynchronize(stream_);
    d.cuStreamDestroy(stream_);
  }
  for (CUdeviceptr p : buffers_) d.cuMemFree(p);
}

rt::Status DeviceProblem::alloc(size_t bytes, CUdeviceptr* out) {
  const rt::Driver& d = *c_->drv;
  CUresult r = d.cuMemAlloc(out, std::max<size_t>(bytes, 256));
  if (r != CUDA_SUCCESS)
    return rt::error(FA_ERROR_OUT_OF_MEMORY, rt::driver_error(d, "cuMemAlloc", r) + fmt::format(" ({} bytes)", bytes));
  buffers_.push_back(*out);
  return rt::Status::Ok();
}

rt::Status DeviceProblem::fill_random(CUdeviceptr p, size_t elems, int dtype, unsigned seed) {
  const rt::Driver& d = *c_->drv;
  const size_t es = rt::dtype_size(dtype);
  constexpr size_t kBlock = size_t{1} << 20;  // elements per host block
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<uint8_t> host(std::min(elems, kBlock) * es);
  for (size_t i = 0; i < host.size() / es; ++i) {
    const float v = u(rng);
    if (dtype == gen::kFp32) {
      std::memcpy(&host[i * 4], &v, 4);
    } else {
      const uint16_t b = dtype == gen::kBf16 ? float_to_bf16_bits(v) : float_to_half_bits(v);
      std::memcpy(&host[i * 2], &b, 2);
    }
  }
  // The block repeats; rotating its start per copy keeps rows from being identical.
  size_t done = 0, rot = 0;
  const size_t block_elems = host.size() / es;
  while (done < elems) {
    const size_t n = std::min(block_elems - rot, elems - done);
    CUresult r = d.cuMemcpyHtoD(p + done * es, host.data() + rot * es, n * es);
    if (r != CUDA_SUCCESS) return rt::error(FA_ERROR_DRIVER, rt::driver_error(d, "cuMemcpyHtoD", r));
    done += n;
    rot = (rot + 4099) % block_elems;
  }
  return rt::Status::Ok();
}

rt::Status DeviceProblem::create(fa_context c, const GridPoint& g, std::unique_ptr<DeviceProblem>* out,
                                 bool low_priority) {
  if (!c->has_device) return rt::error(FA_ERROR_NO_DEVICE, c->no_device_reason);
  std::unique_ptr<DeviceProblem> dp(new DeviceProblem(c));
  rt::CtxGuard guard(c);
  if (!guard.status().ok()) return guard.status();
  const rt::Driver& d = *c->drv;
  const gen::ProblemDesc& p = g.desc;
  int least = 0, greatest = 0;
  if (!low_priority || d.cuCtxGetStreamPriorityRange(&least, &greatest) != CUDA_SUCCESS) least = 0;
  CUresult r = d.cuStreamCreateWithPriority(&dp->stream_, CU_STREAM_NON_BLOCKING, least);
  if (r != CUDA_SUCCESS) return rt::error(FA_ERROR_DRIVER, rt::driver_error(d, "cuStreamCreate", r));
  const size_t es = rt::dtype_size(p.dtype);
  const ProblemLayout l = problem_layout(p);
  ProblemBuffers b;
  rt::Status st;
  for (auto [ptr, bytes] : {std::pair<CUdeviceptr*, size_t>{&b.q, l.q * es},
                            {&b.k, l.k * es},
                            {&b.v, l.v * es},
                            {&b.o, l.o * es},
                            {&dp->o_ref_, l.o * es},
                            {&b.lse, l.lse * 4},
                            {&dp->lse_ref_, l.lse * 4},
                            {&b.bias, l.bias * es},
                            {&b.alibi, l.alibi * 4},
                            {&b.sinks, l.sinks * 4},
                            {&b.seqused, l.seqused * 4},
                            {&b.block_table, l.block_table * 4}}) {
    if (bytes == 0) continue;  // absent from this problem
    st = dp->alloc(bytes, ptr);
    if (!st.ok()) return st;
  }
  dp->o_elems_ = l.o;
  if (!(st = dp->fill_random(b.q, l.q, p.dtype, 1)).ok() || !(st = dp->fill_random(b.k, l.k, p.dtype, 2)).ok() ||
      (l.v != 0 && !(st = dp->fill_random(b.v, l.v, p.dtype, 3)).ok()) ||
      (l.bias != 0 && !(st = dp->fill_random(b.bias, l.bias, p.dtype, 4)).ok()))
    return st;
  auto upload = [&](CUdeviceptr dst, const void* src, size_t bytes) {
    if (bytes == 0) return rt::Status::Ok();
    CUresult cr = d.cuMemcpyHtoD(dst, src, bytes);
    return cr == CUDA_SUCCESS ? rt::Status::Ok() : rt::error(FA_ERROR_DRIVER, rt::driver_error(d, "cuMemcpyHtoD", cr));
  };
  std::vector<float> slopes(l.alibi);
  for (size_t h = 0; h < slopes.size(); ++h)
    slopes[h] = std::exp2(-8.0f * static_cast<float>(h + 1) / static_cast<float>(p.heads_q));
  const std::vector<int32_t> used(l.seqused, p.seqlen_k);  // every sequence uses the bucket's key count
  const std::vector<int32_t> table = block_table_contents(l, 5);
  const std::vector<float> sinks = sinks_contents(l);
  if (!(st = upload(b.alibi, slopes.data(), slopes.size() * 4)).ok() ||
      !(st = upload(b.sinks, sinks.data(), sinks.size() * 4)).ok() ||
      !(st = upload(b.seqused, used.data(), used.size() * 4)).ok() ||
      !(st = upload(b.block_table, table.data(), table.size() * 4)).ok())
    return st;
  dp->params_ = problem_params(p, g.softcap, l, b);
  *out = std::move(dp);
  return rt::Status::Ok();
}

rt::TuneRequest DeviceProblem::request(const fa_params& validated, const gen::ProblemDesc& d) {
  rt::TuneRequest r = rt::forward_tune_request(c_, validated, d, stream_);
  r.verify = [this, validated, d](const gen::KernelConfig& cfg, double* rel) { return verify(validated, d, cfg, rel); };
  return r;
}

rt::Status DeviceProblem::verify(const fa_params& validated, const gen::ProblemDesc& d, const gen::KernelConfig& cfg,
                                 double* rel_error) {
  rt::TuneRequest run = rt::forward_tune_request(c_, validated, d, stream_);
  rt::Status st = run.launch(cfg);
  if (!st.ok()) return st;
  // The reference family into the scratch output.
  const gen::Family* ref = gen::find_family("fwd_ref");
  const gen::Semantic rs = gen::semantic_for(*ref, d, cfg.s.arch);
  const gen::Plan plan = gen::make_plan(rs, d);
  fa_params pr = validated;
  pr.o = reinterpret_cast<void*>(o_ref_);
  pr.lse = reinterpret_cast<float*>(lse_ref_);
  FaFwdArgs args = rt::make_fwd_args(pr, d);
  st =
      rt::enqueue_plan(c_, plan, gen::launch_shape(d), rt::PlanArgs{&args, sizeof args, {}}, true, stream_, nullptr, 0);
  if (!st.ok()) return st;
  rt::CtxGuard g(c_);
  if (!g.status().ok()) return g.status();
  const rt::Driver& drv = *c_->drv;
  CUresult r = drv.cuStreamSynchronize(stream_);
  if (r != CUDA_SUCCESS) return rt::error(FA_ERROR_LAUNCH, rt::driver_error(drv, "cuStreamSynchronize", r));
  const size_t es = rt::dtype_size(d.dtype);
  std::vector<uint8_t> a(o_elems_ * es), b(o_elems_ * es);
  r = drv.cuMemcpyDtoH(a.data(), reinterpret_cast<CUdeviceptr>(validated.o), a.size());
  if (r == CUDA_SUCCESS) r = drv.cuMemcpyDtoH(b.data(), o_ref_, b.size());
  if (r != CUDA_SUCCESS) return rt::error(FA_ERROR_DRIVER, rt::driver_error(drv, "cuMemcpyDtoH", r));
  auto value = [&](const std::vector<uint8_t>& buf, size_t i) -> double {
    if (d.dtype == gen::kFp32) {
      float f;
      std::memcpy(&f, &buf[i * 4], 4);
      return f;
    }
    uint16_t h;
    std::memcpy(&h, &buf[i * 2], 2);
    return d.dtype == gen::kBf16 ? bf16_bits_to_float(h) : half_bits_to_float(h);
  };
  double max_diff = 0, max_ref = 0;
  for (size_t i = 0; i < o_elems_; ++i) {
    const double x = value(a, i), y = value(b, i);
    const double diff = std::fabs(x - y);
    if (!(diff == diff)) {
      *rel_error = std::nan("");
      return rt::Status::Ok();
    }
    max_diff = std::max(max_diff, diff);
    max_ref = std::max(max_ref, std::fabs(y));
  }
  *rel_error = max_diff / std::max(max_ref, 1e-6);
  return rt::Status::Ok();
}

}  // namespace fa::tune
