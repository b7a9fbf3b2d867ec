// thread_pool.h -- a bounded parallel-for for compiling candidates (NVRTC is thread-safe).
#pragma once

#include <cstddef>
#include <functional>

namespace fa::tune {

// min(hardware threads, 8, available RAM / 1 GiB), at least 1; $FA_TUNE_THREADS overrides when set (tune_env.h).
int default_compile_threads();
// The compile threads of a sweep over `gpus` GPUs (fa-tune --devices): each GPU brings the one-GPU cap of 8, as far
// as the host's hardware threads and available RAM (1 GiB a thread) go; $FA_TUNE_THREADS overrides (the total).
int multi_device_compile_threads(int gpus);
// Runs fn(i) for i in [0, n) on up to `threads` threads (the caller's thread is one of them); returns when all are
// done. fn must not throw.
void parallel_for(size_t n, int threads, const std::function<void(size_t)>& fn);

}  // namespace fa::tune
