// bwd_post.cuh -- backward epilogue: dQ = scale * dq_accum converted from float32 to the dtype.
//
// The tensor-core backward (bwd_mma.cuh) accumulates dQ' = sum_j dS'_ij k_j (dS' includes the softcap derivative,
// not the softmax scale) in float32 in args.dq_accum (token row r = b * seqlen_q + i, or cu_seqlens_q[b] + i;
// column h * kHeadDim + c, 8 x 8 tiled: fa_dq_accum_off); this kernel writes dq[b, i, h, c] = scale * dQ'. The CTA
// (b = blockIdx.z, h = blockIdx.y) owns query rows [blockIdx.x * kBlockM, + kBlockM); one warp per row, four rows
// per warp in flight.
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
