// tuning_figures.cpp -- fa_tuning_figures: measures the tuning and caching figures on one GPU, each printed with its
// exact setup:
//   [1] the cold first call of one key, each on a fresh cache file and context: under first_use (tuning in the
//       background: the first call's wall time and compiles, then the worker's tuning), under defaults, and under
//       first_use_sync (compile + tune in the call); expectations: background and defaults <= 1.5 s;
//   [2] a new process starting warm from that file (this program re-executed with --child): the driver's part
//       (cuInit, primary context, paid once by any CUDA process) timed apart from fa_context_create (fa's part:
//       expectation <= 10 ms), the first call, and that no NVRTC compile happened (compiles == 0, store hits >= 1);
//   [3] the host overhead of fa_run on a cache hit (10,000 back-to-back calls of a tiny problem; expectation
//       <= 3 us per call);
//   [4] random lengths in [1, 32768] after a sweep over every length bucket: compiles and tunings during the calls;
//   [5] tuned winner vs heuristic default for the keys tuned here (fa-tune --preset prints the same per preset).
// Without a usable GPU it checks its arguments, prints "no GPU found: <reason>" and exits 0. Exit status 1 when a
// measured figure breaks its expectation (a compile where none may happen), 2 for bad arguments.
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>

#include <fmt/format.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nvrtc.h>

#include "cache_db/cache_db.h"
#include "fa/fa.h"
#include "generator/config.h"
#include "runtime/context.h"
#include "runtime/driver.h"
#include "runtime/kernel_cache.h"
#include "runtime/nvrtc_compiler.h"
#include "tuner/cache_store.h"
#include "tuner/chooser.h"
#include "tuner/tuner.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

constexpr const char* kDefaultBudgetMs = "500";

struct Args {
  std::string cache = "/tmp/fa_tuning_figures.sqlite";
  bool child = false;
  int host_calls = 10000;
  int random_calls = 1000;
  int max_len = 32768;
  std::string mask = "causal";  // figure 4: causal | none | alternate
  uint64_t seed = 4;
};

void usage(std::FILE* f) {
  std::fprintf(f,
               "usage: fa_tuning_figures [--cache FILE] [--host-calls N] [--random-calls N] [--max-len N]\n"
               "                         [--mask causal|none|alternate] [--seed N]\n"
               "  --cache FILE       SQLite cache file, deleted first (default /tmp/fa_tuning_figures.sqlite)\n"
               "  --host-calls N     back-to-back fa_run calls for the host overhead (default 10000)\n"
               "  --random-calls N   random-length calls after the sweep (default 1000)\n"
               "  --max-len N        largest random length (default 32768)\n"
               "  --mask M           mask of the random-length calls (default causal)\n"
               "  --seed N           seed of the random lengths (default 4)\n"
               "  FA_TUNE_BUDGET_MS  timing budget per tuning key; set to %s when unset\n",
               kDefaultBudgetMs);
}

bool parse_int(const char* text, long long lo, long long hi, long long* out) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v < lo || v > hi) return false;
  *out = v;
  return true;
}

// Returns "" on success, else the message.
std::string parse_args(int argc, char** argv, Args* a) {
  for (int i = 1; i < argc; ++i) {
    const std::string opt = argv[i];
    auto value = [&](const char** out) -> bool {
      if (i + 1 >= argc) return false;
      *out = argv[++i];
      return true;
    };
    const char* v = nullptr;
    long long n = 0;
    if (opt == "--child") {
      a->child = true;
    } else if (opt == "--help" || opt == "-h") {
      usage(stdout);
      std::exit(0);
    } else if (opt == "--cache") {
      if (!value(&v) || *v == '\0') return "--cache: expected a file path";
      a->cache = v;
      if (a->cache == ":memory:") return "--cache: expected a file (the warm-start figure needs a file), got :memory:";
    } else if (opt == "--host-calls") {
      if (!value(&v) || !parse_int(v, 1, 10000000, &n)) return "--host-calls: expected an integer in [1, 10000000]";
      a->host_calls = static_cast<int>(n);
    } else if (opt == "--random-calls") {
      if (!value(&v) || !parse_int(v, 1, 1000000, &n)) return "--random-calls: expected an integer in [1, 1000000]";
      a->random_calls = static_cast<int>(n);
    } else if (opt == "--max-len") {
      if (!value(&v) || !parse_int(v, 2, 1 << 20, &n)) return "--max-len: expected an integer in [2, 1048576]";
      a->max_len = static_cast<int>(n);
    } else if (opt == "--mask") {
      if (!value(&v)) return "--mask: expected causal, none or alternate";
      a->mask = v;
      if (a->mask != "causal" && a->mask != "none" && a->mask != "alternate")
        return "--mask: expected causal, none or alternate, got " + a->mask;
    } else if (opt == "--seed") {
      if (!value(&v) || !parse_int(v, 0, INT64_MAX, &n)) return "--seed: expected a non-negative integer";
      a->seed = static_cast<uint64_t>(n);
    } else {
      return "unknown argument " + opt;
    }
  }
  return "";
}

