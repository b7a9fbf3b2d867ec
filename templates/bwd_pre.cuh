// bwd_pre.cuh -- backward preprocessing: Delta_i = rowsum(O_i * dO_i) and clearing of the float32 accumulators.
//
// Algorithm (seed 003, step 1): dP_ij = P_ij (dA_ij - Delta_i) with Delta_i = sum_c O_ic dO_ic, computed once per
// query row here so the main backward kernels never read O. Delta is float32, laid out like the LSE (the LSE
// strides args.f.lse_sb / lse_sh index it); rows whose LSE is -inf (every key hidden) get Delta = 0.
// The CTA (batch b = blockIdx.z, query head h = blockIdx.y) owns query rows [blockIdx.x * kBlockM, + kBlockM).
// Delta: for fp16/bf16 rows that are 16-byte aligned (base pointers and strides), eight lanes share a row, each
// reading 16-byte chunks, and a warp covers four rows at a time, the loads of up to eight chunks per lane (several
// row groups where the head dim is small) issued before any of them is summed; else (and for fp32, where the
// reference backward sums dP in the same order) one warp per row, lane l summing elements l, l + 32, ... It also
// zeroes, for its rows, the float32 dQ accumulator (args.dq_accum: row r = token index (b * seqlen_q + i, or
// cu_seqlens_q[b] + i), column h * kHeadDim + c of accum_q_stride_row, 8 x 8 tiled: fa_dq_accum_off in
// common/dq_accum.cuh; the 8 columns of one row in one block are 32 contiguous bytes: two 16-byte stores) when present,
// and the int32 deterministic-dQ semaphores (args.dk_accum reinterpreted, element r * heads_q + h) when
// args.deterministic and present. With attention sinks (kHasSinks) each CTA also writes its partial sum of their
// gradient, sum over its rows of exp(sink_h - lse_i) * Delta_i (0 where lse is -inf), into args.dsink_part (the
// bwd_sinks step reduces the partials: fa_args.cuh), reading back the Delta it stored.
// Reads from the prelude: kDtype, kHeadDim, kHeadDimV, kBlockM, kWarps, kHasSinks.
#ifndef FA_BWD_PRE_CUH
#define FA_BWD_PRE_CUH

