// bwd_sinks.cuh -- the gradient of the attention sinks (fa_params.sinks; a step of every backward plan of a problem
// with sinks, after bwd_pre):
//   dsinks[h] = -sum over batch entries b and query rows i of P_sink(b, h, i) * Delta(b, h, i),
//   P_sink = exp(sink_h - lse_i) (the sink's probability: the LSE includes it), Delta_i = rowsum(dO_i * O_i),
// from the partial sums bwd_pre wrote per CTA (a.dsink_part[h * dsink_parts + n], fa_args.cuh). One CTA per query
// head: thread t sums parts t, t + kThreads, ... in order, each warp's lanes meet in fa_warp_sum, and thread 0 adds
// the warps' sums in warp order. No atomics: the same bits run to run, deterministic mode or not. dsinks is written,
// never accumulated. Reads fa_cfg: kWarps.
#ifndef FA_BWD_SINKS_CUH
#define FA_BWD_SINKS_CUH

extern "C" __global__ void __launch_bounds__(fa_cfg::kWarps * 32) fa_kernel(const FaBwdArgs a) {
  constexpr int kThreads = fa_cfg::kWarps * 32;
  __shared__ float s_warp[fa_cfg::kWarps];
  const int h = (int)blockIdx.x, tid = (int)threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int n_parts = a.dsink_parts;
  const float* part = a.dsink_part + (long long)h * n_parts;
  float acc = 0.f;
  for (int n = tid; n < n_parts; n += kThreads) acc += part[n];
  acc = fa_warp_sum(acc);
  if (lane == 0) s_warp[warp] = acc;
  __syncthreads();
  if (tid == 0) {
    float total = 0.f;
#pragma unroll
    for (int w = 0; w < fa_cfg::kWarps; ++w) total += s_warp[w];
    a.dsinks[h] = -total;
  }
}

#endif  // FA_BWD_SINKS_CUH
