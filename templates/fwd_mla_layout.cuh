// fwd_mla_layout.cuh -- the shared-memory plans of the Hopper MLA decode kernel (templates/fwd_mla.cuh, the lockstep
// schedule; fwd_mla_seesaw.cuh, the seesaw schedule), one rule compiled twice: by NVRTC in the kernel and by the host
// (generator/families/fwd_mla), which sizes the dynamic shared memory from it. Plain C++17 constexpr (no CUDA). Every
// tile is kFaMlaRows (64) rows of 128 bytes (64 16-bit columns, 128-byte swizzle), 8 KB, 1024-byte aligned; a row of
// head_dim columns is head_dim / 64 such chunks. The lockstep plan:
//   [Q: 64 packed rows x head_dim]                      head_dim / 64 chunks
//   [K stages: stages x (64 keys x head_dim)]            V is the first head_dim_v columns of each stage
//   [P: 64 rows x 64 keys]                               one chunk (bf16 / fp16 probabilities of the block)
//   [row maxima: 2 x 64 floats] [row sums: 2 x 64 floats] [key flags: stages x 64 bytes] [block flags: stages ints]
//   [mbarriers: stages full + stages empty]
// plus 1024 bytes of slack to align the base (the kernel rounds the dynamic shared-memory address up to 1024).
#ifndef FA_FWD_MLA_LAYOUT_CUH
#define FA_FWD_MLA_LAYOUT_CUH

constexpr int kFaMlaRows = 64;                 // packed (query token, query head) rows per CTA
constexpr int kFaMlaChunk = kFaMlaRows * 128;  // one 64-column chunk of 64 rows (8 KB)
constexpr int fa_mla_chunks(int d) { return (d + 63) / 64; }
constexpr int fa_mla_q_bytes(int d) { return fa_mla_chunks(d) * kFaMlaChunk; }
constexpr int fa_mla_stage_bytes(int d, int bn) { return fa_mla_chunks(d) * bn * 128; }
constexpr int fa_mla_off_k(int d) { return fa_mla_q_bytes(d); }
constexpr int fa_mla_off_p(int d, int bn, int stages) { return fa_mla_off_k(d) + stages * fa_mla_stage_bytes(d, bn); }
constexpr int fa_mla_off_max(int d, int bn, int stages) { return fa_mla_off_p(d, bn, stages) + kFaMlaRows * 128; }
constexpr int fa_mla_off_sum(int d, int bn, int stages) { return fa_mla_off_max(d, bn, stages) + 2 * kFaMlaRows * 4; }
constexpr int fa_mla_off_valid(int d, int bn, int stages) { return fa_mla_off_sum(d, bn, stages) + 2 * kFaMlaRows * 4; }
constexpr int fa_mla_off_bad(int d, int bn, int stages) {
  return fa_mla_off_valid(d, bn, stages) + (stages * bn + 15) / 16 * 16;
}
constexpr int fa_mla_off_bar(int d, int bn, int stages) {
  return fa_mla_off_bad(d, bn, stages) + (stages * 4 + 7) / 8 * 8;
}
constexpr int fa_mla_lockstep_smem_bytes(int d, int bn, int stages) {
  return fa_mla_off_bar(d, bn, stages) + 2 * stages * 8 + 1024;
}
// The seesaw schedule (sched 1, fwd_mla_seesaw.cuh): two 64-key buffers, each consumer warpgroup the scores of its own
// block; the last Q chunk lives in registers and its tile holds P1 (the second buffer's probabilities):
//   [Q: head_dim / 64 chunks; the last one is P1 once the consumers hold it] [buffer 0] [buffer 1] [P0: one chunk]
//   [running max: 64 floats] [scale0, scale1: 2 x 64 floats] [row sums: 2 x 64 floats] [key flags: 2 x 64 bytes]
//   [block flags: 2 ints, padded to 16] [mbarriers: full[2][2], empty[2][2] (buffer x half)]
constexpr int fa_mla_ss_off_buf(int d, int x) { return fa_mla_q_bytes(d) + x * fa_mla_stage_bytes(d, 64); }
constexpr int fa_mla_ss_off_p0(int d) { return fa_mla_ss_off_buf(d, 2); }
constexpr int fa_mla_ss_off_max(int d) { return fa_mla_ss_off_p0(d) + kFaMlaChunk; }
constexpr int fa_mla_ss_off_scale(int d) { return fa_mla_ss_off_max(d) + kFaMlaRows * 4; }
constexpr int fa_mla_ss_off_sum(int d) { return fa_mla_ss_off_scale(d) + 2 * kFaMlaRows * 4; }
constexpr int fa_mla_ss_off_valid(int d) { return fa_mla_ss_off_sum(d) + 2 * kFaMlaRows * 4; }
constexpr int fa_mla_ss_off_bad(int d) { return fa_mla_ss_off_valid(d) + 2 * kFaMlaRows; }
constexpr int fa_mla_ss_off_bar(int d) { return fa_mla_ss_off_bad(d) + 16; }
constexpr int fa_mla_seesaw_smem_bytes(int d) { return fa_mla_ss_off_bar(d) + 8 * 8 + 1024; }
constexpr int fa_mla_smem_bytes(int d, int bn, int stages, int sched) {
  return sched == 1 ? fa_mla_seesaw_smem_bytes(d) : fa_mla_lockstep_smem_bytes(d, bn, stages);
}

#endif  // FA_FWD_MLA_LAYOUT_CUH
