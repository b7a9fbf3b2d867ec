// common/hopper_softmax.cuh -- a Hopper forward consumer's scores: the score policy (scale, softcap, bias, ALiBi,
// score_mod; the built-in band, the end of the keys and mask_mod) and the online softmax, over the S accumulator of a
// wgmma m64nNk16 in registers.
// Fragment layout (FaWgThread): warp w of consumer warpgroup cw holds rows 64 cw + 16 w + lane / 4 (+8); element
// jt * 4 + hh * 2 + e of s[kBN / 2] is row rbase + 8 hh, column 8 jt + 2 (lane % 4) + e of the key block.
//   feature path (K::kFeat): t = log2e * (softcap * tanh(S scale / softcap) + bias - slope |i + sk - sq - j|),
//                            then score_mod in natural units (common/fwd_score.cuh: fa_feature_score);
//   plain path:              t = S, scale_log2 folded into the exp2's FFMA (mul = scale_log2; 1 on the feature path).
// Masking runs only where needed: a block crossing the band edge or the end of the keys (keys [lo, hi) visible per
// row; only a window has a left bound), or, with block skipping (K::kSparse), a block mask_blocks classified partial:
// mask_mod on the key groups its sub-tile codes say it cuts (common/fwd_score.cuh: fa_wg_user_mask).
// Online softmax (base 2): m' = max(m, rowmax t); P = exp2(t mul - m' mul); l = l exp2(m mul - m' mul) + rowsum P;
// O is rescaled by corr = exp2(m mul - m' mul) (fa_wg_rescale_o) and P packed to the A fragments of O += P V
// (fa_wg_pack_p). At the end l is summed over the row's quad (row_sum) and lse = (m mul + log2 l) ln 2.
// K (the kernel's constexpr config) provides: kBM, kBN, kFeat, kSparse. Reads fa_cfg: kEvenK, kMask, kHasMaskMod (and
// what fa_feature_score reads). Needs common/fwd_score.cuh (after the rendered user code), common/sm80.cuh (pack2).
#ifndef FA_COMMON_HOPPER_SOFTMAX_CUH
#define FA_COMMON_HOPPER_SOFTMAX_CUH

#define FA_WG_NEG_INF __int_as_float(0xff800000)

// A consumer thread's place in its warpgroup and in the wgmma fragments (rbase: the tile row of its first accumulator
// row, +8 the second).
struct FaWgThread {
  int cw, ltid, warp, lane, gq, tq, rbase;
};

// The score policy of one consumer thread's rows of tile (b, h, rows from m0).
template <class K>
struct FaWgScore {
  const FaFwdArgs& args;
  const unsigned short* bias_g;  // (b, h)'s bias plane (kHasBias)
  float slope;                   // ALiBi's slope times log2e (kHasAlibi)
  int b, h, m0, sq, sk, diag0, rbase, tq;

  // Scores of the key block at kn in log2 units on the feature path (nothing on the plain path).
  FA_DEVICE void features(float (&s)[K::kBN / 2], int kn, const FaUser& u) const {
    if constexpr (K::kFeat) {
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int i = m0 + rbase + hh * 8;
#pragma unroll
        for (int jt = 0; jt < K::kBN / 8; ++jt)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int j = kn + jt * 8 + tq * 2 + e;
            s[jt * 4 + hh * 2 + e] =
                fa_feature_score(s[jt * 4 + hh * 2 + e], args, bias_g, slope, b, h, i, j, sq, sk, u);
          }
      }
    }
  }
  // Whether the visit `entry` ((n_block << 1) | full) at key kn needs a mask: a classified block (kSparse) unless
  // the mask hides nothing there (full ones skip every mask: built-in, keys, user), else a block crossing the end of
  // the keys or the band's edge.
  FA_DEVICE bool need_mask(int entry, int kn) const {
    bool need;
    if constexpr (K::kSparse) {
      need = (entry & 1) == 0;
    } else {
      need = !fa_cfg::kEvenK && kn + K::kBN > sk;
      if constexpr (fa_cfg::kMask != 0) {
        if (args.win_left >= 0) need |= kn < m0 + K::kBM - 1 + sk - sq - args.win_left;
        if (args.win_right >= 0) need |= kn + K::kBN - 1 > diag0 + args.win_right;
      }
    }
    return need;
  }
  // -inf on the hidden keys of the block at kn: mask_mod (with the built-in band and the key range) on the key groups
  // of this warp's rows that mw says the mask cuts, or the built-in band and the key range.
  FA_DEVICE void mask(float (&s)[K::kBN / 2], int kn, const FaWgMaskWords& mw, const FaUser& u) const {
    if constexpr (fa_cfg::kHasMaskMod) {
      fa_wg_user_mask<K::kBN / 8>(s, mw, b, h, m0 + rbase, kn + tq * 2, sq, sk, args.win_left, args.win_right, u);
    } else {
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        // keys [lo, hi) are visible; only a window (kMask 2) has a left bound, so causal and unmasked blocks
        // compare one bound per element
        const int i = m0 + rbase + hh * 8;
        int lo = 0, hi = sk;
        if constexpr (fa_cfg::kMask == 2) {
          if (args.win_left >= 0) lo = i + sk - sq - args.win_left;
        }
        if constexpr (fa_cfg::kMask != 0) {
          if (args.win_right >= 0) hi = min(hi, i + sk - sq + args.win_right + 1);
        }
        lo -= kn + tq * 2;  // compare the column offset inside the block
        hi -= kn + tq * 2;
#pragma unroll
        for (int jt = 0; jt < K::kBN / 8; ++jt)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int jj = jt * 8 + e;
            if ((fa_cfg::kMask == 2 && jj < lo) || jj >= hi) s[jt * 4 + hh * 2 + e] = FA_WG_NEG_INF;
          }
      }
    }
  }
  // The scores of visit `entry`, masked where needed.
  FA_DEVICE void apply(float (&s)[K::kBN / 2], int entry, const FaWgMaskWords& mw, const FaUser& u) const {
    const int kn = (entry >> 1) * K::kBN;
    features(s, kn, u);
    if (need_mask(entry, kn)) mask(s, kn, mw, u);
  }
};

