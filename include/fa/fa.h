/*
 * fa.h -- the C API of fa, a library that writes FlashAttention kernels at run time.
 *
 * Every call returns an fa_status. On failure, fa_last_error() returns a per-thread message that names the
 * argument, the expected value and the actual value. The library never exits, aborts, prints to stdout, or
 * synchronizes a stream behind the caller's back; nothing is launched when a call fails validation, and a failed
 * call changes no output buffer.
 *
 * Versioning. Every struct passed in starts with `struct_size` (sizeof the struct the caller compiled against)
 * and `version`. Fill them with the matching *_init() function, then set fields. New fields are only appended;
 * a caller compiled against an older, smaller struct keeps working (missing fields take their *_init defaults).
 *
 * Semantics of the forward pass (all arithmetic accumulates in float32; the CPU oracle in tests/oracle uses float64):
 *   for batch b, query head h (kv head g = h / (heads_q / heads_kv)), query row i < Sq(b), key j < Sk(b):
 *     s_ij  = softmax_scale * dot(q[b,i,h,:], k[b,j,g,:])          (softmax_scale 0 means 1/sqrt(head_dim))
 *     s_ij  = softcap * tanh(s_ij / softcap)                        (only when softcap > 0)
 *     s_ij += bias[b,h,i,j]                                         (only when bias != NULL)
 *     s_ij += -alibi_slopes[h] * |i + Sk - Sq - j|                  (only when alibi_slopes != NULL)
 *     s_ij  = -inf where the mask hides key j from query i
 *     lse_i = log(exp(sinks[h]) + sum_j exp(s_ij))  (natural log; the sink term only when sinks != NULL; -inf when
 *                                                    every key is hidden and there is no sink)
 *     o_i   = sum_j exp(s_ij - lse_i) v[b,j,g,:]                    (0 when every key is hidden; never NaN)
 *   Attention sinks (sinks != NULL, gpt-oss; FlashAttention 4 / cuDNN "sinks", transformers' s_aux): one logit per
 *   query head, an extra column of every row's softmax that has no value vector. It is in the units of s_ij (after
 *   the scale, softcap, bias, ALiBi and user code; it is not multiplied by softmax_scale), is never masked, and
 *   counts once per row however the keys are split (split-KV adds it in the combine). A row whose keys are all
 *   hidden gives o = 0 and lse = sinks[h]; sinks[h] = -inf is no sink for head h.
 *   Masks are aligned to the bottom-right corner when Sq != Sk (FlashAttention >= 2.1):
 *     FA_MASK_NONE            every key visible
 *     FA_MASK_CAUSAL          j <= i + Sk - Sq
 *     FA_MASK_SLIDING_WINDOW  i + Sk - Sq - window_left <= j <= i + Sk - Sq + window_right (-1: unbounded side)
 *   Sk = 0 gives o = 0 and lse = -inf. Sq = 0 or Sk = 0 is allowed for a sequence of a varlen batch.
 *
 * Layout. q, k, v, o (and dq, dk, dv, do in the backward) are [batch, seqlen, heads, head_dim] with arbitrary
 * element strides for batch, seqlen and head, and a contiguous last dim (BSHD and BHSD both expressible).
 * In varlen mode the tensors are packed [total_tokens, heads, head_dim]: the batch stride is ignored and sequence
 * b occupies tokens cu_seqlens[b] .. cu_seqlens[b+1]-1.
 * Bias has the dtype of q and is indexed bias[b*sb + h*sh + i*sq + j*sk] with i, j local to the sequence; a stride
 * of 0 broadcasts over batch or heads. LSE (float32) is [batch, heads_q, seqlen_q] contiguous, or in varlen mode
 * [heads_q, total_q] (index h*total_q + cu_seqlens_q[b] + i), as FlashAttention stores it.
 *
 * Extents. Pointers carry no size, so the library checks what its fields say and nothing more, as cuDNN does for its
 * tensor descriptors. Every call checks: the pointers it needs non-NULL and aligned (to the element size; int32 arrays,
 * alibi_slopes, sinks, lse and dsinks to 4 bytes, a workspace to 256); the dims in range (batch, heads_q a multiple of
 * heads_kv, head dims, page_size, num_splits, mask and window); each stride >= 0 with its largest offset below 2^60
 * elements; no two elements of one of q, k, v, o, dout, dq, dk, dv at one address (a stride of 0 only on a dim of
 * extent 1; sorted by stride, each stride at least the span of the dims inside it, e.g. k_stride_head >= head_dim); the
 * outputs o, lse (dq, dk, dv; a merge's o and lse) not overlapping the inputs, over the spans those dims and strides
 * give; in varlen mode total_q >= max_seqlen_q and total_k >= max_seqlen_k; with a block table, block_table_stride >=
 * the pages seqlen_k needs. The rest is the caller's to keep, because nothing in a pointer tells it: each allocation
 * covers what the fields describe at their strides -- q, o (and dout, dq) batch x seqlen_q x heads_q x head_dim
 * (head_dim_v for o, dout; total_q tokens in varlen mode), k, v (dk, dv) batch x seqlen_k x heads_kv (a paged cache:
 * num_pages x page_size x heads_kv), bias batch x heads_q x seqlen_q x seqlen_k, alibi_slopes, sinks and dsinks heads_q
 * floats, lse as above, cu_seqlens batch+1 entries, seqused_k batch entries, block_table batch rows of
 * block_table_stride entries, a merge's parts num_parts x batch x heads x seqlen (x head_dim); and what the device
 * reads from memory: cu_seqlens non-decreasing from 0, cu_seqlens[batch] <= total, no sequence longer than its
 * max_seqlen (seqused_k is clamped to [0, seqlen_k] and block-table entries outside [0, num_pages) are masked, so any
 * values are safe). A field that overstates its tensor reads or writes past the allocation. The Python package checks
 * every relation between its tensors' shapes before it fills these structs (python/fa/shape_rules.py).
 */
