// launch.cpp -- from validated params to kernels on the caller's stream (see launch.h).
#include "runtime/launch.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "runtime/alignment_note.h"
#include "runtime/validate.h"

namespace fa::rt {

namespace {
// launch_kernel with the context already pushed by the caller (enqueue_steps pushes it once for every step).
Status launch_pushed(fa_context c, Kernel& k, const gen::Launch& l, gen::KernelParams& params, CUstream stream);
}  // namespace

FaFwdArgs make_fwd_args(const fa_params& p, const gen::ProblemDesc& d) {
  FaFwdArgs a{};
  a.q = p.q;
  a.k = p.k;
  a.v = p.v;
  a.o = p.o;
  a.q_sb = p.q_stride_batch;
  a.q_ss = p.q_stride_seq;
  a.q_sh = p.q_stride_head;
  a.k_sb = p.k_stride_batch;
  a.k_ss = p.k_stride_seq;
  a.k_sh = p.k_stride_head;
  a.v_sb = p.v_stride_batch;
  a.v_ss = p.v_stride_seq;
  a.v_sh = p.v_stride_head;
  a.o_sb = p.o_stride_batch;
  a.o_ss = p.o_stride_seq;
  a.o_sh = p.o_stride_head;
  a.bias = p.bias;
  a.bias_sb = p.bias_stride_batch;
  a.bias_sh = p.bias_stride_head;
  a.bias_sq = p.bias_stride_q;
  a.bias_sk = p.bias_stride_k;
  a.alibi = p.alibi_slopes;
  a.lse = p.lse;
  if (d.varlen) {
    a.lse_sb = 0;
    a.lse_sh = d.total_q;
  } else {
    a.lse_sh = d.seqlen_q;
    a.lse_sb = static_cast<long long>(d.heads_q) * d.seqlen_q;
  }
  a.cu_seqlens_q = d.varlen ? p.cu_seqlens_q : nullptr;
  a.cu_seqlens_k = d.varlen ? p.cu_seqlens_k : nullptr;
  a.batch = d.batch;
  a.seqlen_q = d.seqlen_q;
  a.seqlen_k = d.seqlen_k;
  a.heads_q = d.heads_q;
  a.heads_kv = d.heads_kv;
  a.group = d.heads_q / d.heads_kv;
  if (d.mask == FA_MASK_CAUSAL) {
    a.win_left = -1;
    a.win_right = 0;
  } else if (d.mask == FA_MASK_SLIDING_WINDOW) {
    a.win_left = d.win_left;
    a.win_right = d.win_right;
  } else {
    a.win_left = -1;
    a.win_right = -1;
  }
  a.scale = p.softmax_scale > 0.0f ? p.softmax_scale : 1.0f / std::sqrt(static_cast<float>(d.head_dim));
  a.scale_log2 = a.scale * 1.4426950408889634f;
  a.softcap = p.softcap;
  a.inv_softcap = p.softcap > 0.0f ? 1.0f / p.softcap : 0.0f;
  a.seqused_k = p.seqused_k;
  a.k_scale = p.k_scale;
  a.v_scale = p.v_scale;
  a.k_scale_sh = p.k_scale_stride_head;
  a.v_scale_sh = p.v_scale_stride_head;
  a.sinks = p.sinks;
  a.descale_q = p.descale_q;
  a.descale_k = p.descale_k;
  a.descale_v = p.descale_v;
  a.descale_q_sb = p.descale_q_stride_batch;
  a.descale_q_sh = p.descale_q_stride_head;
  a.descale_k_sb = p.descale_k_stride_batch;
  a.descale_k_sh = p.descale_k_stride_head;
  a.descale_v_sb = p.descale_v_stride_batch;
  a.descale_v_sh = p.descale_v_stride_head;
  if (d.paged) {
    a.block_table = p.block_table;
    a.bt_stride = p.block_table_stride;
    a.page_size = p.page_size;
    while ((1 << a.page_shift) < p.page_size) ++a.page_shift;
    a.num_pages = p.num_pages;
  }
  a.num_splits = 1;  // the plan's split count and partial regions are bound with the workspace (bind_split)
  return a;
}

FaUser make_user_args(const fa_params& p) {
  FaUser u{};
  if (p.mods != nullptr) {
    const fa_mods& m = *p.mods;
    for (int n = 0; n < m.num_buffers; ++n) {
      u.buf[n] = m.buffers[n].ptr;
      for (int r = 0; r < m.buffers[n].rank; ++r) {
        u.shape[n][r] = m.buffers[n].shape[r];
        u.stride[n][r] = m.buffers[n].stride[r];
      }
    }
    for (int n = 0; n < FA_MAX_USER_SCALARS; ++n) {
      u.scalar[n] = m.scalars[n];
      u.iscalar[n] = m.iscalars[n];
    }
  }
  return u;
}

void bind_block_sizes(const gen::Plan& plan, FaFwdArgs* args) {
  if (plan.off_blk_cls == SIZE_MAX) return;
  const long long per_head = static_cast<long long>(plan.blk_mblocks) * plan.blk_nkb;
  args->blk_nkb = plan.blk_nkb;
  args->blk_nmb = plan.blk_mblocks;
  args->blk_cls_sh = (plan.blk_shared & 2) ? 0 : per_head;
  args->blk_cls_sb = (plan.blk_shared & 1) ? 0 : per_head * ((plan.blk_shared & 2) ? 1 : args->heads_q);
}

void bind_block_workspace(const gen::Plan& plan, FaFwdArgs* args, char* ws) {
  if (plan.off_blk_cls != SIZE_MAX) bind_block_classes(plan, args, ws + plan.off_blk_cls);
  if (plan.off_blk_list != SIZE_MAX) args->blk_list = reinterpret_cast<int*>(ws + plan.off_blk_list);
}

void bind_block_classes(const gen::Plan& plan, FaFwdArgs* args, char* span) {
  if (plan.off_blk_cls == SIZE_MAX) return;
  args->blk_cls = reinterpret_cast<unsigned char*>(span);
  if (plan.off_blk_cls_t != SIZE_MAX)
    args->blk_cls_t = reinterpret_cast<unsigned char*>(span + (plan.off_blk_cls_t - plan.off_blk_cls));
  // the sub-tile codes (fwd_wgmma's plans) sit in the same span, so a cached classification keeps them too
  if (plan.off_blk_sub != SIZE_MAX)
    args->blk_sub = reinterpret_cast<unsigned*>(span + (plan.off_blk_sub - plan.off_blk_cls));
  if (plan.off_blk_bits != SIZE_MAX) {
    args->blk_bits = reinterpret_cast<unsigned*>(span + (plan.off_blk_bits - plan.off_blk_cls));
    args->blk_bits_cap = plan.blk_bits_cap;
  }
}

void cache_classes(fa_context c, gen::Role role, const gen::ProblemDesc& d, const gen::Plan& plan, const fa_params& p,
                   const FaUser& user, FaFwdArgs* fwd, PlanArgs* pa) {
  const uint64_t epoch = mods_epoch(p.mods);
  if (epoch == 0 || plan.blk_cls_step < 0 || plan.off_blk_cls_end == SIZE_MAX || !c->mask_cache) return;
  pa->cache_classes = true;
  pa->cls_key = mask_cache_key(role, d, plan, user, d.varlen ? p.cu_seqlens_q : nullptr,
                               d.varlen ? p.cu_seqlens_k : nullptr, epoch);
  pa->fwd = fwd;
}

PlanArgs forward_plan_args(const gen::Plan& plan, FaFwdArgs* args, const FaUser* user) {
  PlanArgs pa{args, sizeof *args, {}};
  pa.user = user;
  pa.fwd = args;
  args->num_splits = plan.num_splits;
  bind_block_sizes(plan, args);
  // One binding for every workspace region the plan has (split partials, block classes and visiting lists).
  if (plan.workspace_bytes > 0)
    pa.bind_workspace = [args, &plan](char* ws) {
      if (plan.off_part_o != SIZE_MAX) args->part_o = reinterpret_cast<float*>(ws + plan.off_part_o);
      if (plan.off_part_lse != SIZE_MAX) args->part_lse = reinterpret_cast<float*>(ws + plan.off_part_lse);
      bind_block_workspace(plan, args, ws);
    };
  return pa;
}

Status stream_capturing(fa_context c, CUstream stream, bool* capturing) {
  *capturing = false;
  if (!c->has_device) return Status::Ok();
  CtxGuard g(c);  // a caller's thread may have no current context (the legacy stream needs one)
  if (!g.status().ok()) return g.status();
  CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
  CUresult r = c->drv->cuStreamIsCapturing(stream, &cs);
  if (r != CUDA_SUCCESS) return error(FA_ERROR_DRIVER, driver_error(*c->drv, "cuStreamIsCapturing", r));
  *capturing = cs != CU_STREAM_CAPTURE_STATUS_NONE;
  return Status::Ok();
}

Status kernel_for(fa_context c, const gen::KernelConfig& cfg, bool allow_compile, std::shared_ptr<Kernel>* out) {
  std::string why;
  if (!gen::is_valid(cfg, c->limits, &why))
    return error(FA_ERROR_INTERNAL, "selected an invalid kernel config " + gen::canonical_key(cfg) + ": " + why);
  std::shared_ptr<Kernel> k;
  if (!allow_compile) {
    k = c->kernels->peek(cfg);
    if (!k || !k->function)
      return error(FA_ERROR_STREAM_CAPTURING, "kernel " + gen::canonical_key(cfg) +
                                                  " is not ready and the stream is being captured: call fa_prepare "
                                                  "(or fa_prepare_backward) with the same params before capture");
    *out = k;
    return Status::Ok();
  }
  Status st = c->kernels->get(cfg, true, &k);
  if (!st.ok()) return st;
  if (c->has_device) {
    CtxGuard g(c);
    if (!g.status().ok()) return g.status();
    st = c->kernels->ensure_loaded(*c->drv, *k, gen::smem_of(cfg));
    if (!st.ok()) return st;
  }
  *out = k;
  return Status::Ok();
}

Status plan_for(fa_context c, gen::Role role, const gen::ProblemDesc& d, const TuneRequest* tune, gen::Plan* out) {
  const gen::Semantic s = gen::select(role, d, context_arch(c));
  if (s.family == nullptr) return error(FA_ERROR_NOT_SUPPORTED, "no kernel family is built in for this problem");
  note_alignment_fallback(c, role, d, s);
  if (!s.family->tuned_on_first_use) {  // the family runs at its defaults (the reference backward)
    *out = gen::make_plan(s, d);
    return Status::Ok();
  }
  gen::Tunables t;
  Status st = c->chooser->choose(c, s, d, tune, &t);
  if (!st.ok()) return st;
  *out = gen::make_plan(s, t, d);
  return Status::Ok();
}

namespace {

bool same_desc(const gen::TensorMapDesc& a, const gen::TensorMapDesc& b) {
  if (a.dtype != b.dtype || a.rank != b.rank || a.base != b.base || a.swizzle != b.swizzle) return false;
  for (int i = 0; i < a.rank; ++i)
    if (a.dims[i] != b.dims[i] || a.box[i] != b.box[i] || (i + 1 < a.rank && a.strides[i] != b.strides[i]))
      return false;
  return true;
}

// The last tensor maps this thread encoded: a repeated call on the same buffers (a decode loop, a training step
// with the allocator's reused addresses) copies 128 bytes instead of paying cuTensorMapEncodeTiled again.
struct EncodedMap {
  gen::TensorMapDesc desc;
  alignas(64) unsigned char map[128];
  bool used = false;
};
thread_local EncodedMap t_encoded[8];
thread_local unsigned t_encoded_next = 0;

// The runtime's tensor-map encoder for families that bind CUtensorMap parameters (BindInput::encode_tensor_map).
bool encode_tensor_map(void* ctx, const gen::TensorMapDesc& t, void* out128, std::string* why) {
  for (const EncodedMap& e : t_encoded)
    if (e.used && same_desc(e.desc, t)) {
      std::memcpy(out128, e.map, sizeof e.map);
      return true;
    }
  const Driver& drv = *static_cast<const Driver*>(ctx);
  // fp8 codes travel as bytes (the copy engine never converts them)
  const CUtensorMapDataType type = t.dtype == FA_DTYPE_FP32   ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32
                                   : t.dtype == FA_DTYPE_BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                   : t.dtype == FA_DTYPE_E4M3 || t.dtype == FA_DTYPE_E5M2
                                       ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                                       : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  const CUtensorMapSwizzle sw = t.swizzle == 128  ? CU_TENSOR_MAP_SWIZZLE_128B
                                : t.swizzle == 64 ? CU_TENSOR_MAP_SWIZZLE_64B
                                : t.swizzle == 32 ? CU_TENSOR_MAP_SWIZZLE_32B
                                                  : CU_TENSOR_MAP_SWIZZLE_NONE;
  cuuint64_t dims[5], strides[4];
  cuuint32_t box[5], elem[5];
  for (int i = 0; i < t.rank; ++i) {
    dims[i] = t.dims[i];
    box[i] = t.box[i];
    elem[i] = 1;
    if (i + 1 < t.rank) strides[i] = t.strides[i];
  }
  CUresult r =
      drv.cuTensorMapEncodeTiled(static_cast<CUtensorMap*>(out128), type, static_cast<cuuint32_t>(t.rank),
                                 const_cast<void*>(t.base), dims, strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE, sw,
                                 CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r == CUDA_SUCCESS) {
    EncodedMap& e = t_encoded[t_encoded_next++ % 8];
    e.desc = t;
    std::memcpy(e.map, out128, sizeof e.map);
    e.used = true;
    return true;
  }
  if (why) *why = driver_error(drv, "cuTensorMapEncodeTiled", r);
  return false;
}

// The cache's entry for a.cls_key on `stream`: none while the stream is being captured (a graph classifies on every
// replay), or when the stream cannot be told apart (cuStreamGetId failing).
MaskCache::Lease classes_lease(fa_context c, const gen::Plan& plan, const PlanArgs& a, CUstream stream) {
  bool capturing = true;
  unsigned long long id = 0;
  if (!stream_capturing(c, stream, &capturing).ok() || capturing || c->drv->cuStreamGetId(stream, &id) != CUDA_SUCCESS)
    return c->mask_cache->acquire_none();
  return c->mask_cache->acquire(a.cls_key, id, stream, plan.off_blk_cls_end - plan.off_blk_cls);
}

}  // namespace

Status resolve_kernels(fa_context c, const gen::Plan& plan, bool allow_compile,
                       std::vector<std::shared_ptr<Kernel>>* out) {
  out->clear();
  out->reserve(plan.steps.size());
  for (const auto& step : plan.steps) {
    std::shared_ptr<Kernel> k;
    Status st = kernel_for(c, step, allow_compile, &k);
    if (!st.ok()) return st;
    out->push_back(std::move(k));
  }
  return Status::Ok();
}

Status enqueue_plan(fa_context c, const gen::Plan& plan, const gen::LaunchShape& shape, const PlanArgs& a,
                    bool allow_compile, CUstream stream, void* ws, size_t ws_size) {
  std::vector<std::shared_ptr<Kernel>> kernels;
  Status st = resolve_kernels(c, plan, allow_compile, &kernels);
  if (!st.ok()) return st;
  return enqueue_steps(c, plan, kernels, shape, a, stream, ws, ws_size);
}

Status enqueue_steps(fa_context c, const gen::Plan& plan, const std::vector<std::shared_ptr<Kernel>>& kernels,
                     const gen::LaunchShape& shape_in, const PlanArgs& a, CUstream stream, void* ws_in,
                     size_t ws_size) {
  gen::LaunchShape shape = shape_in;
  shape.sm_count = c->sm_count > 0 ? c->sm_count : c->limits.sm_count;
  shape.num_splits = plan.num_splits;
  shape.blk_shared = plan.blk_shared;
  CtxGuard g(c);
  if (!g.status().ok()) return g.status();
  if (ws_in != nullptr && ws_size < plan.workspace_bytes)
    return invalid("workspace_size",
                   fmt::format(">= {} bytes ({})", plan.workspace_bytes,
                               plan.off_delta != SIZE_MAX ? "fa_backward_workspace_size" : "fa_forward_workspace_size"),
                   ws_size);
  const MaskCache::Lease lease = a.cache_classes ? classes_lease(c, plan, a, stream) : MaskCache::Lease{};
  const bool hit = lease.use == MaskCache::Use::kHit;
  // a hit needs no workspace when the classes are all the plan keeps there (fwd_wgmma's plan)
  const bool ws_needed = !(hit && plan.off_blk_cls == 0 && plan.off_blk_cls_end >= plan.workspace_bytes);
  CUdeviceptr ws = reinterpret_cast<CUdeviceptr>(ws_in);
  bool owned = false;
  if (ws_in == nullptr && plan.workspace_bytes > 0 && ws_needed) {
    CUresult r = c->drv->cuMemAllocAsync(&ws, plan.workspace_bytes, stream);
    if (r != CUDA_SUCCESS) {
      c->mask_cache->release(lease, false);
      if (r == CUDA_ERROR_OUT_OF_MEMORY)
        return error(FA_ERROR_OUT_OF_MEMORY, driver_error(*c->drv, "cuMemAllocAsync", r));
      return error(FA_ERROR_DRIVER, driver_error(*c->drv, "cuMemAllocAsync", r));
    }
    owned = true;
  }
  if (a.bind_workspace) a.bind_workspace(reinterpret_cast<char*>(ws));
  Status st;
  if (lease.use != MaskCache::Use::kNone) {  // the classes live in the cache entry
    bind_block_classes(plan, a.fwd, reinterpret_cast<char*>(lease.ptr));
    if (lease.wait_ready) {  // filled on another stream: its classification first
      CUresult r = c->drv->cuStreamWaitEvent(stream, lease.ready, 0);
      if (r != CUDA_SUCCESS) st = error(FA_ERROR_DRIVER, driver_error(*c->drv, "cuStreamWaitEvent", r));
    }
  }
  for (size_t i = 0; i < plan.steps.size() && st.ok(); ++i) {
    const bool classify = static_cast<int>(i) == plan.blk_cls_step;
    if (classify && hit) continue;
    const gen::KernelConfig& step = plan.steps[i];
    const gen::Family& f = *step.s.family;
    gen::BindInput in;
    in.args = a.args;
    in.args_size = a.size;
    in.user = a.user;
    in.shape = shape;
    in.launch = f.launch(step, shape);
    in.limits = c->limits;
    in.registers = kernels[i]->ptxas.registers;
    in.encoder_ctx = const_cast<Driver*>(c->drv);
    in.encode_tensor_map = &encode_tensor_map;
    gen::KernelParams params;
    std::string why;
    // The family's bind places every parameter, FaUser included (in.user; fwd_wgmma: fa_kernel(args FA_USER_PARAM,
    // tma)); without one: the common args struct, then, for a kernel with user code, its FaUser (fa_kernel(args
    // FA_USER_PARAM)). One path each, so the user parameter is never passed twice.
    if (f.bind != nullptr) {
      if (!f.bind(step, in, &params, &why))
        st = error(FA_ERROR_INTERNAL, "binding the arguments of " + kernels[i]->key + ": " + why);
    } else if (!params.add(a.args, a.size, 16) ||
               (step.s.mods != nullptr && (a.user == nullptr || !params.add(a.user, sizeof(FaUser), 16)))) {
      st = error(FA_ERROR_INTERNAL,
                 "the arguments of " + kernels[i]->key + " do not fit (or its user code's are missing)");
    }
    if (st.ok() && classify && a.fwd != nullptr && a.fwd->blk_bits != nullptr) {  // mask_blocks takes slots from 0
      CUresult r = c->drv->cuMemsetD32Async(reinterpret_cast<CUdeviceptr>(a.fwd->blk_bits), 0u, 1, stream);
      if (r != CUDA_SUCCESS) st = error(FA_ERROR_DRIVER, driver_error(*c->drv, "cuMemsetD32Async", r));
    }
    if (st.ok()) st = launch_pushed(c, *kernels[i], in.launch, params, stream);
    if (st.ok() && classify) {
      if (c->mask_cache) c->mask_cache->count_classified();
      if (lease.use == MaskCache::Use::kFill) {  // hits on other streams wait for this point
        CUresult r = c->drv->cuEventRecord(lease.ready, stream);
        if (r != CUDA_SUCCESS) st = error(FA_ERROR_DRIVER, driver_error(*c->drv, "cuEventRecord", r));
      }
    }
  }
  if (owned) c->drv->cuMemFreeAsync(ws, stream);
  if (lease.use != MaskCache::Use::kNone) c->mask_cache->release(lease, st.ok());
  return st;
}

Status launch_config(fa_context c, const gen::KernelConfig& cfg, const gen::LaunchShape& shape, void* args, size_t size,
                     CUstream stream) {
  gen::Plan plan;
  plan.steps.push_back(cfg);
  return enqueue_plan(c, plan, shape, PlanArgs{args, size, {}}, true, stream, nullptr, 0);
}

namespace {

// The forward plan with the top-level family at cfg (the tuner's candidate), enqueued on `stream`.
Status launch_config(fa_context c, const gen::KernelConfig& cfg, const fa_params& p, const gen::ProblemDesc& d,
                     CUstream stream) {
  const gen::Plan plan = gen::make_plan(cfg.s, cfg.t, d);
  FaFwdArgs args = make_fwd_args(p, d);
  const FaUser user = make_user_args(p);
  return enqueue_plan(c, plan, gen::launch_shape(d), forward_plan_args(plan, &args, p.mods ? &user : nullptr), true,
                      stream, nullptr, 0);
}

double half_value(int dtype, const unsigned char* b) {
  if (dtype == FA_DTYPE_FP32) {
    float f;
    std::memcpy(&f, b, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, b, 2);
  if (dtype == FA_DTYPE_BF16) {
    const uint32_t x = uint32_t(h) << 16;
    float f;
    std::memcpy(&f, &x, 4);
    return f;
  }
  const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  const double v = e == 0    ? std::ldexp(double(m), -24)
                   : e == 31 ? (m ? NAN : INFINITY)
                             : std::ldexp(double(m | 0x400u), int(e) - 25);
  return (h & 0x8000u) ? -v : v;
}

// Runs the candidate and the reference kernel into two compact scratch outputs and compares them:
// max |o - o_ref| / max |o_ref| (NaN anywhere gives NaN). Both run on a private stream that first waits for the
// caller's stream (an event), so the caller's stream is never synchronized and receives no work.
Status verify_against_reference(fa_context c, const gen::KernelConfig& cfg, const fa_params& p,
                                const gen::ProblemDesc& d, CUstream stream, double* rel) {
  const size_t rows = size_t(d.varlen ? d.total_q : d.batch * d.seqlen_q);
  const size_t elems = rows * size_t(d.heads_q) * size_t(d.head_dim_v);
  const size_t es = d.dtype == FA_DTYPE_FP32 ? 4 : 2;
  if (elems == 0) {
    *rel = 0;
    return Status::Ok();
  }
  CtxGuard g(c);
  if (!g.status().ok()) return g.status();
  const Driver& drv = *c->drv;
  CUdeviceptr a = 0, b = 0;
  CUresult r = drv.cuMemAlloc(&a, elems * es);
  if (r == CUDA_SUCCESS) r = drv.cuMemAlloc(&b, elems * es);
  if (r != CUDA_SUCCESS) {
    if (a) drv.cuMemFree(a);
    return error(FA_ERROR_OUT_OF_MEMORY, driver_error(drv, "cuMemAlloc (tuning scratch)", r));
  }
  fa_params pa = p;
  pa.lse = nullptr;
  pa.o_stride_head = d.head_dim_v;
  pa.o_stride_seq = int64_t(d.heads_q) * d.head_dim_v;
  pa.o_stride_batch = d.varlen ? 0 : pa.o_stride_seq * d.seqlen_q;
  pa.o = reinterpret_cast<void*>(a);
  fa_params pb = pa;
  pb.o = reinterpret_cast<void*>(b);
  const gen::Family* ref = gen::find_family("fwd_ref");
  const gen::Semantic rs = gen::semantic_for(*ref, d, cfg.s.arch);
  const gen::KernelConfig rc = gen::finalize(rs, ref->defaults(rs), d);
  CUstream own = nullptr;
  CUevent ready = nullptr;
  r = drv.cuStreamCreate(&own, CU_STREAM_NON_BLOCKING);
  if (r == CUDA_SUCCESS) r = drv.cuEventCreate(&ready, CU_EVENT_DISABLE_TIMING);
  if (r == CUDA_SUCCESS) r = drv.cuEventRecord(ready, stream);
  if (r == CUDA_SUCCESS) r = drv.cuStreamWaitEvent(own, ready, 0);
  Status st =
      r == CUDA_SUCCESS ? Status::Ok() : error(FA_ERROR_DRIVER, driver_error(drv, "verifying a tuned kernel", r));
  if (st.ok()) st = launch_config(c, cfg, pa, d, own);
  if (st.ok()) st = launch_config(c, rc, pb, d, own);
  std::vector<unsigned char> ha(elems * es), hb(elems * es);
  if (st.ok()) {
    r = drv.cuStreamSynchronize(own);
    if (r == CUDA_SUCCESS) r = drv.cuMemcpyDtoH(ha.data(), a, ha.size());
    if (r == CUDA_SUCCESS) r = drv.cuMemcpyDtoH(hb.data(), b, hb.size());
    if (r != CUDA_SUCCESS) st = error(FA_ERROR_DRIVER, driver_error(drv, "verifying a tuned kernel", r));
  }
  if (own) drv.cuStreamSynchronize(own);  // the scratch buffers are freed below
  if (ready) drv.cuEventDestroy(ready);
  if (own) drv.cuStreamDestroy(own);
  drv.cuMemFree(a);
  drv.cuMemFree(b);
  if (!st.ok()) return st;
  double max_diff = 0, max_ref = 0;
  for (size_t i = 0; i < elems; ++i) {
    const double x = half_value(d.dtype, &ha[i * es]), y = half_value(d.dtype, &hb[i * es]);
    const double diff = std::fabs(x - y);
    if (std::isnan(diff)) {
      *rel = NAN;
      return Status::Ok();
    }
    max_diff = std::max(max_diff, diff);
    max_ref = std::max(max_ref, std::fabs(y));
  }
  *rel = max_diff / std::max(max_ref, 1e-6);
  return Status::Ok();
}

}  // namespace

TuneRequest forward_tune_request(fa_context c, const fa_params& p, const gen::ProblemDesc& d, CUstream stream) {
  TuneRequest r;
  r.stream = stream;
  r.launch = [c, p, d, stream](const gen::KernelConfig& cfg) -> Status { return launch_config(c, cfg, p, d, stream); };
  r.verify = [c, p, d, stream](const gen::KernelConfig& cfg, double* rel) -> Status {
    return verify_against_reference(c, cfg, p, d, stream, rel);
  };
  return r;
}

Status launch_kernel(fa_context c, Kernel& k, const gen::Launch& l, gen::KernelParams& params, CUstream stream) {
  if (l.grid[0] == 0 || l.grid[1] == 0 || l.grid[2] == 0) return Status::Ok();  // nothing to do
  CtxGuard g(c);
  if (!g.status().ok()) return g.status();
  return launch_pushed(c, k, l, params, stream);
}

namespace {
Status launch_pushed(fa_context c, Kernel& k, const gen::Launch& l, gen::KernelParams& params, CUstream stream) {
  if (l.grid[0] == 0 || l.grid[1] == 0 || l.grid[2] == 0) return Status::Ok();  // nothing to do
  CUresult r;
  const bool cluster = l.cluster[0] * l.cluster[1] * l.cluster[2] != 1;
  if (!cluster && !l.dependent) {
    r = c->drv->cuLaunchKernel(k.function, l.grid[0], l.grid[1], l.grid[2], l.block, 1, 1, l.smem, stream, params.ptrs,
                               nullptr);
    if (r != CUDA_SUCCESS)
      return error(FA_ERROR_LAUNCH, driver_error(*c->drv, "cuLaunchKernel", r) + " for kernel " + k.key);
    return Status::Ok();
  }
  CUlaunchAttribute attrs[2]{};
  unsigned n_attrs = 0;
  if (cluster) {
    CUlaunchAttribute& attr = attrs[n_attrs++];
    attr.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attr.value.clusterDim.x = l.cluster[0];
    attr.value.clusterDim.y = l.cluster[1];
    attr.value.clusterDim.z = l.cluster[2];
  }
  if (l.dependent) {
    CUlaunchAttribute& attr = attrs[n_attrs++];
    attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
  }
  CUlaunchConfig cfg{};
  cfg.gridDimX = l.grid[0];
  cfg.gridDimY = l.grid[1];
  cfg.gridDimZ = l.grid[2];
  cfg.blockDimX = l.block;
  cfg.blockDimY = 1;
  cfg.blockDimZ = 1;
  cfg.sharedMemBytes = l.smem;
  cfg.hStream = stream;
  cfg.attrs = attrs;
  cfg.numAttrs = n_attrs;
  r = c->drv->cuLaunchKernelEx(&cfg, k.function, params.ptrs, nullptr);
  if (r != CUDA_SUCCESS)
    return error(FA_ERROR_LAUNCH, driver_error(*c->drv, "cuLaunchKernelEx", r) + " for kernel " + k.key);
  return Status::Ok();
}

}  // namespace

}  // namespace fa::rt
