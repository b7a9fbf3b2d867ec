// fwd_ref.cuh -- the reference forward kernel: simple, exact to the API semantics for every feature and dtype.
//
// Algorithm (seeds 000-003, FlashAttention-2 loop order): one warp per query row i of (batch b, head h); the
// visible key range [lo, hi) comes from the mask; keys are visited in tiles of 32 (one key per lane) with the online
// softmax recurrence
//   s_j = scale * q.k_j  -> softcap: c * tanh(s_j / c) -> + bias_ij -> - slope_h * |i + Sk - Sq - j|
//   m'  = max(m, max_j s_j);  l' = l * e^(m - m') + sum_j e^(s_j - m');  o' = o * e^(m - m') + sum_j e^(s_j - m') v_j
// and at the end o = o / l, lse = m + log l (o = 0 and lse = -inf when no key is visible or every score is -inf);
// with attention sinks (kHasSinks) the row's sink column joins there (common/sinks.cuh: fa_sink_row_end).
// Each lane owns output columns lane, lane + 32, ... of head_dim_v. Accumulation is float32 (natural exp, expf).
// User code (fa_mods): s = fa_user_score(s, b, h, i, j, u) after ALiBi (kHasScoreMod), and key j is hidden
// from query i when fa_user_mask(b, h, i, j, u) is false (kHasMaskMod), on top of the built-in mask.
// KV cache: the keys of sequence b are min(seqlen_k, seqused_k[b]) when seqused_k is given (fa_seq_used); with
// kPaged, key j is row j % page_size of page block_table[b][j / page_size] (a page outside the pool masks the key).
// Reads from the prelude: kDtype, kHeadDim, kHeadDimV, kMask, kHasBias, kHasAlibi, kHasSoftcap, kHasLse, kPaged,
// kHasMaskMod, kHasScoreMod, kHasSinks, kWarps (rows per CTA; kBlockM == kWarps, kBlockN == 32).
#ifndef FA_FWD_REF_CUH
#define FA_FWD_REF_CUH

#include "common/rows.cuh"

namespace fa_fwd_ref {
typedef FaElem<fa_cfg::kDtype> E;
typedef typename E::T T;
constexpr int kDV = fa_cfg::kHeadDimV;
constexpr int kDVSlots = fa_row_slots(kDV);  // output columns per lane (common/rows.cuh)

// Key row j of (b, kv head g) in k (ss, sh: its seq / head strides; base: the contiguous sequence's row 0), or null
// when its page is outside the pool.
FA_DEVICE const T* key_row(const FaFwdArgs& a, const void* pool, const T* base, long long sb, long long ss,
                           long long sh, int b, int g, int j) {
  if (!fa_cfg::kPaged) return base + (long long)j * ss;
  const long long page = fa_kv_page(a, b, j, sb);
  if (page < 0) return nullptr;
  return static_cast<const T*>(pool) + page + (long long)(j & (a.page_size - 1)) * ss + (long long)g * sh;
}
}  // namespace fa_fwd_ref

