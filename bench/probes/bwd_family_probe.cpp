// bwd_family_probe.cpp -- fa_bwd_family_probe: the backward plans of two families timed in the same run on the same
// inputs (rt::run_backward_at: bwd_pre -> family at its default tunables -> bwd_post), interleaved rounds, CUDA
// events; bf16, 16k tokens per batch (batch = 16384 / seqlen), hidden 2048 (heads = 2048 / head_dim), causal and
// not. Prints per shape each family's median time and TFLOP/s (10 b h sq sk d, halved when causal), the ratio, and
// the relative L2 difference of their gradients (a gross-error check, not the oracle). Without a GPU: "no GPU
// found" and exit 0.
// A family may be given with a tunables key (bwd_wgmma:c2.s2.q1); the ratio is the second entry's against the first.
//   fa_bwd_family_probe [--families bwd_mma,bwd_wgmma] [--hdims 64,128] [--seqlens 2048,4096,8192] [--causal 0,1]
//                       [--rounds 5] [--calls 10]
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "api/backward_at.h"
#include "fa/fa.h"
#include "generator/problem.h"
#include "probe_check.h"
#include "runtime/context.h"
#include "runtime/driver.h"
#include "runtime/validate.h"

namespace {

using fa::rt::Driver;

std::vector<int> ints(const std::string& s) {
  std::vector<int> out;
  size_t i = 0;
  while (i < s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    out.push_back(std::atoi(s.substr(i, j - i).c_str()));
    i = j + 1;
  }
  return out;
}
std::vector<std::string> words(const std::string& s) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    out.push_back(s.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

struct Buf {
  const Driver* d;
  CUdeviceptr p = 0;
  Buf(const Driver* drv, size_t bytes) : d(drv) { CK(d->cuMemAlloc(&p, std::max<size_t>(bytes, 256))); }
  ~Buf() { d->cuMemFree(p); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  void* get() const { return reinterpret_cast<void*>(p); }
};

uint16_t bf16_bits(float f) {
  uint32_t v;
  std::memcpy(&v, &f, 4);
  return static_cast<uint16_t>((v + 0x7fffu + ((v >> 16) & 1u)) >> 16);
}
float bf16_float(uint16_t h) {
  const uint32_t v = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &v, 4);
  return f;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? NAN : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::string fams = "bwd_mma,bwd_wgmma", hdims = "64,128", seqlens = "2048,4096,8192", causals = "0,1";
  int rounds = 5, calls = 10;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--families") fams = v;
    else if (k == "--hdims") hdims = v;
    else if (k == "--seqlens") seqlens = v;
    else if (k == "--causal") causals = v;
    else if (k == "--rounds") rounds = std::atoi(v.c_str());
    else if (k == "--calls") calls = std::atoi(v.c_str());
    else {
      fmt::print(stderr, "unknown argument {}\n", k);
      return 2;
    }
  }
  fa_context ctx;
  if (fa_context_create(nullptr, &ctx) != FA_OK || !ctx->has_device) {
    fmt::print("no GPU found: {}\n", fa_last_error());
    return 0;
  }
  const Driver* d = ctx->drv;
  CK(d->cuCtxPushCurrent(ctx->cuctx));
  CUstream stream;
  CUevent e0, e1;
  CK(d->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CK(d->cuEventCreate(&e0, CU_EVENT_DEFAULT));
  CK(d->cuEventCreate(&e1, CU_EVENT_DEFAULT));
  const std::vector<std::string> families = words(fams);
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  fmt::print("device {} SMs; families {}; bf16, 16k tokens per batch, hidden 2048; {} rounds x {} calls\n",
             ctx->sm_count, fams, rounds, calls);
  for (int D : ints(hdims))
    for (int causal : ints(causals))
      for (int S : ints(seqlens)) {
        const int B = std::max(1, 16384 / S), H = 2048 / D;
        const size_t n = size_t(B) * S * H * D;
        std::vector<uint16_t> host(n);
        Buf q(d, n * 2), k(d, n * 2), v(d, n * 2), o(d, n * 2), dout(d, n * 2), lse(d, size_t(B) * H * S * 4);
        for (Buf* b : {&q, &k, &v, &dout}) {
          for (auto& x : host) x = bf16_bits(u(rng));
          CK(d->cuMemcpyHtoD(b->p, host.data(), n * 2));
        }
        std::vector<Buf*> dq, dk, dv;
        for (size_t f = 0; f < families.size(); ++f) {
          dq.push_back(new Buf(d, n * 2));
          dk.push_back(new Buf(d, n * 2));
          dv.push_back(new Buf(d, n * 2));
        }
        fa_params p;
        fa_params_init(&p);
        p.dtype = FA_DTYPE_BF16;
        p.batch = B;
        p.seqlen_q = p.seqlen_k = S;
        p.heads_q = p.heads_kv = H;
        p.head_dim = p.head_dim_v = D;
        p.q = q.get();
        p.k = k.get();
        p.v = v.get();
        p.o = o.get();
        p.lse = reinterpret_cast<float*>(lse.get());
        p.q_stride_batch = p.k_stride_batch = p.v_stride_batch = p.o_stride_batch = int64_t(S) * H * D;
        p.q_stride_seq = p.k_stride_seq = p.v_stride_seq = p.o_stride_seq = int64_t(H) * D;
        p.q_stride_head = p.k_stride_head = p.v_stride_head = p.o_stride_head = D;
        p.mask = causal ? FA_MASK_CAUSAL : FA_MASK_NONE;
        if (fa_run(ctx, &p, stream) != FA_OK) {
          fmt::print("forward: {}\n", fa_last_error());
          return 1;
        }
        std::vector<fa_bwd_params> bp(families.size());
        size_t ws_bytes = 0;
        for (size_t f = 0; f < families.size(); ++f) {
          fa_bwd_params& b = bp[f];
          fa_bwd_params_init(&b);
          b.fwd = &p;
          b.dout = dout.get();
          b.dq = dq[f]->get();
          b.dk = dk[f]->get();
          b.dv = dv[f]->get();
          b.dout_stride_batch = b.dq_stride_batch = b.dk_stride_batch = b.dv_stride_batch = int64_t(S) * H * D;
          b.dout_stride_seq = b.dq_stride_seq = b.dk_stride_seq = b.dv_stride_seq = int64_t(H) * D;
          b.dout_stride_head = b.dq_stride_head = b.dk_stride_head = b.dv_stride_head = D;
          size_t w = 0;
          if (fa_backward_workspace_size(ctx, &b, &w) != FA_OK) {
            fmt::print("workspace size: {}\n", fa_last_error());
            return 1;
          }
          ws_bytes = std::max(ws_bytes, w);
        }
        // both plans: Delta + the dq accumulator (the same layout), so the selected family's size serves both;
        // twice that for safety
        Buf ws(d, 2 * ws_bytes);
        std::vector<fa::gen::Tunables> tun;
        std::vector<std::string> names;
        for (size_t f = 0; f < families.size(); ++f) {
          bp[f].workspace = ws.get();
          bp[f].workspace_size = 2 * ws_bytes;
          // "family" (its default tunables) or "family:key" (the tunables of that key, e.g. bwd_wgmma:c2.s2.q1)
          const size_t colon = families[f].find(':');
          const std::string fname = families[f].substr(0, colon);
          const fa::gen::Family* fam = fa::gen::find_family(fname);
          if (fam == nullptr) {
            fmt::print("no family {}\n", fname);
            return 1;
          }
          fa::rt::BwdView view;
          fa::gen::ProblemDesc pd;
          const fa::rt::Status vs = fa::rt::validate_backward(&bp[f], &view, &pd);
          if (!vs.ok()) {
            fmt::print("validate: {}\n", vs.message);
            return 1;
          }
          const fa::gen::Semantic sem = fa::gen::semantic_for(*fam, pd, ctx->arch);
          fa::gen::Tunables t = fam->defaults(sem);
          if (colon != std::string::npos && !fa::gen::parse_tunables_key(sem, families[f].substr(colon + 1), &t)) {
            fmt::print("bad tunables {}\n", families[f]);
            return 1;
          }
          tun.push_back(t);
          names.push_back(fname);
        }
        auto run = [&](size_t f) {
          const fa::rt::Status st = fa::rt::run_backward_at(ctx, &bp[f], tun[f], stream, names[f].c_str());
          if (!st.ok()) {
            fmt::print("{}: {}\n", families[f], st.message);
            std::exit(1);
          }
        };
        std::vector<std::vector<double>> t(families.size());
        for (size_t f = 0; f < families.size(); ++f) run(f);  // compile, warm
        CK(d->cuStreamSynchronize(stream));
        for (int r = 0; r < rounds; ++r)
          for (size_t ff = 0; ff < families.size(); ++ff) {
            const size_t f = (ff + r) % families.size();
            run(f);
            run(f);
            CK(d->cuEventRecord(e0, stream));
            for (int c = 0; c < calls; ++c) run(f);
            CK(d->cuEventRecord(e1, stream));
            CK(d->cuEventSynchronize(e1));
            float ms = 0;
            CK(d->cuEventElapsedTime(&ms, e0, e1));
            t[f].push_back(1e3 * ms / calls);
          }
        const double flops = 10.0 * B * H * double(S) * S * D * (causal ? 0.5 : 1.0);
        std::string line = fmt::format("d{} {} s{} b{} h{}:", D, causal ? "causal" : "full", S, B, H);
        for (size_t f = 0; f < families.size(); ++f) {
          const double us = median(t[f]);
          line += fmt::format(" {} {:.1f} us {:.0f} TFLOP/s |", families[f], us, flops / us * 1e-6);
        }
        std::vector<uint16_t> ga(n), gb(n);
        for (size_t f = 1; f < families.size(); ++f) {
          line += fmt::format(" {}/{} x{:.3f}", families[f], families[0], median(t[0]) / median(t[f]));
          // gradients of entry f against entry 0 (relative L2)
          double worst = 0;
          for (int w = 0; w < 3; ++w) {
            std::vector<Buf*>& g = w == 0 ? dq : w == 1 ? dk : dv;
            CK(d->cuMemcpyDtoH(ga.data(), g[0]->p, n * 2));
            CK(d->cuMemcpyDtoH(gb.data(), g[f]->p, n * 2));
            double num = 0, den = 0;
            for (size_t i = 0; i < n; ++i) {
              const double x = bf16_float(ga[i]), y = bf16_float(gb[i]);
              num += (x - y) * (x - y);
              den += x * x;
            }
            worst = std::max(worst, std::sqrt(num / std::max(den, 1e-30)));
          }
          line += fmt::format(" grad rel-L2 diff {:.2e};", worst);
        }
        fmt::print("{}\n", line);
        std::fflush(stdout);
        for (size_t f = 0; f < families.size(); ++f) {
          delete dq[f];
          delete dk[f];
          delete dv[f];
        }
      }
  fa_context_destroy(ctx);
  return 0;
}
