// common/fwd_score.cuh -- one S element of the tensor-core forwards (fwd_mma, fwd_wgmma) on the feature path, and
// the user's element mask. Included by those templates after the rendered user code (fa_user_score, fa_user_mask).
//   t = log2e * (softcap * tanh(acc * scale / softcap) + bias(i, j)) - slope * |i + sk - sq - j|     (log2 units)
//   t = log2e * score_mod(t * ln 2, b, h, i, j)        for in-range (i, j) only (the user sees natural units)
// bias_g points at (b, h)'s bias plane (null without a bias); slope is ALiBi's slope times log2e.
// The bias has o's dtype (fa_cfg::kODtype). Reads fa_cfg: kODtype, kHasSoftcap, kHasBias, kHasAlibi, kHasScoreMod,
// kHasMaskMod.
#ifndef FA_COMMON_FWD_SCORE_CUH
#define FA_COMMON_FWD_SCORE_CUH

FA_DEVICE float fa_feature_score(float acc, const FaFwdArgs& a, const unsigned short* bias_g, float slope, int b, int h,
                                 int i, int j, int sq, int sk, const FaUser& u) {
  float x = acc * a.scale;
  if constexpr (fa_cfg::kHasSoftcap) x = a.softcap * fa_tanh(x * a.inv_softcap);
  if constexpr (fa_cfg::kHasBias) {
    if (i < sq && j < sk)
      x += FaElem<fa_cfg::kODtype>::to_float(bias_g[(long long)i * a.bias_sq + (long long)j * a.bias_sk]);
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

// What masks one warp's fragment of a partial block (fwd_wgmma): its 8 code bits (2 per key group g < 4), and with
// `pre` the lane's words of hidden pairs of each group (w[g]; mask_blocks' blk_bits).
struct FaWgMaskWords {
  unsigned codes;
  bool pre;
  unsigned w[4];
};

// The combined mask over one warp's S fragment in the wgmma layout where the tile is partial (fwd_wgmma, kHasMaskMod):
// element jt * 4 + hh * 2 + e (jt < kJ = kBN / 8) holds row i0 + 8 hh and key j0 + 8 jt + e (j0 = the block's first
// key + 2 * (lane & 3)). Keys past sk, outside the built-in band of window (wl, wr) (kMask; < 0: unbounded) or hidden
// by mask_mod get -inf. m.codes: the warp's 2-bit code of each key group g < 4 (jt in [g kJ / 4, (g + 1) kJ / 4);
// mask_blocks' sub-tiles, fa_args.cuh): 0 every pair hidden (set, no user code), 2 none (nothing to do), 1 some:
// with m.pre (m.w[g]: this lane's word of group g in the warp's strip of the tile's blk_bits slot) the group's bits
// are given, without it the group's pairs are evaluated without branches (user code sees in-range (i, j) only: i and
// j clamped; rows past sq are never stored, clamped keys are hidden by the key range), one 8-key column of both rows
// per step of a rolled loop (one key load serves both rows; unrolled, ptxas hoisted the pairs' loads and spilled
// with 3 consumers at head dim 64), into a bit per pair that an unrolled loop applies (S is written in straight-line
// code only: writes under the branches spilled there too). The band is recomputed per step from the row, keeping
// the live registers few. Warp-uniform.
template <int kJ, int kG, int kLo, int kHi>  // key group kG: jt in [kLo, kHi) of fa_wg_user_mask (<= 8 columns)
FA_DEVICE void fa_wg_user_mask_group(float (&s)[kJ * 4], unsigned code, const FaWgMaskWords& m, int b, int h, int i0,
                                     int j0, int sq, int sk, int wl, int wr, const FaUser& u) {
  static_assert(kHi - kLo <= 8, "fa_wg_user_mask: at most 8 columns (32 pairs) per key group");
  // Fixed length with seqlen_k a multiple of the key block: every visited key is in range (no test, no clamp).
  constexpr bool kKeysIn = fa_cfg::kEvenK && !fa_cfg::kVarlen;
  unsigned bits = code == 0u ? ~0u : 0u;  // bit 4 (jt - kLo) + 2 hh + e: the pair hidden
  if (code == 1u && m.pre) {
    bits = m.w[kG];  // mask_blocks' word of this lane and group (fa_args.cuh: blk_bits)
  } else if (code == 1u) {
#pragma unroll 1
    for (int jt = kLo; jt < kHi; ++jt) {
      unsigned nib = 0u;  // this column pair's 4 bits, placed with one shift
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int j = j0 + jt * 8 + e;
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          const int i = i0 + 8 * hh;
          bool hidden = kKeysIn ? false : j >= sk;
          if constexpr (fa_cfg::kMask != 0) {
            if (wl >= 0) hidden |= j < i + sk - sq - wl;
            if (wr >= 0) hidden |= j > i + sk - sq + wr;
          }
          hidden |= !fa_user_mask(b, h, min(i, sq - 1), kKeysIn ? j : min(j, sk - 1), u);
          nib |= hidden ? 1u << (hh * 2 + e) : 0u;
        }
      }
      bits |= nib << ((jt - kLo) * 4);
    }
  }
#pragma unroll
  for (int q = kLo * 4; q < kHi * 4; ++q)
    if ((bits >> (q - kLo * 4)) & 1u) s[q] = __int_as_float(0xff800000);
}
template <int kJ>
FA_DEVICE void fa_wg_user_mask(float (&s)[kJ * 4], const FaWgMaskWords& m, int b, int h, int i0, int j0, int sq, int sk,
                               int wl, int wr, const FaUser& u) {
  fa_wg_user_mask_group<kJ, 0, 0, kJ / 4>(s, m.codes & 3u, m, b, h, i0, j0, sq, sk, wl, wr, u);
  fa_wg_user_mask_group<kJ, 1, kJ / 4, 2 * kJ / 4>(s, (m.codes >> 2) & 3u, m, b, h, i0, j0, sq, sk, wl, wr, u);
  fa_wg_user_mask_group<kJ, 2, 2 * kJ / 4, 3 * kJ / 4>(s, (m.codes >> 4) & 3u, m, b, h, i0, j0, sq, sk, wl, wr, u);
  fa_wg_user_mask_group<kJ, 3, 3 * kJ / 4, kJ>(s, (m.codes >> 6) & 3u, m, b, h, i0, j0, sq, sk, wl, wr, u);
}

#endif  // FA_COMMON_FWD_SCORE_CUH
