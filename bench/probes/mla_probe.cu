// mla_probe.cu -- times the fwd_mla kernel (templates/fwd_mla.cuh) alone on an MLA decode shape, outside the library:
// bf16, 128 query heads over one latent head, d 576 / dv 512, one query token, a paged latent cache (page 64, pages in
// a random order), every key used, num_splits partials (the fwd_combine step is not run). Built by
// bench/probes/mla_probe.sh once per variant (a copy of the template with one stage left out), so the time of each
// stage is the difference to the full kernel (docs/design_notes.md, "Measuring").
//   mla_probe BATCH KEYS SPLITS [ITERS]   -> one line: variant, shape, median us per launch, cache TB/s, TFLOP/s
// The fa_cfg prelude below is what the library renders for fwd_mla (generator/config.cpp), at the default knobs.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#ifndef PROBE_L2
#define PROBE_L2 0
#endif
#ifndef PROBE_SCHED
#define PROBE_SCHED 0
#endif
#ifndef PROBE_NAME
#define PROBE_NAME "full"
#endif

namespace fa_cfg {
constexpr int kArch = 90;
constexpr int kDtype = 2;
constexpr int kHeadDim = 576;
constexpr int kHeadDimV = 512;
constexpr int kMask = 0;
constexpr bool kHasBias = false;
constexpr bool kHasAlibi = false;
constexpr bool kHasSoftcap = false;
constexpr bool kVarlen = false;
constexpr bool kEvenK = false;
constexpr bool kHasLse = false;
constexpr bool kPaged = true;
constexpr bool kHasMaskMod = false;
constexpr bool kHasScoreMod = false;
constexpr int kBlockN = 64;
constexpr int kStages = 2;
constexpr int kSplitTarget = 1;
constexpr int kL2Ahead = PROBE_L2;
constexpr int kSched = PROBE_SCHED;
}  // namespace fa_cfg
#include "fa_args.cuh"
#include "fa_common.cuh"
#include "fwd_mla.cuh"

#define CK(x)                                                                         \
  do {                                                                                \
    cudaError_t e_ = (x);                                                             \
    if (e_ != cudaSuccess) {                                                          \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s BATCH KEYS SPLITS [ITERS]\n", argv[0]);
    return 2;
  }
  const int B = std::atoi(argv[1]), S = std::atoi(argv[2]), NS = std::atoi(argv[3]);
  const int iters = argc > 4 ? std::atoi(argv[4]) : 20;
  const int H = 128, D = 576, DV = 512, PS = 64;
  const int pages = B * S / PS;
  std::mt19937 rng(1);
  auto rand_bf16 = [&](size_t n) {
    std::vector<unsigned short> h(n);
    std::uniform_int_distribution<int> u(0, 255);
    for (auto& x : h) x = (unsigned short)(0x3f00 + u(rng));  // bf16 in [0.5, 2), signs alternating
    for (size_t i = 0; i < n; i += 2) h[i] |= 0x8000;
    return h;
  };
  const size_t nq = size_t(B) * H * D, nk = size_t(pages) * PS * D;
  void *q, *k, *o, *po, *pl, *bt, *used;
  CK(cudaMalloc(&q, nq * 2));
  CK(cudaMalloc(&k, nk * 2));
  CK(cudaMalloc(&o, size_t(B) * H * DV * 2));
  CK(cudaMalloc(&po, size_t(NS) * B * H * DV * 4));
  CK(cudaMalloc(&pl, size_t(NS) * B * H * 4));
  CK(cudaMalloc(&bt, size_t(pages) * 4));
  CK(cudaMalloc(&used, size_t(B) * 4));
  {
    auto hq = rand_bf16(nq);
    CK(cudaMemcpy(q, hq.data(), nq * 2, cudaMemcpyHostToDevice));
    const size_t chunk = size_t(1) << 26;
    auto hk = rand_bf16(chunk);
    for (size_t off = 0; off < nk; off += chunk)
      CK(cudaMemcpy((unsigned short*)k + off, hk.data(), std::min(chunk, nk - off) * 2, cudaMemcpyHostToDevice));
    std::vector<int> perm(pages);
    for (int i = 0; i < pages; ++i) perm[i] = i;
    std::shuffle(perm.begin(), perm.end(), rng);
    CK(cudaMemcpy(bt, perm.data(), size_t(pages) * 4, cudaMemcpyHostToDevice));
    std::vector<int> u(B, S);
    CK(cudaMemcpy(used, u.data(), size_t(B) * 4, cudaMemcpyHostToDevice));
  }
  FaFwdArgs a{};
  a.q = q;
  a.k = k;
  a.v = k;
  a.o = o;
  a.q_sb = (long long)H * D;
  a.q_ss = (long long)H * D;
  a.q_sh = D;
  a.k_sb = (long long)PS * D;
  a.k_ss = D;
  a.k_sh = D;
  a.v_sb = a.k_sb;
  a.v_ss = a.k_ss;
  a.v_sh = a.k_sh;
  a.o_sb = (long long)H * DV;
  a.o_ss = (long long)H * DV;
  a.o_sh = DV;
  a.batch = B;
  a.seqlen_q = 1;
  a.seqlen_k = S;
  a.heads_q = H;
  a.heads_kv = 1;
  a.group = H;
  a.win_left = -1;
  a.win_right = -1;
  a.scale = 1.f / 24.f;
  a.scale_log2 = a.scale * 1.4426950408889634f;
  a.seqused_k = (const int*)used;
  a.block_table = (const int*)bt;
  a.bt_stride = S / PS;
  a.page_size = PS;
  a.page_shift = 6;
  a.num_pages = pages;
  a.num_splits = NS;
  a.part_o = (float*)po;
  a.part_lse = (float*)pl;
  const int smem = fa_mla::kSmemBytes;
  CK(cudaFuncSetAttribute(fa_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const dim3 grid((H + 63) / 64, NS, B);
  for (int i = 0; i < 3; ++i) fa_kernel<<<grid, 384, smem>>>(a);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  std::vector<float> ts;
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  for (int i = 0; i < iters; ++i) {
    CK(cudaEventRecord(e0));
    fa_kernel<<<grid, 384, smem>>>(a);
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    ts.push_back(ms);
  }
  CK(cudaGetLastError());
  std::sort(ts.begin(), ts.end());
  const double ms = ts[ts.size() / 2];
  const double bytes = double(B) * S * D * 2, flops = double(B) * H * S * (D + DV) * 2;
  std::printf("PROBE %-12s l2 %d batch %4d keys %6d splits %3d  %9.1f us  %6.3f TB/s  %6.1f TFLOP/s\n", PROBE_NAME,
              PROBE_L2, B, S, NS, ms * 1e3, bytes / (ms * 1e-3) / 1e12, flops / (ms * 1e-3) / 1e12);
  return 0;
}