// The running max and sum of a thread's two rows.
template <int kBN>
struct FaWgSoftmax {
  float row_m[2], row_l[2];

  // Scores -> probabilities in place (base 2), running max / sum, the rescale factors of O (corr).
  FA_DEVICE void update(float (&s)[kBN / 2], float mul, float (&corr)[2]) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      // row max and row sum as trees over the kBN / 8 column pairs (short dependency chains)
      float t[kBN / 8];
#pragma unroll
      for (int jt = 0; jt < kBN / 8; ++jt) t[jt] = fmaxf(s[jt * 4 + hh * 2], s[jt * 4 + hh * 2 + 1]);
#pragma unroll
      for (int w = 1; w < kBN / 8; w *= 2)
#pragma unroll
        for (int i = 0; i + w < kBN / 8; i += 2 * w) t[i] = fmaxf(t[i], t[i + w]);
      float mx = fmaxf(row_m[hh], t[0]);
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float ms = mx == FA_WG_NEG_INF ? 0.f : mx * mul;
      corr[hh] = fa_exp2(row_m[hh] * mul - ms);
      row_m[hh] = mx;
#pragma unroll
      for (int jt = 0; jt < kBN / 8; ++jt) {
        const float p0 = fa_exp2(fmaf(s[jt * 4 + hh * 2], mul, -ms));
        const float p1 = fa_exp2(fmaf(s[jt * 4 + hh * 2 + 1], mul, -ms));
        s[jt * 4 + hh * 2] = p0;
        s[jt * 4 + hh * 2 + 1] = p1;
        t[jt] = p0 + p1;
      }
#pragma unroll
      for (int w = 1; w < kBN / 8; w *= 2)
#pragma unroll
        for (int i = 0; i + w < kBN / 8; i += 2 * w) t[i] += t[i + w];
      row_l[hh] = row_l[hh] * corr[hh] + t[0];
    }
  }
  // Row hh's sum over the quad holding it (the final l).
  FA_DEVICE float row_sum(int hh) const {
    float l = row_l[hh];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    return l;
  }
  // Row hh's log-sum-exp (natural log) given its final l; -inf for a row that saw no key.
  FA_DEVICE float lse(int hh, float l, float mul) const {
    const float mx = row_m[hh];
    return (l > 0.f && mx != FA_WG_NEG_INF) ? (mx * mul + __log2f(l)) * 0.6931471805599453f : FA_WG_NEG_INF;
  }
};

// P (the probabilities in the S fragment) -> the A fragments of O += P V (16-bit pairs).
template <int kBN>
FA_DEVICE void fa_wg_pack_p(unsigned (&p)[kBN / 16][4], const float (&s)[kBN / 2]) {
#pragma unroll
  for (int kk = 0; kk < kBN / 16; ++kk) {
    p[kk][0] = fa_sm80::pack2(s[kk * 8 + 0], s[kk * 8 + 1]);
    p[kk][1] = fa_sm80::pack2(s[kk * 8 + 2], s[kk * 8 + 3]);
    p[kk][2] = fa_sm80::pack2(s[kk * 8 + 4], s[kk * 8 + 5]);
    p[kk][3] = fa_sm80::pack2(s[kk * 8 + 6], s[kk * 8 + 7]);
  }
}
// O (the accumulator fragment of kNV columns) to the new row maxima.
template <int kNV>
FA_DEVICE void fa_wg_rescale_o(float (&o)[kNV / 2], const float (&corr)[2]) {
#pragma unroll
  for (int jt = 0; jt < kNV / 8; ++jt) {
    o[jt * 4 + 0] *= corr[0];
    o[jt * 4 + 1] *= corr[0];
    o[jt * 4 + 2] *= corr[1];
    o[jt * 4 + 3] *= corr[1];
  }
}

#endif  // FA_COMMON_HOPPER_SOFTMAX_CUH
