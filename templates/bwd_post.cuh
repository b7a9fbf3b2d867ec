// bwd_post.cuh -- backward epilogue: dQ = scale * dq_accum converted from float32 to the dtype.
//
// The tensor-core backward (bwd_mma.cuh) accumulates dQ' = sum_j dS'_ij k_j (dS' includes the softcap derivative,
// not the softmax scale) in float32 in args.dq_accum (token row r = b * seqlen_q + i, or cu_seqlens_q[b] + i;
// column h * kHeadDim + c, 8 x 8 tiled: fa_dq_accum_off); this kernel writes dq[b, i, h, c] = scale * dQ'. The CTA
// (b = blockIdx.z, h = blockIdx.y) owns query rows [blockIdx.x * kBlockM, + kBlockM). Where dq's rows are 16-byte
// aligned (fp16/bf16, head dim a multiple of 8): one item = 8 columns of one row, two 16-byte loads of its 8 x 8
// block row and one 16-byte store, consecutive threads on consecutive column groups (a warp writes whole rows), up
// to eight items per thread loaded before any is stored; else one warp per row, four rows per warp in flight.
// Reads from the prelude: kDtype, kHeadDim, kBlockM, kWarps.
#ifndef FA_BWD_POST_CUH
#define FA_BWD_POST_CUH

extern "C" __global__ void __launch_bounds__(fa_cfg::kWarps * 32) fa_kernel(const FaBwdArgs a) {
  typedef FaElem<fa_cfg::kDtype> E;
  typedef typename E::T T;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int b = blockIdx.z, h = blockIdx.y;
  const FaSeq seq = fa_seq(a.f, b);
  const bool varlen = a.f.cu_seqlens_q != nullptr;
  const long long row0 = varlen ? seq.base_q : (long long)b * a.f.seqlen_q;
  const long long dqb = varlen ? 0 : (long long)b * a.dq_sb;
  const int i0 = blockIdx.x * fa_cfg::kBlockM;
  const long long f0 = (long long)h * fa_cfg::kHeadDim, G = a.accum_q_stride_row * 8;
  if constexpr (fa_cfg::kHeadDim % 8 == 0 && fa_cfg::kDtype != 3) {
    constexpr int kC8 = fa_cfg::kHeadDim / 8, kItems = fa_cfg::kBlockM * kC8, kThreads = fa_cfg::kWarps * 32;
    constexpr int kPer = (kItems + kThreads - 1) / kThreads, kBatch = kPer < 8 ? kPer : 8;
    const int tid = threadIdx.x;
    const float sc = a.f.scale;
    auto two = [&](float x, float y) {  // two scaled values in the dtype, low column first
      return (unsigned)E::from_float(x * sc) | ((unsigned)E::from_float(y * sc) << 16);
    };
    const unsigned long long bytes = reinterpret_cast<unsigned long long>(a.dq) |
                                     (unsigned long long)(a.dq_ss * sizeof(T)) |
                                     (unsigned long long)(a.dq_sh * sizeof(T)) | (unsigned long long)(dqb * sizeof(T));
    if ((bytes & 15) == 0) {
      for (int k0 = 0; k0 < kPer; k0 += kBatch) {
        float4 v[kBatch][2];
#pragma unroll
        for (int u = 0; u < kBatch; ++u) {
          const int idx = tid + (k0 + u) * kThreads, r = idx / kC8, c8 = idx - r * kC8;
          if (k0 + u < kPer && idx < kItems && i0 + r < seq.sq) {
            const float4* p =
                reinterpret_cast<const float4*>(a.dq_accum + fa_dq_accum_off(row0 + i0 + r, f0 + c8 * 8, G));
            v[u][0] = p[0];
            v[u][1] = p[1];
          }
        }
#pragma unroll
        for (int u = 0; u < kBatch; ++u) {
          const int idx = tid + (k0 + u) * kThreads, r = idx / kC8, c8 = idx - r * kC8;
          if (k0 + u < kPer && idx < kItems && i0 + r < seq.sq) {
            T* dst = static_cast<T*>(a.dq) + dqb + (seq.base_q + i0 + r) * a.dq_ss + (long long)h * a.dq_sh + c8 * 8;
            *reinterpret_cast<uint4*>(dst) = make_uint4(two(v[u][0].x, v[u][0].y), two(v[u][0].z, v[u][0].w),
                                                        two(v[u][1].x, v[u][1].y), two(v[u][1].z, v[u][1].w));
          }
        }
      }
      return;
    }
  }
  // kRows rows per warp at a time, their loads issued before their stores (the kernel is bound by memory latency).
  constexpr int kRows = 4, kCols = (fa_cfg::kHeadDim + 31) / 32;
  for (int rb = warp * kRows; rb < fa_cfg::kBlockM; rb += fa_cfg::kWarps * kRows) {
    float v[kRows][kCols];
#pragma unroll
    for (int u = 0; u < kRows; ++u) {
      const int i = i0 + rb + u;
#pragma unroll
      for (int k = 0; k < kCols; ++k) {
        const int c = lane + 32 * k;
        v[u][k] = rb + u < fa_cfg::kBlockM && i < seq.sq && c < fa_cfg::kHeadDim
                      ? a.dq_accum[fa_dq_accum_off(row0 + i, f0 + c, G)]
                      : 0.f;
      }
    }
#pragma unroll
    for (int u = 0; u < kRows; ++u) {
      const int i = i0 + rb + u;
      if (rb + u >= fa_cfg::kBlockM || i >= seq.sq) continue;
      T* dst = static_cast<T*>(a.dq) + dqb + (seq.base_q + i) * a.dq_ss + (long long)h * a.dq_sh;
#pragma unroll
      for (int k = 0; k < kCols; ++k) {
        const int c = lane + 32 * k;
        if (c < fa_cfg::kHeadDim) dst[c] = E::from_float(v[u][k] * a.f.scale);
      }
    }
  }
}

#endif  // FA_BWD_POST_CUH
