// family.h -- what each kernel family tells the host: its tunable space, its defaults, its part of the validity
// predicate, its shared-memory need and its launch geometry. One file per family in generator/families/.
#pragma once

#include <string>
#include <vector>

#include "config.h"

namespace fa::gen {

// Shape facts known at launch time only (never part of a key).
struct LaunchShape {
  int batch = 1;
  int max_seqlen_q = 0;  // fixed-length: seqlen_q
  int max_seqlen_k = 0;
  int heads_q = 1;
  int heads_kv = 1;
  int total_q = 0;       // varlen totals (fixed: batch * seqlen)
  int total_k = 0;
};

struct Launch {
  unsigned grid[3] = {1, 1, 1};
  unsigned block = 32;
  unsigned smem = 0;  // dynamic shared memory bytes
};

struct DeviceLimits {
  int arch = 80;
  int max_smem_optin = 163 * 1024;  // bytes per block (opt-in)
  int max_regs_per_thread = 255;
  int sm_count = 108;
};
DeviceLimits limits_for_arch(int arch);  // conservative per-arch defaults (used on the CPU)

struct Family {
  Kind kind;
  const char* template_name;  // "fwd_ref.cuh"
  // Every tunable point the tuner may try for this semantic (unfiltered; is_valid prunes).
  std::vector<Tunables> (*space)(const Semantic& s);
  // The heuristic default (must be valid for every Semantic this family supports).
  Tunables (*defaults)(const Semantic& s);
  // The family's part of the validity predicate: false with a reason when the point cannot work.
  bool (*valid)(const KernelConfig& c, std::string* why);
  unsigned (*smem_bytes)(const KernelConfig& c);
  Launch (*launch)(const KernelConfig& c, const LaunchShape& shape);
};

// The family of a kind; family_available() is false when this build lacks it (family() then must not be used).
bool family_available(Kind k);
const Family& family(Kind k);

// THE validity predicate: semantic ranges + family rules + shared memory within `lim`. Used by the generator's
// sweep, the tuner and fa_run alike.
bool is_valid(const KernelConfig& c, const DeviceLimits& lim, std::string* why);

// All valid tunable points of a semantic on a device (the tuner's candidate list before ptxas pruning).
std::vector<Tunables> valid_space(const Semantic& s, const DeviceLimits& lim);

}  // namespace fa::gen
