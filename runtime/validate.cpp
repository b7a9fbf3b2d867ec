// validate.cpp -- argument checking for the C API. Each rejection names the field, the expected and the actual.
#include "runtime/validate.h"

#include "generator/user_mods.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <tuple>
#include <vector>

namespace fa::rt {

size_t dtype_size(int dtype) {
  return dtype == FA_DTYPE_FP32 ? 4 : dtype == FA_DTYPE_E4M3 || dtype == FA_DTYPE_E5M2 ? 1 : 2;
}

namespace {

constexpr int64_t kMaxOffset = int64_t(1) << 60;

struct Dim {
  int64_t extent, stride;
};

std::string ptr_str(const void* p) { return fmt::format("{}", p); }

// A tensor [d0, d1, d2, inner] (element strides, inner contiguous). Checks strides >= 0, offsets without overflow,
// and that no two elements alias (dims of extent 1 ignored). Returns the element span [0, span).
Status check_tensor(const char* name, const void* ptr, size_t esize,
                    std::initializer_list<std::pair<const char*, Dim>> dims, int64_t inner, int64_t* span_out) {
  if (ptr == nullptr) return invalid(name, "a device pointer", "NULL");
  if (reinterpret_cast<uintptr_t>(ptr) % esize != 0)
    return invalid(name, fmt::format("a pointer aligned to {} bytes", esize), ptr_str(ptr));
  Dim ds[4];  // the dims of extent > 1 (no heap: this runs on every fa_run)
  size_t nds = 0;
  int64_t span = inner;
  for (const auto& [field, d] : dims)
    if (d.extent == 0) {  // an empty tensor: nothing is read or written, any strides >= 0 will do
      for (const auto& [f2, d2] : dims)
        if (d2.stride < 0) return invalid(f2, ">= 0", d2.stride);
      *span_out = 0;
      return Status::Ok();
    }
  for (const auto& [field, d] : dims) {
    if (d.stride < 0) return invalid(field, ">= 0", d.stride);
    if (d.extent > 1) {
      if (d.stride != 0 && (d.extent - 1) > (kMaxOffset - span) / d.stride)
        return invalid(field,
                       fmt::format("a stride whose largest offset fits in 2^60 elements ({} x {})", d.extent, d.stride),
                       d.stride);
      span += (d.extent - 1) * d.stride;
      if (nds < 4) ds[nds++] = d;
      if (d.stride == 0)
        return invalid(field, fmt::format("a non-zero stride (extent {} would alias)", d.extent), d.stride);
    }
  }
  // no aliasing: sorted by stride, each stride >= the span of the dims inside it
  for (size_t a = 1; a < nds; ++a)  // insertion sort of at most 4
    for (size_t b = a; b > 0 && ds[b].stride < ds[b - 1].stride; --b) std::swap(ds[b], ds[b - 1]);
  int64_t inside = inner;
  for (size_t n = 0; n < nds; ++n) {
    const Dim& d = ds[n];
    if (d.stride < inside) {
      const char* field = "?";
      for (const auto& [f, dd] : dims)
        if (dd.stride == d.stride && dd.extent == d.extent) field = f;
      return invalid(field, fmt::format(">= {} so that {} rows do not overlap", inside, name), d.stride);
    }
    inside = d.stride * (d.extent - 1) + inside;
  }
  *span_out = span;
  return Status::Ok();
}

bool overlaps(const void* a, int64_t a_bytes, const void* b, int64_t b_bytes) {
  auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return x < y + static_cast<uintptr_t>(b_bytes) && y < x + static_cast<uintptr_t>(a_bytes);
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
// The tensor-copy engine (TMA) reads q, k, v (and, in the Hopper backward, dout) as (head_dim, seq, heads, batch)
// boxes: on top of the 16-byte rule, every dimension of extent > 1 needs a positive byte stride below 2^40.
bool tma_stride(int64_t stride, int64_t extent, size_t elem_bytes) {
  return extent <= 1 || (stride > 0 && stride * static_cast<int64_t>(elem_bytes) < (int64_t{1} << 40));
}

// A float32 factor array read at b * stride_batch + g * stride_head (b < batch, g < heads): NULL (the factor 1) with
// zero strides, or a 4-byte aligned pointer with strides >= 0 whose largest offset fits in 2^60 elements. `allowed`:
// the problem uses the field at all (else it must be NULL with zero strides; `when` says when it is used).
Status check_factors(const char* name, const float* ptr, const char* sb_name, int64_t sb, int64_t batch,
                     const char* sh_name, int64_t sh, int64_t heads, bool allowed, const char* when) {
  if (ptr == nullptr) {
    if (sb != 0) return invalid(sb_name, fmt::format("0 when {} is NULL", name), sb);
    if (sh != 0) return invalid(sh_name, fmt::format("0 when {} is NULL", name), sh);
    return Status::Ok();
  }
  if (!allowed) return invalid(name, fmt::format("NULL unless {}", when), ptr_str(ptr));
  if (reinterpret_cast<uintptr_t>(ptr) % 4) return invalid(name, "4-byte aligned (float32)", ptr_str(ptr));
  for (auto [f, s, n] : {std::tuple{sb_name, sb, batch}, std::tuple{sh_name, sh, heads}}) {
    if (f == nullptr) continue;
    if (s < 0) return invalid(f, ">= 0 (0: one factor for every index)", s);
    if (n > 1 && s > (kMaxOffset / 2) / (n - 1))
      return invalid(f, fmt::format("a stride whose largest offset fits in 2^59 elements ({} x {})", n, s), s);
  }
  return Status::Ok();
}

// A buffer's name, address and bytes (the backward's overlap checks).
struct Region {
  const char* n;
  const void* p;
  int64_t bytes;
};

// fa_bwd_params.dsinks (version 2): required (4-byte aligned float32 [heads_q]) exactly when the forward has sinks,
// not overlapping the other gradients, dout, o or the LSE (lse_rows floats).
Status check_dsinks(const fa_bwd_params& b, const fa_params& p, int64_t lse_rows, const Region (&outs)[3],
                    const Region (&ins)[5]) {
  if (p.sinks == nullptr) {
    if (b.dsinks != nullptr) return invalid("dsinks", "NULL when fwd.sinks is NULL", ptr_str(b.dsinks));
    return Status::Ok();
  }
  if (b.dsinks == nullptr)
    return invalid("dsinks",
                   b.version >= 2 ? "a float32 [heads_q] device pointer for the sinks' gradient, as fwd.sinks is set"
                                  : "a float32 [heads_q] device pointer (fa_bwd_params version 2), as fwd.sinks is set",
                   b.version >= 2 ? "NULL" : fmt::format("absent (fa_bwd_params version {})", b.version));
  if (reinterpret_cast<uintptr_t>(b.dsinks) % 4)
    return invalid("dsinks", "a 4-byte aligned float32 [heads_q] pointer", ptr_str(b.dsinks));
  const int64_t bytes = int64_t(p.heads_q) * 4;
  for (const Region& r : outs)
    if (overlaps(b.dsinks, bytes, r.p, r.bytes))
      return invalid("dsinks", fmt::format("memory not overlapping {}", r.n), ptr_str(b.dsinks));
  for (const Region& r : ins)
    if (overlaps(b.dsinks, bytes, r.p, r.bytes))
      return invalid("dsinks", fmt::format("memory not overlapping {}", r.n), ptr_str(b.dsinks));
  if (overlaps(b.dsinks, bytes, p.sinks, bytes))
    return invalid("dsinks", "memory not overlapping sinks", ptr_str(b.dsinks));
  if (overlaps(b.dsinks, bytes, p.lse, lse_rows * 4))
    return invalid("dsinks", "memory not overlapping lse", ptr_str(b.dsinks));
  return Status::Ok();
}

// The version 3 fields (fa.h "FP8"): which dtypes combine, and the descale / scale factor arrays.
Status validate_fp8_fields(const fa_params& p) {
  const bool fp8_in = p.dtype == FA_DTYPE_E4M3 || p.dtype == FA_DTYPE_E5M2;
  const bool fp8_kv = !fp8_in && (p.kv_dtype == FA_DTYPE_E4M3 || p.kv_dtype == FA_DTYPE_E5M2);
  if (fp8_in) {
    if (p.o_dtype != FA_DTYPE_BF16 && p.o_dtype != FA_DTYPE_FP16)
      return invalid(
          "o_dtype",
          fmt::format("FA_DTYPE_BF16 (2) or FA_DTYPE_FP16 (1) with the fp8 dtype {} (o is never fp8)", p.dtype),
          p.o_dtype);
    if (p.kv_dtype != 0 && p.kv_dtype != p.dtype)
      return invalid("kv_dtype", fmt::format("0 or dtype ({}): fp8 q takes k and v of its own dtype", p.dtype),
                     p.kv_dtype);
  } else {
    if (p.o_dtype != 0 && p.o_dtype != p.dtype)
      return invalid("o_dtype", fmt::format("0 or dtype ({}) unless dtype is fp8", p.dtype), p.o_dtype);
    const bool kv_ok = p.kv_dtype == 0 || p.kv_dtype == p.dtype || (fp8_kv && p.dtype != FA_DTYPE_FP32);
    if (!kv_ok)
      return invalid(
          "kv_dtype",
          p.dtype == FA_DTYPE_FP32
              ? std::string("0 or dtype (3) with an fp32 dtype")
              : fmt::format("0, dtype ({}), FA_DTYPE_E4M3 (4) or FA_DTYPE_E5M2 (5) (an fp8 KV cache)", p.dtype),
          p.kv_dtype);
  }
  const int64_t nb = p.batch, hk = p.heads_kv;
  const char* in_when = "dtype is FA_DTYPE_E4M3 / FA_DTYPE_E5M2 (fp8 q / k / v)";
  Status st = check_factors("descale_q", p.descale_q, "descale_q_stride_batch", p.descale_q_stride_batch, nb,
                            "descale_q_stride_head", p.descale_q_stride_head, hk, fp8_in, in_when);
  if (st.ok())
    st = check_factors("descale_k", p.descale_k, "descale_k_stride_batch", p.descale_k_stride_batch, nb,
                       "descale_k_stride_head", p.descale_k_stride_head, hk, fp8_in, in_when);
  if (st.ok())
    st = check_factors("descale_v", p.descale_v, "descale_v_stride_batch", p.descale_v_stride_batch, nb,
                       "descale_v_stride_head", p.descale_v_stride_head, hk, fp8_in, in_when);
  const char* kv_when = "kv_dtype is FA_DTYPE_E4M3 / FA_DTYPE_E5M2 with a 16-bit dtype (an fp8 KV cache)";
  if (st.ok())
    st = check_factors("k_scale", p.k_scale, nullptr, 0, 1, "k_scale_stride_head", p.k_scale_stride_head, hk, fp8_kv,
                       kv_when);
  if (st.ok())
    st = check_factors("v_scale", p.v_scale, nullptr, 0, 1, "v_scale_stride_head", p.v_scale_stride_head, hk, fp8_kv,
                       kv_when);
  return st;
}

}  // namespace

Status validate_mods(const fa_mods& m, bool backward, const gen::UserMods** out, int* depends) {
  if (m.version < 1 || m.version > FA_MODS_VERSION)
    return error(FA_ERROR_INVALID_VERSION,
                 fmt::format("mods.version: expected 1..{} (call fa_mods_init), got {}", FA_MODS_VERSION, m.version));
  // Each version's struct ends where the next one's fields begin; fields past it are never read.
  const size_t expected = m.version == 1   ? offsetof(fa_mods, mask_mod_depends)
                          : m.version == 2 ? offsetof(fa_mods, score_mod_grad)
                          : m.version == 3 ? offsetof(fa_mods, mask_epoch)
                                           : sizeof(fa_mods);
  if (m.struct_size != expected)
    return error(FA_ERROR_INVALID_VERSION,
                 fmt::format("mods.struct_size: expected {} for version {} (call fa_mods_init), got {}", expected,
                             m.version, m.struct_size));
  *depends = FA_MOD_DEPENDS_BATCH | FA_MOD_DEPENDS_HEAD;
  if (m.version >= 2) {
    if (m.mask_mod_depends & ~(FA_MOD_DEPENDS_BATCH | FA_MOD_DEPENDS_HEAD))
      return invalid("mods.mask_mod_depends", "FA_MOD_DEPENDS_* bits (0..3)", m.mask_mod_depends);
    if (m.reserved1 != 0) return invalid("mods.reserved1", "0", m.reserved1);
    *depends = m.mask_mod_depends;
  }
  if (m.num_buffers < 0 || m.num_buffers > FA_MAX_USER_BUFFERS)
    return invalid("mods.num_buffers", fmt::format("0..{}", FA_MAX_USER_BUFFERS), m.num_buffers);
  if (m.reserved0 != 0) return invalid("mods.reserved0", "0", m.reserved0);
  int dtypes[FA_MAX_USER_BUFFERS] = {}, ranks[FA_MAX_USER_BUFFERS] = {};
  for (int n = 0; n < m.num_buffers; ++n) {
    const fa_user_buffer& b = m.buffers[n];
    // The field's name is formatted only for an error (this runs on every fa_run with user code).
    auto field = [n](const char* part) { return fmt::format("mods.buffers[{}].{}", n, part); };
    if (gen::user_dtype_ctype(b.dtype) == nullptr)
      return invalid(field("dtype").c_str(), "an fa_user_dtype (FA_USER_I32 1 .. FA_USER_U8 6)", b.dtype);
    if (b.rank < 0 || b.rank > 4) return invalid(field("rank").c_str(), "0..4", b.rank);
    if (b.rank > 0 && b.ptr == nullptr) return invalid(field("ptr").c_str(), "a device pointer when rank > 0", "NULL");
    static constexpr int kSize[] = {0, 4, 8, 4, 2, 2, 1};
    if (reinterpret_cast<uintptr_t>(b.ptr) % kSize[b.dtype])
      return invalid(field("ptr").c_str(), fmt::format("aligned to {} bytes", kSize[b.dtype]), ptr_str(b.ptr));
    for (int d = 0; d < b.rank; ++d) {
      if (b.shape[d] < 0) return invalid(field(fmt::format("shape[{}]", d).c_str()).c_str(), ">= 0", b.shape[d]);
      if (b.stride[d] < 0) return invalid(field(fmt::format("stride[{}]", d).c_str()).c_str(), ">= 0", b.stride[d]);
    }
    dtypes[n] = b.dtype;
    ranks[n] = b.rank;
  }
  const char* mask = m.mask_mod != nullptr ? m.mask_mod : "";
  const char* score = m.score_mod != nullptr ? m.score_mod : "";
  const char* grad = m.version >= 3 && m.score_mod_grad != nullptr ? m.score_mod_grad : "";
  for (auto [f, body] :
       {std::pair{"mods.mask_mod", mask}, std::pair{"mods.score_mod", score}, std::pair{"mods.score_mod_grad", grad}})
    if (std::strlen(body) > 65536) return invalid(f, "at most 64 KiB of source", std::strlen(body));
  if (*grad != '\0' && *score == '\0')
    return invalid("mods.score_mod_grad", "NULL without a score_mod (it is score_mod's derivative)", "a body");
  if (backward && *score != '\0' && *grad == '\0')
    return invalid("mods.score_mod_grad",
                   m.version >= 3
                       ? "the body of d score_mod / d s for the backward (fa.h: fa_mods), as score_mod is set"
                       : "the body of d score_mod / d s for the backward (fa_mods version 3), as score_mod is set",
                   m.version >= 3 ? "NULL" : fmt::format("absent (fa_mods version {})", m.version));
  // The forward never reads the derivative: its kernels' keys hold the mask and score code alone.
  *out = gen::intern_user_mods(mask, score, m.num_buffers, dtypes, ranks, backward ? grad : "");
  return Status::Ok();
}

uint64_t mods_epoch(const fa_mods* m) { return m != nullptr && m->version >= 4 ? m->mask_epoch : 0; }

Status validate_forward(const fa_params* in, fa_params* out, gen::ProblemDesc* desc) {
  if (in == nullptr) return invalid("params", "a non-NULL fa_params*", "NULL");
  if (in->version < 1 || in->version > FA_PARAMS_VERSION)
    return error(FA_ERROR_INVALID_VERSION, fmt::format("params.version: expected 1..{} (call fa_params_init), got {}",
                                                       FA_PARAMS_VERSION, in->version));
  // Each version's struct ends where the next one's fields begin (1: before the KV-cache fields, 2: before the fp8
  // fields): it is read as far as it goes, the rest stays zero.
  const size_t expected_size = in->version == 1   ? offsetof(fa_params, seqused_k)
                               : in->version == 2 ? offsetof(fa_params, o_dtype)
                                                  : sizeof(fa_params);
  if (in->struct_size != expected_size)
    return error(FA_ERROR_INVALID_VERSION,
                 fmt::format("params.struct_size: expected {} for version {} (call fa_params_init), got {}",
                             expected_size, in->version, in->struct_size));
  fa_params p;
  std::memset(&p, 0, sizeof p);
  std::memcpy(&p, in, expected_size);

  if (p.dtype < FA_DTYPE_FP16 || p.dtype > FA_DTYPE_E5M2)
    return invalid("dtype",
                   "FA_DTYPE_FP16 (1), FA_DTYPE_BF16 (2), FA_DTYPE_FP32 (3), FA_DTYPE_E4M3 (4) or FA_DTYPE_E5M2 (5)",
                   p.dtype);
  if (p.batch < 1 || p.batch > 65535) return invalid("batch", "1..65535", p.batch);
  if (p.heads_q < 1 || p.heads_q > 65535) return invalid("heads_q", "1..65535", p.heads_q);
  if (p.heads_kv < 1) return invalid("heads_kv", ">= 1", p.heads_kv);
  if (p.heads_q % p.heads_kv != 0)
    return invalid("heads_kv", fmt::format("a divisor of heads_q ({})", p.heads_q), p.heads_kv);
  if (!gen::head_dim_ok(p.head_dim))
    return invalid("head_dim", fmt::format("a multiple of 8 in [8, {}]", gen::kMaxHeadDim), p.head_dim);
  if (p.head_dim_v == 0) p.head_dim_v = p.head_dim;
  if (!gen::head_dim_ok(p.head_dim_v, gen::kMaxHeadDimV))
    return invalid("head_dim_v", fmt::format("0 or a multiple of 8 in [8, {}]", gen::kMaxHeadDimV), p.head_dim_v);

  const bool varlen = p.cu_seqlens_q != nullptr || p.cu_seqlens_k != nullptr;
  if (varlen) {
    if (p.cu_seqlens_q == nullptr)
      return invalid("cu_seqlens_q", "non-NULL when cu_seqlens_k is set (varlen mode)", "NULL");
    if (p.cu_seqlens_k == nullptr)
      return invalid("cu_seqlens_k", "non-NULL when cu_seqlens_q is set (varlen mode)", "NULL");
    if (reinterpret_cast<uintptr_t>(p.cu_seqlens_q) % 4)
      return invalid("cu_seqlens_q", "4-byte aligned", ptr_str(p.cu_seqlens_q));
    if (reinterpret_cast<uintptr_t>(p.cu_seqlens_k) % 4)
      return invalid("cu_seqlens_k", "4-byte aligned", ptr_str(p.cu_seqlens_k));
    if (p.max_seqlen_q < 0) return invalid("max_seqlen_q", ">= 0", p.max_seqlen_q);
    if (p.max_seqlen_k < 0) return invalid("max_seqlen_k", ">= 0", p.max_seqlen_k);
    if (p.total_q < p.max_seqlen_q)
      return invalid("total_q", fmt::format(">= max_seqlen_q ({})", p.max_seqlen_q), p.total_q);
    if (p.total_k < p.max_seqlen_k)
      return invalid("total_k", fmt::format(">= max_seqlen_k ({})", p.max_seqlen_k), p.total_k);
  } else {
    if (p.seqlen_q < 1) return invalid("seqlen_q", ">= 1", p.seqlen_q);
    if (p.seqlen_k < 0) return invalid("seqlen_k", ">= 0", p.seqlen_k);
  }
  const bool paged = p.block_table != nullptr;
  if (p.reserved1 != 0) return invalid("reserved1", "0", p.reserved1);
  if (p.num_splits < 0 || p.num_splits > 256)
    return invalid("num_splits", "0 (automatic), 1 (off) or 2..256", p.num_splits);
  if (p.seqused_k != nullptr && reinterpret_cast<uintptr_t>(p.seqused_k) % 4)
    return invalid("seqused_k", "4-byte aligned", ptr_str(p.seqused_k));
  if (paged) {
    if (varlen)
      return invalid("block_table", "NULL in varlen mode (a paged cache takes fixed-length batches)",
                     ptr_str(p.block_table));
    if (reinterpret_cast<uintptr_t>(p.block_table) % 4)
      return invalid("block_table", "4-byte aligned", ptr_str(p.block_table));
    if (p.page_size < 1 || p.page_size > 512 || (p.page_size & (p.page_size - 1)) != 0)
      return invalid("page_size", "a power of two in [1, 512]", p.page_size);
    if (p.num_pages < 1) return invalid("num_pages", ">= 1 (pages in the k / v pools)", p.num_pages);
    const int64_t pages_needed = (int64_t(p.seqlen_k) + p.page_size - 1) / p.page_size;
    if (p.block_table_stride < pages_needed || p.block_table_stride > (int64_t(1) << 31))
      return invalid(
          "block_table_stride",
          fmt::format(">= {} (seqlen_k {} in pages of {}) and <= 2^31", pages_needed, p.seqlen_k, p.page_size),
          p.block_table_stride);
  } else {
    if (p.page_size != 0) return invalid("page_size", "0 without block_table", p.page_size);
    if (p.num_pages != 0) return invalid("num_pages", "0 without block_table", p.num_pages);
    if (p.block_table_stride != 0) return invalid("block_table_stride", "0 without block_table", p.block_table_stride);
  }
  const gen::UserMods* mods = nullptr;
  int mods_depends = FA_MOD_DEPENDS_BATCH | FA_MOD_DEPENDS_HEAD;
  if (p.mods != nullptr) {
    Status ms = validate_mods(*p.mods, false, &mods, &mods_depends);
    if (!ms.ok()) return ms;
  }
  if (p.workspace != nullptr && reinterpret_cast<uintptr_t>(p.workspace) % 256)
    return invalid("workspace", "a 256-byte aligned pointer or NULL", ptr_str(p.workspace));
  if (p.workspace == nullptr && p.workspace_size != 0)
    return invalid("workspace_size", "0 when workspace is NULL", p.workspace_size);
  const int64_t sq = varlen ? p.max_seqlen_q : p.seqlen_q;
  const int64_t sk = varlen ? p.max_seqlen_k : p.seqlen_k;
  const int64_t nb = varlen ? 1 : p.batch;
  const int64_t tq = varlen ? p.total_q : sq;
  // Paged: k / v are pools of num_pages pages of page_size rows (their "batch" dim is the page).
  const int64_t nbk = paged ? p.num_pages : nb;
  const int64_t tk = paged ? p.page_size : varlen ? p.total_k : sk;

  if (p.mask != FA_MASK_NONE && p.mask != FA_MASK_CAUSAL && p.mask != FA_MASK_SLIDING_WINDOW)
    return invalid("mask", "FA_MASK_NONE (0), FA_MASK_CAUSAL (1) or FA_MASK_SLIDING_WINDOW (2)", p.mask);
  if (p.mask == FA_MASK_SLIDING_WINDOW) {
    if (p.window_left < -1) return invalid("window_left", ">= 0 or -1 (unbounded)", p.window_left);
    if (p.window_right < -1) return invalid("window_right", ">= 0 or -1 (unbounded)", p.window_right);
  } else {
    if (p.window_left != -1) return invalid("window_left", "-1 unless mask is FA_MASK_SLIDING_WINDOW", p.window_left);
    if (p.window_right != -1)
      return invalid("window_right", "-1 unless mask is FA_MASK_SLIDING_WINDOW", p.window_right);
  }
  if (!(p.softcap >= 0.0f) || std::isinf(p.softcap))
    return invalid("softcap", "a finite value >= 0 (0 = off)", p.softcap);
  if (!(p.softmax_scale >= 0.0f) || std::isinf(p.softmax_scale))
    return invalid("softmax_scale", "a finite value >= 0 (0 = 1/sqrt(head_dim))", p.softmax_scale);

  Status st = validate_fp8_fields(p);
  if (!st.ok()) return st;
  const int kv_dtype = p.kv_dtype != 0 ? p.kv_dtype : p.dtype;
  const int o_dtype = p.o_dtype != 0 ? p.o_dtype : p.dtype;
  const size_t es = dtype_size(p.dtype), es_kv = dtype_size(kv_dtype), es_o = dtype_size(o_dtype);
  int64_t span_q = 0, span_k = 0, span_v = 0, span_o = 0;
  st = check_tensor("q", p.q, es,
                    {{"q_stride_batch", {nb, p.q_stride_batch}},
                     {"q_stride_seq", {tq, p.q_stride_seq}},
                     {"q_stride_head", {p.heads_q, p.q_stride_head}}},
                    p.head_dim, &span_q);
  if (!st.ok()) return st;
  st = check_tensor("k", p.k, es_kv,
                    {{"k_stride_batch", {nbk, p.k_stride_batch}},
                     {"k_stride_seq", {tk, p.k_stride_seq}},
                     {"k_stride_head", {p.heads_kv, p.k_stride_head}}},
                    p.head_dim, &span_k);
  if (!st.ok()) return st;
  st = check_tensor("v", p.v, es_kv,
                    {{"v_stride_batch", {nbk, p.v_stride_batch}},
                     {"v_stride_seq", {tk, p.v_stride_seq}},
                     {"v_stride_head", {p.heads_kv, p.v_stride_head}}},
                    p.head_dim_v, &span_v);
  if (!st.ok()) return st;
  st = check_tensor("o", p.o, es_o,
                    {{"o_stride_batch", {nb, p.o_stride_batch}},
                     {"o_stride_seq", {tq, p.o_stride_seq}},
                     {"o_stride_head", {p.heads_q, p.o_stride_head}}},
                    p.head_dim_v, &span_o);
  if (!st.ok()) return st;
  const int64_t bo = span_o * static_cast<int64_t>(es_o);
  if (overlaps(p.o, bo, p.q, span_q * static_cast<int64_t>(es)))
    return invalid("o", "memory not overlapping q", ptr_str(p.o));
  if (overlaps(p.o, bo, p.k, span_k * static_cast<int64_t>(es_kv)))
    return invalid("o", "memory not overlapping k", ptr_str(p.o));
  if (overlaps(p.o, bo, p.v, span_v * static_cast<int64_t>(es_kv)))
    return invalid("o", "memory not overlapping v", ptr_str(p.o));

  if (p.bias != nullptr) {  // of o's dtype (dtype, or o_dtype with fp8 inputs)
    if (reinterpret_cast<uintptr_t>(p.bias) % es_o)
      return invalid("bias", fmt::format("a pointer aligned to {} bytes", es_o), ptr_str(p.bias));
    for (auto [f, s] :
         {std::pair{"bias_stride_batch", p.bias_stride_batch}, std::pair{"bias_stride_head", p.bias_stride_head},
          std::pair{"bias_stride_q", p.bias_stride_q}, std::pair{"bias_stride_k", p.bias_stride_k}})
      if (s < 0 || s > kMaxOffset / 65536) return invalid(f, "in [0, 2^44] (0 broadcasts)", s);
  } else if (p.bias_stride_batch || p.bias_stride_head || p.bias_stride_q || p.bias_stride_k) {
    return invalid("bias", "non-NULL when bias strides are set", "NULL");
  }
  if (p.alibi_slopes != nullptr && reinterpret_cast<uintptr_t>(p.alibi_slopes) % 4)
    return invalid("alibi_slopes", "4-byte aligned", ptr_str(p.alibi_slopes));
  if (p.sinks != nullptr && reinterpret_cast<uintptr_t>(p.sinks) % 4)
    return invalid("sinks", "a 4-byte aligned float32 [heads_q] pointer or NULL", ptr_str(p.sinks));
  if (p.lse != nullptr) {
    if (reinterpret_cast<uintptr_t>(p.lse) % 4) return invalid("lse", "4-byte aligned", ptr_str(p.lse));
    const int64_t lse_bytes = (varlen ? int64_t(p.heads_q) * p.total_q : int64_t(p.batch) * p.heads_q * sq) * 4;
    if (overlaps(p.lse, lse_bytes, p.o, bo)) return invalid("lse", "memory not overlapping o", ptr_str(p.lse));
  }

  gen::ProblemDesc d;
  d.dtype = p.dtype;
  d.kv_dtype = kv_dtype != p.dtype ? kv_dtype : 0;
  d.o_dtype = o_dtype != p.dtype ? o_dtype : 0;
  d.batch = p.batch;
  d.seqlen_q = static_cast<int>(sq);
  d.seqlen_k = static_cast<int>(sk);
  d.heads_q = p.heads_q;
  d.heads_kv = p.heads_kv;
  d.head_dim = p.head_dim;
  d.head_dim_v = p.head_dim_v;
  d.varlen = varlen;
  d.total_q = varlen ? p.total_q : p.batch * p.seqlen_q;
  d.total_k = varlen ? p.total_k : p.batch * p.seqlen_k;
  d.mask = p.mask;
  d.win_left = p.window_left;
  d.win_right = p.window_right;
  d.has_bias = p.bias != nullptr;
  d.has_alibi = p.alibi_slopes != nullptr;
  d.has_softcap = p.softcap > 0.0f;
  d.has_lse = p.lse != nullptr;
  d.has_sinks = p.sinks != nullptr;
  d.seqused = p.seqused_k != nullptr;
  d.paged = paged;
  d.page_size = paged ? p.page_size : 0;
  d.num_splits = p.num_splits;
  d.mods = mods;
  d.mask_mod_depends = mods_depends;
  // Strides in elements are multiples of 16 bytes: 16 / element size of each tensor's own dtype.
  auto s16e = [](int64_t s, size_t e) { return s % static_cast<int64_t>(16 / e) == 0; };
  auto s16 = [&](int64_t s) { return s16e(s, es); };
  auto s16kv = [&](int64_t s) { return s16e(s, es_kv); };
  auto s16o = [&](int64_t s) { return s16e(s, es_o); };
  d.aligned16 = aligned16(p.q) && aligned16(p.k) && aligned16(p.v) && aligned16(p.o) && s16(p.q_stride_batch) &&
                s16(p.q_stride_seq) && s16(p.q_stride_head) && s16kv(p.k_stride_batch) && s16kv(p.k_stride_seq) &&
                s16kv(p.k_stride_head) && s16kv(p.v_stride_batch) && s16kv(p.v_stride_seq) && s16kv(p.v_stride_head) &&
                s16o(p.o_stride_batch) && s16o(p.o_stride_seq) && s16o(p.o_stride_head);
  if (p.bias != nullptr)
    d.aligned16 = d.aligned16 && aligned16(p.bias) && p.bias_stride_k == 1 && s16o(p.bias_stride_batch) &&
                  s16o(p.bias_stride_head) && s16o(p.bias_stride_q);
  // TMA boxes of q, k, v and, fixed length, o (the Hopper forward's epilogue stores through a map of o) (tma_stride;
  // varlen: the packed sequence, batch 1). o has its own dtype only under fp8 inputs (the Hopper fp8 forward).
  const int64_t tma_b = varlen ? 1 : p.batch, tma_q = varlen ? d.total_q : p.seqlen_q,
                tma_k = varlen ? d.total_k : p.seqlen_k;
  const bool fp8_in = gen::is_fp8(p.dtype);
  d.tma_ok = d.aligned16 && !paged && d.kv_dtype == 0 && (d.o_dtype == 0 || fp8_in) &&
             tma_stride(p.q_stride_seq, tma_q, es) && tma_stride(p.q_stride_head, p.heads_q, es) &&
             tma_stride(p.q_stride_batch, tma_b, es) && tma_stride(p.k_stride_seq, tma_k, es) &&
             tma_stride(p.k_stride_head, p.heads_kv, es) && tma_stride(p.k_stride_batch, tma_b, es) &&
             tma_stride(p.v_stride_seq, tma_k, es) && tma_stride(p.v_stride_head, p.heads_kv, es) &&
             tma_stride(p.v_stride_batch, tma_b, es) &&
             (varlen || (tma_stride(p.o_stride_seq, p.seqlen_q, es_o) && tma_stride(p.o_stride_head, p.heads_q, es_o) &&
                         tma_stride(p.o_stride_batch, p.batch, es_o)));
  d.v_in_k = p.v == p.k && p.head_dim_v <= p.head_dim && p.v_stride_batch == p.k_stride_batch &&
             p.v_stride_seq == p.k_stride_seq && p.v_stride_head == p.k_stride_head;
  *out = p;
  *desc = d;
  return Status::Ok();
}

Status validate_merge(const fa_merge_params* in, fa_merge_params* out, gen::ProblemDesc* desc) {
  if (in == nullptr) return invalid("params", "a non-NULL fa_merge_params*", "NULL");
  if (in->version != FA_MERGE_PARAMS_VERSION)
    return error(FA_ERROR_INVALID_VERSION, fmt::format("merge.version: expected {} (call fa_merge_params_init), got {}",
                                                       FA_MERGE_PARAMS_VERSION, in->version));
  if (in->struct_size != sizeof(fa_merge_params))
    return error(FA_ERROR_INVALID_VERSION,
                 fmt::format("merge.struct_size: expected {} (call fa_merge_params_init), got {}",
                             sizeof(fa_merge_params), in->struct_size));
  const fa_merge_params& p = *in;
  if (p.dtype != FA_DTYPE_FP16 && p.dtype != FA_DTYPE_BF16 && p.dtype != FA_DTYPE_FP32)
    return invalid("dtype", "FA_DTYPE_FP16 (1), FA_DTYPE_BF16 (2) or FA_DTYPE_FP32 (3)", p.dtype);
  if (p.num_parts < 1 || p.num_parts > 65536) return invalid("num_parts", "1..65536", p.num_parts);
  if (p.batch < 1 || p.batch > 65535) return invalid("batch", "1..65535", p.batch);
  if (p.heads < 1) return invalid("heads", ">= 1", p.heads);
  if (p.seqlen < 1) return invalid("seqlen", ">= 1", p.seqlen);
  const int64_t rows_bh = int64_t(p.heads) * p.seqlen;  // one batch entry's rows (the kernel's 32-bit row index)
  if (rows_bh >= (int64_t(1) << 31))
    return invalid("seqlen", fmt::format("heads * seqlen < 2^31 (heads {})", p.heads), p.seqlen);
  if (!gen::head_dim_ok(p.head_dim, gen::kMaxHeadDimV))
    return invalid("head_dim", fmt::format("a multiple of 8 in [8, {}]", gen::kMaxHeadDimV), p.head_dim);
  if (p.part_o == nullptr) return invalid("part_o", "a device pointer", "NULL");
  if (!aligned16(p.part_o)) return invalid("part_o", "a 16-byte aligned pointer", ptr_str(p.part_o));
  if (p.part_lse == nullptr) return invalid("part_lse", "a device pointer", "NULL");
  if (reinterpret_cast<uintptr_t>(p.part_lse) % 4) return invalid("part_lse", "4-byte aligned", ptr_str(p.part_lse));
  const int64_t rows = int64_t(p.batch) * rows_bh;  // of one part
  const int64_t part_lse_bytes = int64_t(p.num_parts) * rows * 4;
  const int64_t part_o_bytes = part_lse_bytes * p.head_dim;
  if (overlaps(p.part_o, part_o_bytes, p.part_lse, part_lse_bytes))
    return invalid("part_lse", "memory not overlapping part_o", ptr_str(p.part_lse));
  const size_t es = dtype_size(p.dtype);
  int64_t span_o = 0;
  Status st = check_tensor("o", p.o, es,
                           {{"o_stride_batch", {p.batch, p.o_stride_batch}},
                            {"o_stride_seq", {p.seqlen, p.o_stride_seq}},
                            {"o_stride_head", {p.heads, p.o_stride_head}}},
                           p.head_dim, &span_o);
  if (!st.ok()) return st;
  const int64_t bo = span_o * static_cast<int64_t>(es);
  if (overlaps(p.o, bo, p.part_o, part_o_bytes)) return invalid("o", "memory not overlapping part_o", ptr_str(p.o));
  if (overlaps(p.o, bo, p.part_lse, part_lse_bytes))
    return invalid("o", "memory not overlapping part_lse", ptr_str(p.o));
  if (p.lse != nullptr) {
    if (reinterpret_cast<uintptr_t>(p.lse) % 4) return invalid("lse", "4-byte aligned", ptr_str(p.lse));
    const int64_t lse_bytes = rows * 4;
    if (overlaps(p.lse, lse_bytes, p.o, bo)) return invalid("lse", "memory not overlapping o", ptr_str(p.lse));
    if (overlaps(p.lse, lse_bytes, p.part_o, part_o_bytes))
      return invalid("lse", "memory not overlapping part_o", ptr_str(p.lse));
    if (overlaps(p.lse, lse_bytes, p.part_lse, part_lse_bytes))
      return invalid("lse", "memory not overlapping part_lse", ptr_str(p.lse));
  }
  gen::ProblemDesc d;
  d.dtype = p.dtype;
  d.batch = p.batch;
  d.seqlen_q = d.seqlen_k = p.seqlen;
  d.heads_q = d.heads_kv = p.heads;
  d.head_dim = d.head_dim_v = p.head_dim;
  d.total_q = d.total_k = static_cast<int>(std::min<int64_t>(rows, std::numeric_limits<int>::max()));
  d.has_lse = p.lse != nullptr;
  d.num_splits = p.num_parts;
  *out = p;
  *desc = d;
  return Status::Ok();
}

Status validate_backward(const fa_bwd_params* in, BwdView* out, gen::ProblemDesc* desc) {
  if (in == nullptr) return invalid("params", "a non-NULL fa_bwd_params*", "NULL");
  if (in->version < 1 || in->version > FA_BWD_PARAMS_VERSION)
    return error(FA_ERROR_INVALID_VERSION, fmt::format("bwd.version: expected 1..{} (call fa_bwd_params_init), got {}",
                                                       FA_BWD_PARAMS_VERSION, in->version));
  // Version 1 ends where dsinks (version 2) begins: read as far as it goes, the rest stays zero.
  const size_t expected_size = in->version == 1 ? offsetof(fa_bwd_params, dsinks) : sizeof(fa_bwd_params);
  if (in->struct_size != expected_size)
    return error(FA_ERROR_INVALID_VERSION,
                 fmt::format("bwd.struct_size: expected {} for version {} (call fa_bwd_params_init), got {}",
                             expected_size, in->version, in->struct_size));
  if (in->fwd == nullptr) return invalid("bwd.fwd", "the forward fa_params*", "NULL");
  BwdView v;
  gen::ProblemDesc d;
  Status st = validate_forward(in->fwd, &v.fwd, &d);
  if (!st.ok()) return st;
  std::memset(&v.bwd, 0, sizeof v.bwd);
  std::memcpy(&v.bwd, in, expected_size);
  const fa_params& p = v.fwd;
  if (p.lse == nullptr) return invalid("fwd.lse", "the forward's LSE (non-NULL) for the backward", "NULL");
  if (d.kv_dtype != 0 || d.o_dtype != 0)
    return error(FA_ERROR_NOT_SUPPORTED,
                 fmt::format("fwd.dtype / kv_dtype: the backward takes no fp8 (expected fp16, bf16 or fp32 throughout, "
                             "got dtype {} / kv_dtype {})",
                             gen::dtype_name(p.dtype), gen::dtype_name(d.kv_dtype != 0 ? d.kv_dtype : p.dtype)));
  if (d.paged)
    return error(FA_ERROR_NOT_SUPPORTED, "fwd.block_table: the backward takes no paged cache (expected NULL)");
  if (d.seqused)
    return error(FA_ERROR_NOT_SUPPORTED, "fwd.seqused_k: the backward takes no used lengths (expected NULL)");
  if (d.mods != nullptr) {  // again with the derivative of score_mod, which the backward's kernels run
    int depends = 0;
    st = validate_mods(*p.mods, true, &d.mods, &depends);
    if (!st.ok()) return st;
  }
  if (p.head_dim > gen::kMaxHeadDimFast || p.head_dim_v > gen::kMaxHeadDimFast)
    return error(FA_ERROR_NOT_SUPPORTED,
                 fmt::format("fwd.head_dim / head_dim_v: the backward takes head dims up to {}, got {} / {}",
                             gen::kMaxHeadDimFast, p.head_dim, p.head_dim_v));
  const bool varlen = d.varlen;
  const int64_t nb = varlen ? 1 : p.batch;
  const int64_t tq = varlen ? p.total_q : d.seqlen_q;
  const int64_t tk = varlen ? p.total_k : d.seqlen_k;
  const size_t es = dtype_size(p.dtype);
  const fa_bwd_params& b = v.bwd;
  int64_t span_do = 0, span_dq = 0, span_dk = 0, span_dv = 0;
  st = check_tensor("dout", b.dout, es,
                    {{"dout_stride_batch", {nb, b.dout_stride_batch}},
                     {"dout_stride_seq", {tq, b.dout_stride_seq}},
                     {"dout_stride_head", {p.heads_q, b.dout_stride_head}}},
                    p.head_dim_v, &span_do);
  if (!st.ok()) return st;
  st = check_tensor("dq", b.dq, es,
                    {{"dq_stride_batch", {nb, b.dq_stride_batch}},
                     {"dq_stride_seq", {tq, b.dq_stride_seq}},
                     {"dq_stride_head", {p.heads_q, b.dq_stride_head}}},
                    p.head_dim, &span_dq);
  if (!st.ok()) return st;
  st = check_tensor("dk", b.dk, es,
                    {{"dk_stride_batch", {nb, b.dk_stride_batch}},
                     {"dk_stride_seq", {tk, b.dk_stride_seq}},
                     {"dk_stride_head", {p.heads_kv, b.dk_stride_head}}},
                    p.head_dim, &span_dk);
  if (!st.ok()) return st;
  st = check_tensor("dv", b.dv, es,
                    {{"dv_stride_batch", {nb, b.dv_stride_batch}},
                     {"dv_stride_seq", {tk, b.dv_stride_seq}},
                     {"dv_stride_head", {p.heads_kv, b.dv_stride_head}}},
                    p.head_dim_v, &span_dv);
  if (!st.ok()) return st;
  const int64_t e = static_cast<int64_t>(es);
  const Region outs[] = {{"dq", b.dq, span_dq * e}, {"dk", b.dk, span_dk * e}, {"dv", b.dv, span_dv * e}};
  const Region ins[] = {{"q", p.q, 1}, {"k", p.k, 1}, {"v", p.v, 1}, {"o", p.o, 1}, {"dout", b.dout, span_do * e}};
  for (int i = 0; i < 3; ++i) {
    for (int j = i + 1; j < 3; ++j)
      if (overlaps(outs[i].p, outs[i].bytes, outs[j].p, outs[j].bytes))
        return invalid(outs[j].n, fmt::format("memory not overlapping {}", outs[i].n), ptr_str(outs[j].p));
    for (const Region& r : ins)
      if (overlaps(outs[i].p, outs[i].bytes, r.p, r.bytes))
        return invalid(outs[i].n, fmt::format("memory not overlapping {}", r.n), ptr_str(outs[i].p));
  }
  st = check_dsinks(b, p, d.varlen ? int64_t(p.heads_q) * p.total_q : int64_t(p.batch) * p.heads_q * d.seqlen_q, outs,
                    ins);
  if (!st.ok()) return st;
  if (b.deterministic != 0 && b.deterministic != 1) return invalid("deterministic", "0 or 1", b.deterministic);
  if (b.workspace != nullptr && reinterpret_cast<uintptr_t>(b.workspace) % 256)
    return invalid("workspace", "a 256-byte aligned pointer or NULL", ptr_str(b.workspace));
  if (b.workspace == nullptr && b.workspace_size != 0)
    return invalid("workspace_size", "0 when workspace is NULL", b.workspace_size);
  d.backward = true;
  d.deterministic = b.deterministic != 0;
  auto s16 = [&](int64_t s) { return s % static_cast<int64_t>(16 / es) == 0; };
  d.aligned16 = d.aligned16 && aligned16(b.dout) && aligned16(b.dq) && aligned16(b.dk) && aligned16(b.dv) &&
                s16(b.dout_stride_batch) && s16(b.dout_stride_seq) && s16(b.dout_stride_head) &&
                s16(b.dq_stride_batch) && s16(b.dq_stride_seq) && s16(b.dq_stride_head) && s16(b.dk_stride_batch) &&
                s16(b.dk_stride_seq) && s16(b.dk_stride_head) && s16(b.dv_stride_batch) && s16(b.dv_stride_seq) &&
                s16(b.dv_stride_head);
  // The Hopper backward (bwd_wgmma) reads dout by TMA too (tma_stride, as q, k, v).
  d.tma_ok = d.tma_ok && d.aligned16 && tma_stride(b.dout_stride_seq, tq, es) &&
             tma_stride(b.dout_stride_head, p.heads_q, es) && tma_stride(b.dout_stride_batch, nb, es);
  *out = v;
  *desc = d;
  return Status::Ok();
}

}  // namespace fa::rt