extern "C" __global__ void __launch_bounds__(fa_cfg::kWarps * 32) fa_kernel(const FaBwdArgs a) {
  typedef FaElem<fa_cfg::kDtype> E;
  typedef typename E::T T;
  constexpr int kThreads = fa_cfg::kWarps * 32, kVec = 16 / (int)sizeof(T), kChunks = fa_cfg::kHeadDimV / kVec;
  static_assert(fa_cfg::kHeadDimV % kVec == 0 && fa_cfg::kHeadDim % 8 == 0, "bwd_pre: head dims multiples of 8");
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int b = blockIdx.z, h = blockIdx.y;
  const FaSeq seq = fa_seq(a.f, b);
  const bool varlen = a.f.cu_seqlens_q != nullptr;
  const long long row0 = varlen ? seq.base_q : (long long)b * a.f.seqlen_q;
  const int i0 = blockIdx.x * fa_cfg::kBlockM;
  const long long ob = varlen ? 0 : (long long)b * a.f.o_sb;
  const long long db = varlen ? 0 : (long long)b * a.do_sb;
  const T* o0 = static_cast<const T*>(a.f.o) + ob + seq.base_q * a.f.o_ss + (long long)h * a.f.o_sh;
  const T* d0 = static_cast<const T*>(a.dout) + db + seq.base_q * a.do_ss + (long long)h * a.do_sh;
  const long long lb = (long long)b * a.f.lse_sb + (long long)h * a.f.lse_sh + seq.base_q;
  auto store_delta = [&](int i, float sum) {
    const float lse = a.f.lse[lb + i];
    a.delta[lb + i] = lse == -__int_as_float(0x7f800000) ? 0.f : sum;
  };
  // Every row start 16-byte aligned: the base pointers and the row strides (in bytes) are multiples of 16.
  const unsigned long long align = reinterpret_cast<unsigned long long>(o0) | reinterpret_cast<unsigned long long>(d0) |
                                   (unsigned long long)(a.f.o_ss * (long long)sizeof(T)) |
                                   (unsigned long long)(a.do_ss * (long long)sizeof(T));
  // 16-bit dtypes only: fp32 runs the reference backward, whose dP = dO.v sums in the element order below, so
  // with seqlen_k = 1 (O = v) dP - Delta cancels exactly there as it does in the float64 oracle.
  if (fa_cfg::kDtype != 3 && (align & 15) == 0) {
    static_assert(fa_cfg::kBlockM % (fa_cfg::kWarps * 4) == 0, "bwd_pre: warps x 4 rows tile the block");
    const int sub = lane >> 3, l8 = lane & 7;  // row of the four, lane within its eight
    // kIters row groups of four per warp, taken kGroup at a time: kGroup * kPer 16-byte chunks of O and of dO per
    // lane in flight (at most 8 each), loaded before the sums (the Delta stores in between would otherwise keep
    // the compiler from hoisting the next group's loads).
    constexpr int kIters = fa_cfg::kBlockM / (fa_cfg::kWarps * 4), kPer = (kChunks + 7) / 8;
    constexpr int kGroup = kPer >= 8 ? 1 : (8 / kPer < kIters ? 8 / kPer : kIters);
    for (int k0 = 0; k0 < kIters; k0 += kGroup) {
      uint4 ov[kGroup][kPer], dv[kGroup][kPer];
#pragma unroll
      for (int u = 0; u < kGroup; ++u) {
        const int i = i0 + warp * 4 + (k0 + u) * fa_cfg::kWarps * 4 + sub;
        const bool ok = k0 + u < kIters && i < seq.sq;
        const uint4* o = reinterpret_cast<const uint4*>(o0 + (ok ? i : 0) * a.f.o_ss);
        const uint4* d = reinterpret_cast<const uint4*>(d0 + (ok ? i : 0) * a.do_ss);
#pragma unroll
        for (int c = 0; c < kPer; ++c) {
          const bool okc = ok && l8 + 8 * c < kChunks;
          ov[u][c] = okc ? o[l8 + 8 * c] : make_uint4(0, 0, 0, 0);
          dv[u][c] = okc ? d[l8 + 8 * c] : make_uint4(0, 0, 0, 0);
        }
      }
#pragma unroll
      for (int u = 0; u < kGroup; ++u) {
        const int i = i0 + warp * 4 + (k0 + u) * fa_cfg::kWarps * 4 + sub;
        float acc = 0.f;
#pragma unroll
        for (int c = 0; c < kPer; ++c) {
          const T* ot = reinterpret_cast<const T*>(&ov[u][c]);
          const T* dt = reinterpret_cast<const T*>(&dv[u][c]);
#pragma unroll
          for (int e = 0; e < kVec; ++e) acc += E::to_float(ot[e]) * E::to_float(dt[e]);
        }
        acc = fa_lanes_sum<8>(acc);  // the row's eight lanes
        if (l8 == 0 && k0 + u < kIters && i < seq.sq) store_delta(i, acc);
      }
    }
  } else {
    for (int r = warp; r < fa_cfg::kBlockM; r += fa_cfg::kWarps) {
      const int i = i0 + r;
      if (i >= seq.sq) break;
      const T* o = o0 + i * a.f.o_ss;
      const T* d = d0 + i * a.do_ss;
      float acc = 0.f;
      for (int c = lane; c < fa_cfg::kHeadDimV; c += 32) acc += E::to_float(o[c]) * E::to_float(d[c]);
      acc = fa_warp_sum(acc);
      if (lane == 0) store_delta(i, acc);
    }
  }
  // Zeroing: one item = 8 columns of one row (32 contiguous bytes); consecutive threads take consecutive rows of an
  // 8-row group, so a warp's stores cover contiguous 256-byte blocks.
  const int rows = min(fa_cfg::kBlockM, seq.sq - i0);
  if (a.dq_accum) {
    const long long f0 = (long long)h * fa_cfg::kHeadDim, G = a.accum_q_stride_row * 8;
    constexpr int kC8 = fa_cfg::kHeadDim / 8;
    for (int idx = tid; idx < fa_cfg::kBlockM * kC8; idx += kThreads) {
      const int r = (idx & 7) + ((idx >> 3) / kC8) * 8, c8 = (idx >> 3) % kC8;
      if (r >= rows) continue;
      float4* p = reinterpret_cast<float4*>(a.dq_accum + fa_dq_accum_off(row0 + i0 + r, f0 + c8 * 8, G));
      p[0] = make_float4(0.f, 0.f, 0.f, 0.f);
      p[1] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
  }
  if (a.deterministic && a.dk_accum)
    for (int r = tid; r < rows; r += kThreads)
      reinterpret_cast<int*>(a.dk_accum)[(row0 + i0 + r) * a.f.heads_q + h] = 0;
  // Attention sinks: row i's term of the sinks' gradient is exp(sink_h - lse_i) * Delta_i (0 where lse is -inf).
  // Warp 0 reads back the Delta the CTA stored (visible to the block after the barrier) and sums its rows into the
  // CTA's partial (bwd_sinks.cuh adds the partials up); every CTA writes its part, 0 past the sequence's rows
  // (rows <= 0). Computing the terms here rather than beside each Delta keeps the loads above free of the extra state.
  if constexpr (fa_cfg::kHasSinks) {
    __syncthreads();
    if (warp == 0) {
      const float sink = a.f.sinks[h];
      float acc = 0.f;
      for (int r = lane; r < rows; r += 32) {
        const float lse = a.f.lse[lb + i0 + r];
        acc += lse == -__int_as_float(0x7f800000) ? 0.f : expf(sink - lse) * a.delta[lb + i0 + r];
      }
      acc = fa_warp_sum(acc);
      if (lane == 0) a.dsink_part[(long long)h * a.dsink_parts + (long long)b * a.dsink_blocks + blockIdx.x] = acc;
    }
  }
}

#endif  // FA_BWD_PRE_CUH
