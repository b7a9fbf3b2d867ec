// device_timer.cpp -- CUDA-event timing of a TuneRequest launcher with L2 flushes (see timer.h).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>
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

int timed_reps(const TimingPlan& plan, double run_ms) {
  const int lo = std::max(plan.min_reps, 1), hi = std::max(plan.max_reps, lo);
  const double per = std::max(run_ms, 1e-3) * (1.0 + std::max(plan.idle_ratio, 0.0));
  return static_cast<int>(
      std::clamp(std::floor(plan.budget_ms / per), static_cast<double>(lo), static_cast<double>(hi)));
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
    st = timed_runs(cfg, req, s, 1, plan.flush_l2, 1, plan.idle_ratio, &one);
    if (!st.ok()) return st;
    const int burst = std::max(plan.burst, 1);
    const int reps = timed_reps(plan, one[0] * burst);
    std::vector<double> times;
    st = timed_runs(cfg, req, s, reps, plan.flush_l2, burst, plan.idle_ratio, &times);
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

  // `reps` runs, each [flush] start-event, `burst` launches, end-event; elapsed times in ms per launch. Without idle
  // time the runs go back to back and one synchronize ends them; with idle > 0 each run is waited for and followed
  // by idle times its time asleep (timer.h: the GPU's average power stays under its cap).
  rt::Status timed_runs(const gen::KernelConfig& cfg, const rt::TuneRequest& req, CUstream s, int reps, bool flush,
                        int burst, double idle, std::vector<double>* out) {
    const rt::Driver& d = *c_->drv;
    auto event = [&](int i, int which) { return events_[2 * static_cast<size_t>(i) + static_cast<size_t>(which)]; };
    auto wait = [&](int i) -> rt::Status {
      const CUresult r = d.cuEventSynchronize(event(i, 1));
      if (r == CUDA_SUCCESS) return rt::Status::Ok();
      return rt::error(FA_ERROR_LAUNCH,
                       rt::driver_error(d, "cuEventSynchronize", r) + " while timing " + gen::canonical_key(cfg));
    };
    auto elapsed = [&](int i, double* ms) -> rt::Status {
      float f = 0.0f;
      const CUresult r = d.cuEventElapsedTime(&f, event(i, 0), event(i, 1));
      if (r != CUDA_SUCCESS) return rt::error(FA_ERROR_DRIVER, rt::driver_error(d, "cuEventElapsedTime", r));
      *ms = static_cast<double>(f);
      return rt::Status::Ok();
    };
    out->clear();
    for (int i = 0; i < reps; ++i) {
      if (flush && scratch_ != 0) {
        CUresult r = d.cuMemsetD8Async(scratch_, static_cast<unsigned char>(i & 0xff), kFlushBytes, s);
        if (r != CUDA_SUCCESS) return rt::error(FA_ERROR_DRIVER, rt::driver_error(d, "cuMemsetD8Async", r));
      }
      CUresult r = d.cuEventRecord(event(i, 0), s);
      if (r != CUDA_SUCCESS) return rt::error(FA_ERROR_DRIVER, rt::driver_error(d, "cuEventRecord", r));
      for (int k = 0; k < burst; ++k) {
        rt::Status st = req.launch(cfg);
        if (!st.ok()) return st;
      }
      r = d.cuEventRecord(event(i, 1), s);
      if (r != CUDA_SUCCESS) return rt::error(FA_ERROR_DRIVER, rt::driver_error(d, "cuEventRecord", r));
      if (idle > 0) {
        double ms = 0.0;
        rt::Status st = wait(i);
        if (st.ok()) st = elapsed(i, &ms);
        if (!st.ok()) return st;
        std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(idle * ms));
      }
    }
    rt::Status st = wait(reps - 1);
    if (!st.ok()) return st;
    for (int i = 0; i < reps; ++i) {
      double ms = 0.0;
      st = elapsed(i, &ms);
      if (!st.ok()) return st;
      out->push_back(ms / burst);
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
