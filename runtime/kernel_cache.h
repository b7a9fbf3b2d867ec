// kernel_cache.h -- compiled kernels by compile hash: memory first, then the persistent store, then NVRTC.
// Thread-safe; two threads asking for the same kernel compile it once. Modules are loaded into the context's
// device lazily (loading is not a stream operation, but fa_run never loads while its stream is being captured).
#pragma once

#include <cuda.h>

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "generator/config.h"
#include "runtime/nvrtc_compiler.h"
#include "runtime/status.h"

namespace fa::rt {

struct Driver;

// Where cubins persist between processes (implemented over cache_db/). All calls are best effort. dynamic_smem is
// the dynamic shared memory the kernel is launched with (gen::smem_of): the store keeps the CTA's whole shared
// memory (ptxas's static part, 0 for fa's kernels, plus this), which is what `fa-tune --list` shows.
struct CubinStore {
  virtual ~CubinStore() = default;
  virtual std::optional<std::vector<char>> load(uint64_t hash, const std::string& key, unsigned dynamic_smem,
                                                PtxasInfo* info) = 0;
  virtual void save(uint64_t hash, const std::string& key, int arch, const std::vector<char>& cubin,
                    const PtxasInfo& info, unsigned dynamic_smem) = 0;
};

struct Kernel {
  gen::KernelConfig cfg;
  std::string key;
  uint64_t hash = 0;
  std::vector<char> cubin;
  PtxasInfo ptxas;
  bool from_store = false;  // came from the persistent cache (no NVRTC call)
  double compile_seconds = 0;
  // Loaded state (guarded by the cache's mutex).
  CUmodule module = nullptr;
  CUfunction function = nullptr;
};

struct KernelCacheStats {
  long long compiles = 0;    // NVRTC invocations
  long long store_hits = 0;  // cubins taken from the persistent store
  long long memory_hits = 0;
  long long loads = 0;  // modules loaded
};

class KernelCache {
 public:
  explicit KernelCache(CubinStore* store) : store_(store) {}
  ~KernelCache();
  KernelCache(const KernelCache&) = delete;
  KernelCache& operator=(const KernelCache&) = delete;

  // The compiled kernel (no device needed). allow_compile=false: only memory/store hits.
  Status get(const gen::KernelConfig& c, bool allow_compile, std::shared_ptr<Kernel>* out);
  // Only if already in memory (never blocks on a compile, never touches the store).
  std::shared_ptr<Kernel> peek(const gen::KernelConfig& c);
  // Loads the module into the current context (caller pushed it) and sets the smem attribute.
  Status ensure_loaded(const Driver& d, Kernel& k, unsigned smem_bytes);
  // Unloads every module (the caller pushed the context).
  void unload_all(const Driver& d);
  KernelCacheStats stats();

 private:
  struct Slot {
    std::shared_ptr<Kernel> kernel;
    bool busy = false;
    Status failure;
  };
  CubinStore* store_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, Slot> slots_;
  KernelCacheStats stats_;
};

}  // namespace fa::rt