// ---- device side: buffers, problems -----------------------------------------------------------------------------

struct Gpu {
  fa_context ctx = nullptr;
  const fa::rt::Driver* d = nullptr;
  CUstream stream = nullptr;
};

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "fa_tuning_figures: %s\n", what.c_str());
  std::fflush(stdout);
  std::exit(1);
}

void check(const Gpu& g, CUresult r, const char* call) {
  if (r != CUDA_SUCCESS) die(fa::rt::driver_error(*g.d, call, r));
}

void check_fa(fa_status s, const char* call) {
  if (s != FA_OK) die(fmt::format("{} failed: {}: {}", call, fa_status_string(s), fa_last_error()));
}

constexpr double kColdLimitS = 1.5;  // [1] first call of a new key, background tuning or defaults
constexpr double kColdTargetDefaultsS = 0.5;
constexpr double kFaCreateLimitMs = 10.0;  // [2] fa's own part of fa_context_create
constexpr double kHitLimitUs = 3.0;        // [3] host cost per fa_run on a hit

const char* policy_name(int policy) {
  switch (policy) {
    case FA_TUNE_ON_FIRST_USE: return "first_use (background)";
    case FA_TUNE_DEFAULTS_ONLY: return "defaults";
    case FA_TUNE_REQUIRE_TUNED: return "require";
    default: return "first_use_sync";
  }
}

fa_context create_context(const std::string& cache, int policy = FA_TUNE_ON_FIRST_USE_SYNC) {
  fa_context_options o;
  fa_context_options_init(&o);
  o.tune_policy = policy;
  o.cache_path = cache.c_str();
  o.verbose = 1;
  fa_context c = nullptr;
  check_fa(fa_context_create(&o, &c), "fa_context_create");
  return c;
}

