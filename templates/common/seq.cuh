// common/seq.cuh -- the sequence geometry of one (batch, head) work item and the mask band, as every kernel reads
// them from the kernel ABI (fa_args.cuh): sequence lengths and token offsets (varlen: from cu_seqlens), and the
// key range a query row sees under the window (win_left, win_right; causal is (-1, 0)), bottom-right aligned:
// key j is visible to query i iff i + sk - sq - win_left <= j <= i + sk - sq + win_right (a negative side is open).
#ifndef FA_COMMON_SEQ_CUH
#define FA_COMMON_SEQ_CUH

// Sequence geometry of one (batch, head) work item, shared by all kernels.
struct FaSeq {
  int sq, sk;                // lengths of this sequence
  long long base_q, base_k;  // token offsets (varlen) or 0
};
FA_DEVICE FaSeq fa_seq(const FaFwdArgs& a, int b) {
  FaSeq s;
  if (a.cu_seqlens_q) {
    int q0 = a.cu_seqlens_q[b], q1 = a.cu_seqlens_q[b + 1];
    int k0 = a.cu_seqlens_k[b], k1 = a.cu_seqlens_k[b + 1];
    s.sq = q1 - q0;
    s.sk = k1 - k0;
    s.base_q = q0;
    s.base_k = k0;
  } else {
    s.sq = a.seqlen_q;
    s.sk = a.seqlen_k;
    s.base_q = 0;
    s.base_k = 0;
  }
  return s;
}
// The same with the keys a KV-cache call uses: sk = min(sk, seqused_k[b]) when seqused_k is given (values below 0
// count as 0). Kernels of families that cover seqused_k / paged problems call this one (fwd_ref, fwd_split).
FA_DEVICE FaSeq fa_seq_used(const FaFwdArgs& a, int b) {
  FaSeq s = fa_seq(a, b);
  if (a.seqused_k) s.sk = max(0, min(s.sk, a.seqused_k[b]));
  return s;
}
// Paged KV: the element offset of the page holding key j of batch b (page index * page stride), or -1 when the
// block table names a page outside [0, num_pages) (the key is then masked, never read).
FA_DEVICE long long fa_kv_page(const FaFwdArgs& a, int b, int j, long long page_stride) {
  const int page = a.block_table[(long long)b * a.bt_stride + (j >> a.page_shift)];
  return (page >= 0 && page < a.num_pages) ? (long long)page * page_stride : -1;
}
// Visible key range [lo, hi) of query row i (lo >= hi: fully masked).
FA_DEVICE void fa_key_range(const FaFwdArgs& a, int i, int sq, int sk, int* lo, int* hi) {
  int diag = i + sk - sq;
  int l = 0, h = sk;
  if (a.win_left >= 0) l = max(l, diag - a.win_left);
  if (a.win_right >= 0) h = min(h, diag + a.win_right + 1);
  *lo = l;
  *hi = h;
}

#endif  // FA_COMMON_SEQ_CUH
