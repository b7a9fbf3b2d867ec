// family.h -- the kernel-family house: what each family tells the host, and the registry that holds them.
//
// A family is one folder, generator/families/NAME/, whose family.cpp describes its kernel template to the host and
// registers it (FA_FAMILY_FOLDER below; CMake lists the folders, so nothing else names a family):
//   - identity and selection: name, template, role (a forward, a backward, or a step inside another family's plan),
//     arch range, priority, and a coverage predicate: the selector (problem.h) ranks the families of a role that
//     cover a problem, highest priority first;
//   - the tunable schema: named integer knobs with their allowed values and key tags; a Tunables holds their values
//     in schema order, rendered into the kernel's constexpr prelude by name and keyed / parsed generically;
//   - the family's rules: defaults, validity (on top of the generic knob check), shared memory, launch geometry
//     (grid, block, cluster), a finalize step for shape-class flags that depend on the tunables (even_k);
//   - a plan (the launches and workspace of one forward or backward call; default: a plan of one, the family itself)
//     and argument binding (the kernel parameters; default: the common FaFwdArgs / FaBwdArgs struct, with room for
//     __grid_constant__ CUtensorMap parameters through the runtime's encoder).
// Nothing here depends on CUDA.
#pragma once

#include <climits>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "config.h"

namespace fa::gen {

struct ProblemDesc;  // problem.h

// Shape facts known at launch time only (never part of a key).
struct LaunchShape {
  int batch = 1;
  int max_seqlen_q = 0;  // fixed-length: seqlen_q
  int max_seqlen_k = 0;
  int heads_q = 1;
  int heads_kv = 1;
  int total_q = 0;  // varlen totals (fixed: batch * seqlen)
  int total_k = 0;
  int sm_count = 0;    // the device's SMs (persistent grids); 0: unknown
  int num_splits = 1;  // split-KV: key splits per (batch, kv head), from the plan
  int blk_shared = 0;  // block classification (mask_blocks): 1 shared over batch entries, 2 over heads; from the plan
};

struct Launch {
  unsigned grid[3] = {1, 1, 1};
  unsigned block = 32;
  unsigned smem = 0;                // dynamic shared memory bytes
  unsigned cluster[3] = {1, 1, 1};  // thread-block cluster (sm_90+); {1, 1, 1}: no cluster
  bool dependent = false;           // programmatic dependent launch (sm_90+, templates/common/pdl.cuh): may start
                                    // before the stream's previous kernel ends; the kernel waits before any access
};

struct DeviceLimits {
  int arch = 80;
  int max_smem_optin = 163 * 1024;  // bytes per block (opt-in)
  int max_regs_per_thread = 255;
  int max_threads_per_sm = 2048;  // resident threads per SM (occupancy: bwd_mma's CTA order)
  int sm_count = 108;
};
DeviceLimits limits_for_arch(int arch);  // per-arch defaults (used on the CPU; a context with a GPU reads its own)

// One tunable: a named integer with its allowed values. The tuner's space is the product of a family's knobs'
// values (or the family's own space()), pruned by the validity predicate.
struct Knob {
  const char* name;         // "block_m": how code, logs and docs refer to it
  const char* tag;          // "m": its prefix in tunables_key ("m128")
  const char* cname;        // "kBlockM": its constexpr name in the rendered prelude
  std::vector<int> values;  // allowed values
  bool boolean = false;     // rendered as constexpr bool (values 0 / 1)
};

// The workspace and launches of one call. Offsets into the workspace are SIZE_MAX where a region is absent; the
// runtime allocates workspace_bytes (or checks the caller's) and binds the regions to the kernel ABI's pointers.
struct Plan {
  std::vector<KernelConfig> steps;  // launched in order on the caller's stream
  int tuned_step = 0;               // the step whose tunables the chooser picks (the top-level family's own)
  size_t workspace_bytes = 0;       // what these launches use, each region 256-byte aligned (0: nothing allocated)
  // What the workspace size query reports: enough for the plan of every tunable point of the call (a caller sizes
  // its buffer before tuning may swap another winner in), >= workspace_bytes. 0: workspace_bytes.
  size_t workspace_reserve_bytes = 0;
  size_t reported_workspace() const {
    return workspace_reserve_bytes > workspace_bytes ? workspace_reserve_bytes : workspace_bytes;
  }
  size_t off_delta = SIZE_MAX, off_dq_accum = SIZE_MAX, off_dk_accum = SIZE_MAX, off_dv_accum = SIZE_MAX;
  // Backward plans of a problem with attention sinks: bwd_pre's per-CTA partial sums of the sinks' gradient (float32
  // [heads_q][dsink_parts], dsink_parts = batch x dsink_blocks, bwd_pre's query blocks) that the bwd_sinks step
  // reduces (FaBwdArgs::dsink_part); SIZE_MAX: none.
  size_t off_dsink_part = SIZE_MAX;
  int dsink_parts = 0, dsink_blocks = 0;
  long long accum_q_stride_row = 0, accum_kv_stride_row = 0;
  // Split-KV forward plans: the key splits per (batch, kv head) and the float32 partial-output regions
  // (FaFwdArgs::part_o / part_lse); num_splits == 1: none.
  int num_splits = 1;
  size_t off_part_o = SIZE_MAX, off_part_lse = SIZE_MAX;
  // Block-sparse plans (a mask_mod: [mask_blocks, fwd_mma or fwd_wgmma], bwd_mma's [bwd_pre, mask_blocks, bwd_mma,
  // bwd_post]): the tile classes (FaFwdArgs::blk_cls, [batch or 1][heads_q or 1][query blocks][blk_nkb] bytes;
  // blk_shared as in LaunchShape), in backward plans transposed too (blk_cls_t, key block major), and the kernel's
  // visiting lists (blk_list, [batch][heads_q][query blocks][blk_nkb] int32; fwd_wgmma has none), and fwd_wgmma's
  // sub-tile records (blk_sub, the classes' layout times block_m / 64 + 1 uint32) and the hidden pairs of partial
  // tiles (blk_bits: a slot counter, then blk_bits_cap slots of block_m * 32 bytes; fa_args.cuh); SIZE_MAX: none
  // (families/common.h: block_workspace).
  size_t off_blk_cls = SIZE_MAX, off_blk_cls_t = SIZE_MAX, off_blk_list = SIZE_MAX, off_blk_sub = SIZE_MAX;
  size_t off_blk_bits = SIZE_MAX;
  int blk_nkb = 0, blk_mblocks = 0, blk_shared = 0, blk_bits_cap = 0;
  // The classification step (mask_blocks) and the workspace bytes it writes, [off_blk_cls, off_blk_cls_end): every
  // region the step writes lies there (the classes, transposed too), and nothing else does. A context may keep those
  // bytes across calls (runtime/mask_cache.h) and then skip the step, binding the regions to its copy
  // (rt::bind_block_classes); a region the step writes outside the span would be left unwritten. -1 / SIZE_MAX: none.
  int blk_cls_step = -1;
  size_t off_blk_cls_end = SIZE_MAX;
};

// A tensor map the runtime encodes for a family (cuTensorMapEncodeTiled): element type, global dims (innermost
// first), byte strides of dims 1..rank-1, the box copied per load, and the shared-memory swizzle in bytes.
struct TensorMapDesc {
  int dtype = kBf16;
  int rank = 2;
  const void* base = nullptr;
  uint64_t dims[5] = {};
  uint64_t strides[4] = {};
  uint32_t box[5] = {};
  int swizzle = 128;  // 0, 32, 64 or 128
};

// The kernel parameters of one launch: up to kMax parameters, each copied into aligned storage. `ptrs` is what
// cuLaunchKernel takes. Not copyable (ptrs point into storage).
struct KernelParams {
  static constexpr int kMax = 4;
  KernelParams() = default;
  KernelParams(const KernelParams&) = delete;
  KernelParams& operator=(const KernelParams&) = delete;
  // Appends a parameter of `size` bytes aligned to `align` (a power of two <= 64); false when it does not fit.
  bool add(const void* data, size_t size, size_t align);
  void* ptrs[kMax] = {};
  int count = 0;

