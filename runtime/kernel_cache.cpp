// kernel_cache.cpp -- once-per-key compilation and module loading.
#include "runtime/kernel_cache.h"

#include "generator/family.h"
#include "runtime/driver.h"

namespace fa::rt {

KernelCache::~KernelCache() = default;  // modules die with the context (the owner unloads with the ctx pushed)

std::shared_ptr<Kernel> KernelCache::peek(const gen::KernelConfig& c) {
  const uint64_t h = compile_hash_for(c);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = slots_.find(h);
  if (it == slots_.end() || !it->second.kernel) return nullptr;
  return it->second.kernel;
}

Status KernelCache::get(const gen::KernelConfig& c, bool allow_compile, std::shared_ptr<Kernel>* out) {
  const uint64_t h = compile_hash_for(c);
  const std::string key = gen::canonical_key(c);
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    Slot& s = slots_[h];
    if (s.kernel) {
      ++stats_.memory_hits;
      *out = s.kernel;
      return Status::Ok();
    }
    if (!s.busy) break;
    if (!allow_compile)
      return error(FA_ERROR_STREAM_CAPTURING, "kernel " + key + " is being compiled by another thread");
    cv_.wait(lock);
  }
  slots_[h].busy = true;
  lock.unlock();

  auto k = std::make_shared<Kernel>();
  k->cfg = c;
  k->key = key;
  k->hash = h;
  Status st;
  if (store_) {
    if (auto blob = store_->load(h, key, gen::smem_of(c), &k->ptxas)) {
      k->cubin = std::move(*blob);
      k->from_store = true;
    }
  }
  if (!k->from_store) {
    if (!allow_compile) {
      st = error(FA_ERROR_STREAM_CAPTURING,
                 "kernel " + key +
                     " is not compiled yet and compiling is not allowed now (stream capture or policy); "
                     "call fa_prepare before capturing");
    } else {
      CompileResult r = compile(c);
      k->compile_seconds = r.seconds;
      if (!r.ok) {
        st = error(FA_ERROR_COMPILE,
                   "NVRTC failed to compile kernel " + key + " (hash " + gen::hex64(h) + "):\n" + r.log);
      } else {
        k->cubin = std::move(r.cubin);
        k->ptxas = r.ptxas;
        if (store_) store_->save(h, key, c.s.arch, k->cubin, k->ptxas, gen::smem_of(c));
      }
    }
  }

  lock.lock();
  Slot& s = slots_[h];
  s.busy = false;
  if (st.ok()) {
    if (k->from_store) ++stats_.store_hits;
    else ++stats_.compiles;
    s.kernel = k;
    *out = k;
  } else if (st.code == FA_ERROR_STREAM_CAPTURING) {
    slots_.erase(h);
  }
  cv_.notify_all();
  return st;
}

Status KernelCache::ensure_loaded(const Driver& d, Kernel& k, unsigned smem_bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (k.function) return Status::Ok();
  CUmodule mod = nullptr;
  CUresult r = d.cuModuleLoadData(&mod, k.cubin.data());
  if (r != CUDA_SUCCESS) return error(FA_ERROR_DRIVER, driver_error(d, "cuModuleLoadData", r) + " for kernel " + k.key);
  CUfunction fn = nullptr;
  r = d.cuModuleGetFunction(&fn, mod, gen::kEntryName);
  if (r != CUDA_SUCCESS) {
    d.cuModuleUnload(mod);
    return error(FA_ERROR_DRIVER, driver_error(d, "cuModuleGetFunction", r) + " for kernel " + k.key);
  }
  if (smem_bytes > 48 * 1024) {
    r = d.cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, static_cast<int>(smem_bytes));
    if (r != CUDA_SUCCESS) {
      d.cuModuleUnload(mod);
      return error(FA_ERROR_NOT_SUPPORTED,
                   driver_error(d, "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)", r) + " for kernel " + k.key);
    }
  }
  k.module = mod;
  k.function = fn;
  ++stats_.loads;
  return Status::Ok();
}

void KernelCache::unload_all(const Driver& d) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [h, s] : slots_) {
    if (s.kernel && s.kernel->module) {
      d.cuModuleUnload(s.kernel->module);
      s.kernel->module = nullptr;
      s.kernel->function = nullptr;
    }
  }
}

KernelCacheStats KernelCache::stats() {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace fa::rt
