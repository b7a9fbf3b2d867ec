// bwd_ref.cuh -- the reference backward kernels: simple, exact to the API semantics for every feature and dtype.
//
// Recomputation backward (seed 003, step 2) with the forward's LSE and bwd_pre's Delta, per (query i, key j):
//   s1 = scale * q_i.k_j;  t = tanh(s1 / c);  s2 = c * t (softcap c, else s2 = s1);  s = s2 + bias_ij - slope_h|i+Sk-Sq-j|
//   p  = exp(s - lse_i)                    (0 when j is hidden from i, or when lse_i = -inf)
//   dp = dO_i.v_j;   ds = p (dp - Delta_i) (1 - t^2 under softcap, else 1)
//   dQ_i = scale * sum_j ds k_j,   dK_j = scale * sum_{h in group, i} ds q_i,   dV_j = sum_{h in group, i} p dO_i
// kDkDv false (bwd_ref_dq): one warp per query row i of (b = blockIdx.z, query head h = blockIdx.y), looping over its
// visible keys. kDkDv true (bwd_ref_dkdv): one warp per key row j of (b, kv head g = blockIdx.y), looping over the
// query heads of its GQA group and their query rows that see j. Deterministic by construction (fixed loop order,
// no atomics); every row is written (fully masked rows get zeros). Lanes own columns lane, lane + 32, ...
// Reads from the prelude: kDkDv, kDtype, kHeadDim, kHeadDimV, kHasBias, kHasAlibi, kHasSoftcap, kWarps (rows per
// CTA; kBlockM == kWarps).
#ifndef FA_BWD_REF_CUH
#define FA_BWD_REF_CUH

namespace fa_bwd_ref {
typedef FaElem<fa_cfg::kDtype> E;
typedef typename E::T T;
constexpr int kDPerLane = (fa_cfg::kHeadDim + 31) / 32;
constexpr int kDvPerLane = (fa_cfg::kHeadDimV + 31) / 32;

struct Score {  // s after softcap/bias/alibi, and the softcap derivative factor
  float s, dcap;
};
FA_DEVICE Score score(const FaFwdArgs& a, float dot, int b, int h, int i, int j, int sq, int sk) {
  Score r;
  float s = dot * a.scale;
  r.dcap = 1.f;
  if (fa_cfg::kHasSoftcap) {
    const float t = fa_tanh(s * a.inv_softcap);
    s = a.softcap * t;
    r.dcap = 1.f - t * t;
  }
  if (fa_cfg::kHasBias)
    s += E::to_float(static_cast<const T*>(a.bias)[(long long)b * a.bias_sb + (long long)h * a.bias_sh +
                                                   (long long)i * a.bias_sq + (long long)j * a.bias_sk]);
  if (fa_cfg::kHasAlibi) s -= a.alibi[h] * fabsf((float)(i + sk - sq - j));
  r.s = s;
  return r;
}
}  // namespace fa_bwd_ref