 private:
  alignas(
      64) unsigned char storage_[2048];  // written by add() before any pointer refers to it (no 2 KB clear per launch)
  size_t used_ = 0;
};

// What a family's bind() may use: the common argument struct the runtime filled (FaFwdArgs for forward families,
// FaBwdArgs for backward ones: the role says which), the user code's values (kernels with fa_mods), the launch, the
// device, the loaded kernel's registers, and the runtime's tensor-map encoder.
struct BindInput {
  void* args = nullptr;  // FaFwdArgs* or FaBwdArgs*; a family may adjust fields before they are copied
  size_t args_size = 0;
  const void* user = nullptr;  // FaUser* (fa_args.cuh): the second parameter of kernels with user code (Semantic::mods)
  LaunchShape shape;
  Launch launch;
  DeviceLimits limits;
  int registers = 0;  // per thread, from ptxas (0: unknown)
  void* encoder_ctx = nullptr;
  bool (*encode_tensor_map)(void* ctx, const TensorMapDesc& d, void* out128, std::string* why) = nullptr;
};

enum class Role : int {
  Forward,   // serves fa_run: ranked by the selector
  Backward,  // serves fa_run_backward: ranked by the selector; its plan lists the steps
  Step,      // only a step inside another family's plan (bwd_pre, bwd_post, ...)
};

struct Family {
  const char* name = nullptr;           // "fwd_mma": the key prefix and the registry's name
  const char* template_name = nullptr;  // "fwd_mma.cuh" (embedded, templates/)
  Role role = Role::Step;
  int arch_min = 80, arch_max = INT_MAX;
  int priority = 0;                // among covering families of a role, the highest wins
  bool reference = false;          // the always-correct fallback (FA_FORCE_REFERENCE picks these)
  bool tuned_on_first_use = true;  // false: the chooser keeps the defaults (no timing)
  // FP8 (fa_params version 3). The selector passes over a family that does not declare what a problem needs, so no
  // 16-bit kernel ever reads fp8 bytes: fp8_kv_cache: reads k / v of kv_dtype e4m3 / e5m2 with k_scale / v_scale
  // (q, o 16-bit); fp8_inputs: q, k, v of an fp8 dtype with descales, o of o_dtype.
  bool fp8_kv_cache = false;
  bool fp8_inputs = false;
  // Attention sinks (fa_params.sinks, Semantic::has_sinks): the family's kernels read them (kHasSinks). Without it
  // the selector passes the family over and the validity predicate refuses any config of it with a sink, so that
  // no kernel ever ignores the pointer.
  bool sinks = false;
  std::vector<Knob> knobs;         // the tunable schema
  const char* legacy_x = nullptr;  // the knob that pre-schema keys called `x` (parse_tunables_key)

