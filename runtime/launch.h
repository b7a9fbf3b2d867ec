// launch.h -- from validated params to kernels on the caller's stream: the common kernel arguments, the kernels of
// a plan (compiled or found, loaded), each step's parameters bound by its family, and the launches.
#pragma once

#include <cuda.h>

#include <functional>
#include <memory>
#include <vector>

#include "fa/fa.h"
#include "generator/family.h"
#include "generator/problem.h"
#include "runtime/context.h"
#include "runtime/mask_cache.h"
#include "templates/fa_args.cuh"

namespace fa::rt {

FaFwdArgs make_fwd_args(const fa_params& p, const gen::ProblemDesc& d);

// Whether `stream` is being captured into a graph (false when there is no device).
Status stream_capturing(fa_context c, CUstream stream, bool* capturing);

// Compiles and loads a config (used by the plans, fa_prepare and the tuner). allow_compile=false: only what is
// already compiled and loaded in memory.
Status kernel_for(fa_context c, const gen::KernelConfig& cfg, bool allow_compile, std::shared_ptr<Kernel>* out);

// The chosen plan of a validated problem for `role`: the selector's family, the chooser's tunables for it (tuning
// now when `tune` is non-null and the policy allows), the family's plan.
Status plan_for(fa_context c, gen::Role role, const gen::ProblemDesc& d, const TuneRequest* tune, gen::Plan* out);

// The common argument struct of a plan's launches and how the workspace reaches it: `args` points at a FaFwdArgs
// (forward roles) or FaBwdArgs (backward); `bind_workspace(ws)` stores the workspace regions' pointers into it.
struct PlanArgs {
  void* args = nullptr;
  size_t size = 0;
  std::function<void(char* ws)> bind_workspace;
  const FaUser* user = nullptr;  // the second kernel parameter of steps with user code (Semantic::mods)
  // The classification cache (runtime/mask_cache.h; set by cache_classes): the key of the plan's classification,
  // and the FaFwdArgs whose class pointers a cached copy rebinds (the args, or a FaBwdArgs' forward part).
  bool cache_classes = false;
  MaskCacheKey cls_key{};
  FaFwdArgs* fwd = nullptr;
};

// Lets enqueue_steps keep or reuse the classification of `plan` (a mask_blocks step) across calls when the caller's
// fa_mods allows it (version 4, mask_epoch != 0) and the context's cache is on: fills pa's key for problem d of
// `role` (p: the validated params; user: its user code's values) and `fwd`. A no-op otherwise.
void cache_classes(fa_context c, gen::Role role, const gen::ProblemDesc& d, const gen::Plan& plan, const fa_params& p,
                   const FaUser& user, FaFwdArgs* fwd, PlanArgs* pa);

// The forward plan's args: the split count, and the workspace binding of the split partials (plan and args must
// outlive the returned PlanArgs' use).
PlanArgs forward_plan_args(const gen::Plan& plan, FaFwdArgs* args, const FaUser* user);
// Block skipping (plans with a mask_blocks step, forward or backward): the classes' sizes and strides, and their
// workspace regions (classes, transposed classes, visiting lists). No-ops for plans without.
void bind_block_sizes(const gen::Plan& plan, FaFwdArgs* args);
void bind_block_workspace(const gen::Plan& plan, FaFwdArgs* args, char* ws);
// The pointers of the regions the classification step writes (Plan::off_blk_cls .. off_blk_cls_end), into a copy of
// that span at `span` (the workspace's: ws + off_blk_cls; a cached one: its entry).
void bind_block_classes(const gen::Plan& plan, FaFwdArgs* args, char* span);
// The user code's parameter (fa_mods' buffers and scalars) of params p; zero without mods.
FaUser make_user_args(const fa_params& p);

// Enqueues every step of `plan` on `stream`: kernels (allow_compile as in kernel_for), the workspace (the caller's
// `ws` of `ws_size` bytes, or a stream-ordered allocation freed on the stream after the last step), each step's
// parameters (the family's bind, which places a.user itself; default: the common args, then a.user for a step with
// user code), the launch (with the family's cluster dims and dependent-launch flag). With a.cache_classes, outside
// stream capture: a cached classification skips the classification step (and the workspace when the classes are
// all it holds), or a new one is classified into a cache entry (runtime/mask_cache.h).
// Never synchronizes.
Status enqueue_plan(fa_context c, const gen::Plan& plan, const gen::LaunchShape& shape, const PlanArgs& a,
                    bool allow_compile, CUstream stream, void* ws, size_t ws_size);

// The kernels of every step of `plan` (kernel_for each, allow_compile as there), in step order.
Status resolve_kernels(fa_context c, const gen::Plan& plan, bool allow_compile,
                       std::vector<std::shared_ptr<Kernel>>* out);

// enqueue_plan with the kernels already resolved (fa_run's fast path: a CachedPlan's kernels).
Status enqueue_steps(fa_context c, const gen::Plan& plan, const std::vector<std::shared_ptr<Kernel>>& kernels,
                     const gen::LaunchShape& shape, const PlanArgs& a, CUstream stream, void* ws, size_t ws_size);

// One config as a plan of one step (tests and tools that launch a given kernel with the common args).
Status launch_config(fa_context c, const gen::KernelConfig& cfg, const gen::LaunchShape& shape, void* args, size_t size,
                     CUstream stream);

// Launches kernel k (loaded) with its bound parameters. No synchronization.
Status launch_kernel(fa_context c, Kernel& k, const gen::Launch& l, gen::KernelParams& params, CUstream stream);

// A TuneRequest for a validated forward problem on `stream` (launches write the caller's o and lse, which the
// final launch overwrites).
TuneRequest forward_tune_request(fa_context c, const fa_params& p, const gen::ProblemDesc& d, CUstream stream);

}  // namespace fa::rt
