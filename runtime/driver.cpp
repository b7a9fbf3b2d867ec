// driver.cpp -- loads libcuda.so.1 once and resolves the entry points of driver_functions.inc.
#include "runtime/driver.h"

#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <fmt/format.h>

#include <mutex>
#include <type_traits>

// A pinned entry (FA_DRIVER_FN_AT) is called through cuda.h's declaration: it must be the ABI of the version asked.
static_assert(std::is_same_v<decltype(&::cuCtxSynchronize), PFN_cuCtxSynchronize_v2000>,
              "cuCtxSynchronize: cuda.h's declaration is not the CUDA 2.0 ABI the table resolves");

namespace fa::rt {

namespace {

using GetProcAddressFn = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);

struct Loaded {
  Driver d;
  bool ok = false;
  std::string why;
};

Loaded load() {
  Loaded L;
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* e = dlerror();
    L.why = fmt::format("no CUDA driver: dlopen(\"libcuda.so.1\") failed: {}", e ? e : "unknown error");
    return L;
  }
  auto gpa = reinterpret_cast<GetProcAddressFn>(dlsym(lib, "cuGetProcAddress_v2"));
  if (!gpa) {
    L.why = "CUDA driver too old: libcuda.so.1 has no cuGetProcAddress_v2 (CUDA 12 or newer driver needed)";
    return L;
  }
  bool missing = false;
  auto resolve = [&](const char* name, void** slot, int version) {
    CUdriverProcAddressQueryResult q{};
    CUresult r = gpa(name, slot, version, CU_GET_PROC_ADDRESS_DEFAULT, &q);
    if (r != CUDA_SUCCESS || *slot == nullptr) {
      if (!missing) L.why = fmt::format("CUDA driver lacks {} (cuGetProcAddress status {})", name, static_cast<int>(q));
      missing = true;
    }
  };
#define FA_DRIVER_FN(name) resolve(#name, reinterpret_cast<void**>(&L.d.name), CUDA_VERSION);
#define FA_DRIVER_FN_AT(name, version) resolve(#name, reinterpret_cast<void**>(&L.d.name), version);
#include "runtime/driver_functions.inc"
#undef FA_DRIVER_FN_AT
#undef FA_DRIVER_FN
  if (missing) return L;
  CUresult r = L.d.cuInit(0);
  if (r != CUDA_SUCCESS) {
    L.why = driver_error(L.d, "cuInit", r) + " (no usable GPU)";
    return L;
  }
  L.d.cuDriverGetVersion(&L.d.version);
  L.ok = true;
  return L;  // the library handle stays open for the life of the process
}

}  // namespace

const Driver* driver(std::string* why) {
  static const Loaded L = load();
  if (!L.ok) {
    if (why) *why = L.why;
    return nullptr;
  }
  return &L.d;
}

std::string driver_error(const Driver& d, const char* call, CUresult r) {
  const char* name = nullptr;
  if (d.cuGetErrorName) d.cuGetErrorName(r, &name);
  return fmt::format("{} failed: {} ({})", call, name ? name : "unknown", static_cast<int>(r));
}

void relax_capture_mode_of_this_thread(const Driver& d) {
  thread_local bool relaxed = false;
  if (relaxed) return;
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  relaxed = d.cuThreadExchangeStreamCaptureMode(&mode) == CUDA_SUCCESS;
}

}  // namespace fa::rt