// Makes the context's CUDA context current for the rest of the process and creates a stream.
Gpu bind(fa_context c) {
  Gpu g;
  g.ctx = c;
  g.d = c->drv;
  check(g, g.d->cuCtxPushCurrent(c->cuctx), "cuCtxPushCurrent");
  check(g, g.d->cuStreamCreate(&g.stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  return g;
}

void sync(const Gpu& g) { check(g, g.d->cuStreamSynchronize(g.stream), "cuStreamSynchronize"); }

// One fa_run and a stream synchronize, timed on the host clock: seconds; *st is fa_run's status.
double timed_run(const Gpu& g, const fa_params& p, fa_status* st) {
  const auto t0 = Clock::now();
  *st = fa_run(g.ctx, &p, g.stream);
  sync(g);
  return seconds_since(t0);
}

// bf16 bits of a float (round to nearest even; inputs here are finite).
uint16_t to_bf16(float f) {
  uint32_t u = 0;
  std::memcpy(&u, &f, sizeof u);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// q, k, v, o of a BSHD problem, bf16, allocated once for the largest shape used with them.
struct Tensors {
  CUdeviceptr q = 0, k = 0, v = 0, o = 0;
  size_t elems = 0;
};

Tensors alloc_tensors(const Gpu& g, size_t elems, std::mt19937_64& rng) {
  Tensors t;
  t.elems = elems;
  const size_t bytes = elems * sizeof(uint16_t);
  for (CUdeviceptr* p : {&t.q, &t.k, &t.v, &t.o}) check(g, g.d->cuMemAlloc(p, bytes), "cuMemAlloc");
  // Random values in [-1, 1]: one host chunk, copied over each input in turn.
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<uint16_t> chunk(std::min<size_t>(elems, size_t{1} << 22));
  for (uint16_t& x : chunk) x = to_bf16(u(rng));
  for (CUdeviceptr p : {t.q, t.k, t.v}) {
    for (size_t done = 0; done < elems; done += chunk.size()) {
      const size_t n = std::min(chunk.size(), elems - done);
      check(g, g.d->cuMemcpyHtoD(p + done * sizeof(uint16_t), chunk.data(), n * sizeof(uint16_t)), "cuMemcpyHtoD");
    }
  }
  check(g, g.d->cuMemsetD8Async(t.o, 0, bytes, g.stream), "cuMemsetD8Async");
  sync(g);
  return t;
}

void free_tensors(const Gpu& g, Tensors& t) {
  for (CUdeviceptr p : {t.q, t.k, t.v, t.o})
    if (p) g.d->cuMemFree(p);
  t = Tensors{};
}

struct Shape {
  int batch = 1, seqlen = 1, heads = 1, dim = 128, mask = FA_MASK_CAUSAL;
  std::string text() const {
    return fmt::format("bf16 d{} {} b{} s{} hq{} hkv{} BSHD", dim, mask == FA_MASK_CAUSAL ? "causal" : "no-mask", batch,
                       seqlen, heads, heads);
  }
};

// Fixed-length BSHD params over `t` (which holds at least batch * seqlen * heads * dim elements).
fa_params make_params(const Tensors& t, const Shape& s) {
  fa_params p;
  fa_params_init(&p);
  p.dtype = FA_DTYPE_BF16;
  p.batch = s.batch;
  p.seqlen_q = s.seqlen;
  p.seqlen_k = s.seqlen;
  p.heads_q = s.heads;
  p.heads_kv = s.heads;
  p.head_dim = s.dim;
  p.head_dim_v = s.dim;
  const int64_t sh = s.dim, ss = int64_t{s.heads} * s.dim, sb = ss * s.seqlen;
  p.q = reinterpret_cast<const void*>(t.q);
  p.k = reinterpret_cast<const void*>(t.k);
  p.v = reinterpret_cast<const void*>(t.v);
  p.o = reinterpret_cast<void*>(t.o);
  p.q_stride_batch = p.k_stride_batch = p.v_stride_batch = p.o_stride_batch = sb;
  p.q_stride_seq = p.k_stride_seq = p.v_stride_seq = p.o_stride_seq = ss;
  p.q_stride_head = p.k_stride_head = p.v_stride_head = p.o_stride_head = sh;
  p.mask = s.mask;
  p.window_left = -1;
  p.window_right = -1;
  return p;
}

size_t elems_of(const Shape& s) { return size_t(s.batch) * size_t(s.seqlen) * size_t(s.heads) * size_t(s.dim); }

fa::rt::KernelCacheStats stats(const Gpu& g) { return g.ctx->kernels->stats(); }

fa::tune::TuningChooser* tuning_chooser(const Gpu& g) {
  return dynamic_cast<fa::tune::TuningChooser*>(g.ctx->chooser.get());
}

// Distinct (semantic key, bucket) pairs with tuning rows in the context's cache file.
size_t db_tuning_keys(const Gpu& g) {
  fa::cache::Db* db = fa::tune::context_db(g.ctx);
  if (db == nullptr) return 0;
  std::set<std::pair<std::string, std::string>> keys;
  for (const auto& r : db->list_tune_rows(false)) keys.emplace(r.row.semantic_key, r.row.bucket);
  return keys.size();
}

std::string budget_text() {
  const char* e = std::getenv("FA_TUNE_BUDGET_MS");
  return e ? e : "?";
}

double ms(double s) { return s * 1e3; }

std::string outcome_line(const fa::tune::TuneOutcome& o) {
  if (!o.has_winner) return "no winner (tuning failed: defaults used)";
  const double speedup = o.default_ms > 0 ? o.default_ms / o.winner_ms : std::nan("");
  return fmt::format("winner {} {:.4f} ms ({:.1f} TFLOP/s) vs default {} {:.4f} ms ({:.1f} TFLOP/s) -> {:.2f}x{}",
                     fa::gen::tunables_key(o.semantic, o.winner), o.winner_ms, o.winner_tflops,
                     fa::gen::tunables_key(o.semantic, o.defaults), o.default_ms, o.default_tflops, speedup,
                     o.verified ? ", verified" : "");
}

void remove_cache_files(const std::string& path) {
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) std::remove((path + suffix).c_str());
}

// ---- the figures ------------------------------------------------------------------------------------------------

const Shape kColdShape{16, 4096, 16, 128, FA_MASK_CAUSAL};

// [2], in the re-executed child: create, first call, sync; no NVRTC compile may happen.
int child_main(const Args& a) {
  // The driver's part, as any CUDA process (e.g. PyTorch) pays it before fa: the driver table and cuInit, the
  // device's primary context retained (its creation).
  const auto td = Clock::now();
  std::string why;
  const fa::rt::Driver* drv = fa::rt::driver(&why);
  CUdevice dev = 0;
  CUcontext primary = nullptr;
  if (drv == nullptr || drv->cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
      drv->cuDevicePrimaryCtxRetain(&primary, dev) != CUDA_SUCCESS) {
    std::printf("no GPU found: %s\n", why.c_str());
    return 0;
  }
  const double driver_s = seconds_since(td);
  const auto t0 = Clock::now();
  fa_context c = create_context(a.cache, FA_TUNE_ON_FIRST_USE);
  const double create_s = seconds_since(t0);
  if (!fa_context_has_device(c)) {
    std::printf("no GPU found: %s\n", c->no_device_reason.c_str());
    fa_context_destroy(c);
    return 0;
  }
  Gpu g = bind(c);
  std::mt19937_64 rng(a.seed);
  Tensors t = alloc_tensors(g, elems_of(kColdShape), rng);
  const fa_params p = make_params(t, kColdShape);
  const auto s0 = stats(g);
  fa_status st = FA_OK;
  const double run_s = timed_run(g, p, &st);
  const auto s1 = stats(g);
  check_fa(st, "fa_run");
  const long long compiles = s1.compiles - s0.compiles, store_hits = s1.store_hits - s0.store_hits;
  const bool ok = compiles == 0 && store_hits >= 1 && ms(create_s) <= kFaCreateLimitMs;
  std::printf(
      "[2] warm start in a new process (fork+exec of /proc/self/exe, pid %d, same cache %s, policy first_use), %s:\n"
      "    driver part (driver table + cuInit + primary context retain, paid once by any CUDA process) %.1f ms; "
      "fa part: fa_context_create %.1f ms (expected <= %.0f; of which device binding %.2f ms, cache store open "
      "%.2f ms); first fa_run + cuStreamSynchronize %.1f ms; fa total %.1f ms "
      "(buffer allocation/fill excluded); NVRTC compiles %lld (expected 0), store hits %lld (expected >= 1), "
      "module loads %lld (lazily, per key) -> %s\n",
      int(getpid()), a.cache.c_str(), kColdShape.text().c_str(), ms(driver_s), ms(create_s), kFaCreateLimitMs,
      c->create_bind_ms, c->create_store_ms, ms(run_s), ms(create_s + run_s), compiles, store_hits, s1.loads - s0.loads,
      ok ? "PASS" : "FAIL");
  std::fflush(stdout);
  free_tensors(g, t);
  g.d->cuStreamDestroy(g.stream);
  CUcontext popped = nullptr;
  g.d->cuCtxPopCurrent(&popped);
  fa_context_destroy(c);
  drv->cuDevicePrimaryCtxRelease(dev);
  return ok ? 0 : 1;
}

// [1] and [5a]: the cold first call of one key.
bool figure_cold(const Gpu& g, const Args& a, std::mt19937_64& rng) {
  Tensors t = alloc_tensors(g, elems_of(kColdShape), rng);
  const fa_params p = make_params(t, kColdShape);
  const auto s0 = stats(g);
  fa_status st = FA_OK;
  const double first_s = timed_run(g, p, &st);
  check_fa(st, "fa_run (cold)");
  const auto s1 = stats(g);
  const auto t1 = Clock::now();
  check_fa(fa_run(g.ctx, &p, g.stream), "fa_run (second)");
  sync(g);
  const double second_s = seconds_since(t1);
  fa::tune::TuneOutcome o;
  if (auto* ch = tuning_chooser(g)) o = ch->last_outcome();
  std::printf(
      "[1c] cold first call: fresh cache file %s (deleted first), policy first_use_sync, FA_TUNE_BUDGET_MS=%s, %s:\n"
      "    first fa_run + cuStreamSynchronize %.2f s (compile + tune); NVRTC compiles %lld, store hits %lld; "
      "tuner: %zu candidates, %d compiled, %d rejected, compile wall %.2f s, timing %.2f s; "
      "second call of the same key %.2f ms\n",
      a.cache.c_str(), budget_text().c_str(), kColdShape.text().c_str(), first_s, s1.compiles - s0.compiles,
      s1.store_hits - s0.store_hits, o.candidates.size(), o.compiled, o.rejected, o.compile_seconds, o.timing_seconds,
      ms(second_s));
  std::printf("[5a] tuned vs default, same key (bucket %s): %s\n", o.bucket.c_str(), outcome_line(o).c_str());
  std::fflush(stdout);
  free_tensors(g, t);
  return s1.compiles > s0.compiles;
}

// [1a] / [1b]: the cold first call of the key on a fresh cache file and context of its own under `policy`
// (first_use: background tuning, or defaults). The expectation: the first call returns within kColdLimitS.
bool figure_cold_fast(const Args& a, int policy, std::mt19937_64& rng) {
  const std::string cache = a.cache + (policy == FA_TUNE_ON_FIRST_USE ? ".background" : ".defaults");
  remove_cache_files(cache);
  fa_context c = create_context(cache, policy);
  Gpu g = bind(c);
  Tensors t = alloc_tensors(g, elems_of(kColdShape), rng);
  const fa_params p = make_params(t, kColdShape);
  const auto s0 = stats(g);
  fa_status st = FA_OK;
  const double first_s = timed_run(g, p, &st);
  check_fa(st, "fa_run (cold)");
  const auto s1 = stats(g);
  const bool background = policy == FA_TUNE_ON_FIRST_USE;
  const char* tag = background ? "[1a]" : "[1b]";
  const bool ok = first_s <= kColdLimitS;
  std::printf(
      "%s cold first call: fresh cache file %s, policy %s, %s:\n"
      "    first fa_run + cuStreamSynchronize %.3f s (expected <= %.1f s%s); NVRTC compiles in the call %lld\n",
      tag, cache.c_str(), policy_name(policy), kColdShape.text().c_str(), first_s, kColdLimitS,
      background ? "" : fmt::format(", target {:.1f} s", kColdTargetDefaultsS).c_str(), s1.compiles - s0.compiles);
  if (background) {
    auto* ch = tuning_chooser(g);
    const auto tb = Clock::now();
    const bool done = ch != nullptr && ch->wait_background(600.0);
    const double bg_s = seconds_since(tb);
    const auto s2 = stats(g);
    const fa::tune::BackgroundStats bs = ch ? ch->background_stats() : fa::tune::BackgroundStats{};
    const fa::tune::TuneOutcome o = ch ? ch->last_outcome() : fa::tune::TuneOutcome{};
    const auto t2 = Clock::now();
    check_fa(fa_run(c, &p, g.stream), "fa_run (after the swap)");
    sync(g);
    const double after_s = seconds_since(t2);
    std::printf(
        "    background worker: done %s %.2f s after the first call returned (jobs submitted %lld, finished %lld, "
        "failed %lld); NVRTC compiles by the worker %lld; tuner: %zu candidates, compile wall %.2f s, timing %.2f s; "
        "%s; next call (the winner, plan rebuilt) %.2f ms\n",
        done ? "yes" : "NO", bg_s, bs.submitted, bs.finished, bs.failed, s2.compiles - s1.compiles, o.candidates.size(),
        o.compile_seconds, o.timing_seconds, outcome_line(o).c_str(), ms(after_s));
  }
  std::fflush(stdout);
  free_tensors(g, t);
  g.d->cuStreamDestroy(g.stream);
  CUcontext popped = nullptr;
  g.d->cuCtxPopCurrent(&popped);
  const auto td = Clock::now();
  fa_context_destroy(c);
  if (!background) return ok;
  std::printf("    fa_context_destroy %.1f ms\n", ms(seconds_since(td)));
  return ok;
}

// [2]: re-execute this program with --child and the same cache file.
bool figure_warm_process(const Args& a, const char* argv0) {
  std::fflush(stdout);
  std::fflush(stderr);
  const auto t0 = Clock::now();
  const pid_t pid = fork();
  if (pid < 0) die(std::string("fork failed: ") + std::strerror(errno));
  if (pid == 0) {
    const std::string seed = std::to_string(a.seed);
    char* const args[] = {const_cast<char*>(argv0),
                          const_cast<char*>("--child"),
                          const_cast<char*>("--cache"),
                          const_cast<char*>(a.cache.c_str()),
                          const_cast<char*>("--seed"),
                          const_cast<char*>(seed.c_str()),
                          nullptr};
    execv("/proc/self/exe", args);
    std::fprintf(stderr, "execv(/proc/self/exe) failed: %s\n", std::strerror(errno));
    _exit(127);
  }
  int status = 0;
  if (waitpid(pid, &status, 0) < 0) die(std::string("waitpid failed: ") + std::strerror(errno));
  const double wall_s = seconds_since(t0);
  const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  std::printf("    child process wall time (fork to exit, incl. exec, driver init, allocation) %.1f ms, exit %d\n",
              ms(wall_s), WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  std::fflush(stdout);
  return ok;
}

// Per-call enqueue times of `calls` calls of `launch` (false: a call failed) in batches of `batch`, a synchronize
// (not timed) between batches: one sample per batch. [3] times fa_run and the driver's baseline with it.
struct BatchTimes {
  std::vector<double> per_call_us;  // one per batch
  double enqueue_s = 0;             // the batches' host time together
  bool ok = true;
};
template <class F>
BatchTimes time_in_batches(const Gpu& g, int calls, int batch, F&& launch) {
  BatchTimes r;
  for (int done = 0; done < calls && r.ok;) {
    const int n = std::min(batch, calls - done);
    const auto tb = Clock::now();
    for (int i = 0; i < n && r.ok; ++i) r.ok = launch();
    const double batch_s = seconds_since(tb);
    r.enqueue_s += batch_s;
    r.per_call_us.push_back(1e6 * batch_s / n);
    sync(g);
    done += n;
  }
  return r;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// [3]'s baseline: the driver's own cost of one launch, measured on an empty kernel whose parameter is as large as
// fa's forward arguments (320 bytes), compiled here with NVRTC and launched in the same batches as fa_run. fa_run on a
// hit costs this launch plus fa's own work (validation, the plan-cache lookup, argument binding). Returns us per
// launch, or a negative value when the kernel cannot be made (the figure then prints no baseline).
double bare_launch_us(const Gpu& g, int calls, int batch) {
  const char* src =
      "struct A { unsigned long long w[40]; };\n"
      "extern \"C\" __global__ void fa_empty(const __grid_constant__ A a) { if (a.w[39] == 1) asm volatile(\"trap;\"); "
      "}\n";
  nvrtcProgram prog = nullptr;
  if (nvrtcCreateProgram(&prog, src, "empty.cu", 0, nullptr, nullptr) != NVRTC_SUCCESS) return -1;
  const std::string arch = "--gpu-architecture=" + fa::rt::arch_option(g.ctx->arch);
  const char* opts[] = {arch.c_str()};
  std::vector<char> cubin;
  if (nvrtcCompileProgram(prog, 1, opts) == NVRTC_SUCCESS) {
    size_t n = 0;
    if (nvrtcGetCUBINSize(prog, &n) == NVRTC_SUCCESS && n > 0) {
      cubin.resize(n);
      if (nvrtcGetCUBIN(prog, cubin.data()) != NVRTC_SUCCESS) cubin.clear();
    }
  }
  nvrtcDestroyProgram(&prog);
  if (cubin.empty()) return -1;
  CUmodule mod = nullptr;
  CUfunction fn = nullptr;
  if (g.d->cuModuleLoadData(&mod, cubin.data()) != CUDA_SUCCESS) return -1;
  if (g.d->cuModuleGetFunction(&fn, mod, "fa_empty") != CUDA_SUCCESS) {
    g.d->cuModuleUnload(mod);
    return -1;
  }
  unsigned long long arg[40] = {};
  void* params[] = {arg};
  auto launch = [&] { return g.d->cuLaunchKernel(fn, 1, 1, 1, 128, 1, 1, 0, g.stream, params, nullptr); };
  for (int i = 0; i < 16; ++i) launch();
  sync(g);
  const BatchTimes bt = time_in_batches(g, calls, batch, [&] { return launch() == CUDA_SUCCESS; });
  g.d->cuModuleUnload(mod);
  return bt.ok ? median(bt.per_call_us) : -1;
}

// [3]: host overhead of fa_run on a cache hit.
bool figure_host_overhead(const Gpu& g, const Args& a, std::mt19937_64& rng) {
  const Shape s{1, 64, 1, 128, FA_MASK_CAUSAL};
  Tensors t = alloc_tensors(g, elems_of(s), rng);
  const fa_params p = make_params(t, s);
  check_fa(fa_run(g.ctx, &p, g.stream), "fa_run (warm-up, tunes the bucket)");
  // Under first_use the bucket tunes in the background: wait for the worker, so that its compiles and timings
  // (driver calls on another thread) do not run beside the loop, then take the winner's plan.
  if (auto* ch = tuning_chooser(g)) ch->wait_background(120.0);
  check_fa(fa_run(g.ctx, &p, g.stream), "fa_run (warm-up)");
  check_fa(fa_run(g.ctx, &p, g.stream), "fa_run (warm-up)");
  sync(g);
  const auto s0 = stats(g);
  // The host cost is timed in batches of kBatch calls with a synchronize between batches (not timed): one long
  // back-to-back loop fills the driver's launch queue once the GPU is slower than the host (a tiny kernel takes a
  // few microseconds of GPU time), and from then on each fa_run waits for a queue slot, so the loop measures the
  // GPU's rate, not the host's (the earlier form of this figure: enqueue time == end-to-end time).
  // Each batch's enqueue time per call is one sample; the figure is their median (a batch that the OS interrupts
  // moves the mean, not the median), and the driver's baseline below is taken the same way.
  constexpr int kBatch = 256;
  const int calls = a.host_calls;
  const auto t0 = Clock::now();
  const BatchTimes bt = time_in_batches(g, calls, kBatch, [&] {
    const fa_status st = fa_run(g.ctx, &p, g.stream);
    if (st != FA_OK) check_fa(st, "fa_run (host overhead loop)");
    return true;
  });
  const double total_s = seconds_since(t0);
  // The same calls back to back (the queue fills): the GPU's rate for this tiny problem, for comparison.
  const auto tq = Clock::now();
  for (int i = 0; i < a.host_calls; ++i) {
    const fa_status st = fa_run(g.ctx, &p, g.stream);
    if (st != FA_OK) check_fa(st, "fa_run (back-to-back loop)");
  }
  sync(g);
  const double back_to_back_s = seconds_since(tq);
  const double bare_us = bare_launch_us(g, a.host_calls, kBatch);
  const auto s1 = stats(g);
  const long long compiles = s1.compiles - s0.compiles;
  const double per_call_us = median(bt.per_call_us);
  const double mean_us = 1e6 * bt.enqueue_s / calls;
  const bool ok = compiles == 0 && per_call_us <= kHitLimitUs;
  std::printf(
      "[3] host overhead on a cache hit: %s (tuned and loaded before), %d fa_run on one stream in batches of %d:\n"
      "    %.2f us/call enqueue only (median over batches of the host clock around each batch, a synchronize between "
      "batches; expected <= %.1f; mean %.2f), %.2f us/call incl. the synchronizes; %d calls back to back (the launch "
      "queue fills: the GPU's rate) %.2f "
      "us/call; compiles during the loops %lld, kernel-cache lookups %lld (the fast path makes none), plan-cache "
      "entries %zu -> %s\n",
      s.text().c_str(), calls, kBatch, per_call_us, kHitLimitUs, mean_us, 1e6 * total_s / calls, a.host_calls,
      1e6 * back_to_back_s / a.host_calls, compiles, s1.memory_hits - s0.memory_hits, g.ctx->plans.size(),
      ok ? "PASS" : "FAIL");
  if (bare_us >= 0)
    std::printf(
        "    the driver alone: an empty kernel with 320 bytes of arguments, same batches and median: %.2f us/launch; "
        "fa's "
        "own share of a hit: %.2f us/call\n",
        bare_us, per_call_us - bare_us);
  else std::printf("    the driver alone: the empty baseline kernel could not be made (NVRTC or module load failed)\n");
  std::fflush(stdout);
  free_tensors(g, t);
  return ok;
}

// [4] and [5b]: a sweep over every length bucket, then random lengths.
bool figure_random_lengths(const Gpu& g, const Args& a, std::mt19937_64& rng) {
  const int heads = 8, dim = 128;
  const bool alternate = a.mask == "alternate";
  std::vector<int> masks;
  if (a.mask == "causal" || alternate) masks.push_back(FA_MASK_CAUSAL);
  if (a.mask == "none" || alternate) masks.push_back(FA_MASK_NONE);
  Tensors t = alloc_tensors(g, size_t(a.max_len) * heads * dim, rng);
  auto* chooser = tuning_chooser(g);
  auto remembered = [&] { return chooser ? chooser->remembered() : size_t{0}; };

  // The sweep: per power-of-two bucket (2^(k-1), 2^k], 2^k itself (tunes the bucket) and one odd length
  // (2^(k-1) + 1), each followed by fa_prepare, which compiles every shape class of the bucket. Every length in [1,
  // max_len] falls in one of these buckets.
  struct Row {
    std::string bucket, mask, line;
  };
  std::vector<Row> table;
  const auto s0 = stats(g);
  const size_t rem0 = remembered(), db0 = db_tuning_keys(g);
  const auto t0 = Clock::now();
  int sweep_calls = 0;
  for (long long b = 1; b < 2LL * a.max_len; b <<= 1) {
    const int top = static_cast<int>(std::min<long long>(b, a.max_len));
    std::vector<int> lens{top};
    if (top != b && top / 256 * 256 > b / 2) lens.push_back(top / 256 * 256);  // max_len not a power of two
    if (b >= 4) lens.push_back(static_cast<int>(b / 2 + 1));
    for (int mask : masks) {
      for (int len : lens) {
        const size_t before = remembered();
        const fa_params p = make_params(t, Shape{1, len, heads, dim, mask});
        check_fa(fa_run(g.ctx, &p, g.stream), "fa_run (sweep)");
        // Every shape class of the bucket (fwd_wgmma's tiles of 160 and 176 columns are classes that no power of
        // two reaches), as the fa_prepare contract promises: no later length of the bucket compiles.
        check_fa(fa_prepare(g.ctx, &p), "fa_prepare (sweep)");
        sync(g);
        ++sweep_calls;
        if (chooser && remembered() > before) {
          const fa::tune::TuneOutcome o = chooser->last_outcome();
          table.push_back({o.bucket, mask == FA_MASK_CAUSAL ? "causal" : "none", outcome_line(o)});
        }
      }
    }
  }
  const double sweep_s = seconds_since(t0);
  const auto s1 = stats(g);
  const size_t rem1 = remembered(), db1 = db_tuning_keys(g);
  std::printf(
      "[4a] sweep: bf16 d128 b1 hq8 hkv8 BSHD, mask %s, lengths 2^k and 2^(k-1)+1 for every bucket up to %d "
      "(%d fa_run + sync): %.2f s, NVRTC compiles %lld, store hits %lld, tunings %zu (chooser keys %zu -> %zu, "
      "DB tuning keys %zu -> %zu)\n",
      a.mask.c_str(), a.max_len, sweep_calls, sweep_s, s1.compiles - s0.compiles, s1.store_hits - s0.store_hits,
      rem1 - rem0, rem0, rem1, db0, db1);
  std::printf("[5b] tuned vs default per bucket of the sweep (FA_TUNE_BUDGET_MS=%s):\n", budget_text().c_str());
  for (const Row& r : table) std::printf("     %-6s %-24s %s\n", r.mask.c_str(), r.bucket.c_str(), r.line.c_str());
  std::fflush(stdout);

  std::uniform_int_distribution<int> len_dist(1, a.max_len);
  const auto t1 = Clock::now();
  for (int i = 0; i < a.random_calls; ++i) {
    const int mask = masks[size_t(i) % masks.size()];
    const fa_params p = make_params(t, Shape{1, len_dist(rng), heads, dim, mask});
    const fa_status st = fa_run(g.ctx, &p, g.stream);
    if (st != FA_OK) check_fa(st, "fa_run (random lengths)");
  }
  const double enqueue_s = seconds_since(t1);
  sync(g);
  const double total_s = seconds_since(t1);
  const auto s2 = stats(g);
  const size_t rem2 = remembered(), db2 = db_tuning_keys(g);
  const long long compiles = s2.compiles - s1.compiles;
  const size_t tunings = rem2 - rem1;
  const bool ok = compiles == 0 && tunings == 0 && db2 == db1;
  std::printf(
      "[4] %d random lengths uniform in [1, %d] (seed %llu; seqlen_q = seqlen_k, bf16 d128 b1 hq8 hkv8, mask %s, "
      "buffers allocated once for %d) after the sweep, policy first_use:\n"
      "    NVRTC compiles during the calls %lld (expected 0), new tunings %zu (chooser keys %zu -> %zu, DB tuning "
      "keys %zu -> %zu; expected 0), store hits %lld, memory hits %lld; enqueue %.3f s, incl. final sync %.3f s "
      "-> %s\n",
      a.random_calls, a.max_len, static_cast<unsigned long long>(a.seed), a.mask.c_str(), a.max_len, compiles, tunings,
      rem1, rem2, db1, db2, s2.store_hits - s1.store_hits, s2.memory_hits - s1.memory_hits, enqueue_s, total_s,
      ok ? "PASS" : "FAIL");
  std::fflush(stdout);
  free_tensors(g, t);
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  const std::string err = parse_args(argc, argv, &a);
  if (!err.empty()) {
    std::fprintf(stderr, "fa_tuning_figures: %s\n", err.c_str());
    usage(stderr);
    return 2;
  }
  setenv("FA_TUNE_BUDGET_MS", kDefaultBudgetMs, 0);  // the caller's value wins
  if (a.child) return child_main(a);

  // Is there a device? (A throw-away in-memory context: the cache file is not touched on a machine without one.)
  {
    fa_context probe = nullptr;
    fa_context_options o;
    fa_context_options_init(&o);
    o.cache_path = ":memory:";
    if (fa_context_create(&o, &probe) != FA_OK) {
      std::printf("no GPU found: %s\n", fa_last_error());
      return 0;
    }
    const bool has = fa_context_has_device(probe) != 0;
    const std::string why = has ? "" : probe->no_device_reason;
    fa_context_destroy(probe);
    if (!has) {
      std::printf("no GPU found: %s\n", why.empty() ? "no usable CUDA device" : why.c_str());
      return 0;
    }
  }

  remove_cache_files(a.cache);
  fa_context c = create_context(a.cache);
  Gpu g = bind(c);
  std::printf("fa_tuning_figures: %s (sm_%d, %d SMs), fa %s, FA_TUNE_BUDGET_MS=%s, cache %s\n", c->gpu_name.c_str(),
              c->arch, c->sm_count, fa_version_string(), budget_text().c_str(), a.cache.c_str());
  std::fflush(stdout);
  std::mt19937_64 rng0(a.seed + 1);
  bool ok = true;
  const auto t00 = Clock::now();
  ok &= figure_cold_fast(a, FA_TUNE_ON_FIRST_USE, rng0);
  ok &= figure_cold_fast(a, FA_TUNE_DEFAULTS_ONLY, rng0);
  std::mt19937_64 rng(a.seed);
  ok &= figure_cold(g, a, rng);
  ok &= figure_warm_process(a, argv[0]);
  ok &= figure_host_overhead(g, a, rng);
  ok &= figure_random_lengths(g, a, rng);
  std::printf(
      "[5] tuned-vs-default speedups across a preset: run `fa-tune --preset ci` and `fa-tune --preset llama3-8b` "
      "(each prints winner vs default per key)\n");
  std::printf("total %.1f s -> %s\n", seconds_since(t00), ok ? "PASS" : "FAIL");
  g.d->cuStreamDestroy(g.stream);
  CUcontext popped = nullptr;
  g.d->cuCtxPopCurrent(&popped);
  fa_context_destroy(c);
  return ok ? 0 : 1;
}