#ifndef FA_FA_H
#define FA_FA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define FA_API __declspec(dllexport)
#else
#define FA_API __attribute__((visibility("default")))
#endif

#define FA_VERSION_MAJOR 0
#define FA_VERSION_MINOR 1
#define FA_VERSION_PATCH 0

/* ---- status codes: stable numeric ranges ---------------------------------------------------------------------- */
typedef enum fa_status {
  FA_OK = 0,
  /* 100..199: the caller passed something invalid; nothing was launched or changed */
  FA_ERROR_INVALID_ARGUMENT = 100, /* a field is null, out of range, misaligned, or contradicts another */
  FA_ERROR_INVALID_VERSION = 101,  /* struct_size / version not recognised: call the *_init function */
  /* 200..299: valid, but this build or device cannot do it */
  FA_ERROR_NOT_SUPPORTED = 200, /* e.g. fp32 on a fast-only path, an arch below sm_80 */
  FA_ERROR_NOT_TUNED = 201,     /* FA_TUNE_REQUIRE_TUNED and no tuned entry exists for this problem */
  /* 300..399: the environment */
  FA_ERROR_NO_DEVICE = 300, /* no CUDA driver (libcuda.so.1) or no such device */
  FA_ERROR_DRIVER = 301,    /* a CUDA driver call failed (message names it and its CUresult) */
  FA_ERROR_OUT_OF_MEMORY = 302,
  /* 400..499: run-time compilation */
  FA_ERROR_COMPILE = 400, /* NVRTC rejected generated source: message holds the kernel key and the NVRTC log */
  FA_ERROR_NVRTC_UNAVAILABLE = 401,
  /* 500..599: launching */
  FA_ERROR_LAUNCH = 500,           /* cuLaunchKernel failed */
  FA_ERROR_STREAM_CAPTURING = 501, /* the work needs a compile, tune or allocation while the stream is captured */
  /* 600..699: the persistent cache (never fatal for fa_run: a broken cache is a miss) */
  FA_ERROR_CACHE = 600,
  /* 900..999 */
  FA_ERROR_INTERNAL = 900
} fa_status;

/* A static, never-NULL English name of a status ("FA_ERROR_INVALID_ARGUMENT: ..."). */
FA_API const char* fa_status_string(fa_status status);
/* The calling thread's last error message ("" if the last call on this thread succeeded). Valid until the next
 * fa_* call on the same thread. */
FA_API const char* fa_last_error(void);
/* "0.1.0" */
FA_API const char* fa_version_string(void);

/* ---- enums ----------------------------------------------------------------------------------------------------- */
/* FP8 (OCP 8-bit floating point, version 3 of fa_params): E4M3 is float8_e4m3fn (bias 7, no infinities, 0x7F / 0xFF
 * NaN, largest 448), E5M2 is float8_e5m2 (bias 15, IEEE-like: infinities, NaNs, largest 57344). They need fp8 tensor
 * cores: sm_89 (Ada) or newer; an older arch fails with FA_ERROR_NOT_SUPPORTED naming the dtype and the arch. As the
 * dtype of q, k and v they take descale_q / k / v and an o_dtype (o is never fp8); as kv_dtype of a 16-bit problem
 * they are a quantized KV cache read with k_scale / v_scale (fa_params version 3). */
typedef enum fa_dtype {
  FA_DTYPE_FP16 = 1,
  FA_DTYPE_BF16 = 2,
  FA_DTYPE_FP32 = 3,
  FA_DTYPE_E4M3 = 4,
  FA_DTYPE_E5M2 = 5
} fa_dtype;

typedef enum fa_mask { FA_MASK_NONE = 0, FA_MASK_CAUSAL = 1, FA_MASK_SLIDING_WINDOW = 2 } fa_mask;