  // Whether the family serves problem p on arch (beyond the arch range); the reason when not. null: always.
  bool (*covers)(const ProblemDesc& p, int arch, std::string* why) = nullptr;
  // The heuristic default (must be valid for every Semantic this family covers).
  Tunables (*defaults)(const Semantic& s) = nullptr;
  // The family's cross-knob rules (each knob's value is already one of its allowed values): false with a reason
  // when the point cannot work. null: no further rule.
  bool (*valid)(const KernelConfig& c, std::string* why) = nullptr;
  unsigned (*smem_bytes)(const KernelConfig& c) = nullptr;  // null: 0
  Launch (*launch)(const KernelConfig& c, const LaunchShape& shape) = nullptr;
  // Every tunable point the tuner may try (unfiltered; is_valid prunes). null: the product of the knobs' values.
  std::vector<Tunables> (*space)(const Semantic& s) = nullptr;
  // Fills the config's shape-class flags that depend on the tunables for problem p. null: even_k = false.
  void (*finalize)(KernelConfig* c, const ProblemDesc& p) = nullptr;
  // Family constants beyond the semantic part and the knobs, appended to the fa_cfg prelude. null: none.
  void (*render_constants)(const KernelConfig& c, std::string* src) = nullptr;
  // The plan of a call served by this family with its own step at `main` (Forward / Backward roles).
  // null: a plan of one step, `main` finalized for p, no workspace.
  Plan (*plan)(const KernelConfig& main, const ProblemDesc& p) = nullptr;
  // The kernel parameters of a launch, every one of them: with user code (Semantic::mods) the bind also places
  // BindInput::user where its template declares FA_USER_PARAM (the runtime adds nothing after a bind). null: the
  // common args struct, then FaUser for a kernel with user code.
  bool (*bind)(const KernelConfig& c, const BindInput& in, KernelParams* out, std::string* why) = nullptr;

  int knob_index(std::string_view knob_name) const;  // -1 when the family has no such knob
};

// The registry. Each folder's family.cpp defines `void fa_register_family_NAME()` (FA_FAMILY_FOLDER), which calls
// register_family for each family it holds; registry.cpp calls every folder's function once, from the list CMake
// generates (generator/families/*/).
void register_family(const Family* f);
const std::vector<const Family*>& all_families();
const Family* find_family(std::string_view name);  // nullptr when no such family is built in
// The families of `role` whose arch range includes `arch`, highest priority first (registration order on ties).
const std::vector<const Family*>& ranked_families(Role role, int arch);
#define FA_FAMILY_FOLDER(folder) void fa_register_family_##folder()

// The value of the knob named `knob` in t for s's family; `fallback` when the family has no such knob.
int knob_value(const Semantic& s, const Tunables& t, std::string_view knob, int fallback = 0);

// THE validity predicate: semantic ranges + each knob within its values + family rules + shared memory within
// `lim`. Used by the generator's sweep, the tuner and fa_run alike.
bool is_valid(const KernelConfig& c, const DeviceLimits& lim, std::string* why);

// All tunable points of a semantic before validity (the family's space, or the knobs' product).
std::vector<Tunables> full_space(const Semantic& s);
// All valid tunable points of a semantic on a device (the tuner's candidate list before ptxas pruning).
std::vector<Tunables> valid_space(const Semantic& s, const DeviceLimits& lim);
// Every valid point of the knobs' product, also where a family's space() is narrower (what the tunables tests and
// the compile sweep cover: every point a caller may pin must compile without spills and give the same answer).
std::vector<Tunables> all_valid_points(const Semantic& s, const DeviceLimits& lim);

// Small shared helpers for families.
unsigned smem_of(const KernelConfig& c);  // the family's smem_bytes, or 0

}  // namespace fa::gen
