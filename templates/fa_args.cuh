// fa_args.cuh -- the kernel ABI: plain structs passed by value to every generated kernel.
//
// Compiled twice: by the host compiler (runtime/ fills them) and by NVRTC (kernels read them), so it uses only
// fundamental types (no <cstdint>, no CUDA headers) and no member functions. Element strides, not bytes.
// Index conventions (shared by every kernel):
//   fixed-length: seq base 0, batch offset b*stride_batch.   varlen: batch offset 0, seq base cu_seqlens[b].
//   q row i of (b, h):  q + boff + (base_q + i)*q_ss + h*q_sh        (k/v use kv head g = h / group)
//   lse row i:          lse + b*lse_sb + h*lse_sh + base_q + i     (varlen: lse_sb = 0, lse_sh = total_q)
//   bias(i, j):         bias + b*bias_sb + h*bias_sh + i*bias_sq + j*bias_sk   (i, j local to the sequence)
//   k row j of (b, g), paged (block_table != null): k + page*k_sb + (j & (page_size-1))*k_ss + g*k_sh with
//                       page = block_table[b*bt_stride + (j >> page_shift)] (v likewise); pages outside
//                       [0, num_pages) are never read: their keys are masked (common/seq.cuh, fa_kv_page)
//   keys of sequence b: seqlen_k (varlen: from cu_seqlens_k), then min(that, seqused_k[b]) when seqused_k != null
//   split-KV partials (num_splits > 1): row r = ((split*batch + b)*heads_q + h)*seqlen_q + i of
//                       part_o [.., head_dim_v] and part_lse [..] (float32, natural-log LSE, -inf: no key)
// Window: key j visible to query i iff (win_left < 0 || j >= i + sk - sq - win_left) &&
//                                     (win_right < 0 || j <= i + sk - sq + win_right); causal = (-1, 0).
#ifndef FA_ARGS_CUH
#define FA_ARGS_CUH

// What user code (fa_mods: mask_mod / score_mod) may read: buffers (typed by the rendered fa_buf<n>_t), their
// shapes and strides (elements), and scalars. Values only: they never enter a kernel key. A kernel whose config
// carries user code (Semantic::mods) takes it as a second parameter (__grid_constant__: read in place, never copied
// to local memory): templates declare their entry point as fa_kernel(const FaFwdArgs a FA_USER_PARAM[, further
// parameters]) and pass FA_USER_ARGS to fa_user_mask / fa_user_score (both rendered by generator/user_mods.cpp;
// without user code the parameter is absent, so other launches carry none of it).
struct FaUser {
  const void* buf[4];
  long long shape[4][4];
  long long stride[4][4];
  float scalar[8];
  int iscalar[8];
};