typedef enum fa_tune_policy {
  /* default: the first fa_run of a new problem class compiles only the heuristic default kernel, runs it and
   * returns; a background worker thread of the context (its own low-priority stream and buffers, never the caller's
   * stream) tunes the class and swaps the winner in for later calls (stored in the cache like any tuning). Nothing
   * is queued while the caller's stream is being captured. Forward fixed-length problems only: varlen forwards run
   * at their defaults (tune them with fa_prepare or fa-tune), and fa_run_backward / fa_prepare tune synchronously
   * as under FA_TUNE_ON_FIRST_USE_SYNC. fa_context_destroy stops the worker (a tuning in flight is abandoned). */
  FA_TUNE_ON_FIRST_USE = 0,
  FA_TUNE_DEFAULTS_ONLY = 1,    /* never time anything: tuned entries if cached, else heuristic defaults */
  FA_TUNE_REQUIRE_TUNED = 2,    /* fail with FA_ERROR_NOT_TUNED when no tuned entry exists */
  FA_TUNE_ON_FIRST_USE_SYNC = 3 /* the first call of a new problem class tunes it before it returns (unless
                                   capturing; seconds): that call already runs the tuned kernel */
} fa_tune_policy;

/* ---- context --------------------------------------------------------------------------------------------------- */
typedef struct fa_context_s* fa_context;

#define FA_CONTEXT_OPTIONS_VERSION 1
typedef struct fa_context_options {
  uint32_t struct_size;   /* sizeof(fa_context_options) */
  uint32_t version;       /* FA_CONTEXT_OPTIONS_VERSION */
  int32_t device_ordinal; /* CUDA device ordinal (default 0) */
  int32_t tune_policy;    /* fa_tune_policy; default from $FA_TUNE_POLICY (first_use|defaults|require|
                             first_use_sync, or the number), else 0 (FA_TUNE_ON_FIRST_USE: tuning in the
                             background) */
  const char* cache_path; /* SQLite file; NULL: $FA_CACHE_PATH, else $XDG_CACHE_HOME/fa/cache.sqlite, else
                             ~/.cache/fa/cache.sqlite; ":memory:" keeps nothing across processes. A file this
                             process may not write (or its directory), or any file with $FA_CACHE_READONLY=1, is
                             only read: its cubins and tuning results are used, new ones stay in memory */
  int32_t verbose;        /* messages on stderr follow $FA_LOG: off, warn (the default: cache trouble such as
                             a file moved aside or not writable, a failed tuning; each message once per
                             process), info (also decisions such as a problem sent to the reference kernel),
                             debug (also every cache hit and store). 1: at least info; default 0 */
  int32_t reserved0;
} fa_context_options;

FA_API fa_status fa_context_options_init(fa_context_options* options);
/* Creates a context. Without a CUDA driver the context is still created (so keys, validation and compilation work,
 * for the arch $FA_ARCH names: 80, 86, 89, 90, 100, 103, 120 or 121, also written sm_120 or sm120, and from 90 on
 * with an "a" suffix, 90a or sm_100a; default 90) and device-bound calls return FA_ERROR_NO_DEVICE. A bad $FA_ARCH,
 * $FA_LOG, $FA_TUNE_POLICY, $FA_CACHE_READONLY, $FA_MASK_CACHE_MB, $FA_PREFETCH, $FA_TUNE_THREADS or
 * $FA_TUNE_BUDGET_MS fails with FA_ERROR_INVALID_ARGUMENT naming the variable, the expected and the actual value. A
 * context is safe to share between threads. */
FA_API fa_status fa_context_create(const fa_context_options* options, fa_context* out_context);
/* NULL is a no-op. The caller must not destroy a context while another thread uses it. */
FA_API void fa_context_destroy(fa_context context);
/* 1 when a CUDA device is usable by this context, else 0 (the reason is in fa_last_error()). */
FA_API int fa_context_has_device(fa_context context);

