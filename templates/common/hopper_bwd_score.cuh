// common/hopper_bwd_score.cuh -- a Hopper backward consumer's scores of one tile: P^T and dS^T recomputed from the
// S^T and dP^T accumulators (wgmma m64n64k16, 64 keys x 64 queries) with the score policy and the masks.
// Fragment layout (transposed against the forward's, common/hopper_softmax.cuh): element 4 j + 2 hh + e of s[32] is
// key krow + 8 hh (krow = the consumer's first key + 16 warp + lane / 4), query i0 + 8 j + 2 (lane % 4) + e.
//   plain:      P^T = exp2(S^T scale_log2 - lse2_i) (probs), then dS^T = P^T (dP^T - Delta_i) (grads);
//   score_mod:  (K::kScore, user code) per pair s = score_mod(scale S^T) and g = score_mod_grad at the same raw value,
//               P^T = exp2(s log2e - lse2_i), dS^T = P^T (dP^T - Delta_i) g (0 where P^T is) (probs_grads).
// lse2 (base 2; +inf hides the row) and Delta come from the tile's ring slot (common/hopper_bwd_ring.cuh).
// Masks run only where needed (need_mask): a tile whose consumer key range crosses the band edge or the end of the
// keys, or, with block skipping (K::kSparse), one mask_blocks did not classify full. hidden_bits gives the hidden
// pairs, bit 4 j + 2 hh + e: the built-in band and the key range in straight-line code, or (K::kSparse) with mask_mod
// per pair in a rolled loop over the 8-query column groups (common/fwd_score.cuh does the same for the forward);
// hide zeroes them (P^T, and dS^T on the score_mod path, whatever score_mod and its derivative gave).
// K (the kernel's constexpr config) provides: kBM, kSparse. Needs common/sm90.cuh, the rendered user code
// (fa_user_mask, fa_user_score, fa_user_score_grad), fa_args.cuh.
#ifndef FA_COMMON_HOPPER_BWD_SCORE_CUH
#define FA_COMMON_HOPPER_BWD_SCORE_CUH

// The score policy of one consumer thread's pairs of tile (b, h, queries from i0; keys from kc0).
template <class K>
struct FaBwdScore {
  const FaFwdArgs& a;
  const FaUser& u;
  int b, h, i0, sq, sk, off;
  int kc0, krow, tq;  // the consumer's first key, the key of accumulator rows hh = 0 (+8: hh = 1), lane % 4

