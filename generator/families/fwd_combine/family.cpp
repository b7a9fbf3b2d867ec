// fwd_combine -- host side of the split-KV combine step (templates/fwd_combine.cuh): a Step of fwd_split's plan
// (num_splits > 1) that merges the float32 partial outputs and LSEs of the splits into o and lse, one warp per output
// row. Knob: warps {4, 8} (rows per CTA).
#include "../common.h"

namespace fa::gen {

namespace {

enum { kWarps };

Tunables defaults(const Semantic&) { return Tunables{{4}}; }

bool valid(const KernelConfig& c, std::string* why) {
  if (c.s.dtype != kFp16 && c.s.dtype != kBf16 && c.s.dtype != kFp32)
    return fam::fail(why, "fwd_combine", "dtype must be fp16, bf16 or fp32");
  return true;
}

Launch launch(const KernelConfig& c, const LaunchShape& sh) {
  Launch l;
  const long long rows = static_cast<long long>(sh.heads_q) * sh.max_seqlen_q;  // per batch entry (grid y)
  l.grid[0] = static_cast<unsigned>((rows + c.t[kWarps] - 1) / c.t[kWarps]);
  l.grid[1] = static_cast<unsigned>(sh.batch);
  l.block = static_cast<unsigned>(c.t[kWarps] * 32);
  return l;
}

const Family kFamily{.name = "fwd_combine", .template_name = "fwd_combine.cuh", .role = Role::Step,
                     .knobs = {fam::warps({4, 8})}, .defaults = &defaults, .valid = &valid, .launch = &launch};

}  // namespace

FA_FAMILY_FOLDER(fwd_combine) { register_family(&kFamily); }

}  // namespace fa::gen