// minBlocksPerSM = 1 stated explicitly: without it ptxas spills a few bytes to reach register-occupancy thresholds
// (seen at 48 registers for kDkDv with 8 warps).
extern "C" __global__ void __launch_bounds__(fa_cfg::kWarps * 32, 1) fa_kernel(const FaBwdArgs args) {
  using namespace fa_bwd_ref;
  const FaFwdArgs& a = args.f;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int b = blockIdx.z;
  const FaSeq seq = fa_seq(a, b);
  const bool varlen = a.cu_seqlens_q != nullptr;
  const long long qb = varlen ? 0 : (long long)b * a.q_sb, kb = varlen ? 0 : (long long)b * a.k_sb;
  const long long vb = varlen ? 0 : (long long)b * a.v_sb, dob = varlen ? 0 : (long long)b * args.do_sb;
  const float neg_inf = -__int_as_float(0x7f800000);
  if constexpr (!fa_cfg::kDkDv) {
    const int h = blockIdx.y, g = h / a.group;
    const int i = blockIdx.x * fa_cfg::kWarps + warp;
    if (i >= seq.sq) return;
    const T* q = static_cast<const T*>(a.q) + qb + (seq.base_q + i) * a.q_ss + (long long)h * a.q_sh;
    const T* dout = static_cast<const T*>(args.dout) + dob + (seq.base_q + i) * args.do_ss + (long long)h * args.do_sh;
    const T* k = static_cast<const T*>(a.k) + kb + seq.base_k * a.k_ss + (long long)g * a.k_sh;
    const T* v = static_cast<const T*>(a.v) + vb + seq.base_k * a.v_ss + (long long)g * a.v_sh;
    float qr[kDPerLane], dq[kDPerLane], dor[kDvPerLane];
#pragma unroll
    for (int t = 0; t < kDPerLane; ++t) {
      const int c = lane + 32 * t;
      qr[t] = c < fa_cfg::kHeadDim ? E::to_float(q[c]) : 0.f;
      dq[t] = 0.f;
    }
#pragma unroll
    for (int t = 0; t < kDvPerLane; ++t) {
      const int c = lane + 32 * t;
      dor[t] = c < fa_cfg::kHeadDimV ? E::to_float(dout[c]) : 0.f;
    }
    const long long li = (long long)b * a.lse_sb + (long long)h * a.lse_sh + seq.base_q + i;
    const float lse = a.lse[li], delta = args.delta[li];
    int lo, hi;
    fa_key_range(a, i, seq.sq, seq.sk, &lo, &hi);
    if (lse == neg_inf) hi = lo;
    for (int j = lo; j < hi; ++j) {
      const T* kj = k + (long long)j * a.k_ss;
      const T* vj = v + (long long)j * a.v_ss;
      float dot = 0.f, dp = 0.f;
#pragma unroll
      for (int t = 0; t < kDPerLane; ++t) {
        const int c = lane + 32 * t;
        if (c < fa_cfg::kHeadDim) dot += qr[t] * E::to_float(kj[c]);
      }
#pragma unroll
      for (int t = 0; t < kDvPerLane; ++t) {
        const int c = lane + 32 * t;
        if (c < fa_cfg::kHeadDimV) dp += dor[t] * E::to_float(vj[c]);
      }
      dot = fa_warp_sum(dot);
      dp = fa_warp_sum(dp);
      const Score sc = score(a, dot, b, h, i, j, seq.sq, seq.sk);
      const float p = expf(sc.s - lse);
      const float ds = p * (dp - delta) * sc.dcap;
#pragma unroll
      for (int t = 0; t < kDPerLane; ++t) {
        const int c = lane + 32 * t;
        if (c < fa_cfg::kHeadDim) dq[t] += ds * E::to_float(kj[c]);
      }
    }
    const long long dqb = varlen ? 0 : (long long)b * args.dq_sb;
    T* dqp = static_cast<T*>(args.dq) + dqb + (seq.base_q + i) * args.dq_ss + (long long)h * args.dq_sh;
#pragma unroll
    for (int t = 0; t < kDPerLane; ++t) {
      const int c = lane + 32 * t;
      if (c < fa_cfg::kHeadDim) dqp[c] = E::from_float(dq[t] * a.scale);
    }
  } else {
    const int g = blockIdx.y;
    const int j = blockIdx.x * fa_cfg::kWarps + warp;
    if (j >= seq.sk) return;
    const T* kj = static_cast<const T*>(a.k) + kb + (seq.base_k + j) * a.k_ss + (long long)g * a.k_sh;
    const T* vj = static_cast<const T*>(a.v) + vb + (seq.base_k + j) * a.v_ss + (long long)g * a.v_sh;
    float kr[kDPerLane], dk[kDPerLane], vr[kDvPerLane], dv[kDvPerLane];
#pragma unroll
    for (int t = 0; t < kDPerLane; ++t) {
      const int c = lane + 32 * t;
      kr[t] = c < fa_cfg::kHeadDim ? E::to_float(kj[c]) : 0.f;
      dk[t] = 0.f;
    }
#pragma unroll
    for (int t = 0; t < kDvPerLane; ++t) {
      const int c = lane + 32 * t;
      vr[t] = c < fa_cfg::kHeadDimV ? E::to_float(vj[c]) : 0.f;
      dv[t] = 0.f;
    }
    // Query rows that see key j: lo(i) <= j < hi(i), with diag(i) = i + sk - sq.
    const int off = seq.sk - seq.sq;
    int ilo = 0, ihi = seq.sq;
    if (a.win_right >= 0) ilo = max(ilo, j - off - a.win_right);
    if (a.win_left >= 0) ihi = min(ihi, j - off + a.win_left + 1);
    for (int h = g * a.group; h < (g + 1) * a.group; ++h) {
      const T* q = static_cast<const T*>(a.q) + qb + seq.base_q * a.q_ss + (long long)h * a.q_sh;
      const T* dout = static_cast<const T*>(args.dout) + dob + seq.base_q * args.do_ss + (long long)h * args.do_sh;
      const long long lb = (long long)b * a.lse_sb + (long long)h * a.lse_sh + seq.base_q;
      for (int i = ilo; i < ihi; ++i) {
        const float lse = a.lse[lb + i];
        if (lse == neg_inf) continue;
        const float delta = args.delta[lb + i];
        const T* qi = q + (long long)i * a.q_ss;
        const T* doi = dout + (long long)i * args.do_ss;
        float dot = 0.f, dp = 0.f;
#pragma unroll
        for (int t = 0; t < kDPerLane; ++t) {
          const int c = lane + 32 * t;
          if (c < fa_cfg::kHeadDim) dot += kr[t] * E::to_float(qi[c]);
        }
#pragma unroll
        for (int t = 0; t < kDvPerLane; ++t) {
          const int c = lane + 32 * t;
          if (c < fa_cfg::kHeadDimV) dp += vr[t] * E::to_float(doi[c]);
        }
        dot = fa_warp_sum(dot);
        dp = fa_warp_sum(dp);
        const Score sc = score(a, dot, b, h, i, j, seq.sq, seq.sk);
        const float p = expf(sc.s - lse);
        const float ds = p * (dp - delta) * sc.dcap;
#pragma unroll
        for (int t = 0; t < kDPerLane; ++t) {
          const int c = lane + 32 * t;
          if (c < fa_cfg::kHeadDim) dk[t] += ds * E::to_float(qi[c]);
        }
#pragma unroll
        for (int t = 0; t < kDvPerLane; ++t) {
          const int c = lane + 32 * t;
          if (c < fa_cfg::kHeadDimV) dv[t] += p * E::to_float(doi[c]);
        }
      }
    }
    const long long dkb = varlen ? 0 : (long long)b * args.dk_sb, dvb = varlen ? 0 : (long long)b * args.dv_sb;
    T* dkp = static_cast<T*>(args.dk) + dkb + (seq.base_k + j) * args.dk_ss + (long long)g * args.dk_sh;
    T* dvp = static_cast<T*>(args.dv) + dvb + (seq.base_k + j) * args.dv_ss + (long long)g * args.dv_sh;
#pragma unroll
    for (int t = 0; t < kDPerLane; ++t) {
      const int c = lane + 32 * t;
      if (c < fa_cfg::kHeadDim) dkp[c] = E::from_float(dk[t] * a.scale);
    }
#pragma unroll
    for (int t = 0; t < kDvPerLane; ++t) {
      const int c = lane + 32 * t;
      if (c < fa_cfg::kHeadDimV) dvp[c] = E::from_float(dv[t]);
    }
  }
}

#endif  // FA_BWD_REF_CUH
