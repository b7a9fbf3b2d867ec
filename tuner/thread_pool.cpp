// thread_pool.cpp -- default compile parallelism and a work-stealing-free parallel for (an atomic index).
#include "tuner/thread_pool.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "tuner/tune_env.h"

namespace fa::tune {

namespace {
// MemAvailable from /proc/meminfo in bytes; 0 when unknown.
long long available_ram() {
  FILE* f = std::fopen("/proc/meminfo", "r");
  if (f == nullptr) return 0;
  char line[256];
  long long kb = 0;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::strncmp(line, "MemAvailable:", 13) == 0) {
      kb = std::atoll(line + 13);
      break;
    }
  }
  std::fclose(f);
  return kb * 1024;
}
}  // namespace

int default_compile_threads() { return multi_device_compile_threads(1); }

int multi_device_compile_threads(int gpus) {
  if (int n = 0; parse_tune_threads(std::getenv("FA_TUNE_THREADS"), &n) && n > 0) return n;
  int n = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  n = std::min(n, 8 * std::max(1, gpus));
  const long long ram = available_ram();
  if (ram > 0) n = static_cast<int>(std::min<long long>(n, std::max(1LL, ram / (1LL << 30))));
  return std::max(1, n);
}

void parallel_for(size_t n, int threads, const std::function<void(size_t)>& fn) {
  if (n == 0) return;
  const size_t workers = std::min(n, static_cast<size_t>(std::max(1, threads)));
  std::atomic<size_t> next{0};
  auto body = [&] {
    for (size_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) fn(i);
  };
  std::vector<std::thread> pool;
  pool.reserve(workers - 1);
  for (size_t w = 1; w < workers; ++w) pool.emplace_back(body);
  body();
  for (auto& t : pool) t.join();
}

}  // namespace fa::tune
