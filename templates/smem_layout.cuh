// smem_layout.cuh -- the row layout of the shared-memory tiles that cp.async fills and ldmatrix reads (fwd_mma,
// bwd_mma), one rule compiled twice: by NVRTC in the kernels and by the host (generator/families), which sizes the
// shared memory from it.
//
// A tile of 16-bit elements with C columns (C a multiple of 16) is stored row-major in 16-byte chunks. Two layouts:
//   swizzled (C % 64 == 0): pitch C, chunk c of row r at chunk c ^ (r & 7) of the row. Rows are a multiple of 128
//     bytes, so every 8-chunk group of a row is one 128-byte line and the XOR permutes chunks inside it: 8 rows
//     read at the same logical chunk (ldmatrix) hit 8 distinct bank groups, and 8 chunks of one row written by
//     cp.async fill one aligned 128-byte line. Tile bases must be 128-byte aligned.
//   padded (other C): pitch C + 8 (16 bytes of padding per row, rows shift by one bank group). ldmatrix is
//     conflict-free, but cp.async writes straddle 128-byte lines: Nsight Compute counted 55M excess shared
//     wavefronts of 89M in the forward at d128 with this layout (H100), all from cp.async.
// Device side (when fa_common.cuh came first): the address of (row, chunk) and the per-lane ldmatrix base with the
// compile-time step folded in by XOR (one LOP3 per ldmatrix, the rest in the immediate). Plain C++17 otherwise.
#ifndef FA_SMEM_LAYOUT_CUH
#define FA_SMEM_LAYOUT_CUH

constexpr bool fa_smem_swizzled(int cols) { return cols % 64 == 0; }
// Row pitch in elements of a tile of `cols` (a multiple of 16) columns.
constexpr int fa_smem_pitch(int cols) { return fa_smem_swizzled(cols) ? cols : cols + 8; }

#ifdef FA_DEVICE
// Device helpers take the pitch alone: a padded pitch is 8 mod 16 elements, a swizzled one a multiple of 64, so
// PITCH says which layout a tile has (any other pitch, e.g. the bwd P / dS' tiles' block_m + 8, is plain).
// Byte offset of chunk `chunk` (16 bytes) of row `row` in a tile of pitch PITCH elements.
template <int PITCH>
FA_DEVICE unsigned fa_smem_off(int row, int chunk) {
  return (unsigned)(row * PITCH * 2 + ((fa_smem_swizzled(PITCH) ? (chunk ^ (row & 7)) : chunk) << 4));
}
// A lane's ldmatrix row address is split into a lane part and a compile-time step: the lane reads row lrow, chunk
// lchunk of a 16 x 16 block at rows r0.., columns c0.. (r0 a multiple of 8). fa_smem_lane(base, lrow, lchunk) is
// computed once per tile; fa_smem_at(lanebase, r0, c0) per ldmatrix. On swizzled rows fa_smem_at needs lchunk and
// c0 / 8 to share no bit inside the 8-chunk group (lchunk 0 or 1 with c0 a multiple of 16, or lchunk carrying a
// warp's column offset that is a multiple of the steps' span: bwd_mma's kBtFold).
template <int PITCH>
FA_DEVICE unsigned fa_smem_lane(unsigned base, int lrow, int lchunk) {
  return base + fa_smem_off<PITCH>(lrow, lchunk);
}
template <int PITCH>
FA_DEVICE unsigned fa_smem_at(unsigned lanebase, int r0, int c0) {
  if constexpr (fa_smem_swizzled(PITCH)) {
    // (r0 + lrow) & 7 == lrow & 7, and the lane's chunk bits sit in bits 4-6 of lanebase (128-byte aligned rows):
    // chunk (c0/8 + lchunk) ^ (lrow & 7) == ((lchunk ^ (lrow & 7)) ^ (c0/8 & 7)) + 8 * (c0/64) when the low bits of
    // c0/8 and lchunk are disjoint (their sum is then their XOR).
    return (lanebase ^ (unsigned)(((c0 >> 3) & 7) << 4)) + (unsigned)(r0 * PITCH * 2 + ((c0 >> 6) << 7));
  } else {
    return lanebase + (unsigned)((r0 * PITCH + c0) * 2);
  }
}
#endif

#endif  // FA_SMEM_LAYOUT_CUH
