// tune_timing_probe.cpp -- fa_tune_timing_probe: one forward problem, a few tunable points, each timed the ways the
// tuner and the benchmarks time it, on the same buffers in one process, so that a disagreement between fa-tune's
// ranking and bench_peers.py's can be placed (issue 20: fa-tune read the d 128 causal 2k winner 15% slower than the
// bench did, persistent points alike in both).
//   T1    the tuner's first pass: tune::make_device_timer, a 256 MiB L2 flush, then one launch between events
//   T8    the tuner's finals: 8 launches back to back between events (per launch; the probe flushes L2 first)
//   (T1 and T8 leave the GPU idle after each run for --idle-ratio times its time, the tuner's 1 by default: timer.h;
//   B, RUN, RUN0 and EV0 run their rounds back to back, for seconds, at the GPU's power cap)
//   B     20 launches of the tuner's launcher (rt::TuneRequest) back to back between two events, no flush
//   RUN   20 fa_run calls back to back through the C API, the point made the tuned winner in the cache first
//   RUN0  RUN without an LSE output (lse = null: the has_lse = 0 kernel, which a forward without autograd runs; the
//         tuner times the LSE kernel, one tuning key serving both)
//   EV0   RUN0 with an event pair around each call, the median call (bench_peers.py's event_times)
// each on the tuner's data (uniform in [-1, 1], tuner/device_problem.cpp) and on N(0, 1) data (torch.randn's, as the
// benchmarks fill), over rounds that visit the points in a rotating order; the median per (point, data, mode).
//   fa_tune_timing_probe --dtype bf16 --head-dim 128 --heads 16 --seqlen 2048 --mask causal [--batch-tokens 16384]
//                        [--rounds 5] [--idle-ratio 1] [--cache FILE] [--fresh] KEY [KEY ...]
// (KEY: a tunables key, e.g. c2.n128.s3.pp1.ov1.p0; the cache file, kept unless --fresh, holds the compiled points
// for the next run, and the tuned rows that make each point fa_run's winner.)
// Exit status 0, or 1 on a CUDA / fa error; "no GPU found" and 0 without a device.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "fa/fa.h"
#include "generator/config.h"
#include "generator/problem.h"
#include "probe_check.h"
#include "runtime/context.h"
#include "runtime/driver.h"
#include "runtime/launch.h"
#include "runtime/validate.h"
#include "tuner/bucket.h"
#include "tuner/cache_store.h"
#include "tuner/device_problem.h"
#include "tuner/fa_tune_args.h"
#include "tuner/timer.h"

namespace {

namespace gen = fa::gen;
namespace rt = fa::rt;
namespace tune = fa::tune;

double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// N(0, 1) values (Box-Muller) as 16-bit floats of `dtype`, uploaded over `elems` elements at p.
void fill_normal(const rt::Driver& d, const void* p, size_t elems, int dtype, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(1e-7f, 1.0f);
  std::vector<uint16_t> h(elems);
  for (size_t i = 0; i < elems; i += 2) {
    const float r = std::sqrt(-2.0f * std::log(u(rng))), t = 6.2831853f * u(rng);
    const float a = r * std::cos(t), b = r * std::sin(t);
    h[i] = dtype == gen::kBf16 ? tune::float_to_bf16_bits(a) : tune::float_to_half_bits(a);
    if (i + 1 < elems) h[i + 1] = dtype == gen::kBf16 ? tune::float_to_bf16_bits(b) : tune::float_to_half_bits(b);
  }
  CK(d.cuMemcpyHtoD(reinterpret_cast<CUdeviceptr>(p), h.data(), elems * 2));
}

struct Args {
  std::vector<std::string> tune_argv;  // the grid flags, passed to fa-tune's parser
  std::vector<std::string> keys;
  int rounds = 5;
  double idle_ratio = 1.0;  // T1 / T8: idle after each timed run, per unit of its time (the tuner's default)
  std::string cache = "/tmp/fa_tune_timing_probe.sqlite";
  bool fresh = false;  // remove the cache file first (else its cubins serve the next run's points)
};

}  // namespace

