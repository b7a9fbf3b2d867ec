// common/sinks.cuh -- attention sinks (fa_params.sinks, fa_cfg::kHasSinks): one more column of every row's softmax,
// the logit sinks[h] in natural units (the units of the scores after scale, softcap, bias, ALiBi and user code),
// with no value vector. A kernel adds it once per row, where the row ends: given the row's running max m over its
// keys (log2 units, -inf when it saw none), its sum l = sum_j exp2(t_j - m) and z = sink * log2(e),
//   M = max(m, z),   L = l exp2(m - M) + exp2(z - M),   O = acc exp2(m - M) / L,   lse = (M + log2 L) ln 2
// with acc = sum_j exp2(t_j - m) v_j. Every exponent is <= 0: a sink far above the scores neither overflows nor
// divides by zero; a row whose keys are all hidden gives O = 0 and lse = sink (exactly); z = -inf is no sink (O =
// acc / l, lse = (m + log2 l) ln 2). Kernels keeping natural units pass m log2(e). Split-KV kernels write their
// partials without it and the combine step adds it as one more part (lse = sink, O = 0: fa_lse_merge_add), so it counts
// once per row.
#ifndef FA_COMMON_SINKS_CUH
#define FA_COMMON_SINKS_CUH

struct FaRowEnd {
  float o_mul;  // O's factor exp2(m - M) / L; 0 when the row has no visible key
  float lse;    // natural log; the sink when the row has no visible key (-inf when it has no sink either)
};
FA_DEVICE FaRowEnd fa_sink_row_end(float m, float l, float sink) {
  const float z = sink * 1.4426950408889634f;
  const float mm = fmaxf(m, z);
  FaRowEnd e;
  if (m == -INFINITY) {  // no visible key: O = 0, lse = the sink exactly (-inf without one)
    e.o_mul = 0.f;
    e.lse = sink;
    return e;
  }
  const float c = exp2f(m - mm);
  const float total = l * c + exp2f(z - mm);
  e.o_mul = c * (1.f / total);
  e.lse = (mm + log2f(total)) * 0.6931471805599453f;
  return e;
}

#endif  // FA_COMMON_SINKS_CUH