/* ---- user code: any mask, any score function ------------------------------------------------------------------
 * mask_mod and score_mod are the BODIES of two CUDA C device functions, compiled by NVRTC into the kernel:
 *   bool  mask_mod (int b, int h, int i, int j, const FaUser& u)            true: query i may see key j
 *   float score_mod(float s, int b, int h, int i, int j, const FaUser& u)   the new score
 * b is the batch entry, h the query head, i and j the query and key positions local to the sequence (0-based);
 * s is the score after softmax_scale, softcap, bias and ALiBi; score_mod's result then goes through the built-in
 * mask and mask_mod (a key is visible when both allow it), then the softmax. Either may be NULL. The code may read
 * u.buf[n] (the device pointers of `buffers`, typed: fa_buf<n>_t is the C type of buffer n's dtype, e.g.
 * `static_cast<const fa_buf0_t*>(u.buf[0])[b]`), u.shape[n][d] and u.stride[n][d] (elements), u.scalar[n]
 * (floats) and u.iscalar[n] (int32). The kernel key holds a hash of the code and the buffers' dtypes and ranks,
 * never their pointers or the scalars: new contents, pointers or scalars never recompile. The code runs on the
 * GPU with the caller's privileges, as any kernel the caller launches; it must be pure (no writes, no
 * synchronization) and total (defined for every b, h, i, j in range). A body that does not compile fails the call
 * with FA_ERROR_COMPILE and NVRTC's log, its lines counted in the user's own snippet ("mask_mod(3): error: ...").
 * Block skipping (the tensor-core kernels: the forwards, the Hopper one on sm_90 and the mma one elsewhere, and the
 * backwards, bwd_wgmma on sm_90 and bwd_mma): with a mask_mod, each call first classifies every (query block, key
 * block) tile on the device with the mask (built-in mask, key range and mask_mod together): blocks the mask hides
 * wholly are never loaded (the forwards skip key blocks, the backwards the query blocks of each key block), blocks it
 * hides nowhere skip the per-element mask. The classification is per (b, h) unless mask_mod_depends (version 2)
 * says the mask ignores h or b: then it is computed once and shared.
 * Caching the classification (version 4, mask_epoch): fa cannot see what a buffer holds, so by default it classifies
 * on every call. A caller that sets mask_epoch != 0 lets the context keep the classification on the device and reuse
 * it: a later call whose classification has the same inputs launches no classification at all. The cache key holds
 * the code, the shape (batch, heads, lengths, the built-in mask and window, the kernel's tile, mask_mod_depends, in
 * varlen mode the cu_seqlens_q / cu_seqlens_k pointers), every buffer's pointer, dtype, shape and strides, the
 * scalars and mask_epoch; never the contents behind a pointer. So the rule for the caller: whenever the contents of
 * a buffer the mask_mod reads (or, in varlen mode, of cu_seqlens_q / cu_seqlens_k) change while its pointer stays,
 * pass a mask_epoch never passed before with those pointers (e.g. increment a counter; the fa Python package does it
 * from each tensor's version counter). New pointers, shapes, lengths or scalars need nothing. Entries stay for the
 * context's life, within $FA_MASK_CACHE_MB of device memory (default 64; 0: no cache), reused only once their readers
 * on the stream that filled them are done; when none is free, the call classifies into its workspace as without an
 * epoch. While the stream is being captured into a CUDA graph nothing is cached or looked up: the graph classifies on
 * every replay, so a replay sees the buffers' contents of that moment. fa_forward_workspace_size and
 * fa_backward_workspace_size do not change (a cached call may leave the classes' part of the workspace unused).
 * fa_context_destroy waits for the device work of the context's calls when entries were cached (their memory is freed).
 * Backward (fa_run_backward with fwd->mods): mask_mod needs nothing more. A score_mod needs its derivative with
 * respect to s, score_mod_grad (version 3), the body of
 *   float score_mod_grad(float s, int b, int h, int i, int j, const FaUser& u)   d score_mod / d s at this s
 * where s is the same raw score the forward's score_mod receives (after softmax_scale, softcap, bias and ALiBi; the
 * backward chains it with softcap's own derivative). A backward call with a score_mod and no score_mod_grad fails
 * with FA_ERROR_INVALID_ARGUMENT naming mods.score_mod_grad. The forward never reads it, and it is not part of the
 * forward's kernel key. Examples (README.md shows them with their score_mods):
 *   softcap c:       score_mod  return u.scalar[0] * tanhf(s / u.scalar[0]);
 *                    grad       float t = tanhf(s / u.scalar[0]); return 1.0f - t * t;
 *   ALiBi, relative bias (anything of the form s + f(b, h, i, j)):  grad  return 1.0f; */
