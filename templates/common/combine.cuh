// common/combine.cuh -- the exact merge of partial attention results over disjoint key sets (split-KV's combine
// step, later context parallelism across GPUs). Each part s is a normalized output o_s over its keys with its
// natural-log LSE lse_s (-inf: the part saw no key, o_s = 0). The merge is
//   lse = log(sum_s exp(lse_s)),  o = sum_s exp(lse_s - lse) o_s      (every lse_s = -inf: lse = -inf, o = 0)
// computed stably as m = max_s lse_s, lse = m + log(sum_s exp(lse_s - m)). FaLseMerge accumulates the LSE of any
// number of parts in any order (fa_lse_merge_add, or fa_lse_merge_join for two partial accumulators, e.g. across
// lanes); fa_lse_merge_total gives lse, fa_lse_merge_weight(s) the weight of one part in o, exp((lse_s - m) -
// log(sum)): the rounding of lse itself never enters o (that would cost |lse| * 2^-24 relative: 1e-3 at lse = 10^4).
#ifndef FA_COMMON_COMBINE_CUH
#define FA_COMMON_COMBINE_CUH

struct FaLseMerge {
  float m;  // max lse_s so far (-inf: none)
  float s;  // sum exp(lse_s - m)
};
FA_DEVICE FaLseMerge fa_lse_merge_init() {
  FaLseMerge r;
  r.m = -INFINITY;
  r.s = 0.f;
  return r;
}
FA_DEVICE FaLseMerge fa_lse_merge_join(FaLseMerge a, FaLseMerge b) {
  if (b.m == -INFINITY) return a;
  if (a.m == -INFINITY) return b;
  FaLseMerge r;
  r.m = fmaxf(a.m, b.m);
  r.s = a.s * expf(a.m - r.m) + b.s * expf(b.m - r.m);
  return r;
}
FA_DEVICE FaLseMerge fa_lse_merge_add(FaLseMerge a, float lse) {
  FaLseMerge b;
  b.m = lse;
  b.s = lse == -INFINITY ? 0.f : 1.f;
  return fa_lse_merge_join(a, b);
}
FA_DEVICE float fa_lse_merge_total(FaLseMerge a) { return a.s > 0.f ? a.m + logf(a.s) : -INFINITY; }
// The weights of the parts in the merged output, exp(lse_s - lse) = exp((lse_s - m) - log s): every term is small,
// so the rounding of lse = m + log s never enters them. fa_lse_merge_weights once per row (after the last part),
// fa_lse_merge_weight per part (0 when no part saw a key). No division: an IEEE float division is a call with a stack
// frame on sm_80.
struct FaLseWeights {
  float m;      // max lse_s
  float log_s;  // log(sum exp(lse_s - m)); +inf when no part saw a key
};
FA_DEVICE FaLseWeights fa_lse_merge_weights(FaLseMerge a) {
  FaLseWeights w;
  w.m = a.m;
  w.log_s = a.s > 0.f ? logf(a.s) : INFINITY;
  return w;
}
FA_DEVICE float fa_lse_merge_weight(FaLseWeights w, float lse_s) { return expf((lse_s - w.m) - w.log_s); }

#endif  // FA_COMMON_COMBINE_CUH
