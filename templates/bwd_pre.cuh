// bwd_pre.cuh -- backward preprocessing: Delta_i = rowsum(O_i * dO_i) and clearing of the float32 accumulators.
//
// Algorithm (seed 003, step 1): dP_ij = P_ij (dA_ij - Delta_i) with Delta_i = sum_c O_ic dO_ic, computed once per
// query row here so the main backward kernels never read O. Delta is float32, laid out like the LSE (the LSE
// strides args.f.lse_sb / lse_sh index it); rows whose LSE is -inf (every key hidden) get Delta = 0.
// The CTA (batch b = blockIdx.z, query head h = blockIdx.y) owns query rows [blockIdx.x * kBlockM, + kBlockM);
// one warp per row. It also zeroes, for its rows, the float32 dQ accumulator (args.dq_accum: row r = token index
// (b * seqlen_q + i, or cu_seqlens_q[b] + i), column h * kHeadDim + c of accum_q_stride_row, 8 x 8 tiled:
// fa_dq_accum_off in fa_common.cuh) when present, and
// the int32 deterministic-dQ semaphores (args.dk_accum reinterpreted, element r * heads_q + h) when
// args.deterministic and present.
// Reads from the prelude: kDtype, kHeadDim, kHeadDimV, kBlockM, kWarps.
#ifndef FA_BWD_PRE_CUH
#define FA_BWD_PRE_CUH

extern "C" __global__ void __launch_bounds__(fa_cfg::kWarps * 32) fa_kernel(const FaBwdArgs a) {
  typedef FaElem<fa_cfg::kDtype> E;
  typedef typename E::T T;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int b = blockIdx.z, h = blockIdx.y;
  const FaSeq seq = fa_seq(a.f, b);
  const bool varlen = a.f.cu_seqlens_q != nullptr;
  const long long row0 = varlen ? seq.base_q : (long long)b * a.f.seqlen_q;
  const int i0 = blockIdx.x * fa_cfg::kBlockM;
  for (int r = warp; r < fa_cfg::kBlockM; r += fa_cfg::kWarps) {
    const int i = i0 + r;
    if (i >= seq.sq) break;
    const long long ob = varlen ? 0 : (long long)b * a.f.o_sb;
    const long long db = varlen ? 0 : (long long)b * a.do_sb;
    const T* o = static_cast<const T*>(a.f.o) + ob + (seq.base_q + i) * a.f.o_ss + (long long)h * a.f.o_sh;
    const T* dout = static_cast<const T*>(a.dout) + db + (seq.base_q + i) * a.do_ss + (long long)h * a.do_sh;
    float acc = 0.f;
    for (int c = lane; c < fa_cfg::kHeadDimV; c += 32) acc += E::to_float(o[c]) * E::to_float(dout[c]);
    acc = fa_warp_sum(acc);
    const long long li = (long long)b * a.f.lse_sb + (long long)h * a.f.lse_sh + seq.base_q + i;
    const float lse = a.f.lse[li];
    if (lane == 0) a.delta[li] = lse == -__int_as_float(0x7f800000) ? 0.f : acc;
    const long long r_tok = row0 + i;
    if (a.dq_accum) {
      const long long f0 = (long long)h * fa_cfg::kHeadDim, G = a.accum_q_stride_row * 8;
      for (int c = lane; c < fa_cfg::kHeadDim; c += 32) a.dq_accum[fa_dq_accum_off(r_tok, f0 + c, G)] = 0.f;
    }
    if (a.deterministic && a.dk_accum && lane == 0)
      reinterpret_cast<int*>(a.dk_accum)[r_tok * a.f.heads_q + h] = 0;
  }
}

#endif  // FA_BWD_PRE_CUH