#define FA_MODS_VERSION 4
#define FA_MOD_DEPENDS_BATCH 1 /* mask_mod_depends bits: mask_mod reads b (e.g. per-sequence document ids) */
#define FA_MOD_DEPENDS_HEAD 2  /* mask_mod reads h */
#define FA_MAX_USER_BUFFERS 4
#define FA_MAX_USER_SCALARS 8
typedef enum fa_user_dtype {
  FA_USER_I32 = 1,
  FA_USER_I64 = 2,
  FA_USER_F32 = 3,
  FA_USER_F16 = 4,
  FA_USER_BF16 = 5,
  FA_USER_U8 = 6
} fa_user_dtype;
typedef struct fa_user_buffer {
  const void* ptr;   /* device pointer (may be NULL when rank is 0) */
  int32_t dtype;     /* fa_user_dtype */
  int32_t rank;      /* 0..4 */
  int64_t shape[4];  /* extents of the first `rank` dims (>= 0) */
  int64_t stride[4]; /* element strides (>= 0) */
} fa_user_buffer;
typedef struct fa_mods {
  uint32_t struct_size;  /* sizeof(fa_mods) */
  uint32_t version;      /* FA_MODS_VERSION */
  const char* mask_mod;  /* NUL-terminated body, or NULL */
  const char* score_mod; /* NUL-terminated body, or NULL */
  int32_t num_buffers;   /* 0..FA_MAX_USER_BUFFERS */
  int32_t reserved0;
  fa_user_buffer buffers[FA_MAX_USER_BUFFERS];
  float scalars[FA_MAX_USER_SCALARS];
  int32_t iscalars[FA_MAX_USER_SCALARS];
  /* ---- version 2 */
  int32_t mask_mod_depends; /* FA_MOD_DEPENDS_* bits: which of b, h mask_mod's result depends on (fa_mods_init and
                               version 1: both). A wrong 0 bit gives wrong results: the block classification of
                               b = 0 / h = 0 is used for every batch entry / head. Never part of the kernel key. */
  int32_t reserved1;        /* must be 0 */
  /* ---- version 3 */
  const char* score_mod_grad; /* NUL-terminated body of d score_mod / d s (see above), or NULL; needed by the
                                 backward when score_mod is set, must be NULL without a score_mod */
  /* ---- version 4 */
  uint64_t mask_epoch; /* 0 (fa_mods_init and versions 1..3): the classification is never cached. Else the
                          caller's generation of the buffers' contents: change it whenever the contents of a
                          buffer the mask_mod reads (or of cu_seqlens in varlen mode) change in place (see
                          "Caching the classification" above). Never part of the kernel key. */
} fa_mods;
FA_API fa_status fa_mods_init(fa_mods* mods);