int main(int argc, char** argv) {
  Args a;
  std::map<std::string, std::string> flag = {{"--dtype", "--dtypes"}, {"--head-dim", "--head-dims"},
                                             {"--heads", "--heads"},  {"--seqlen", "--seqlens"},
                                             {"--mask", "--masks"},   {"--batch-tokens", "--batch-tokens"}};
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    if (flag.count(s) && i + 1 < argc) {
      a.tune_argv.push_back(flag[s]);
      a.tune_argv.push_back(argv[++i]);
    } else if (s == "--rounds" && i + 1 < argc) {
      a.rounds = std::max(1, std::atoi(argv[++i]));
    } else if (s == "--cache" && i + 1 < argc) {
      a.cache = argv[++i];
    } else if (s == "--idle-ratio" && i + 1 < argc) {
      a.idle_ratio = std::max(0.0, std::atof(argv[++i]));
    } else if (s == "--fresh") {
      a.fresh = true;
    } else if (!s.empty() && s[0] != '-') {
      a.keys.push_back(s);
    } else {
      fmt::print(stderr,
                 "usage: fa_tune_timing_probe --dtype D --head-dim N --heads H --seqlen S --mask M "
                 "[--batch-tokens T] [--rounds R] [--idle-ratio X] [--cache FILE] [--fresh] KEY [KEY ...]\n");
      return 2;
    }
  }
  tune::TuneArgs ta;
  std::string why;
  if (!tune::parse_tune_args(a.tune_argv, &ta, &why)) {
    fmt::print(stderr, "{}\n", why);
    return 2;
  }
  const std::vector<tune::GridPoint> grid = tune::expand_grid(ta);
  if (grid.size() != 1 || a.keys.empty()) {
    fmt::print(stderr, "one grid point and at least one key, please (got {} points)\n", grid.size());
    return 2;
  }
  if (a.fresh) std::remove(a.cache.c_str());
  fa_context_options opt;
  fa_context_options_init(&opt);
  opt.tune_policy = FA_TUNE_DEFAULTS_ONLY;
  opt.cache_path = a.cache.c_str();
  fa_context c = nullptr;
  if (fa_context_create(&opt, &c) != FA_OK || c == nullptr || !c->has_device) {
    fmt::print("no GPU found: {}\n", c ? c->no_device_reason : fa_last_error());
    return 0;
  }
  const rt::Driver& d = *c->drv;
  std::unique_ptr<tune::DeviceProblem> dp;
  fa_params vp;
  gen::ProblemDesc vd;
  rt::Status st = tune::DeviceProblem::create(c, grid[0], &dp);
  if (st.ok()) st = rt::validate_forward(&dp->params(), &vp, &vd);
  if (!st.ok()) {
    fmt::print("problem: {}\n", st.message);
    return 1;
  }
  const gen::Semantic s = gen::select_forward(vd, c->arch);
  rt::TuneRequest req = dp->request(vp, vd);
  std::vector<gen::KernelConfig> cfgs;
  for (const std::string& k : a.keys) {
    gen::Tunables t;
    if (!gen::parse_tunables_key(s, k, &t)) {
      fmt::print(stderr, "{}: not a tunables key of {}\n", k, s.family->name);
      return 2;
    }
    cfgs.push_back(gen::finalize(s, t, vd));
    if (!gen::is_valid(cfgs.back(), c->limits, &why)) {
      fmt::print(stderr, "{}: not valid here: {}\n", k, why);
      return 2;
    }
    st = req.launch(cfgs.back());  // compiles it
    if (!st.ok()) {
      fmt::print("{}: {}\n", k, st.message);
      return 1;
    }
  }
  CK(d.cuCtxPushCurrent(c->cuctx));
  CK(d.cuStreamSynchronize(dp->stream()));
  CUevent e0 = nullptr, e1 = nullptr;
  CK(d.cuEventCreate(&e0, CU_EVENT_DEFAULT));
  CK(d.cuEventCreate(&e1, CU_EVENT_DEFAULT));
  const CUstream stream = dp->stream();
  std::unique_ptr<tune::Timer> timer = tune::make_device_timer(c);
  // One fa context per point whose cache names the point the winner; created once, reused every round.
  std::vector<fa_context> runners(cfgs.size(), nullptr);
  fa_params no_lse = dp->params();
  no_lse.lse = nullptr;
  for (size_t i = 0; i < cfgs.size(); ++i) {
    fa::cache::TuneRow row{tune::tuning_semantic_key(s), tune::shape_bucket(vd), gen::tunables_key(s, cfgs[i].t),
                           1e-3 / static_cast<double>(i + 1), "ok"};  // each row ahead of the ones before
    if (!tune::context_db(c)->put_tune_results({row}, true)) {
      fmt::print("cache: {}\n", tune::context_db(c)->last_error());
      return 1;
    }
    if (fa_context_create(&opt, &runners[i]) != FA_OK) {
      fmt::print("context: {}\n", fa_last_error());
      return 1;
    }
    if (fa_run(runners[i], &dp->params(), stream) != FA_OK || fa_run(runners[i], &no_lse, stream) != FA_OK) {
      fmt::print("fa_run: {}\n", fa_last_error());
      return 1;
    }
  }
  CK(d.cuStreamSynchronize(stream));
  constexpr int kCalls = 20;
  double host_us[2] = {0, 0};  // host time per call, summed: B, RUN
  int host_n[2] = {0, 0};
  auto b2b = [&](int which, auto&& launch) {
    CK(d.cuEventRecord(e0, stream));
    const auto h0 = std::chrono::steady_clock::now();
    for (int k = 0; k < kCalls; ++k) launch();
    host_us[which] += std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - h0).count() / kCalls;
    ++host_n[which];
    CK(d.cuEventRecord(e1, stream));
    CK(d.cuEventSynchronize(e1));
    float ms = 0;
    CK(d.cuEventElapsedTime(&ms, e0, e1));
    return static_cast<double>(ms) / kCalls;
  };
  // per-call event pairs (EV0): the median of kCalls calls, each timed alone
  std::vector<CUevent> ev(2 * kCalls, nullptr);
  for (CUevent& e : ev) CK(d.cuEventCreate(&e, CU_EVENT_DEFAULT));
  auto per_call = [&](auto&& launch) {
    for (int k = 0; k < kCalls; ++k) {
      CK(d.cuEventRecord(ev[2 * k], stream));
      launch();
      CK(d.cuEventRecord(ev[2 * k + 1], stream));
    }
    CK(d.cuEventSynchronize(ev[2 * kCalls - 1]));
    std::vector<double> t;
    for (int k = 0; k < kCalls; ++k) {
      float ms = 0;
      CK(d.cuEventElapsedTime(&ms, ev[2 * k], ev[2 * k + 1]));
      t.push_back(ms);
    }
    return median(t);
  };
  constexpr int kModes = 6;
  const char* modes[kModes] = {"T1", "T8", "B", "RUN", "RUN0", "EV0"};
  const char* datas[] = {"uniform", "normal"};
  // times[data][point][mode]
  std::vector<std::vector<std::vector<std::vector<double>>>> times(
      2, std::vector<std::vector<std::vector<double>>>(cfgs.size(), std::vector<std::vector<double>>(kModes)));
  const auto t0 = std::chrono::steady_clock::now();
  for (int data = 0; data < 2; ++data) {
    if (data == 1) {
      const fa_params& p = dp->params();
      fill_normal(d, p.q, size_t(vd.batch) * vd.seqlen_q * vd.heads_q * vd.head_dim, vd.dtype, 11);
      fill_normal(d, p.k, size_t(vd.batch) * vd.seqlen_k * vd.heads_kv * vd.head_dim, vd.dtype, 12);
      fill_normal(d, p.v, size_t(vd.batch) * vd.seqlen_k * vd.heads_kv * vd.head_dim_v, vd.dtype, 13);
    }
    for (int r = 0; r < a.rounds; ++r) {
      for (size_t k = 0; k < cfgs.size(); ++k) {
        const size_t i = (k + static_cast<size_t>(r)) % cfgs.size();
        for (int m = 0; m < kModes; ++m) {
          double ms = NAN;
          if (m < 2) {
            tune::TimingPlan plan;
            plan.burst = m == 0 ? 1 : 8;
            plan.budget_ms = 20;
            plan.idle_ratio = a.idle_ratio;
            st = timer->time(cfgs[i], req, plan, &ms);
          } else if (m == 2) {
            ms = b2b(0, [&] {
              if (st.ok()) st = req.launch(cfgs[i]);
            });
          } else {
            const fa_params* p = m == 3 ? &dp->params() : &no_lse;
            auto call = [&] {
              if (st.ok() && fa_run(runners[i], p, stream) != FA_OK) st = rt::error(FA_ERROR_INTERNAL, fa_last_error());
            };
            ms = m == 5 ? per_call(call) : b2b(1, call);
          }
          if (!st.ok()) {
            fmt::print("{} {}: {}\n", a.keys[i], modes[m], st.message);
            return 1;
          }
          times[data][i][m].push_back(ms);
        }
      }
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  fmt::print("## {} ({}), {} rounds, {:.1f} s; median ms per launch; host per call: B {:.1f} us, RUN {:.1f} us\n",
             grid[0].label, c->gpu_name, a.rounds, secs, host_us[0] / std::max(host_n[0], 1),
             host_us[1] / std::max(host_n[1], 1));
  for (int data = 0; data < 2; ++data)
    for (size_t i = 0; i < cfgs.size(); ++i) {
      std::string line = fmt::format("TT {} {:<24} {:<7}", grid[0].label, a.keys[i], datas[data]);
      for (int m = 0; m < kModes; ++m) line += fmt::format("  {} {:.4f}", modes[m], median(times[data][i][m]));
      fmt::print("{}\n", line);
    }
  for (CUevent e : ev) d.cuEventDestroy(e);
  CUcontext cur;
  d.cuCtxPopCurrent(&cur);
  timer.reset();
  for (fa_context r : runners) fa_context_destroy(r);
  dp.reset();
  fa_context_destroy(c);
  return 0;
}
