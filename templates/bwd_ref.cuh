// bwd_ref.cuh -- the reference backward kernels: simple, exact to the API semantics for every feature and dtype.
//
// Recomputation backward (seed 003, step 2) with the forward's LSE and bwd_pre's Delta, per (query i, key j):
//   s1 = scale * q_i.k_j;  t = tanh(s1 / c);  s2 = c * t (softcap c, else s2 = s1);  s = s2 + bias_ij -
//   slope_h|i+Sk-Sq-j| s' = score_mod(s) (user code, kHasScoreMod; else s) p  = exp(s' - lse_i)                   (0
//   when j is hidden from i by the mask or mask_mod, or when lse_i = -inf) dp = dO_i.v_j;   ds = p (dp - Delta_i) (1 -
//   t^2 under softcap, else 1) score_mod_grad(s) (user code, else 1) dQ_i = scale * sum_j ds k_j,   dK_j = scale *
//   sum_{h in group, i} ds q_i,   dV_j = sum_{h in group, i} p dO_i
// kDkDv false (bwd_ref_dq): one warp per query row i of (b = blockIdx.z, query head h = blockIdx.y), looping over its
// visible keys. kDkDv true (bwd_ref_dkdv): one warp per key row j of (b, kv head g = blockIdx.y), looping over the
// query heads of its GQA group and their query rows that see j. Deterministic by construction (fixed loop order,
// no atomics); every row is written (fully masked rows get zeros). Lanes own columns lane, lane + 32, ...
// Hidden pairs (mask_mod false: kHasMaskMod) are skipped before their dot products. User code runs for in-range
// (i, j) only; fa_user_* are rendered by generator/user_mods.cpp.
// Reads from the prelude: kDkDv, kDtype, kHeadDim, kHeadDimV, kHasBias, kHasAlibi, kHasSoftcap, kHasMaskMod,
// kHasScoreMod, kWarps (rows per CTA; kBlockM == kWarps).
#ifndef FA_BWD_REF_CUH
#define FA_BWD_REF_CUH

#include "common/rows.cuh"

namespace fa_bwd_ref {
typedef FaElem<fa_cfg::kDtype> E;
typedef typename E::T T;
constexpr int kD = fa_cfg::kHeadDim, kDV = fa_cfg::kHeadDimV;
constexpr int kDSlots = fa_row_slots(kD), kDVSlots = fa_row_slots(kDV);  // per lane (common/rows.cuh)

struct Score {  // s after softcap/bias/alibi/score_mod, and the derivative factor of softcap and score_mod
  float s, dcap;
};
FA_DEVICE Score score(const FaFwdArgs& a, float dot, int b, int h, int i, int j, int sq, int sk, const FaUser& u) {
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
  if (fa_cfg::kHasScoreMod) {  // the derivative at the raw s, the value the forward's score_mod received
    r.dcap *= fa_user_score_grad(s, b, h, i, j, u);
    s = fa_user_score(s, b, h, i, j, u);
  }
  r.s = s;
  return r;
}
struct Grad {  // p and ds of one (query i, key j) pair
  float p, ds;
};
// From this lane's parts of the dot products q_i.k_j and dO_i.v_j (summed across the warp here).
FA_DEVICE Grad grad(const FaFwdArgs& a, float dot, float dp, float lse, float delta, int b, int h, int i, int j, int sq,
                    int sk, const FaUser& u) {
  dot = fa_warp_sum(dot);
  dp = fa_warp_sum(dp);
  const Score sc = score(a, dot, b, h, i, j, sq, sk, u);
  Grad g;
  g.p = expf(sc.s - lse);
  g.ds = g.p * (dp - delta) * sc.dcap;
  return g;
}
}  // namespace fa_bwd_ref

// minBlocksPerSM = 1 stated explicitly: without it ptxas spills a few bytes to reach register-occupancy thresholds
// (seen at 48 registers for kDkDv with 8 warps).
extern "C" __global__ void __launch_bounds__(fa_cfg::kWarps * 32, 1) fa_kernel(const FaBwdArgs args FA_USER_PARAM) {
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
    float qr[kDSlots], dq[kDSlots] = {}, dor[kDVSlots];
    fa_row_load<E, kD>(qr, q, lane);
    fa_row_load<E, kDV>(dor, dout, lane);
    const long long li = (long long)b * a.lse_sb + (long long)h * a.lse_sh + seq.base_q + i;
    const float lse = a.lse[li], delta = args.delta[li];
    int lo, hi;
    fa_key_range(a, i, seq.sq, seq.sk, &lo, &hi);
    if (lse == neg_inf) hi = lo;
    for (int j = lo; j < hi; ++j) {
      if (fa_cfg::kHasMaskMod && !fa_user_mask(b, h, i, j, FA_USER_ARGS)) continue;  // warp-uniform (one i, j)
      const T* kj = k + (long long)j * a.k_ss;
      const T* vj = v + (long long)j * a.v_ss;
      const Grad gr = grad(a, fa_row_dot<E, kD>(qr, kj, lane), fa_row_dot<E, kDV>(dor, vj, lane), lse, delta, b, h, i,
                           j, seq.sq, seq.sk, FA_USER_ARGS);
      fa_row_axpy<E, kD>(dq, gr.ds, kj, lane);
    }
    const long long dqb = varlen ? 0 : (long long)b * args.dq_sb;
    T* dqp = static_cast<T*>(args.dq) + dqb + (seq.base_q + i) * args.dq_ss + (long long)h * args.dq_sh;
    fa_row_store<E, kD>(dqp, dq, a.scale, lane);
  } else {
    const int g = blockIdx.y;
    const int j = blockIdx.x * fa_cfg::kWarps + warp;
    if (j >= seq.sk) return;
    const T* kj = static_cast<const T*>(a.k) + kb + (seq.base_k + j) * a.k_ss + (long long)g * a.k_sh;
    const T* vj = static_cast<const T*>(a.v) + vb + (seq.base_k + j) * a.v_ss + (long long)g * a.v_sh;
    float kr[kDSlots], dk[kDSlots] = {}, vr[kDVSlots], dv[kDVSlots] = {};
    fa_row_load<E, kD>(kr, kj, lane);
    fa_row_load<E, kDV>(vr, vj, lane);
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
        if (fa_cfg::kHasMaskMod && !fa_user_mask(b, h, i, j, FA_USER_ARGS)) continue;  // warp-uniform (one i, j)
        const float delta = args.delta[lb + i];
        const T* qi = q + (long long)i * a.q_ss;
        const T* doi = dout + (long long)i * args.do_ss;
        const Grad gr = grad(a, fa_row_dot<E, kD>(kr, qi, lane), fa_row_dot<E, kDV>(vr, doi, lane), lse, delta, b, h, i,
                             j, seq.sq, seq.sk, FA_USER_ARGS);
        fa_row_axpy<E, kD>(dk, gr.ds, qi, lane);
        fa_row_axpy<E, kDV>(dv, gr.p, doi, lane);
      }
    }
    const long long dkb = varlen ? 0 : (long long)b * args.dk_sb, dvb = varlen ? 0 : (long long)b * args.dv_sb;
    T* dkp = static_cast<T*>(args.dk) + dkb + (seq.base_k + j) * args.dk_ss + (long long)g * args.dk_sh;
    T* dvp = static_cast<T*>(args.dv) + dvb + (seq.base_k + j) * args.dv_ss + (long long)g * args.dv_sh;
    fa_row_store<E, kD>(dkp, dk, a.scale, lane);
    fa_row_store<E, kDV>(dvp, dv, 1.f, lane);
  }
}

#endif  // FA_BWD_REF_CUH