/* ---- forward --------------------------------------------------------------------------------------------------- */
#define FA_PARAMS_VERSION 3
typedef struct fa_params {
  uint32_t struct_size; /* sizeof(fa_params) */
  uint32_t version;     /* FA_PARAMS_VERSION */

  int32_t dtype;      /* fa_dtype of q, k, v, o and bias (version 3: k, v see kv_dtype, o sees o_dtype) */
  int32_t batch;      /* >= 1 */
  int32_t seqlen_q;   /* >= 1 (ignored in varlen mode: max_seqlen_q is used) */
  int32_t seqlen_k;   /* >= 0 (ignored in varlen mode) */
  int32_t heads_q;    /* >= 1 */
  int32_t heads_kv;   /* >= 1, divides heads_q (GQA / MQA) */
  int32_t head_dim;   /* of q and k: a multiple of 8 in [8, 576] (above 256: forward only; MLA is 576) */
  int32_t head_dim_v; /* of v and o: a multiple of 8 in [8, 512]; 0 means head_dim (above 256: forward only) */

  /* Device pointers, aligned to the element size; strides in elements, >= 0 (what is checked and what is the
   * caller's to keep: "Extents" at the top). The fast kernel families (fwd_mma,
   * and bwd_mma in the backward) need more: q, k, v, o (bias; dout, dq, dk, dv) pointers 16-byte aligned, their
   * batch / seq / head strides multiples of 16 bytes (8 fp16 / bf16 elements), and bias_stride_k == 1. Otherwise the
   * reference kernels run: the same results, much slower ($FA_LOG=info says so once per problem class). On sm_90
   * the Hopper families also read q, k, v (dout; and o in the fixed-length forward, which stores it by TMA) as
   * TMA tensors: each stride of a dimension longer than 1 positive and below 2^40 bytes, else the mma families
   * run. v may be the first head_dim_v columns of k (v == k with k's strides: MLA's latent cache); on sm_90 with
   * head_dim 512 or 576 and head_dim_v 512 that layout runs a kernel that reads each key once for both products. */
  const void* q;
  int64_t q_stride_batch, q_stride_seq, q_stride_head;
  const void* k;
  int64_t k_stride_batch, k_stride_seq, k_stride_head;
  const void* v;
  int64_t v_stride_batch, v_stride_seq, v_stride_head;
  void* o;
  int64_t o_stride_batch, o_stride_seq, o_stride_head;

  /* Varlen: both non-NULL (device int32 arrays of batch+1 non-decreasing offsets starting at 0), with host-side
   * maxima of the per-sequence lengths and totals (cu_seqlens[batch]). Both NULL: fixed-length mode. */
  const int32_t* cu_seqlens_q;
  const int32_t* cu_seqlens_k;
  int32_t max_seqlen_q, max_seqlen_k;
  int32_t total_q, total_k;

  int32_t mask;         /* fa_mask */
  int32_t window_left;  /* FA_MASK_SLIDING_WINDOW only: >= 0 or -1 (unbounded); must be -1 for other masks */
  int32_t window_right; /* likewise */

  const void* bias; /* optional additive bias, dtype of q */
  int64_t bias_stride_batch, bias_stride_head, bias_stride_q, bias_stride_k;
  const float* alibi_slopes; /* optional, float32 [heads_q] */
  float softcap;             /* > 0 enables softcap; 0 off */
  float softmax_scale;       /* 0 means 1/sqrt(head_dim) */

  float* lse; /* optional float32 output, see the layout above */

  /* ---- version 2: the KV cache of inference servers (all zero / NULL: as in version 1) -------------------------
   * Used lengths: seqused_k (device int32 [batch]) gives the keys each sequence uses, so the cache (seqlen_k keys,
   * its capacity) may be longer than what is used; values are clamped to [0, seqlen_k]. Masks align to the used
   * length (bottom-right: query i of Sq sees key j under causal iff j <= i + used - Sq).
   * Paged cache: with block_table (device int32 [batch, block_table_stride]) k and v point at page pools of
   * num_pages pages of page_size rows: key j of sequence b lives in page block_table[b][j / page_size], row
   * j % page_size, at k + page * k_stride_batch + row * k_stride_seq + head * k_stride_head (vLLM / FlashAttention
   * layout [num_pages, page_size, heads_kv, head_dim] is k_stride_batch = page_size*heads_kv*head_dim,
   * k_stride_seq = heads_kv*head_dim, k_stride_head = head_dim). seqlen_k is the capacity and at most
   * block_table_stride * page_size; page_size a power of two in [1, 512]. Entries outside [0, num_pages) are never
   * read: their keys are treated as masked. Not with varlen, and forward only (the backward rejects both fields).
   * Split-KV: num_splits 0 lets fa split the keys of each (sequence, KV head) over several CTAs when the grid would
   * leave the GPU idle (decode), 1 never splits, n >= 2 asks for n (at most the key blocks there are). Splits need
   * float32 workspace: `workspace` of fa_forward_workspace_size bytes (256-byte aligned), or NULL for stream-ordered
   * memory (cuMemAllocAsync, legal in graph capture). The split count depends on batch, heads, seqlen_k (the
   * capacity) and the device, never on seqused_k, so a captured graph replays with new used lengths and tables. */
  const int32_t* seqused_k;
  const int32_t* block_table;
  int64_t block_table_stride;
  int32_t page_size;
  int32_t num_pages;
  int32_t num_splits;
  int32_t reserved1; /* must be 0 */
  void* workspace;
  size_t workspace_size;
  /* ---- version 2: user code (see fa_mods above); NULL: none. Read during the call only. */
  const fa_mods* mods;

  /* ---- version 3: FP8 (all zero / NULL: as in version 2) ------------------------------------------------------
   * Two uses, told apart by dtype and kv_dtype:
   * FP8 inputs (dtype FA_DTYPE_E4M3 or FA_DTYPE_E5M2): q, k and v hold fp8 codes (kv_dtype 0 or dtype), each read
   *   as code * descale: q[b,i,h,:] * descale_q[b * descale_q_stride_batch + g * descale_q_stride_head] with g the
   *   kv head of query head h (FlashAttention 3's descale_q / descale_k / descale_v, shape [batch, heads_kv]); k and
   *   v likewise with descale_k / descale_v. Strides 0 / 0 give one factor per tensor; a NULL descale is 1. o_dtype
   *   must be FA_DTYPE_BF16 or FA_DTYPE_FP16 (o is never fp8), bias has that dtype too; all arithmetic in float32
   *   as in the 16-bit forward, except P (the softmax's probabilities), rounded to e4m3 before P V (the row sums
   *   stay float32). The Hopper forward computes it (sm_90; masks, windows, GQA, varlen, ALiBi, softcap, LSE, head
   *   dims up to 256, q / k / v describable as TMA tensors: 16-byte aligned rows); a bias, user code, another arch
   *   or layout fails with FA_ERROR_NOT_SUPPORTED "no fp8 forward kernel yet for ...", after the fields are
   *   validated.
   * FP8 KV cache (dtype FA_DTYPE_FP16 or FA_DTYPE_BF16, kv_dtype FA_DTYPE_E4M3 or FA_DTYPE_E5M2): k and v (their
   *   pools when paged) hold fp8 codes, read as k[..., g, :] * k_scale[g * k_scale_stride_head] and v likewise with
   *   v_scale (vLLM's k_scale / v_scale; stride 0: one factor for every kv head; a NULL scale is 1). q, o and bias
   *   keep dtype. The decode family serves it (fwd_split: paged or with seqused_k, or the contiguous decode class;
   *   head dims up to 256); other problems fail with FA_ERROR_NOT_SUPPORTED "no fp8 forward kernel yet for ...".
   *   Pointers and strides of k / v count 1-byte elements: the 16-byte rule above is 16 elements for them.
   * Scale and descale pointers are device float32 arrays, 4-byte aligned, strides in elements >= 0; values are
   * read on the device (finite values are the caller's to keep). Forward only: the backward rejects fp8. */
  int32_t o_dtype;  /* fa_dtype of o: 0 means dtype; with an fp8 dtype FA_DTYPE_BF16 or FA_DTYPE_FP16 (required) */
  int32_t kv_dtype; /* fa_dtype of k and v: 0 means dtype; FA_DTYPE_E4M3 / E5M2 with a 16-bit dtype: fp8 KV cache */
  const float* descale_q; /* fp8 dtype only: NULL (1) or [batch, heads_kv] factors at the strides below */
  int64_t descale_q_stride_batch, descale_q_stride_head;
  const float* descale_k;
  int64_t descale_k_stride_batch, descale_k_stride_head;
  const float* descale_v;
  int64_t descale_v_stride_batch, descale_v_stride_head;
  const float* k_scale;        /* fp8 KV cache only: NULL (1) or [heads_kv] factors at k_scale_stride_head */
  int64_t k_scale_stride_head; /* 0: one factor for every kv head (per tensor) */
  const float* v_scale;
  int64_t v_scale_stride_head;
  /* Attention sinks (see the semantics at the top): NULL, or device float32 [heads_q] sink logits, contiguous, 4-byte
   * aligned, one per query head, read on the device (values finite or -inf are the caller's to keep). Every dtype
   * (fp8 as 16-bit) and every forward family takes them (prefill, decode, paged, split-KV, MLA); the backward then
   * writes their gradient into fa_bwd_params.dsinks. A sink changes the kernel (it is part of the problem key). */
  const float* sinks;
} fa_params;