extern "C" __global__ void __launch_bounds__(fa_cfg::kWarps * 32, 1) fa_kernel(const FaFwdArgs a FA_USER_PARAM) {
  using namespace fa_fwd_ref;
  extern __shared__ float fa_smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int b = blockIdx.z, h = blockIdx.y;
  const int i = blockIdx.x * fa_cfg::kWarps + warp;
  const FaSeq seq = fa_seq_used(a, b);
  if (i >= seq.sq) return;
  const int g = h / a.group;
  const long long qb = a.cu_seqlens_q ? 0 : (long long)b * a.q_sb;
  const long long kb = a.cu_seqlens_q ? 0 : (long long)b * a.k_sb;
  const long long vb = a.cu_seqlens_q ? 0 : (long long)b * a.v_sb;
  const long long ob = a.cu_seqlens_q ? 0 : (long long)b * a.o_sb;
  const T* q = static_cast<const T*>(a.q) + qb + (seq.base_q + i) * a.q_ss + (long long)h * a.q_sh;
  const T* k = static_cast<const T*>(a.k) + kb + seq.base_k * a.k_ss + (long long)g * a.k_sh;
  const T* v = static_cast<const T*>(a.v) + vb + seq.base_k * a.v_ss + (long long)g * a.v_sh;
  T* o = static_cast<T*>(a.o) + ob + (seq.base_q + i) * a.o_ss + (long long)h * a.o_sh;

  float* qs = fa_smem + warp * fa_cfg::kHeadDim;
  for (int d = lane; d < fa_cfg::kHeadDim; d += 32) qs[d] = E::to_float(q[d]);
  __syncwarp();

  int lo = 0, hi = seq.sk;
  if (fa_cfg::kMask != 0) fa_key_range(a, i, seq.sq, seq.sk, &lo, &hi);
  const float slope = fa_cfg::kHasAlibi ? a.alibi[h] : 0.0f;
  const T* bias_row = nullptr;
  if (fa_cfg::kHasBias)
    bias_row =
        static_cast<const T*>(a.bias) + (long long)b * a.bias_sb + (long long)h * a.bias_sh + (long long)i * a.bias_sq;

  float m = -INFINITY, l = 0.0f;
  float acc[kDVSlots] = {};

  for (int j0 = lo; j0 < hi; j0 += 32) {
    const int j = j0 + lane;
    float s = -INFINITY;
    if (j < hi) {
      const T* kr = key_row(a, a.k, k, a.k_sb, a.k_ss, a.k_sh, b, g, j);
      if (kr != nullptr) {
        float dot = 0.0f;
#pragma unroll 8
        for (int d = 0; d < fa_cfg::kHeadDim; ++d) dot = fmaf(qs[d], E::to_float(kr[d]), dot);
        s = dot * a.scale;
        if (fa_cfg::kHasSoftcap) s = a.softcap * fa_tanh(s * a.inv_softcap);
        if (fa_cfg::kHasBias) s += E::to_float(bias_row[(long long)j * a.bias_sk]);
        if (fa_cfg::kHasAlibi) s -= slope * fabsf((float)(i + seq.sk - seq.sq - j));
        if (fa_cfg::kHasScoreMod) s = fa_user_score(s, b, h, i, j, FA_USER_ARGS);
        if (fa_cfg::kHasMaskMod && !fa_user_mask(b, h, i, j, FA_USER_ARGS)) s = -INFINITY;
      }
    }
    const float m_new = fmaxf(m, fa_warp_max(s));
    if (m_new == -INFINITY) continue;    // every score so far is -inf (e.g. a -inf bias): nothing to add
    const float corr = expf(m - m_new);  // m == -inf gives 0
    const float p = (s == -INFINITY) ? 0.0f : expf(s - m_new);
    l = l * corr + fa_warp_sum(p);
    m = m_new;
#pragma unroll
    for (int t = 0; t < kDVSlots; ++t) acc[t] *= corr;
    const int nk = min(32, hi - j0);
    for (int jj = 0; jj < nk; ++jj) {
      const float pj = __shfl_sync(0xffffffffu, p, jj);
      if (fa_cfg::kPaged && pj == 0.0f) continue;  // also every key of a page outside the pool (never read)
      const T* vr = key_row(a, a.v, v, a.v_sb, a.v_ss, a.v_sh, b, g, j0 + jj);  // fmaf as written, not
                                                                                // fa_row_axpy's acc += p v
#pragma unroll
      for (int t = 0; t < kDVSlots; ++t) {
        const int d = lane + 32 * t;
        if (d < kDV) acc[t] = fmaf(pj, E::to_float(vr[d]), acc[t]);
      }
    }
  }
  float o_mul = l > 0.0f ? 1.0f / l : 0.0f, lse = l > 0.0f ? m + logf(l) : -INFINITY;
  if constexpr (fa_cfg::kHasSinks) {  // the sink column (common/sinks.cuh; m in natural units)
    const FaRowEnd e = fa_sink_row_end(m * 1.4426950408889634f, l, a.sinks[h]);
    o_mul = e.o_mul;
    lse = e.lse;
  }
  fa_row_store<E, kDV>(o, acc, o_mul, lane);
  if (fa_cfg::kHasLse && a.lse != nullptr && lane == 0)
    a.lse[(long long)b * a.lse_sb + (long long)h * a.lse_sh + seq.base_q + i] = lse;
}

#endif  // FA_FWD_REF_CUH