  // Whether the tile needs a mask (full_tile: mask_blocks found nothing hidden there, kSparse).
  FA_DEVICE bool need_mask(bool full_tile) const {
    bool need;
    if constexpr (K::kSparse) {
      need = !full_tile;  // the classes cover every mask (built-in, keys, user)
    } else {
      need = kc0 + 64 > sk;
      if (a.win_left >= 0) need |= kc0 < i0 + K::kBM - 1 + off - a.win_left;
      if (a.win_right >= 0) need |= kc0 + 63 > i0 + off + a.win_right;
    }
    return need;
  }
  // The hidden pairs of a masked tile, bit 4 j + 2 hh + e.
  FA_DEVICE unsigned hidden_bits() const {
    unsigned bits = 0u;
    if constexpr (K::kSparse) {
#pragma unroll 1
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int kj = krow + 8 * hh, i = i0 + 8 * j + 2 * tq + e;
            bool hidden = kj >= sk || i >= sq;
            if (a.win_left >= 0) hidden |= kj < i + off - a.win_left;
            if (a.win_right >= 0) hidden |= kj > i + off + a.win_right;
            hidden |= !fa_user_mask(b, h, min(i, sq - 1), min(kj, sk - 1), u);
            bits |= (unsigned)hidden << (4 * j + 2 * hh + e);
          }
    } else {
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int kj = krow + 8 * hh;
        // query i sees key kj iff lo <= i < hi (and kj < sk)
        int lo = 0, hi = kj < sk ? sq : 0;
        if (a.win_right >= 0) lo = max(lo, kj - off - a.win_right);
        if (a.win_left >= 0) hi = min(hi, kj - off + a.win_left + 1);
        lo -= i0 + 2 * tq;
        hi -= i0 + 2 * tq;
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int cc = 8 * j + e;
            bits |= (unsigned)(cc < lo || cc >= hi) << (4 * j + 2 * hh + e);
          }
      }
    }
    return bits;
  }
  // Zero the hidden pairs of x.
  FA_DEVICE static void hide(float (&x)[32], unsigned bits) {
#pragma unroll
    for (int q = 0; q < 32; ++q)
      if ((bits >> q) & 1u) x[q] = 0.f;
  }
  FA_DEVICE static void hide(float (&x)[32], float (&y)[32], unsigned bits) {
#pragma unroll
    for (int q = 0; q < 32; ++q)
      if ((bits >> q) & 1u) x[q] = y[q] = 0.f;
  }

  // Plain: S^T -> P^T in place (sl: the slot's lse2 array), masked pairs 0.
  FA_DEVICE void probs(float (&s)[32], unsigned sl, bool masked) const {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const float2 l2 = fa_ld_shared_f2(sl + (unsigned)((8 * j + 2 * tq) * 4));
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        s[4 * j + 2 * hh] = fa_exp2(fmaf(s[4 * j + 2 * hh], a.scale_log2, -l2.x));
        s[4 * j + 2 * hh + 1] = fa_exp2(fmaf(s[4 * j + 2 * hh + 1], a.scale_log2, -l2.y));
      }
    }
    if (masked) hide(s, hidden_bits());
  }
  // Plain: dP^T -> dS^T = P^T (dP^T - Delta) in place (sd: the slot's Delta array).
  FA_DEVICE void grads(float (&dp)[32], const float (&p)[32], unsigned sd) const {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const float2 d2 = fa_ld_shared_f2(sd + (unsigned)((8 * j + 2 * tq) * 4));
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        dp[4 * j + 2 * hh] = p[4 * j + 2 * hh] * (dp[4 * j + 2 * hh] - d2.x);
        dp[4 * j + 2 * hh + 1] = p[4 * j + 2 * hh + 1] * (dp[4 * j + 2 * hh + 1] - d2.y);
      }
    }
  }
  // score_mod: S^T -> P^T and dP^T -> dS^T in place. A rolled loop over the 8-query column groups, each step taking
  // the first 4 pairs of S^T / dP^T and appending its results (the arrays rotate through registers; unrolled, ptxas
  // hoisted every pair's user-code loads and spilled at head dim 128); hidden pairs 0 in both.
  FA_DEVICE void probs_grads(float (&s)[32], float (&dp)[32], unsigned sl, unsigned sd, bool masked) const {
#pragma unroll 1
    for (int j = 0; j < 8; ++j) {
      const float2 l2 = fa_ld_shared_f2(sl + (unsigned)((8 * j + 2 * tq) * 4));
      const float2 d2 = fa_ld_shared_f2(sd + (unsigned)((8 * j + 2 * tq) * 4));
      float rs[4], rd[4];
#pragma unroll
      for (int hh = 0; hh < 2; ++hh)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int q = 2 * hh + e;
          const int i = min(i0 + 8 * j + 2 * tq + e, sq - 1), kj = min(krow + 8 * hh, sk - 1);
          const float raw = s[q] * a.scale;
          const float g = fa_user_score_grad(raw, b, h, i, kj, u);
          const float sv = fa_user_score(raw, b, h, i, kj, u);
          const float pv = fa_exp2(fmaf(sv, 1.4426950408889634f, -(e ? l2.y : l2.x)));
          rs[q] = pv;
          rd[q] = pv != 0.f ? pv * (dp[q] - (e ? d2.y : d2.x)) * g : 0.f;
        }
#pragma unroll
      for (int q = 0; q < 28; ++q) {
        s[q] = s[q + 4];
        dp[q] = dp[q + 4];
      }
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        s[28 + q] = rs[q];
        dp[28 + q] = rd[q];
      }
    }
    if (masked) hide(s, dp, hidden_bits());
  }
};

#endif  // FA_COMMON_HOPPER_BWD_SCORE_CUH