FA_API fa_status fa_params_init(fa_params* params);
/* Bytes of workspace enough for fa_run(params) whichever tunables the tuner picks, now or later (0 when the problem
 * never needs one: no split-KV and no mask_mod block classification). A call whose chosen kernels need no workspace
 * (e.g. a decode that does not split) neither reads the caller's nor allocates one. Same validation as fa_run. */
FA_API fa_status fa_forward_workspace_size(fa_context context, const fa_params* params, size_t* out_bytes);

/* Computes attention on `stream` (a CUstream / cudaStream_t; NULL is the legacy default stream). Returns once the
 * work is enqueued. The first call of a new problem class may compile a kernel (and, by policy, tune: in the
 * background by default, see fa_tune_policy); later calls of the same class, any sequence lengths, only launch
 * (a repeated shape takes a cached plan: validation, argument binding and the launch, no allocation). While `stream` is
 * being captured into a CUDA graph nothing is compiled, tuned, allocated or synchronized: a cached or default kernel is
 * used, and if none is compiled yet the call fails with FA_ERROR_STREAM_CAPTURING (call fa_prepare before capture). */
FA_API fa_status fa_run(fa_context context, const fa_params* params, void* stream);

/* Makes fa_run(params) ready: validates, selects, tunes (by policy) and compiles; synchronous on the context's
 * device, not on any caller stream. Call before capturing a CUDA graph. Tuning times candidate kernels on the
 * params' own buffers, as fa_run would run them (on the legacy default stream): under FA_TUNE_ON_FIRST_USE(_SYNC),
 * with a device and no tuned entry yet, q, k, v (and what else the params point to) are read and o and lse
 * written, so every pointer must be valid then; their contents afterwards are unspecified. Under
 * FA_TUNE_DEFAULTS_ONLY / FA_TUNE_REQUIRE_TUNED, or once the class is tuned, nothing is launched and the pointers
 * are not dereferenced. */
FA_API fa_status fa_prepare(fa_context context, const fa_params* params);

/* 1 when fa_run would accept params (validation + selection only; no device needed), else 0 with the reason in
 * fa_last_error(). Uses the same selector as fa_run. */
FA_API int fa_is_supported(fa_context context, const fa_params* params);

/* Writes the problem's canonical kernel key (the compile key of the kernel fa_run would use, without tuning) into
 * buf, NUL-terminated. Never contains sequence lengths or batch. A buffer shorter than the key and its NUL gives
 * FA_ERROR_INVALID_ARGUMENT naming `size` and the size needed, and buf is left untouched (256 bytes always fit). */
FA_API fa_status fa_problem_key(fa_context context, const fa_params* params, char* buf, size_t size);

/* ---- backward -------------------------------------------------------------------------------------------------- */
/* The forward params (q, k, v, o, lse, masks, bias, alibi, softcap, scale, varlen, mods, sinks) describe the problem;
 * lse must be the forward's LSE. Bias is an input only: no gradient with respect to bias (or to anything user code
 * reads) is computed; the sinks' gradient is (dsinks). User code (fwd->mods) runs here too: a score_mod needs
 * score_mod_grad (fa_mods above). */
