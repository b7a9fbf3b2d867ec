// host_cost_mods.cpp -- fa_host_cost_mods: the C library's host time per call of fa_run and fa_run_backward with
// user code (a restated causal mask_mod, "return j <= i;") against the built-in causal, and the driver entry points'
// share of it: the context's driver table (runtime/driver.h) is replaced by a copy whose every entry is wrapped with a
// timer, so the rest of a call is fa's own work (validation, plan-cache lookup, argument binding, the classification
// cache). Three contenders, interleaved over --rounds rounds of --calls calls each (the order reversed every other
// round): the built-in causal; the mod with its classification kept across calls (fa_mods.mask_epoch 1); the mod
// classified on every call (mask_epoch 0: mask_blocks, its memset and a workspace each call). Each call is timed alone
// (enqueue only, the stream drained every 4 calls outside the clocks); median and mean per call. bf16, d128, 16 heads,
// batch 1. Without a GPU: the validation timings (no device needed), "no GPU found" and exit 0.
//   fa_host_cost_mods [--seq 2048] [--rounds 7] [--calls 300]
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "fa/fa.h"
#include "runtime/context.h"
#include "runtime/driver.h"
#include "runtime/validate.h"

namespace {

using Clock = std::chrono::steady_clock;
double us_since(Clock::time_point t0) { return std::chrono::duration<double, std::micro>(Clock::now() - t0).count(); }

// Per driver entry point: microseconds and calls while `g_timing` is set.
constexpr int kMaxFns = 64;
double g_us[kMaxFns];
long g_calls[kMaxFns];
const char* g_name[kMaxFns];
bool g_timing = false;

template <int I, typename F>
struct Timed;
template <int I, typename R, typename... A>
struct Timed<I, R (*)(A...)> {
  static_assert(I < kMaxFns, "more driver entry points than counters");
  static inline R (*orig)(A...) = nullptr;
  static R call(A... a) {
    if (!g_timing) return orig(a...);
    const auto t0 = Clock::now();
    R r = orig(a...);
    g_us[I] += us_since(t0);
    ++g_calls[I];
    return r;
  }
  static void install(R (**slot)(A...), const char* name) {
    orig = *slot;
    *slot = &call;
    g_name[I] = name;
  }
};

// Every entry of table d timed (d: a copy the context is pointed at; the process's own table stays as loaded).
void wrap_driver(fa::rt::Driver* d) {
#define FA_DRIVER_FN(name) Timed<__COUNTER__, decltype(fa::rt::Driver::name)>::install(&d->name, #name);
#include "runtime/driver_functions.inc"
#undef FA_DRIVER_FN
}

// A bshd problem of `seq` tokens at fake or real addresses: q, k, v, o at ptr[0..3], lse at lse.
void fill_forward(fa_params* p, int seq, int heads, int d, const unsigned long long* ptr, unsigned long long lse) {
  fa_params_init(p);
  p->dtype = FA_DTYPE_BF16;
  p->batch = 1;
  p->seqlen_q = p->seqlen_k = seq;
  p->heads_q = p->heads_kv = heads;
  p->head_dim = d;
  const int64_t row = int64_t{heads} * d;
  p->q = reinterpret_cast<void*>(ptr[0]);
  p->k = reinterpret_cast<void*>(ptr[1]);
  p->v = reinterpret_cast<void*>(ptr[2]);
  p->o = reinterpret_cast<void*>(ptr[3]);
  p->lse = reinterpret_cast<float*>(lse);
  p->q_stride_batch = p->k_stride_batch = p->v_stride_batch = p->o_stride_batch = seq * row;
  p->q_stride_seq = p->k_stride_seq = p->v_stride_seq = p->o_stride_seq = row;
  p->q_stride_head = p->k_stride_head = p->v_stride_head = p->o_stride_head = d;
}

// dO, dQ, dK, dV at ptr[4..7], laid out as q.
void fill_backward(fa_bwd_params* b, const fa_params* p, const unsigned long long* ptr) {
  fa_bwd_params_init(b);
  b->fwd = p;
  b->dout = reinterpret_cast<void*>(ptr[4]);
  b->dq = reinterpret_cast<void*>(ptr[5]);
  b->dk = reinterpret_cast<void*>(ptr[6]);
  b->dv = reinterpret_cast<void*>(ptr[7]);
  b->dout_stride_batch = b->dq_stride_batch = b->dk_stride_batch = b->dv_stride_batch = p->q_stride_batch;
  b->dout_stride_seq = b->dq_stride_seq = b->dk_stride_seq = b->dv_stride_seq = p->q_stride_seq;
  b->dout_stride_head = b->dq_stride_head = b->dk_stride_head = b->dv_stride_head = p->q_stride_head;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}
double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0.0 : s / static_cast<double>(v.size());
}

