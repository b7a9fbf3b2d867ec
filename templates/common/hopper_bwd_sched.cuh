// common/hopper_bwd_sched.cuh -- the tiles of a Hopper backward CTA (bwd_wgmma) and the order it takes them in.
// A CTA owns one key block (K::kBN keys from n0, kv head g, batch b; the CTA order of bwd_mma's fa_bwd_cta,
// bwd_mma_tiling.cuh) and visits tiles (query head h of g's group, query block m of K::kBM rows). The query blocks
// [m_lo, m_hi) meet the bottom-right aligned band j - off - win_right <= i <= j - off + win_left (off = seqlen_k -
// seqlen_q; bwd_mma's rule). Orders:
//   plain:            every tile of the band, heads outer (h = g * group + it / nm), query blocks cyclically from one
//                     rotated by the key block (m_lo + (it % nm + nb % nm) % nm), full = false: the geometry decides
//                     the masking;
//   K::kSparse:       for each head of the group, the query blocks of the band that the plan's mask_blocks step did
//                     not hide wholly (the CTA's column of args.blk_cls_t, walked by common/blk_visit.cuh's cursor,
//                     last first; warp-collective, the same in every warp), full = the mask hides nothing there (no
//                     classes: every block, none full).
// The producer warp and every consumer warp walk the same order themselves (for_each), so no list is kept.
// K (the kernel's constexpr config) provides: kBM, kBN, kSparse. Needs bwd_mma_tiling.cuh (FaBwdCta),
// common/blk_visit.cuh, fa_args.cuh.
#ifndef FA_COMMON_HOPPER_BWD_SCHED_CUH
#define FA_COMMON_HOPPER_BWD_SCHED_CUH

template <class K>
struct FaBwdSched {
  const FaFwdArgs& a;
  int nb, g, b, n0;         // key block, kv head, batch, first key
  int m_lo, m_hi, nm, rot;  // the band's query blocks [m_lo, m_hi), nm of them; the plain order's rotation

  FA_DEVICE FaBwdSched(const FaFwdArgs& args, const FaBwdCta& cta)
      : a(args), nb(cta.nb), g(cta.g), b(cta.b), n0(cta.nb * K::kBN) {
    const int sq = a.seqlen_q, sk = a.seqlen_k, off = sk - sq;
    const int nmb = (sq + K::kBM - 1) / K::kBM;
    m_lo = 0;
    m_hi = nmb;
    if (a.win_right >= 0) {
      const int x = n0 - (off + a.win_right);
      if (x > sq - 1) m_hi = 0;
      else if (x > 0) m_lo = x / K::kBM;
    }
    if (a.win_left >= 0) {
      const int z = min(sk, n0 + K::kBN) - 1 - (off - a.win_left);
      m_hi = z < 0 ? 0 : min(m_hi, z / K::kBM + 1);
    }
    nm = max(0, m_hi - m_lo);
    rot = nm > 0 ? nb % nm : 0;
  }

  // Calls visit(it, h, m, full) for the CTA's tiles in order, it counting the visited ones; returns the count.
  template <class F>
  FA_DEVICE int for_each(F&& visit) const {
    int it = 0;
    if constexpr (K::kSparse) {
      for (int hl = 0; hl < a.group; ++hl) {
        const int h = g * a.group + hl;
        const unsigned char* col = a.blk_cls_t != nullptr ? a.blk_cls_t + (long long)b * a.blk_cls_sb +
                                                                (long long)h * a.blk_cls_sh + (long long)nb * a.blk_nmb
                                                          : nullptr;
        FaBlkCursor cur;
        cur.start(col, m_lo, m_hi);
        for (int e = cur.next(); e >= 0; e = cur.next()) visit(it++, h, e >> 1, (e & 1) != 0);
      }
    } else {
      const int total = nm * a.group;
      for (; it < total; ++it) {
        const int hl = it / nm;
        int r = it - hl * nm + rot;
        if (r >= nm) r -= nm;
        visit(it, g * a.group + hl, m_lo + r, false);
      }
    }
    return it;
  }
};

#endif  // FA_COMMON_HOPPER_BWD_SCHED_CUH
