// decode_probe.cpp -- fa_decode_probe: times the decode families' plans (fwd_split / fwd_mla, + fwd_combine) at
// every valid tunable point, contiguous and paged caches side by side on the same values, so that the paged cost is
// read at equal tunables (the bench tunes the two keys separately). bf16, one query token.
//   GQA cells (fwd_split): 32 query heads over 8 KV heads, d 128; contiguous [B, S, 8, 128] and the same rows in
//     pages of 16 and 64 keys in a random page order.
//   MLA cells (fwd_mla): 128 query heads over one latent head, d 576 / dv 512, v = k[..., :512], paged (page 64,
//     random order) only.
// Per point and layout: the median over rounds of (events around `calls` back-to-back plan launches) / calls, the
// layouts and points visited in a rotating order each round (drift reaches all alike). Paged outputs are compared
// bit for bit with the contiguous output of the same point. Prints one line per (cell, point) and a summary per
// cell (default point, best point per layout, best paged / best contiguous).
//   fa_decode_probe [--gqa B:S[:all],...] [--mla B:S[:all],...] [--rounds N] [--calls N]   (B:S: the default
//   point alone; B:S:all: every valid point). GQA layouts: contig, paged16, paged64 (random page order) and
//   paged16seq (pages in order: the paged code on a contiguous walk, so the memory pattern's share shows apart).
// Exit status 0, or 1 on a CUDA / fa error; "no GPU found" and 0 without a device.
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "fa/fa.h"
#include "generator/config.h"
#include "generator/family.h"
#include "generator/problem.h"
#include "probe_check.h"
#include "runtime/context.h"
#include "runtime/driver.h"
#include "runtime/launch.h"
#include "runtime/validate.h"

