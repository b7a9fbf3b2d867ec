// common/fwd_score.cuh -- one S element of the tensor-core forwards (fwd_mma, fwd_wgmma) on the feature path, and
// the user's element mask. Included by those templates after the rendered user code (fa_user_score, fa_user_mask).
//   t = log2e * (softcap * tanh(acc * scale / softcap) + bias(i, j)) - slope * |i + sk - sq - j|     (log2 units)
//   t = log2e * score_mod(t * ln 2, b, h, i, j)        for in-range (i, j) only (the user sees natural units)
// bias_g points at (b, h)'s bias plane (null without a bias); slope is ALiBi's slope times log2e.
// Reads fa_cfg: kDtype, kHasSoftcap, kHasBias, kHasAlibi, kHasScoreMod, kHasMaskMod.
#ifndef FA_COMMON_FWD_SCORE_CUH
#define FA_COMMON_FWD_SCORE_CUH

FA_DEVICE float fa_feature_score(float acc, const FaFwdArgs& a, const unsigned short* bias_g, float slope, int b,
                                 int h, int i, int j, int sq, int sk, const FaUser& u) {
  float x = acc * a.scale;
  if constexpr (fa_cfg::kHasSoftcap) x = a.softcap * fa_tanh(x * a.inv_softcap);
  if constexpr (fa_cfg::kHasBias) {
    if (i < sq && j < sk)
      x += FaElem<fa_cfg::kDtype>::to_float(bias_g[(long long)i * a.bias_sq + (long long)j * a.bias_sk]);
  }
  x *= 1.4426950408889634f;
  if constexpr (fa_cfg::kHasAlibi) x -= slope * fabsf((float)(i + sk - sq - j));
  if constexpr (fa_cfg::kHasScoreMod) {
    if (i < sq && j < sk) x = fa_user_score(x * 0.6931471805599453f, b, h, i, j, u) * 1.4426950408889634f;
  }
  return x;
}

// Whether mask_mod hides key j from query i (rows past the query length are hidden: user code sees in-range (i, j)
// only; the caller has already hidden j outside the band and past the key length). False without a mask_mod.
FA_DEVICE bool fa_user_hides(int b, int h, int i, int j, int sq, const FaUser& u) {
  if constexpr (fa_cfg::kHasMaskMod) return i >= sq || !fa_user_mask(b, h, i, j, u);
  return false;
}

// The user's mask over one accumulator row of an S fragment in the mma / wgmma layout: element q = 2 * jt + e holds
// key j0 + 8 * jt + e (j0 = the block's first key + 2 * (lane & 3)), q < kElems (<= 64). Bit q of the result is set
// where the key is hidden: outside [lo, hi) (offsets from j0: the band and the key range) or by mask_mod. A loop
// unrolled 4 times: the user's code runs with few registers of its own beside the live accumulators (a full unroll
// let ptxas hoist every element's loads and spill) while 4 elements' loads are in flight, and the caller applies the
// bits in its unrolled loop.
template <bool kWide>
struct FaMaskBits {  // the mask of up to 32 elements, or 64 (kWide)
  typedef unsigned T;
};
template <>
struct FaMaskBits<true> {
  typedef unsigned long long T;
};
template <int kElems>
FA_DEVICE typename FaMaskBits<(kElems > 32)>::T fa_user_hidden_bits(int b, int h, int i, int j0, int lo, int hi,
                                                                    int sq, const FaUser& u) {
  static_assert(kElems <= 64, "fa_user_hidden_bits: at most 64 elements");
  typedef typename FaMaskBits<(kElems > 32)>::T Bits;
  Bits bits = 0;
#pragma unroll 4
  for (int q = 0; q < kElems; ++q) {
    const int jj = (q >> 1) * 8 + (q & 1);
    if (jj < lo || jj >= hi || fa_user_hides(b, h, i, j0 + jj, sq, u)) bits |= (Bits)1 << q;
  }
  return bits;
}

#endif  // FA_COMMON_FWD_SCORE_CUH
