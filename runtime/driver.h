// driver.h -- the CUDA Driver API, loaded at run time: dlopen("libcuda.so.1"), then every entry point through
// cuGetProcAddress. The library links no driver, so everything but launching works on a machine without one.
#pragma once

#include <cuda.h>

#include <string>

namespace fa::rt {

struct Driver {
#define FA_DRIVER_FN(name) decltype(&::name) name = nullptr;
#include "runtime/driver_functions.inc"
#undef FA_DRIVER_FN
  int version = 0;  // cuDriverGetVersion
};

// The process-wide driver table, loaded once. nullptr when there is no usable driver; *why says what failed.
const Driver* driver(std::string* why);

// "cuLaunchKernel failed: CUDA_ERROR_INVALID_VALUE (1)"
std::string driver_error(const Driver& d, const char* call, CUresult r);

// Sets the calling thread's stream-capture interaction mode to relaxed (once per thread): a background worker's
// allocations, module loads and synchronizations then neither fail nor invalidate a graph capture that another
// thread of the process runs meanwhile.
void relax_capture_mode_of_this_thread(const Driver& d);

}  // namespace fa::rt
