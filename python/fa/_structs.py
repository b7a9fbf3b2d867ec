"""ctypes mirrors of the structs and enums of include/fa/fa.h.

Field order and C types follow fa.h exactly (pointers of any pointee type are c_void_p: same size and alignment).
Never fill struct_size/version by hand: create the struct with new_context_options(), new_params() or
new_bwd_params() or new_merge_params(), which call the library's *_init function, then set fields.
"""

from __future__ import annotations

import ctypes
from ctypes import c_float, c_int32, c_int64, c_size_t, c_uint32, c_uint64, c_void_p

# ---- fa_status -------------------------------------------------------------------------------------------------------
FA_OK = 0
FA_ERROR_INVALID_ARGUMENT = 100
FA_ERROR_INVALID_VERSION = 101
FA_ERROR_NOT_SUPPORTED = 200
FA_ERROR_NOT_TUNED = 201
FA_ERROR_NO_DEVICE = 300
FA_ERROR_DRIVER = 301
FA_ERROR_OUT_OF_MEMORY = 302
FA_ERROR_COMPILE = 400
FA_ERROR_NVRTC_UNAVAILABLE = 401
FA_ERROR_LAUNCH = 500
FA_ERROR_STREAM_CAPTURING = 501
FA_ERROR_CACHE = 600
FA_ERROR_INTERNAL = 900

STATUS_NAMES = {
    FA_OK: "FA_OK",
    FA_ERROR_INVALID_ARGUMENT: "FA_ERROR_INVALID_ARGUMENT",
    FA_ERROR_INVALID_VERSION: "FA_ERROR_INVALID_VERSION",
    FA_ERROR_NOT_SUPPORTED: "FA_ERROR_NOT_SUPPORTED",
    FA_ERROR_NOT_TUNED: "FA_ERROR_NOT_TUNED",
    FA_ERROR_NO_DEVICE: "FA_ERROR_NO_DEVICE",
    FA_ERROR_DRIVER: "FA_ERROR_DRIVER",
    FA_ERROR_OUT_OF_MEMORY: "FA_ERROR_OUT_OF_MEMORY",
    FA_ERROR_COMPILE: "FA_ERROR_COMPILE",
    FA_ERROR_NVRTC_UNAVAILABLE: "FA_ERROR_NVRTC_UNAVAILABLE",
    FA_ERROR_LAUNCH: "FA_ERROR_LAUNCH",
    FA_ERROR_STREAM_CAPTURING: "FA_ERROR_STREAM_CAPTURING",
    FA_ERROR_CACHE: "FA_ERROR_CACHE",
    FA_ERROR_INTERNAL: "FA_ERROR_INTERNAL",
}

# ---- enums -----------------------------------------------------------------------------------------------------------
FA_DTYPE_FP16 = 1
FA_DTYPE_BF16 = 2
FA_DTYPE_FP32 = 3
FA_DTYPE_E4M3 = 4  # fp8 (fa_params version 3): float8_e4m3fn
FA_DTYPE_E5M2 = 5  # float8_e5m2

FA_MASK_NONE = 0
FA_MASK_CAUSAL = 1
FA_MASK_SLIDING_WINDOW = 2

FA_TUNE_ON_FIRST_USE = 0
FA_TUNE_DEFAULTS_ONLY = 1
FA_TUNE_REQUIRE_TUNED = 2
FA_TUNE_ON_FIRST_USE_SYNC = 3

FA_CONTEXT_OPTIONS_VERSION = 1
FA_PARAMS_VERSION = 3
FA_BWD_PARAMS_VERSION = 2
FA_MERGE_PARAMS_VERSION = 1
FA_MODS_VERSION = 4
FA_MOD_DEPENDS_BATCH, FA_MOD_DEPENDS_HEAD = 1, 2
FA_MAX_USER_BUFFERS = 4
FA_MAX_USER_SCALARS = 8
FA_USER_I32, FA_USER_I64, FA_USER_F32, FA_USER_F16, FA_USER_BF16, FA_USER_U8 = 1, 2, 3, 4, 5, 6


def _strided(name: str, const: bool = True):
    """A pointer followed by its batch, seq and head strides (fa.h declares them on one line)."""
    return [
        (name, c_void_p),
        (f"{name}_stride_batch", c_int64),
        (f"{name}_stride_seq", c_int64),
        (f"{name}_stride_head", c_int64),
    ]


class ContextOptions(ctypes.Structure):
    """fa_context_options."""

    _fields_ = [
        ("struct_size", c_uint32),
        ("version", c_uint32),
        ("device_ordinal", c_int32),
        ("tune_policy", c_int32),
        ("cache_path", ctypes.c_char_p),
        ("verbose", c_int32),
        ("reserved0", c_int32),
    ]