namespace {

using fa::rt::Driver;

struct Cell {
  int b, sk;
  bool all;  // every valid tunable point (else the default alone)
};

struct Args {
  std::vector<Cell> gqa = {{1, 32768, true}, {8, 4096, true}, {1, 131072, false}, {8, 32768, false}};
  std::vector<Cell> mla = {{32, 32768, true}, {128, 4096, true}, {1, 32768, true}};
  int rounds = 7, calls = 20;
};

// "B:S[:all],..." (all: every valid tunable point, else the default)
std::vector<Cell> parse_cells(const char* s) {
  std::vector<Cell> out;
  std::string t(s);
  size_t i = 0;
  while (i < t.size()) {
    size_t j = t.find(',', i);
    if (j == std::string::npos) j = t.size();
    const std::string c = t.substr(i, j - i);
    const size_t colon = c.find(':');
    if (colon != std::string::npos)
      out.push_back({std::atoi(c.c_str()), std::atoi(c.c_str() + colon + 1), c.find(":all") != std::string::npos});
    i = j + 1;
  }
  return out;
}

struct Buf {
  const Driver* d = nullptr;
  CUdeviceptr p = 0;
  size_t n = 0;
  Buf(const Driver* drv, size_t bytes) : d(drv), n(bytes) { CK(d->cuMemAlloc(&p, std::max<size_t>(bytes, 256))); }
  ~Buf() {
    if (p) d->cuMemFree(p);
  }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  void* get() const { return reinterpret_cast<void*>(p); }
};

// bf16 bits of uniform values in [-1, 1) (a block of 1M values repeated with a rotating start).
std::vector<uint16_t> random_bf16(size_t elems, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<uint16_t> h(std::min<size_t>(elems, 1u << 20)), out(elems);
  for (auto& x : h) {
    const float f = u(rng);
    uint32_t v;
    std::memcpy(&v, &f, 4);
    x = static_cast<uint16_t>((v + 0x7fffu + ((v >> 16) & 1u)) >> 16);
  }
  size_t done = 0, rot = 0;
  while (done < elems) {
    const size_t n = std::min(h.size() - rot, elems - done);
    std::memcpy(out.data() + done, h.data() + rot, n * 2);
    done += n;
    rot = (rot + 4099) % h.size();
  }
  return out;
}

void upload(const Driver* d, Buf& b, const void* src, size_t bytes) { CK(d->cuMemcpyHtoD(b.p, src, bytes)); }

// One layout of a cell: its params (validated), plan per point and kernels.
struct Layout {
  std::string name;
  fa_params p;
  fa::gen::ProblemDesc d;
  std::vector<fa::gen::Plan> plans;
  std::vector<std::vector<std::shared_ptr<fa::rt::Kernel>>> kernels;
  std::vector<std::vector<double>> times;  // [point][round]
  std::vector<int> bit_exact;              // [point]: paged output == contiguous (1), != (0), n/a (-1)
};

double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Probe {
  fa_context c;
  const Driver* d;
  CUstream stream = nullptr;
  CUevent e0 = nullptr, e1 = nullptr;
  const Args& a;
  explicit Probe(fa_context ctx, const Args& args) : c(ctx), d(ctx->drv), a(args) {
    CK(d->cuCtxPushCurrent(c->cuctx));  // current on this thread for the probe's lifetime
    CK(d->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    CK(d->cuEventCreate(&e0, CU_EVENT_DEFAULT));
    CK(d->cuEventCreate(&e1, CU_EVENT_DEFAULT));
  }

  // Plans and kernels of every point of `family` for each layout (compiled in parallel first).
  bool prepare(const char* family, bool all, std::vector<Layout>& ls, std::vector<fa::gen::Tunables>* points,
               size_t* ws) {
    const fa::gen::Family* f = fa::gen::find_family(family);
    if (f == nullptr) return false;
    for (Layout& l : ls) {
      fa_params v;
      fa::rt::Status st = fa::rt::validate_forward(&l.p, &v, &l.d);
      if (!st.ok()) {
        fmt::print("validate {}: {}\n", l.name, st.message);
        return false;
      }
      l.p = v;
      l.d.sm_count = c->sm_count > 0 ? c->sm_count : c->limits.sm_count;
      if (!fa::gen::family_covers(*f, l.d, c->arch, nullptr)) {
        fmt::print("{} does not cover {}\n", family, l.name);
        return false;
      }
    }
    const fa::gen::Semantic s0 = fa::gen::semantic_for(*f, ls[0].d, c->arch);
    const fa::gen::Tunables def = f->defaults(s0);
    if (all) *points = fa::gen::all_valid_points(s0, c->limits);
    points->erase(std::remove(points->begin(), points->end(), def), points->end());
    points->insert(points->begin(), def);  // the default first
    *ws = 0;
    for (Layout& l : ls) {
      const fa::gen::Semantic s = fa::gen::semantic_for(*f, l.d, c->arch);
      l.plans.clear();
      for (const auto& t : *points) {
        l.plans.push_back(fa::gen::make_plan(s, t, l.d));
        *ws = std::max(*ws, l.plans.back().reported_workspace());
      }
      l.kernels.assign(points->size(), {});
      l.times.assign(points->size(), {});
      l.bit_exact.assign(points->size(), -1);
    }
    // compile every kernel once, in parallel (the kernel cache dedups)
    std::vector<std::pair<Layout*, size_t>> jobs;
    for (Layout& l : ls)
      for (size_t i = 0; i < points->size(); ++i) jobs.push_back({&l, i});
    std::vector<std::thread> th;
    const size_t nt = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
    std::vector<std::string> errs(jobs.size());
    for (size_t w = 0; w < nt; ++w)
      th.emplace_back([&, w] {
        for (size_t j = w; j < jobs.size(); j += nt) {
          auto [l, i] = jobs[j];
          fa::rt::Status st = fa::rt::resolve_kernels(c, l->plans[i], true, &l->kernels[i]);
          if (!st.ok()) errs[j] = st.message;
        }
      });
    for (auto& t : th) t.join();
    for (size_t j = 0; j < jobs.size(); ++j)
      if (!errs[j].empty()) {
        fmt::print("compile {} point {}: {}\n", jobs[j].first->name, jobs[j].second, errs[j]);
        return false;
      }
    return true;
  }

  void launch(Layout& l, size_t i, void* ws, size_t ws_size) {
    FaFwdArgs args = fa::rt::make_fwd_args(l.p, l.d);
    fa::rt::Status st =
        fa::rt::enqueue_steps(c, l.plans[i], l.kernels[i], fa::gen::launch_shape(l.d),
                              fa::rt::forward_plan_args(l.plans[i], &args, nullptr), stream, ws, ws_size);
    if (!st.ok()) {
      fmt::print("launch {}: {}\n", l.name, st.message);
      std::exit(1);
    }
  }

  // Rounds over (point, layout) in a rotating order; bit check of each paged layout against the first.
  void time_all(std::vector<Layout>& ls, size_t npoints, void* ws, size_t ws_size, Buf& out0, size_t out_bytes) {
    std::vector<uint8_t> ref(out_bytes), got(out_bytes);
    for (size_t i = 0; i < npoints; ++i) {
      for (size_t k = 0; k < ls.size(); ++k) {
        CK(d->cuMemsetD8Async(out0.p, 0xff, out_bytes, stream));
        launch(ls[k], i, ws, ws_size);
        CK(d->cuStreamSynchronize(stream));
        CK(d->cuMemcpyDtoH(k == 0 ? ref.data() : got.data(), out0.p, out_bytes));
        if (k > 0) ls[k].bit_exact[i] = ref == got ? 1 : 0;
      }
    }
    const size_t n = npoints * ls.size();
    for (int r = 0; r < a.rounds; ++r)
      for (size_t q = 0; q < n; ++q) {
        const size_t idx = (q + static_cast<size_t>(r) * 7) % n;
        const size_t i = idx / ls.size(), k = idx % ls.size();
        for (int w = 0; w < 3; ++w) launch(ls[k], i, ws, ws_size);  // warm
        CK(d->cuEventRecord(e0, stream));
        for (int w = 0; w < a.calls; ++w) launch(ls[k], i, ws, ws_size);
        CK(d->cuEventRecord(e1, stream));
        CK(d->cuEventSynchronize(e1));
        float ms = 0;
        CK(d->cuEventElapsedTime(&ms, e0, e1));
        ls[k].times[i].push_back(1e3 * ms / a.calls);
      }
  }

  void report(const char* tag, int b, int sk, const std::vector<fa::gen::Tunables>& points, std::vector<Layout>& ls,
              const fa::gen::Semantic& s, double bytes, double flops) {
    std::vector<double> best(ls.size(), 1e30);
    std::vector<size_t> best_i(ls.size(), 0);
    for (size_t i = 0; i < points.size(); ++i) {
      std::string line = fmt::format("{} b{} sk{} {:<22}", tag, b, sk, fa::gen::tunables_key(s, points[i]));
      const double t0 = median(ls[0].times[i]);
      for (size_t k = 0; k < ls.size(); ++k) {
        const double t = median(ls[k].times[i]);
        if (t < best[k]) best[k] = t, best_i[k] = i;
        line += fmt::format(" | {} {:8.2f} us", ls[k].name, t);
        if (k > 0) line += fmt::format(" x{:.3f}{}", t0 / t, ls[k].bit_exact[i] == 1 ? "" : " NOT-BIT-EXACT");
      }
      fmt::print("{}\n", line);
    }
    std::string sum = fmt::format("SUMMARY {} b{} sk{}: default {}", tag, b, sk, fa::gen::tunables_key(s, points[0]));
    for (size_t k = 0; k < ls.size(); ++k) sum += fmt::format(" {} {:.2f}", ls[k].name, median(ls[k].times[0]));
    sum += "; best";
    for (size_t k = 0; k < ls.size(); ++k)
      sum += fmt::format(" {} {:.2f} ({})", ls[k].name, best[k], fa::gen::tunables_key(s, points[best_i[k]]));
    for (size_t k = 1; k < ls.size(); ++k)
      sum += fmt::format("; best {}/best {} x{:.3f}", ls[0].name, ls[k].name, best[0] / best[k]);
    if (bytes > 0) sum += fmt::format("; best {} {:.2f} TB/s", ls[0].name, bytes / (best[0] * 1e-6) / 1e12);
    if (flops > 0) sum += fmt::format(" {:.0f} TFLOP/s", flops / (best[0] * 1e-6) / 1e12);
    fmt::print("{}\n", sum);
    std::fflush(stdout);
  }

  fa_params base_params(int b, int sk, int hq, int hkv, int dd, int dv, const Buf& q, const Buf& o) {
    fa_params p;
    fa_params_init(&p);
    p.dtype = FA_DTYPE_BF16;
    p.batch = b;
    p.seqlen_q = 1;
    p.seqlen_k = sk;
    p.heads_q = hq;
    p.heads_kv = hkv;
    p.head_dim = dd;
    p.head_dim_v = dv;
    p.q = q.get();
    p.q_stride_batch = (int64_t)hq * dd;
    p.q_stride_seq = (int64_t)hq * dd;
    p.q_stride_head = dd;
    p.o = o.get();
    p.o_stride_batch = (int64_t)hq * dv;
    p.o_stride_seq = (int64_t)hq * dv;
    p.o_stride_head = dv;
    return p;
  }

  // Pages in a random order: page i of the logical cache (sequence i / pps, page i % pps) lives at perm[i].
  static std::vector<int> perm_of(int pages, unsigned seed) {
    std::vector<int> perm(static_cast<size_t>(pages));
    std::iota(perm.begin(), perm.end(), 0);
    std::mt19937 rng(seed);
    std::shuffle(perm.begin(), perm.end(), rng);
    return perm;
  }

  void gqa_cell(int b, int sk, bool all) {
    const int hq = 32, hkv = 8, dd = 128;
    const size_t row = size_t(hkv) * dd;  // elements per key row (all heads)
    const size_t nkv = size_t(b) * sk * row;
    Buf q(d, size_t(b) * hq * dd * 2), o(d, size_t(b) * hq * dd * 2), k(d, nkv * 2), v(d, nkv * 2);
    const std::vector<uint16_t> hqv = random_bf16(size_t(b) * hq * dd, 1), hk = random_bf16(nkv, 2),
                                hv = random_bf16(nkv, 3);
    upload(d, q, hqv.data(), hqv.size() * 2);
    upload(d, k, hk.data(), nkv * 2);
    upload(d, v, hv.data(), nkv * 2);
    std::vector<Layout> ls;
    ls.reserve(3);
    {
      Layout l;
      l.name = "contig";
      l.p = base_params(b, sk, hq, hkv, dd, dd, q, o);
      l.p.k = k.get();
      l.p.v = v.get();
      l.p.k_stride_batch = l.p.v_stride_batch = (int64_t)sk * row;
      l.p.k_stride_seq = l.p.v_stride_seq = (int64_t)row;
      l.p.k_stride_head = l.p.v_stride_head = dd;
      ls.push_back(l);
    }
    std::vector<std::unique_ptr<Buf>> keep;
    // pages of 16 and 64 keys in a random order, and of 16 in order (the paged code on a contiguous walk)
    for (int ps : {16, 64, -16}) {
      const bool in_order = ps < 0;
      ps = in_order ? -ps : ps;
      const int pages = b * sk / ps, pps = sk / ps;
      std::vector<int> perm = perm_of(pages, 100u + unsigned(ps));
      if (in_order) std::iota(perm.begin(), perm.end(), 0);
      auto kp = std::make_unique<Buf>(d, nkv * 2), vp = std::make_unique<Buf>(d, nkv * 2);
      auto bt = std::make_unique<Buf>(d, size_t(pages) * 4);
      const size_t pel = size_t(ps) * row;  // elements per page
      std::vector<uint16_t> pk(nkv), pv(nkv);
      for (int i = 0; i < pages; ++i) {
        std::memcpy(pk.data() + size_t(perm[size_t(i)]) * pel, hk.data() + size_t(i) * pel, pel * 2);
        std::memcpy(pv.data() + size_t(perm[size_t(i)]) * pel, hv.data() + size_t(i) * pel, pel * 2);
      }
      upload(d, *kp, pk.data(), nkv * 2);
      upload(d, *vp, pv.data(), nkv * 2);
      CK(d->cuMemcpyHtoD(bt->p, perm.data(), size_t(pages) * 4));  // table[b][j] = perm[b * pps + j]
      Layout l;
      l.name = fmt::format("paged{}{}", ps, in_order ? "seq" : "");
      l.p = base_params(b, sk, hq, hkv, dd, dd, q, o);
      l.p.k = kp->get();
      l.p.v = vp->get();
      l.p.k_stride_batch = l.p.v_stride_batch = (int64_t)ps * row;
      l.p.k_stride_seq = l.p.v_stride_seq = (int64_t)row;
      l.p.k_stride_head = l.p.v_stride_head = dd;
      l.p.block_table = static_cast<const int32_t*>(bt->get());
      l.p.block_table_stride = pps;
      l.p.page_size = ps;
      l.p.num_pages = pages;
      ls.push_back(l);
      keep.push_back(std::move(kp));
      keep.push_back(std::move(vp));
      keep.push_back(std::move(bt));
    }
    run_cell("GQA", "fwd_split", all, b, sk, ls, o, size_t(b) * hq * dd * 2, 2.0 * double(nkv) * 2, 0);
  }

  void mla_cell(int b, int sk, bool all) {
    const int hq = 128, dd = 576, dv = 512, ps = 64;
    const int pages = b * sk / ps, pps = sk / ps;
    Buf q(d, size_t(b) * hq * dd * 2), o(d, size_t(b) * hq * dv * 2), k(d, size_t(pages) * ps * dd * 2),
        bt(d, size_t(pages) * 4);
    const std::vector<uint16_t> hqv = random_bf16(size_t(b) * hq * dd, 4), hk = random_bf16(size_t(pages) * ps * dd, 5);
    upload(d, q, hqv.data(), hqv.size() * 2);
    upload(d, k, hk.data(), hk.size() * 2);
    const std::vector<int> perm = perm_of(pages, 7);
    CK(d->cuMemcpyHtoD(bt.p, perm.data(), size_t(pages) * 4));
    std::vector<Layout> ls(1);
    Layout& l = ls[0];
    l.name = "paged64";
    l.p = base_params(b, sk, hq, 1, dd, dv, q, o);
    l.p.k = l.p.v = k.get();
    l.p.k_stride_batch = l.p.v_stride_batch = (int64_t)ps * dd;
    l.p.k_stride_seq = l.p.v_stride_seq = dd;
    l.p.k_stride_head = l.p.v_stride_head = dd;
    l.p.block_table = static_cast<const int32_t*>(bt.get());
    l.p.block_table_stride = pps;
    l.p.page_size = ps;
    l.p.num_pages = pages;
    run_cell("MLA", "fwd_mla", all, b, sk, ls, o, size_t(b) * hq * dv * 2, double(b) * sk * dd * 2,
             double(b) * hq * sk * (dd + dv) * 2);
  }

  void run_cell(const char* tag, const char* family, bool all, int b, int sk, std::vector<Layout>& ls, Buf& o,
                size_t o_bytes, double bytes, double flops) {
    std::vector<fa::gen::Tunables> points;
    size_t ws = 0;
    if (!prepare(family, all, ls, &points, &ws)) std::exit(1);
    Buf w(d, ws);
    time_all(ls, points.size(), w.get(), ws, o, o_bytes);
    report(tag, b, sk, points, ls, fa::gen::semantic_for(*fa::gen::find_family(family), ls[0].d, c->arch), bytes,
           flops);
  }
};

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        fmt::print(stderr, "{} needs a value\n", s);
        std::exit(2);
      }
      return argv[++i];
    };
    if (s == "--gqa") a.gqa = parse_cells(next());
    else if (s == "--mla") a.mla = parse_cells(next());
    else if (s == "--rounds") a.rounds = std::atoi(next());
    else if (s == "--calls") a.calls = std::atoi(next());
    else {
      fmt::print(stderr,
                 "usage: fa_decode_probe [--gqa B:S[:all],...] [--mla B:S[:all],...] [--rounds N] "
                 "[--calls N]\n");
      return 2;
    }
  }
  fa_context_options opt;
  fa_context_options_init(&opt);
  opt.tune_policy = FA_TUNE_DEFAULTS_ONLY;
  fa_context c = nullptr;
  if (fa_context_create(&opt, &c) != FA_OK || c == nullptr || !c->has_device) {
    fmt::print("no GPU found: {}\n", c ? c->no_device_reason : fa_last_error());
    return 0;
  }
  {
    Probe p(c, a);
    for (const Cell& x : a.gqa) p.gqa_cell(x.b, x.sk, x.all);
    if (c->arch == 90)
      for (const Cell& x : a.mla) p.mla_cell(x.b, x.sk, x.all);
    CUcontext cur;
    c->drv->cuCtxPopCurrent(&cur);
  }
  fa_context_destroy(c);
  return 0;
}