struct Contender {
  const char* name;
  int mask;
  fa_mods* mods;
  std::vector<double> fwd, bwd;
  double drv_us[kMaxFns] = {};
  long drv_calls[kMaxFns] = {};
  long steps = 0;
};

}  // namespace

int main(int argc, char** argv) {
  int seq = 2048, rounds = 7, calls = 300;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    int* dst = a == "--seq" ? &seq : a == "--rounds" ? &rounds : a == "--calls" ? &calls : nullptr;
    if (dst == nullptr) {
      fmt::print(stderr, "unknown option {} (--seq, --rounds, --calls)\n", a);
      return 2;
    }
    *dst = std::atoi(argv[i + 1]);
  }
  const int heads = 16, d = 128;
  fa_mods kept;
  fa_mods_init(&kept);
  kept.mask_mod = "return j <= i;";
  kept.mask_mod_depends = 0;
  kept.mask_epoch = 1;
  fa_mods per_call = kept;
  per_call.mask_epoch = 0;

  {  // validation alone, on fake addresses (no device)
    const unsigned long long fake[8] = {0x10000000, 0x10000000, 0x10000000, 0x20000000,
                                        0x30000000, 0x40000000, 0x50000000, 0x60000000};
    fa_params p;
    fill_forward(&p, seq, heads, d, fake, 0x70000000);
    fa_bwd_params b;
    fill_backward(&b, &p, fake);
    const int n = 100000;
    for (fa_mods* m : {static_cast<fa_mods*>(nullptr), &kept}) {
      p.mask = m ? FA_MASK_NONE : FA_MASK_CAUSAL;
      p.mods = m;
      fa_params out;
      fa::gen::ProblemDesc desc;
      fa::rt::BwdView view;
      auto t0 = Clock::now();
      for (int i = 0; i < n; ++i) (void)fa::rt::validate_forward(&p, &out, &desc);
      const double f = us_since(t0) / n;
      t0 = Clock::now();
      for (int i = 0; i < n; ++i) (void)fa::rt::validate_backward(&b, &view, &desc);
      fmt::print("validation ({}): forward {:.3f} us, backward {:.3f} us\n", m ? "causal (mod)" : "built-in causal", f,
                 us_since(t0) / n);
    }
  }

  fa_context ctx = nullptr;
  if (fa_context_create(nullptr, &ctx) != FA_OK || !fa_context_has_device(ctx)) {
    fmt::print("no GPU found: {}\n", ctx ? ctx->no_device_reason : fa_last_error());
    if (ctx) fa_context_destroy(ctx);
    return 0;
  }
  static fa::rt::Driver timed = *ctx->drv;
  wrap_driver(&timed);
  ctx->drv = &timed;
  const fa::rt::Driver* drv = &timed;
  CUdevice dev;
  CUcontext cu;
  CUstream stream;
  drv->cuDeviceGet(&dev, 0);
  drv->cuDevicePrimaryCtxRetain(&cu, dev);
  drv->cuCtxPushCurrent(cu);
  drv->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING);
  const size_t bytes = size_t(seq) * heads * d * 2;
  unsigned long long ptr[8], lse;
  for (auto& b : ptr) {
    CUdeviceptr x;
    if (drv->cuMemAlloc(&x, bytes) != CUDA_SUCCESS) return 1;
    drv->cuMemsetD8Async(x, 0, bytes, stream);
    b = x;
  }
  CUdeviceptr l;
  if (drv->cuMemAlloc(&l, size_t(seq) * heads * 4) != CUDA_SUCCESS) return 1;
  lse = l;
  fa_params p;
  fill_forward(&p, seq, heads, d, ptr, lse);
  fa_bwd_params b;
  fill_backward(&b, &p, ptr);

  Contender cs[] = {{"built-in causal", FA_MASK_CAUSAL, nullptr, {}, {}},
                    {"causal (mod), kept", FA_MASK_NONE, &kept, {}, {}},
                    {"causal (mod), per call", FA_MASK_NONE, &per_call, {}, {}}};
  const int n_cs = 3;
  for (Contender& c : cs) {  // compile, load, plan-cache entries
    p.mask = c.mask;
    p.mods = c.mods;
    for (int i = 0; i < 10; ++i)
      if (fa_run(ctx, &p, stream) != FA_OK || fa_run_backward(ctx, &b, stream) != FA_OK) {
        fmt::print("{}: {}\n", c.name, fa_last_error());
        return 1;
      }
  }
  drv->cuStreamSynchronize(stream);
  for (int r = 0; r < rounds; ++r)
    for (int k = 0; k < n_cs; ++k) {
      Contender& c = cs[r % 2 ? n_cs - 1 - k : k];
      p.mask = c.mask;
      p.mods = c.mods;
      std::memset(g_us, 0, sizeof g_us);
      std::memset(g_calls, 0, sizeof g_calls);
      g_timing = true;
      for (int i = 0; i < calls; ++i) {
        auto t0 = Clock::now();
        (void)fa_run(ctx, &p, stream);
        c.fwd.push_back(us_since(t0));
        t0 = Clock::now();
        (void)fa_run_backward(ctx, &b, stream);
        c.bwd.push_back(us_since(t0));
        if (i % 4 == 3) {  // the queue never fills (a full queue blocks the launch)
          g_timing = false;
          drv->cuStreamSynchronize(stream);
          g_timing = true;
        }
      }
      g_timing = false;
      drv->cuStreamSynchronize(stream);
      for (int f = 0; f < kMaxFns; ++f) {
        c.drv_us[f] += g_us[f];
        c.drv_calls[f] += g_calls[f];
      }
      c.steps += calls;
    }
  fmt::print(
      "s {} h {} d {} bf16: host us per call (median / mean of {} calls, enqueue only); driver calls per "
      "forward + backward (us, calls)\n",
      seq, heads, d, rounds * calls);
  for (const Contender& c : cs) {
    double drv_total = 0;
    std::string each;
    for (int f = 0; f < kMaxFns; ++f) {
      if (c.drv_calls[f] == 0) continue;
      drv_total += c.drv_us[f];
      each += fmt::format(" {} {:.2f} x{:.1f}", g_name[f], c.drv_us[f] / static_cast<double>(c.steps),
                          static_cast<double>(c.drv_calls[f]) / static_cast<double>(c.steps));
    }
    fmt::print("  {:<24} fwd {:6.2f} / {:6.2f}  bwd {:6.2f} / {:6.2f}  driver {:6.2f}:{}\n", c.name, median(c.fwd),
               mean(c.fwd), median(c.bwd), mean(c.bwd), drv_total / static_cast<double>(c.steps), each);
  }
  for (auto x : ptr) drv->cuMemFree(x);
  drv->cuMemFree(l);
  drv->cuStreamDestroy(stream);
  fa_context_destroy(ctx);
  return 0;
}