class UserBuffer(ctypes.Structure):
    """fa_user_buffer (a device buffer user code may read)."""

    _fields_ = [
        ("ptr", c_void_p),
        ("dtype", c_int32),
        ("rank", c_int32),
        ("shape", c_int64 * 4),
        ("stride", c_int64 * 4),
    ]


class Mods(ctypes.Structure):
    """fa_mods (user code: mask_mod / score_mod / score_mod_grad bodies, buffers, scalars)."""

    _fields_ = [
        ("struct_size", c_uint32),
        ("version", c_uint32),
        ("mask_mod", ctypes.c_char_p),
        ("score_mod", ctypes.c_char_p),
        ("num_buffers", c_int32),
        ("reserved0", c_int32),
        ("buffers", UserBuffer * 4),
        ("scalars", c_float * 8),
        ("iscalars", c_int32 * 8),
        ("mask_mod_depends", c_int32),
        ("reserved1", c_int32),
        ("score_mod_grad", ctypes.c_char_p),
        ("mask_epoch", c_uint64),
    ]


class Params(ctypes.Structure):
    """fa_params (the forward problem)."""

    _fields_ = [
        ("struct_size", c_uint32),
        ("version", c_uint32),
        ("dtype", c_int32),
        ("batch", c_int32),
        ("seqlen_q", c_int32),
        ("seqlen_k", c_int32),
        ("heads_q", c_int32),
        ("heads_kv", c_int32),
        ("head_dim", c_int32),
        ("head_dim_v", c_int32),
        *_strided("q"),
        *_strided("k"),
        *_strided("v"),
        *_strided("o"),
        ("cu_seqlens_q", c_void_p),
        ("cu_seqlens_k", c_void_p),
        ("max_seqlen_q", c_int32),
        ("max_seqlen_k", c_int32),
        ("total_q", c_int32),
        ("total_k", c_int32),
        ("mask", c_int32),
        ("window_left", c_int32),
        ("window_right", c_int32),
        ("bias", c_void_p),
        ("bias_stride_batch", c_int64),
        ("bias_stride_head", c_int64),
        ("bias_stride_q", c_int64),
        ("bias_stride_k", c_int64),
        ("alibi_slopes", c_void_p),
        ("softcap", c_float),
        ("softmax_scale", c_float),
        ("lse", c_void_p),
        # version 2: the KV cache
        ("seqused_k", c_void_p),
        ("block_table", c_void_p),
        ("block_table_stride", c_int64),
        ("page_size", c_int32),
        ("num_pages", c_int32),
        ("num_splits", c_int32),
        ("reserved1", c_int32),
        ("workspace", c_void_p),
        ("workspace_size", c_size_t),
        ("mods", ctypes.POINTER(Mods)),
        # version 3: fp8 (dtypes of o and k / v, descales of fp8 inputs, scales of an fp8 KV cache)
        ("o_dtype", c_int32),
        ("kv_dtype", c_int32),
        ("descale_q", c_void_p),
        ("descale_q_stride_batch", c_int64),
        ("descale_q_stride_head", c_int64),
        ("descale_k", c_void_p),
        ("descale_k_stride_batch", c_int64),
        ("descale_k_stride_head", c_int64),
        ("descale_v", c_void_p),
        ("descale_v_stride_batch", c_int64),
        ("descale_v_stride_head", c_int64),
        ("k_scale", c_void_p),
        ("k_scale_stride_head", c_int64),
        ("v_scale", c_void_p),
        ("v_scale_stride_head", c_int64),
        ("sinks", c_void_p),  # attention sinks: float32 [heads_q] logits, or NULL
    ]


class BwdParams(ctypes.Structure):
    """fa_bwd_params (the backward problem; `fwd` points at a Params)."""

    _fields_ = [
        ("struct_size", c_uint32),
        ("version", c_uint32),
        ("fwd", ctypes.POINTER(Params)),
        *_strided("dout"),
        *_strided("dq"),
        *_strided("dk"),
        *_strided("dv"),
        ("deterministic", c_int32),
        ("reserved0", c_int32),
        ("workspace", c_void_p),
        ("workspace_size", c_size_t),
        # version 2: the sinks' gradient (float32 [heads_q]), required exactly when fwd.sinks is set
        ("dsinks", c_void_p),
    ]


class MergeParams(ctypes.Structure):
    """fa_merge_params (the merge of partial results over disjoint key sets)."""

    _fields_ = [
        ("struct_size", c_uint32),
        ("version", c_uint32),
        ("dtype", c_int32),
        ("num_parts", c_int32),
        ("batch", c_int32),
        ("heads", c_int32),
        ("seqlen", c_int32),
        ("head_dim", c_int32),
        ("part_o", c_void_p),
        ("part_lse", c_void_p),
        *_strided("o"),
        ("lse", c_void_p),
    ]


def field_names(struct_type) -> list[str]:
    return [name for name, _ in struct_type._fields_]
