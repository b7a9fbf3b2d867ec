// common/split.cuh -- the work of one CTA of a split-KV decode kernel (fwd_split, fwd_mla): the CTA owns ROWS packed
// rows of one (batch b, KV head) starting at packed row r0 (packed row R = i * group + hq: query token i, query head
// g * group + hq) and split `split` of ns; the key blocks (BN keys) its rows see, [nb_lo, nb_hi), are cut into ns
// equal runs and the split walks its run. Lengths come from fa_seq_used (seqused_k on the device), so the grid
// depends on the capacity only. Masks are bottom-right aligned to the used length (common/seq.cuh's band): key j is
// visible to token i iff lo(i) <= j < hi(i), lo = i + sk - sq - win_left (win_left >= 0), hi = i + sk - sq +
// win_right + 1 (win_right >= 0). Reads fa_cfg::kMask.
#ifndef FA_COMMON_SPLIT_CUH
#define FA_COMMON_SPLIT_CUH

// The CTA's sequence lengths, its rows, the keys seen by some row [key_lo, key_hi) and by every row [full_lo,
// full_hi), and its split's run of key blocks [blk0, blk0 + n_blocks) (rows <= 0: the tile is past the packed rows
// and the CTA has nothing to do).
struct FaSplitWork {
  int sq, sk, rows, key_lo, key_hi, full_lo, full_hi, blk0, n_blocks;
};
template <int ROWS, int BN>
FA_DEVICE FaSplitWork fa_split_work(const FaFwdArgs& a, int b, int r0, int split, int ns) {
  FaSplitWork w;
  const FaSeq seq = fa_seq_used(a, b);
  w.sq = seq.sq;
  w.sk = seq.sk;
  const int group = a.group, sq = w.sq, sk = w.sk;
  w.rows = min(ROWS, sq * group - r0);
  const int i_first = r0 / group, i_last = (r0 + max(w.rows, 1) - 1) / group;
  w.key_lo = 0, w.key_hi = sk, w.full_lo = 0, w.full_hi = sk;
  if constexpr (fa_cfg::kMask != 0) {
    if (a.win_left >= 0) {
      w.key_lo = max(0, i_first + sk - sq - a.win_left);
      w.full_lo = max(0, i_last + sk - sq - a.win_left);
    }
    if (a.win_right >= 0) {
      w.key_hi = min(sk, i_last + sk - sq + a.win_right + 1);
      w.full_hi = min(sk, i_first + sk - sq + a.win_right + 1);
    }
  }
  const int nb_lo = w.key_lo / BN;
  const int nb_hi = w.key_hi > w.key_lo ? (w.key_hi + BN - 1) / BN : nb_lo;
  const int per_split = (nb_hi - nb_lo + ns - 1) / ns;
  w.blk0 = nb_lo + split * per_split;
  w.n_blocks = max(0, min(nb_hi, w.blk0 + per_split) - w.blk0);
  return w;
}

#endif  // FA_COMMON_SPLIT_CUH
