// common/rows.cuh -- rows held by one warp, striped across its lanes, as the reference kernels (fwd_ref, bwd_ref)
// keep them: element c = lane + 32 t of a row of COLS elements sits in slot t of lane `lane`, fa_row_slots(COLS)
// float32 slots per lane. Loads, a lane's part of a dot product with a row in global memory (fa_warp_sum
// completes it), acc += w * row, and the store back in the dtype E (FaElem). Columns >= COLS are skipped on
// stores and read as 0.
#ifndef FA_COMMON_ROWS_CUH
#define FA_COMMON_ROWS_CUH

constexpr int fa_row_slots(int cols) { return (cols + 31) / 32; }

// r = row (float32)
template <class E, int COLS>
FA_DEVICE void fa_row_load(float (&r)[fa_row_slots(COLS)], const typename E::T* row, int lane) {
#pragma unroll
  for (int t = 0; t < fa_row_slots(COLS); ++t) {
    const int c = lane + 32 * t;
    r[t] = c < COLS ? E::to_float(row[c]) : 0.f;
  }
}
// This lane's part of r . row
template <class E, int COLS>
FA_DEVICE float fa_row_dot(const float (&r)[fa_row_slots(COLS)], const typename E::T* row, int lane) {
  float dot = 0.f;
#pragma unroll
  for (int t = 0; t < fa_row_slots(COLS); ++t) {
    const int c = lane + 32 * t;
    if (c < COLS) dot += r[t] * E::to_float(row[c]);
  }
  return dot;
}
// acc += w * row
template <class E, int COLS>
FA_DEVICE void fa_row_axpy(float (&acc)[fa_row_slots(COLS)], float w, const typename E::T* row, int lane) {
#pragma unroll
  for (int t = 0; t < fa_row_slots(COLS); ++t) {
    const int c = lane + 32 * t;
    if (c < COLS) acc[t] += w * E::to_float(row[c]);
  }
}
// row = r * mul, in the dtype
template <class E, int COLS>
FA_DEVICE void fa_row_store(typename E::T* row, const float (&r)[fa_row_slots(COLS)], float mul, int lane) {
#pragma unroll
  for (int t = 0; t < fa_row_slots(COLS); ++t) {
    const int c = lane + 32 * t;
    if (c < COLS) row[c] = E::from_float(r[t] * mul);
  }
}

#endif  // FA_COMMON_ROWS_CUH