#define FA_BWD_PARAMS_VERSION 2
typedef struct fa_bwd_params {
  uint32_t struct_size; /* sizeof(fa_bwd_params) */
  uint32_t version;     /* FA_BWD_PARAMS_VERSION */
  const fa_params* fwd; /* the forward problem; fwd->o and fwd->lse are read, not written */
  const void* dout;
  int64_t dout_stride_batch, dout_stride_seq, dout_stride_head;
  void* dq;
  int64_t dq_stride_batch, dq_stride_seq, dq_stride_head;
  void* dk;
  int64_t dk_stride_batch, dk_stride_seq, dk_stride_head;
  void* dv;
  int64_t dv_stride_batch, dv_stride_seq, dv_stride_head;
  int32_t deterministic; /* 1: bitwise identical results run to run (no order-dependent atomics) */
  int32_t reserved0;
  void* workspace; /* device memory of at least fa_backward_workspace_size bytes, 256-byte aligned; NULL: the
                      library allocates stream-ordered memory (cuMemAllocAsync), which is legal in graph capture */
  size_t workspace_size;
  /* ---- version 2 */
  float* dsinks; /* fwd->sinks set: required, device float32 [heads_q], 4-byte aligned: d loss / d sinks[h] =
                    -sum_{b,i} exp(sinks[h] - lse_i) * dot(dout_i, o_i), written (not accumulated; bitwise the same
                    run to run, deterministic or not). fwd->sinks NULL: must be NULL (version 1: no sinks). */
} fa_bwd_params;

FA_API fa_status fa_bwd_params_init(fa_bwd_params* params);
FA_API fa_status fa_backward_workspace_size(fa_context context, const fa_bwd_params* params, size_t* out_bytes);
FA_API fa_status fa_run_backward(fa_context context, const fa_bwd_params* params, void* stream);
/* Makes fa_run_backward(params) ready, as fa_prepare does the forward: validates, selects, tunes (by policy) and
 * compiles. Tuning times candidates on the params' buffers (the workspace excepted: it allocates its own): dout,
 * the forward's inputs, o and lse are read and dq, dk, dv written, so these pointers must be valid whenever it
 * tunes (see fa_prepare); the gradients' contents afterwards are unspecified. */
FA_API fa_status fa_prepare_backward(fa_context context, const fa_bwd_params* params);

/* ---- merging partial results (context parallelism, key ranges computed apart) ---------------------------------
 * Given num_parts partial results of one attention problem over DISJOINT sets of keys -- part s holds, for every
 * query row, the normalized output o_s over its keys and their natural-log LSE lse_s, as fa_run writes them
 * (lse_s = -inf: the part saw no key for that row; its o_s is then never read) -- fa_merge_partials writes what
 * one pass over the union of the keys gives:
 *   lse = log(sum_s exp(lse_s)),   o = sum_s exp(lse_s - lse) o_s        (every lse_s = -inf: o = 0, lse = -inf)
 * in float32 with the largest lse_s factored out first (the merge of fa's split-KV decode): never NaN for -inf
 * parts. LSE values must be finite or -inf. The parts are float32 in one buffer (the rows of the split-KV
 * workspace): part_o [num_parts, batch, heads, seqlen, head_dim] and part_lse [num_parts, batch, heads, seqlen],
 * both contiguous; a part computed in fp16 / bf16 is converted into its slot by the caller. o (dtype, any strides
 * with a contiguous last dim, [batch, seqlen, heads, head_dim] like fa_params.o) and lse ([batch, heads, seqlen]
 * contiguous, as fa_params.lse; NULL: not written) must not overlap the parts. o of dtype FA_DTYPE_FP32 may be the
 * slot of a later merge (a running merge). Enqueued on `stream`, never synchronizes; the first call for a (dtype,
 * head_dim) compiles its kernel (a call while `stream` is captured before that fails with FA_ERROR_STREAM_CAPTURING:
 * merge once before capture). */
#define FA_MERGE_PARAMS_VERSION 1
typedef struct fa_merge_params {
  uint32_t struct_size;  /* sizeof(fa_merge_params) */
  uint32_t version;      /* FA_MERGE_PARAMS_VERSION */
  int32_t dtype;         /* fa_dtype of o */
  int32_t num_parts;     /* 1..65536 */
  int32_t batch;         /* 1..65535 */
  int32_t heads;         /* >= 1 */
  int32_t seqlen;        /* query rows per (batch, head), >= 1; heads * seqlen < 2^31 */
  int32_t head_dim;      /* of o: a multiple of 8 in [8, 512] */
  const float* part_o;   /* float32 [num_parts, batch, heads, seqlen, head_dim], contiguous, 16-byte aligned */
  const float* part_lse; /* float32 [num_parts, batch, heads, seqlen], contiguous, 4-byte aligned */
  void* o;
  int64_t o_stride_batch, o_stride_seq, o_stride_head; /* elements, >= 0 */
  float* lse;                                          /* optional float32 [batch, heads, seqlen], contiguous */
} fa_merge_params;

FA_API fa_status fa_merge_params_init(fa_merge_params* params);
FA_API fa_status fa_merge_partials(fa_context context, const fa_merge_params* params, void* stream);

#ifdef __cplusplus
}
#endif
#endif /* FA_FA_H */
