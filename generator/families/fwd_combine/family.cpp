// fwd_combine -- host side of the split-KV combine step (templates/fwd_combine.cuh): a Step of fwd_split's plan
// (num_splits > 1) that merges the float32 partial outputs and LSEs of the splits into o and lse, one CTA per output
// row. Knob: warps {4, 8} (warps sharing the splits of a row). On sm_90 it is launched as a programmatic dependent of
// the split kernel (its launch overlaps the split kernel's tail; the kernel waits before touching memory).
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
  l.grid[0] = static_cast<unsigned>(static_cast<long long>(sh.heads_q) * sh.max_seqlen_q);  // rows of a batch entry
  l.grid[1] = static_cast<unsigned>(sh.batch);
  l.block = static_cast<unsigned>(c.t[kWarps] * 32);
  l.dependent = c.s.arch >= 90;
  return l;
}

const Family kFamily{.name = "fwd_combine",
                     .template_name = "fwd_combine.cuh",
                     .role = Role::Step,
                     .sinks = true,
                     .knobs = {fam::warps({4, 8})},
                     .defaults = &defaults,
                     .valid = &valid,
                     .launch = &launch};

}  // namespace

FA_FAMILY_FOLDER(fwd_combine) { register_family(&kFamily); }

}  // namespace fa::gen
