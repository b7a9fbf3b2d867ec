// context.cpp -- creating and destroying contexts, binding the device, the primary-context guard.
#include "runtime/context.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "runtime/arch.h"

namespace fa::rt {

gen::DeviceLimits device_limits(int major, int minor, int smem_optin, int threads_per_sm, int sms) {
  gen::DeviceLimits l = gen::limits_for_arch(arch_of_capability(major, minor));
  if (smem_optin > 0) l.max_smem_optin = smem_optin;
  if (threads_per_sm > 0) l.max_threads_per_sm = threads_per_sm;
  if (sms > 0) l.sm_count = sms;
  return l;
}

CtxGuard::CtxGuard(fa_context c) : c_(c) {
  if (!c_->has_device) {
    st_ = error(FA_ERROR_NO_DEVICE, c_->no_device_reason);
    return;
  }
  // Already current on this thread (the caller's framework bound it, or an outer guard did): nothing to push. A
  // push / pop pair costs about as much as the rest of a cached fa_run.
  CUcontext current = nullptr;
  if (c_->drv->cuCtxGetCurrent(&current) == CUDA_SUCCESS && current == c_->cuctx) return;
  CUresult r = c_->drv->cuCtxPushCurrent(c_->cuctx);
  if (r != CUDA_SUCCESS) st_ = error(FA_ERROR_DRIVER, driver_error(*c_->drv, "cuCtxPushCurrent", r));
  else pushed_ = true;
}

CtxGuard::~CtxGuard() {
  if (pushed_) {
    CUcontext popped = nullptr;
    c_->drv->cuCtxPopCurrent(&popped);
  }
}

int context_arch(fa_context c) { return c->arch; }

std::unique_ptr<MaskCache> make_mask_cache(fa_context c) {
  MaskCache::Device dev;
  dev.alloc = [c](size_t bytes, CUstream s, CUdeviceptr* out) {
    return c->has_device && c->drv->cuMemAllocAsync(out, bytes, s) == CUDA_SUCCESS;
  };
  dev.new_event = [c](CUevent* ev) {
    return c->has_device && c->drv->cuEventCreate(ev, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS;
  };
  dev.release_all = [c](const std::vector<CUdeviceptr>& mem, const std::vector<CUevent>& events) {
    if (!c->has_device) return;
    CtxGuard g(c);
    if (!g.status().ok()) return;
    c->drv->cuCtxSynchronize();  // every reader of every entry, on any stream, is done before the frees
    for (CUdeviceptr p : mem) c->drv->cuMemFree(p);
    for (CUevent e : events) c->drv->cuEventDestroy(e);
  };
  return std::make_unique<MaskCache>(std::move(dev), c->mask_cache_bytes);
}

Status bind_device(fa_context c) {
  std::string why;
  c->drv = driver(&why);
  if (!c->drv) {
    c->no_device_reason = why;
    return Status::Ok();
  }
  const Driver& d = *c->drv;
  int count = 0;
  CUresult r = d.cuDeviceGetCount(&count);
  if (r != CUDA_SUCCESS) {
    c->no_device_reason = driver_error(d, "cuDeviceGetCount", r);
    return Status::Ok();
  }
  if (c->device_ordinal >= count) {
    c->no_device_reason =
        fmt::format("device_ordinal: expected < {} (devices present), got {}", count, c->device_ordinal);
    return count == 0 ? Status::Ok() : invalid("device_ordinal", fmt::format("0..{}", count - 1), c->device_ordinal);
  }
  r = d.cuDeviceGet(&c->dev, c->device_ordinal);
  if (r != CUDA_SUCCESS) return error(FA_ERROR_DRIVER, driver_error(d, "cuDeviceGet", r));
  int major = 0, minor = 0, smem_optin = 0, threads = 0, sms = 0;
  d.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, c->dev);
  d.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, c->dev);
  d.cuDeviceGetAttribute(&smem_optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, c->dev);
  d.cuDeviceGetAttribute(&threads, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, c->dev);
  d.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, c->dev);
  char name[256] = {0};
  d.cuDeviceGetName(name, sizeof name - 1, c->dev);
  c->gpu_name = name;
  c->sm_count = sms;
  c->arch = arch_of_capability(major, minor);
  if (c->arch < 80) {
    c->no_device_reason = fmt::format("device {} is sm_{}: fa needs sm_80 or newer", c->gpu_name, c->arch);
    c->arch = 80;
    c->limits = gen::limits_for_arch(80);
    return Status::Ok();
  }
  c->limits = device_limits(major, minor, smem_optin, threads, sms);
  r = d.cuDevicePrimaryCtxRetain(&c->cuctx, c->dev);
  if (r != CUDA_SUCCESS) {
    c->no_device_reason = driver_error(d, "cuDevicePrimaryCtxRetain", r);
    return Status::Ok();
  }
  c->has_device = true;
  return Status::Ok();
}

}  // namespace fa::rt

void fa_context_s::warn(const std::string& msg) const { fa::rt::log_line(log_level, fa::rt::LogLevel::kWarn, msg); }

void fa_context_s::info(const std::string& msg, const std::string& once_key) const {
  fa::rt::log_line(log_level, fa::rt::LogLevel::kInfo, msg, once_key);
}

void fa_context_s::debug(const std::string& msg) const { fa::rt::log_line(log_level, fa::rt::LogLevel::kDebug, msg); }
