// fwd_split_layout.cuh -- the shared-memory plan of the split-KV decode kernel (templates/fwd_split.cuh), one rule
// compiled twice: by NVRTC in the kernel and by the host (generator/families/fwd_split), which sizes the dynamic
// shared memory from it. Plain C++17 constexpr (no CUDA); includes smem_layout.cuh for the row pitches.
//   [Q tile: kFaSplitRows packed rows x pitch(d)] [K/V slots: stages x (block_n x pitch(d) + block_n x pitch(dv))]
//   [page ring: 2 stages x block_n int32 page indices (paged kernels; sized always)]
// The per-warp float32 partial outputs of the final in-CTA merge (warps x 16 rows x (dv + 4), then the warps' row
// maxima and sums) reuse the K/V slots once the pipeline has drained; the slots region is the larger of the two.
#ifndef FA_FWD_SPLIT_LAYOUT_CUH
#define FA_FWD_SPLIT_LAYOUT_CUH

#include "smem_layout.cuh"

constexpr int kFaSplitRows = 16;  // packed (query token, query head) rows per CTA: one m16 MMA tile
constexpr int fa_split_pad16(int d) { return (d + 15) / 16 * 16; }
constexpr int fa_split_q_bytes(int d) { return kFaSplitRows * fa_smem_pitch(fa_split_pad16(d)) * 2; }
constexpr int fa_split_kslot_bytes(int d, int bn) { return bn * fa_smem_pitch(fa_split_pad16(d)) * 2; }
constexpr int fa_split_vslot_bytes(int dv, int bn) { return bn * fa_smem_pitch(fa_split_pad16(dv)) * 2; }
constexpr int fa_split_o_pitch(int dv) { return fa_split_pad16(dv) + 4; }  // floats
constexpr int fa_split_merge_bytes(int dv, int warps) {
  return warps * kFaSplitRows * fa_split_o_pitch(dv) * 4 + 2 * warps * kFaSplitRows * 4;
}
// An fp8 KV cache (kv_dtype e4m3 / e5m2) streams its blocks as bytes: `stages` fp8 K / V slots (rows of pad16(d)
// bytes, unpadded: a warp's 16-byte reads of consecutive chunks are contiguous) behind ONE 16-bit K / V tile, into
// which each block is dequantized (registers: 16 codes in, 16 fp16 / bf16 out) before the MMAs read it:
//   [K16 | V16: the 16-bit tile of the block being computed] [stages x (K8 slot | V8 slot)]
constexpr int fa_split_k8slot_bytes(int d, int bn) { return bn * fa_split_pad16(d); }
constexpr int fa_split_v8slot_bytes(int dv, int bn) { return bn * fa_split_pad16(dv); }
constexpr int fa_split_slots_bytes(int d, int dv, int bn, int warps, int stages, bool fp8 = false) {
  const int tile16 = fa_split_kslot_bytes(d, bn) + fa_split_vslot_bytes(dv, bn);
  const int kv =
      fp8 ? tile16 + stages * (fa_split_k8slot_bytes(d, bn) + fa_split_v8slot_bytes(dv, bn)) : stages * tile16;
  const int merge = (fa_split_merge_bytes(dv, warps) + 127) / 128 * 128;
  return kv > merge ? kv : merge;
}
constexpr int fa_split_ring_bytes(int bn, int stages) { return 2 * stages * bn * 4; }
// Wide heads (head_dim > 256 or head_dim_v > 256: MLA's 576 / 512): kFaSplitRowsWide packed rows per CTA (four m16
// tiles), S = Q K^T once per block by all warps (row tile x key half), P (bf16 / fp16) through shared memory, and the
// warps split head_dim_v for O = P V (warp w owns columns [w dv / warps, (w + 1) dv / warps) of all the rows):
//   [Q: 64 rows x pitch(d)] [K/V slots: stages x (block_n x pitch(d) + block_n x pitch(dv)), or 4 K tiles]
//   [P: 64 x pitch(block_n)] [row statistics: 8 x 64 floats] [page ring: 2 x max(stages, 4) x block_n int32]
constexpr int kFaSplitRowsWide = 64;
constexpr bool fa_split_wide(int d, int dv) { return d > 256 || dv > 256; }
constexpr int fa_split_rows(int d, int dv) { return fa_split_wide(d, dv) ? kFaSplitRowsWide : kFaSplitRows; }
constexpr int fa_split_wide_q_bytes(int d) { return kFaSplitRowsWide * fa_smem_pitch(fa_split_pad16(d)) * 2; }
constexpr int fa_split_wide_p_bytes(int bn) { return (kFaSplitRowsWide * fa_smem_pitch(bn) * 2 + 127) / 128 * 128; }
constexpr int fa_split_wide_stat_bytes() { return 8 * kFaSplitRowsWide * 4; }
// When v is the first head_dim_v columns of k (MLA's latent cache: same pointer and strides), V is read from the K
// tile and the slots hold kFaSplitWideAliasStages K tiles instead of `stages` K + V pairs (the larger of the two).
constexpr int kFaSplitWideAliasStages = 4;
constexpr int fa_split_wide_slots_bytes(int d, int dv, int bn, int stages) {
  const int kv = stages * (fa_split_kslot_bytes(d, bn) + fa_split_vslot_bytes(dv, bn));
  const int k_only = kFaSplitWideAliasStages * fa_split_kslot_bytes(d, bn);
  return kv > k_only ? kv : k_only;
}
constexpr int fa_split_wide_ring_stages(int stages) {
  return stages > kFaSplitWideAliasStages ? stages : kFaSplitWideAliasStages;
}
constexpr int fa_split_smem_bytes(int d, int dv, int bn, int warps, int stages, bool fp8 = false) {
  if (fa_split_wide(d, dv))
    return fa_split_wide_q_bytes(d) + fa_split_wide_slots_bytes(d, dv, bn, stages) + fa_split_wide_p_bytes(bn) +
           fa_split_wide_stat_bytes() + fa_split_ring_bytes(bn, fa_split_wide_ring_stages(stages));
  return fa_split_q_bytes(d) + fa_split_slots_bytes(d, dv, bn, warps, stages, fp8) + fa_split_ring_bytes(bn, stages);
}

#endif  // FA_FWD_SPLIT_LAYOUT_CUH