struct FaFwdArgs {
  const void* q;
  const void* k;
  const void* v;
  void* o;
  long long q_sb, q_ss, q_sh;
  long long k_sb, k_ss, k_sh;
  long long v_sb, v_ss, v_sh;
  long long o_sb, o_ss, o_sh;
  const void* bias;
  long long bias_sb, bias_sh, bias_sq, bias_sk;
  const float* alibi;  // [heads_q] or null
  float* lse;
  long long lse_sb, lse_sh;  // null: not written
  const int* cu_seqlens_q;   // null in fixed-length mode
  const int* cu_seqlens_k;
  int batch, seqlen_q, seqlen_k;  // varlen: seqlen_q/k are the maxima (grid sizing only)
  int heads_q, heads_kv, group;   // group = heads_q / heads_kv
  int win_left, win_right;        // normalised: causal is (-1, 0); none is (-1, -1)
  float scale;                    // softmax scale
  float scale_log2;               // scale * log2(e)
  float softcap;                  // 0: off
  float inv_softcap;              // 1 / softcap
  // KV cache (version 2 of fa_params): used lengths, pages, split-KV. Zero / null when absent.
  const int* seqused_k;       // [batch] keys used per sequence (clamped to [0, seqlen_k]), or null
  const int* block_table;     // [batch, bt_stride] page indices in order, or null (contiguous k / v)
  long long bt_stride;        // elements between sequences of block_table
  int page_size, page_shift;  // rows per page (a power of two) and its log2; 0 when not paged
  int num_pages;              // pages in the k / v pools
  int num_splits;             // key splits per (batch, kv head); 1: no split (o written directly)
  float* part_o;              // workspace (num_splits > 1): [num_splits, batch, heads_q, seqlen_q, head_dim_v]
  float* part_lse;            // workspace (num_splits > 1): [num_splits, batch, heads_q, seqlen_q]
  // Block skipping (fa_mods with a mask_mod; workspace, bound by the runtime; null: none, every block masked):
  // blk_cls[bb*blk_cls_sb + hh*blk_cls_sh + m_block*blk_nkb + n_block] classifies the (query block of blk_m rows,
  // key block of blk_n keys) tile: 0 the mask hides every pair, 1 some, 2 none (bb, hh: b, h, or 0 where the mask
  // does not depend on them: blk_cls_sb / blk_cls_sh 0). blk_list[((b*heads_q + h)*gridDim.x + m_block)*blk_nkb
  // + it] is the forward's scratch: its visible key blocks in visiting order, (n_block << 1) | full.
  unsigned char* blk_cls;
  int* blk_list;
  long long blk_cls_sb, blk_cls_sh;
  int blk_nkb;  // key blocks per query block row (the maximum over the batch)
  int blk_pad;
  // Backward plans (bwd_mma with a mask_mod) also get the classes transposed, for their key-block-major CTAs:
  // blk_cls_t[bb*blk_cls_sb + hh*blk_cls_sh + n_block*blk_nmb + m_block] (blk_nmb query blocks per key block, the
  // maximum over the batch); blk_list is then the backward's scratch (bwd_mma.cuh). null: none.
  unsigned char* blk_cls_t;
  int blk_nmb;
  int blk_pad2;
  // Sub-tile records of the tiles (fwd_wgmma plans; templates/mask_blocks.cuh writes them when this is set): the
  // record of tile t = bb*blk_cls_sb + hh*blk_cls_sh + m_block*blk_nkb + n_block is blk_sub[t * (blk_m / 64 + 1) ..]:
  // word w < blk_m / 64 holds, for the rows 64 w .. 64 w + 63 of the tile, 2 bits per (16-row strip s < 4, key
  // group g < 4) at bit 2 (4 s + g): 0 the mask hides every pair of the sub-tile, 1 some, 2 none; word blk_m / 64 is
  // the tile's slot in blk_bits (0xffffffff: none). Key group g of a tile of blk_n keys: the 8-key columns c8 in
  // [g * blk_n / 32, (g + 1) * blk_n / 32) (integer division), i.e. c8 belongs to group (4 c8 + 3) / (blk_n / 8).
  // null: none (every sub-tile of a partial tile is partial).
  unsigned* blk_sub;
  // The hidden pairs of partial tiles, so that the forward reads a word instead of running user code (fwd_wgmma
  // plans; null: none): blk_bits[0] counts the slots taken (zeroed before mask_blocks runs), and slot k < blk_bits_cap
  // is blk_bits[64 + k * blk_m * 8 ..]: per (16-row strip s, key group g) 32 words, word (4 s + g) * 32 + lane, in
  // the wgmma fragment layout of lane = 4 gq + tq: bit 4 (c8 - first c8 of g) + 2 hh + e is set when row 16 s + 8 hh
  // + gq, key 8 c8 + 2 tq + e is hidden (rows past the query length: any value, never stored).
  unsigned* blk_bits;
  int blk_bits_cap;
  int blk_pad3;
  // An fp8 KV cache (fa_params version 3, fa_cfg::kKvDtype 4 / 5): k / v hold fp8 codes (k_sb.. in bytes = elements),
  // read as code * k_scale[g * k_scale_sh] (v likewise): float32 device arrays, null: 1. Unused otherwise.
  const float* k_scale;
  const float* v_scale;
  long long k_scale_sh, v_scale_sh;
  // Attention sinks (fa_params.sinks, fa_cfg::kHasSinks): float32 [heads_q] logits in natural units, the extra column
  // of every row's softmax (common/sinks.cuh); null without.
  const float* sinks;
  // FP8 inputs (fa_params version 3, fa_cfg::kDtype 4 / 5): q / k / v hold fp8 codes (strides in bytes = elements),
  // read as code * descale_x[b * descale_x_sb + g * descale_x_sh] (g: the kv head; FlashAttention 3's descale_q /
  // descale_k / descale_v): float32 device arrays, null: 1. Unused otherwise.
  const float* descale_q;
  const float* descale_k;
  const float* descale_v;
  long long descale_q_sb, descale_q_sh, descale_k_sb, descale_k_sh, descale_v_sb, descale_v_sh;
};

struct FaBwdArgs {
  FaFwdArgs f;  // forward problem: o and lse are inputs here
  const void* dout;
  long long do_sb, do_ss, do_sh;
  void* dq;
  long long dq_sb, dq_ss, dq_sh;
  void* dk;
  long long dk_sb, dk_ss, dk_sh;
  void* dv;
  long long dv_sb, dv_ss, dv_sh;
  float* delta;     // workspace: [batch, heads_q, seqlen_q] like lse (varlen: [heads_q, total_q])
  float* dq_accum;  // workspace: float32 dQ accumulators, layout chosen by the kernel family
  float* dk_accum;  // workspace: float32 dK/dV accumulators for GQA (summed over the group), or null
  float* dv_accum;
  long long accum_q_stride_row;  // helper strides for the accumulators (elements)
  long long accum_kv_stride_row;
  int total_q, total_k;  // varlen totals (fixed: batch*seqlen)
  int deterministic;
  int lpt_tail;             // bwd_mma: the last lpt_tail (kv head, batch) pairs run key-block-major (fa_bwd_cta)
  unsigned lpt_magic_tail;  // fa_div_magic(lpt_tail), fa_div_magic(heads_kv)
  unsigned lpt_magic_heads;
  // Attention sinks (f.sinks set): the gradient dsinks [heads_q] (fa_bwd_params.dsinks, written by bwd_sinks) and
  // the workspace of its partial sums, dsink_part[h * dsink_parts + b * dsink_blocks + x] for bwd_pre's CTA (x, h, b)
  // (dsink_blocks = its grid's x extent; dsink_parts = batch * dsink_blocks). Null / 0 without sinks.
  float* dsinks;
  float* dsink_part;
  int dsink_parts, dsink_blocks;
};

#endif  // FA_ARGS_CUH
