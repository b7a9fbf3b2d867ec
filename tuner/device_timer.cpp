// device_timer.cpp -- CUDA-event timing of a TuneRequest launcher with L2 flushes (see timer.h).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "runtime/driver.h"
#include "tuner/timer.h"

namespace fa::tune {

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  if (n == 0) return std::nan("");
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

namespace {

constexpr size_t kFlushBytes = size_t{256} << 20;

class DeviceTimer : public Timer {
 public:
  explicit DeviceTimer(fa_context c) : c_(c) {}
  ~DeviceTimer() override {
    if (!c_->has_device) return;
    rt::CtxGuard g(c_);
    if (!g.status().ok()) return;
    const rt::Driver& d = *c_->drv;
    for (CUevent e : events_) d.cuEventDestroy(e);
    if (scratch_ != 0) d.cuMemFree(scratch_);  // implicitly waits for the flushes that used it
  }

  rt::Status time(const gen::KernelConfig& cfg, const rt::TuneRequest& req, const TimingPlan& plan,
                  double* median_ms) override {
    if (!c_->has_device) return rt::error(FA_ERROR_NO_DEVICE, c_->no_device_reason);
    if (!req.launch) return rt::error(FA_ERROR_INTERNAL, "tuner: the tune request has no launcher");
    rt::CtxGuard g(c_);
    if (!g.status().ok()) return g.status();
    const rt::Driver& d = *c_->drv;
    const int max_reps = std::max(plan.max_reps, std::max(plan.min_reps, 1));
    rt::Status st = ensure_events(static_cast<size_t>(2 * max_reps));
    if (!st.ok()) return st;
    if (plan.flush_l2 && !scratch_tried_) {
      scratch_tried_ = true;
      if (d.cuMemAlloc(&scratch_, kFlushBytes) != CUDA_SUCCESS) {
        scratch_ = 0;
        c_->warn("tuner: could not allocate the 256 MiB L2 flush buffer; timing without flushes");
      }
    }
    CUstream s = req.stream;
    for (int i = 0; i < plan.warmup; ++i) {
      st = req.launch(cfg);
      if (!st.ok()) return st;
    }
    // One timed run estimates the cost and sizes the repetition count.
    std::vector<double> one;
    st = timed_runs(cfg, req, s, 1, plan.flush_l2, 1, &one);
    if (!st.ok()) return st;
    const int burst = std::max(plan.burst, 1);
    const double est = std::max(one[0], 1e-3) * burst;
    const int reps = static_cast<int>(std::clamp(std::floor(plan.budget_ms / est), static_cast<double>(plan.min_reps),
                                                 static_cast<double>(max_reps)));
    std::vector<double> times;
    st = timed_runs(cfg, req, s, reps, plan.flush_l2, burst, &times);
    if (!st.ok()) return st;
    *median_ms = median_of(times);
    return rt::Status::Ok();
  }

 private:
  rt::Status ensure_events(size_t n) {
    const rt::Driver& d = *c_->drv;
    while (events_.size() < n) {
      CUevent e = nullptr;
      CUresult r = d.cuEventCreate(&e, CU_EVENT_DEFAULT);
      if (r != CUDA_SUCCESS) return rt::error(FA_ERROR_DRIVER, rt::driver_error(d, "cuEventCreate", r));
      events_.push_back(e);
    }
    return rt::Status::Ok();
  }

  // `reps` runs, each [flush] start-event, `burst` launches, end-event, then one synchronize; elapsed times in ms per
  // launch.
  rt::Status timed_runs(const gen::KernelConfig& cfg, const rt::TuneRequest& req, CUstream s, int reps, bool flush,
                        int burst, std::vector<double>* out) {
    const rt::Driver& d = *c_->drv;
    for (int i = 0; i < reps; ++i) {
      if (flush && scratch_ != 0) {
        CUresult r = d.cuMemsetD8Async(scratch_, static_cast<unsigned char>(i & 0xff), kFlushBytes, s);
        if (r != CUDA_SUCCESS) return rt::error(FA_ERROR_DRIVER, rt::driver_error(d, "cuMemsetD8Async", r));
      }
      CUevent a = events_[2 * static_cast<size_t>(i)], b = events_[2 * static_cast<size_t>(i) + 1];
      CUresult r = d.cuEventRecord(a, s);
      if (r != CUDA_SUCCESS) return rt::error(FA_ERROR_DRIVER, rt::driver_error(d, "cuEventRecord", r));
      for (int k = 0; k < burst; ++k) {
        rt::Status st = req.launch(cfg);
        if (!st.ok()) return st;
      }
      r = d.cuEventRecord(b, s);
      if (r != CUDA_SUCCESS) return rt::error(FA_ERROR_DRIVER, rt::driver_error(d, "cuEventRecord", r));
    }
    CUresult r = d.cuEventSynchronize(events_[2 * static_cast<size_t>(reps - 1) + 1]);
    if (r != CUDA_SUCCESS) return rt::error(FA_ERROR_LAUNCH, rt::driver_error(d, "cuEventSynchronize", r) +
                                                                 " while timing " + gen::canonical_key(cfg));
    out->clear();
    for (int i = 0; i < reps; ++i) {
      float ms = 0.0f;
      r = d.cuEventElapsedTime(&ms, events_[2 * static_cast<size_t>(i)], events_[2 * static_cast<size_t>(i) + 1]);
      if (r != CUDA_SUCCESS) return rt::error(FA_ERROR_DRIVER, rt::driver_error(d, "cuEventElapsedTime", r));
      out->push_back(static_cast<double>(ms) / burst);
    }
    return rt::Status::Ok();
  }

  fa_context c_;
  std::vector<CUevent> events_;
  CUdeviceptr scratch_ = 0;
  bool scratch_tried_ = false;
};

}  // namespace

std::unique_ptr<Timer> make_device_timer(fa_context c) { return std::make_unique<DeviceTimer>(c); }

}  // namespace fa::tune
