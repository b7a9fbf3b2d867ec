"""fa.attention_with_kvcache: decode and chunked prefill against an inference server's KV cache.

Shaped like flash_attn_with_kvcache: q [B, Sq, Hq, D] against a cache that is either contiguous
(k_cache [B, S_cap, Hkv, D], v_cache [B, S_cap, Hkv, Dv]) or paged (k_cache [num_pages, page_size, Hkv, D] with
block_table int32 [B, max_pages]); cache_seqlens (int32 [B], or one int for every sequence) gives the keys each
sequence uses, so the cache may be longer than what is used. Masks align to the used length (bottom-right).
The op fa::attention_kvcache has a fake (meta) implementation, so torch.compile(dynamic=True, fullgraph=True)
traces it; nothing in a launch depends on cache_seqlens or the block table's contents, so one captured CUDA graph
replays with new lengths and tables (call fa.prepare_kvcache first). No autograd: the cache path is inference only.
An fp8 cache (k_cache / v_cache torch.float8_e4m3fn or torch.float8_e5m2, q float16 / bfloat16; sm_89 or newer) is
read as k_cache * k_scale and v_cache * v_scale, vLLM's convention: each scale a float, a float32 tensor of one
factor, or one factor per KV head (Hkv,); None is 1. The output has q's dtype. Attention sinks (gpt-oss): sinks
[Hq], one logit per query head added to every row's softmax (any floating dtype, read as float32; the LSE includes
them); the split-KV combine adds them once.
"""

# No `from __future__ import annotations` here: torch.library.custom_op reads the annotations as types.
from typing import Optional, Tuple

import torch
from torch import Tensor

from . import shape_rules as rules
from ._tensor_params import FP8_DTYPES, build_params, check_devices, check_int32, last_dim_contiguous, shape_of
from ._torch_common import device_index, mask_args, stream
from .context import default_context

FP8_CACHE_DTYPES = FP8_DTYPES  # the cache dtypes read with k_scale / v_scale


def check(
    q: Tensor,
    k_cache: Tensor,
    v_cache: Tensor,
    cache_seqlens: Optional[Tensor],
    block_table: Optional[Tensor],
    alibi_slopes: Optional[Tensor],
    k_scale: Optional[Tensor] = None,
    v_scale: Optional[Tensor] = None,
    sinks: Optional[Tensor] = None,
) -> None:
    """Every check of a KV-cache call before anything is allocated: fa.shape_rules.kvcache and kv_scales, dtypes
    (an fp8 cache under a 16-bit q, its scales only then; sinks float32), devices."""
    rules.kvcache(
        q.shape,
        k_cache.shape,
        v_cache.shape,
        cache_seqlens=shape_of(cache_seqlens),
        block_table=shape_of(block_table),
        alibi_slopes=shape_of(alibi_slopes),
        sinks=shape_of(sinks),
    )
    if sinks is not None and sinks.dtype != torch.float32:
        rules.fail(f"sinks: dtype {sinks.dtype}; expected torch.float32")
    rules.kv_scales(shape_of(k_scale), shape_of(v_scale), int(k_cache.shape[2]))
    if k_cache.dtype in FP8_CACHE_DTYPES:
        if q.dtype not in (torch.float16, torch.bfloat16):
            rules.fail(
                f"q: dtype {q.dtype} over an fp8 cache ({k_cache.dtype}); expected torch.float16 or torch.bfloat16"
            )
        rules.same_dtype(("k_cache", k_cache.dtype), ("v_cache", v_cache.dtype))
    else:
        rules.same_dtype(("q", q.dtype), ("k_cache", k_cache.dtype), ("v_cache", v_cache.dtype))
        for name, s in (("k_scale", k_scale), ("v_scale", v_scale)):
            if s is not None:
                rules.fail(
                    f"{name}: given, but k_cache is {k_cache.dtype}; expected None (scales are for an fp8 cache)"
                )
    check_devices(
        q,
        (
            ("k_cache", k_cache),
            ("v_cache", v_cache),
            ("cache_seqlens", cache_seqlens),
            ("block_table", block_table),
            ("alibi_slopes", alibi_slopes),
            ("k_scale", k_scale),
            ("v_scale", v_scale),
            ("sinks", sinks),
        ),
    )
    check_int32((("cache_seqlens", cache_seqlens), ("block_table", block_table)))
    if block_table is not None and block_table.stride(1) != 1:
        rules.fail(f"block_table: column stride {block_table.stride(1)}; expected 1 (contiguous rows)")


def _params(
    q,
    k_cache,
    v_cache,
    o,
    lse,
    cache_seqlens,
    block_table,
    alibi_slopes,
    mask,
    window_left,
    window_right,
    softcap,
    scale,
    num_splits,
    k_scale=None,
    v_scale=None,
    sinks=None,
):
    paged = block_table is not None
    fp8 = FP8_CACHE_DTYPES.get(k_cache.dtype)
    p, keep = build_params(
        q,
        k_cache,
        v_cache,
        o,
        lse,
        None,
        alibi_slopes,
        None,
        None,
        0,
        0,
        mask,
        window_left,
        window_right,
        softcap,
        scale,
    )
    # build_params reads the cache's dim 1 as seqlen_k: right for a contiguous cache; a paged one holds pages.
    if paged:
        p.batch = int(q.shape[0])
        p.page_size = int(k_cache.shape[1])
        p.num_pages = int(k_cache.shape[0])
        p.block_table = block_table.data_ptr() or None
        p.block_table_stride = int(block_table.stride(0))
        p.seqlen_k = int(block_table.shape[1]) * p.page_size
        keep.append(block_table)
    if cache_seqlens is not None:
        p.seqused_k = cache_seqlens.data_ptr() or None
        keep.append(cache_seqlens)
    p.num_splits = int(num_splits)
    if fp8 is not None:  # an fp8 cache: its dtype, and its scales (float32, one factor or one per KV head)
        p.kv_dtype = fp8
        for name, s in (("k", k_scale), ("v", v_scale)):
            if s is not None:
                setattr(p, f"{name}_scale", s.data_ptr())
                setattr(p, f"{name}_scale_stride_head", 0 if s.numel() == 1 else 1)
                keep.append(s)
    if sinks is not None:
        p.sinks = sinks.data_ptr()
        keep.append(sinks)
    return p, keep


def _kvcache_impl(
    q: Tensor,
    k_cache: Tensor,
    v_cache: Tensor,
    cache_seqlens: Optional[Tensor],
    block_table: Optional[Tensor],
    alibi_slopes: Optional[Tensor],
    mask: int,
    window_left: int,
    window_right: int,
    softcap: float,
    scale: float,
    num_splits: int,
    k_scale: Optional[Tensor],
    v_scale: Optional[Tensor],
    sinks: Optional[Tensor] = None,
) -> Tuple[Tensor, Tensor]:
    """fa::attention_kvcache: every check, then _run."""
    check(q, k_cache, v_cache, cache_seqlens, block_table, alibi_slopes, k_scale, v_scale, sinks)
    return _run(
        q,
        k_cache,
        v_cache,
        cache_seqlens,
        block_table,
        alibi_slopes,
        mask,
        window_left,
        window_right,
        softcap,
        scale,
        num_splits,
        k_scale,
        v_scale,
        sinks,
    )


def _run(
    q,
    k_cache,
    v_cache,
    cache_seqlens,
    block_table,
    alibi_slopes,
    mask,
    window_left,
    window_right,
    softcap,
    scale,
    num_splits,
    k_scale=None,
    v_scale=None,
    sinks=None,
):
    """(o, lse) of checked arguments: outputs allocated, fa_params filled, fa_run on the current stream."""
    q, k_cache, v_cache = last_dim_contiguous(q), last_dim_contiguous(k_cache), last_dim_contiguous(v_cache)
    o = torch.empty(q.shape[:3] + (v_cache.shape[3],), dtype=q.dtype, device=q.device)
    lse = torch.empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32, device=q.device)
    if o.numel() == 0:
        lse.fill_(float("-inf"))
        return o, lse
    p, keep = _params(
        q,
        k_cache,
        v_cache,
        o,
        lse,
        cache_seqlens,
        block_table,
        alibi_slopes,
        mask,
        window_left,
        window_right,
        softcap,
        scale,
        num_splits,
        k_scale,
        v_scale,
        sinks,
    )
    with torch.cuda.device(q.device):
        default_context(device_index(q.device)).run(p, stream(q.device))
    del keep
    return o, lse


attention_kvcache = torch.library.custom_op("fa::attention_kvcache", mutates_args=())(_kvcache_impl)


@attention_kvcache.register_fake
def _attention_kvcache_fake(
    q,
    k_cache,
    v_cache,
    cache_seqlens,
    block_table,
    alibi_slopes,
    mask,
    window_left,
    window_right,
    softcap,
    scale,
    num_splits,
    k_scale,
    v_scale,
    sinks=None,
):
    return (
        q.new_empty(q.shape[:3] + (v_cache.shape[3],)),
        q.new_empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32),
    )


def _scale_tensor(name, s, device):
    """A k_scale / v_scale as a contiguous float32 vector on `device` (a float: one factor), or None."""
    if s is None:
        return None
    if isinstance(s, (int, float)):
        return torch.full((1,), float(s), dtype=torch.float32, device=device)
    if not isinstance(s, Tensor):
        raise TypeError(f"fa: {name} must be None, a float or a float32 tensor, got {type(s).__name__}")
    return s.to(torch.float32).reshape(-1).contiguous() if s.dim() <= 1 else s


def _op_args(
    q,
    k_cache,
    v_cache,
    cache_seqlens,
    block_table,
    causal,
    window,
    softcap,
    alibi_slopes,
    scale,
    num_splits,
    k_scale=None,
    v_scale=None,
    sinks=None,
):
    """The op's arguments of attention_with_kvcache's, every check made."""
    k_scale, v_scale = _scale_tensor("k_scale", k_scale, q.device), _scale_tensor("v_scale", v_scale, q.device)
    if sinks is not None:
        if not isinstance(sinks, Tensor) or not sinks.is_floating_point():
            rules.fail(f"sinks: {type(sinks).__name__}; expected a floating tensor of one logit per query head")
        sinks = sinks.detach().to(torch.float32).contiguous()  # the cache path has no autograd
    check(
        q,
        k_cache,
        v_cache,
        None if isinstance(cache_seqlens, int) else cache_seqlens,
        block_table,
        alibi_slopes,
        k_scale,
        v_scale,
        sinks,
    )
    if isinstance(cache_seqlens, int):
        cache_seqlens = torch.full((q.shape[0],), cache_seqlens, dtype=torch.int32, device=q.device)
    if alibi_slopes is not None and (alibi_slopes.dtype != torch.float32 or not alibi_slopes.is_contiguous()):
        alibi_slopes = alibi_slopes.to(torch.float32).contiguous()
    mask, wl, wr = mask_args(causal, window)
    return (
        q,
        k_cache,
        v_cache,
        cache_seqlens,
        block_table,
        alibi_slopes,
        mask,
        wl,
        wr,
        float(softcap or 0.0),
        float(scale or 0.0),
        int(num_splits),
        k_scale,
        v_scale,
        sinks,
    )


def attention_with_kvcache(
    q: Tensor,
    k_cache: Tensor,
    v_cache: Tensor,
    *,
    cache_seqlens=None,
    block_table: Optional[Tensor] = None,
    causal: bool = False,
    window=(-1, -1),
    softcap: float = 0.0,
    alibi_slopes: Optional[Tensor] = None,
    scale: Optional[float] = None,
    num_splits: int = 0,
    return_lse: bool = False,
    k_scale=None,
    v_scale=None,
    sinks: Optional[Tensor] = None,
):
    """Attention of q [B, Sq, Hq, D] against a KV cache (see the module docstring). num_splits: 0 lets fa split
    the keys over several CTAs when the GPU would idle (decode), 1 never splits, n asks for n. k_scale / v_scale:
    the factors of an fp8 cache (float, or float32 tensor () / (1,) / (Hkv,); None: 1). sinks: attention sinks, one
    logit per query head [Hq]. Returns o [B, Sq, Hq, Dv] (q's dtype) and, with return_lse, lse float32 [B, Hq, Sq]."""
    args = _op_args(
        q,
        k_cache,
        v_cache,
        cache_seqlens,
        block_table,
        causal,
        window,
        softcap,
        alibi_slopes,
        scale,
        num_splits,
        k_scale,
        v_scale,
        sinks,
    )
    if torch.compiler.is_compiling():
        o, lse = torch.ops.fa.attention_kvcache(*args)
    else:
        o, lse = _run(*args)  # checked by _op_args
    return (o, lse) if return_lse else o


_KVCACHE_KWARGS = (
    "cache_seqlens",
    "block_table",
    "causal",
    "window",
    "softcap",
    "alibi_slopes",
    "scale",
    "num_splits",
    "return_lse",
    "k_scale",
    "v_scale",
    "sinks",
)


def cache_problem(q: Tensor, k_cache: Tensor, v_cache: Tensor, kwargs: dict):
    """(fa_params, kept tensors, q) of attention_with_kvcache(q, k_cache, v_cache, **kwargs) as the call would fill
    them (outputs allocated, not run), every check made: for fa.prepare_kvcache, and for fa.prepare, fa.is_supported
    and fa.problem_key over an fp8 cache (k_scale / v_scale)."""
    unknown = sorted(set(kwargs) - set(_KVCACHE_KWARGS))
    if unknown:
        raise TypeError(f"fa: unexpected keyword arguments {unknown} (expected those of attention_with_kvcache)")
    args = _op_args(
        q,
        k_cache,
        v_cache,
        kwargs.get("cache_seqlens"),
        kwargs.get("block_table"),
        kwargs.get("causal", False),
        kwargs.get("window", (-1, -1)),
        kwargs.get("softcap", 0.0),
        kwargs.get("alibi_slopes"),
        kwargs.get("scale"),
        kwargs.get("num_splits", 0),
        kwargs.get("k_scale"),
        kwargs.get("v_scale"),
        kwargs.get("sinks"),
    )
    q2, k2, v2 = last_dim_contiguous(args[0]), last_dim_contiguous(args[1]), last_dim_contiguous(args[2])
    o = torch.empty(q2.shape[:3] + (v2.shape[3],), dtype=q2.dtype, device=q2.device)
    lse = torch.empty((q2.shape[0], q2.shape[2], q2.shape[1]), dtype=torch.float32, device=q2.device)
    p, keep = _params(q2, k2, v2, o, lse, *args[3:])
    keep += [o, lse]
    return p, keep, q2


def prepare_kvcache(q: Tensor, k_cache: Tensor, v_cache: Tensor, **kwargs) -> None:
    """Compile (and, by policy, tune) what attention_with_kvcache(q, k_cache, v_cache, **kwargs) will run, so that
    it can be captured in a CUDA graph; use the largest batch and cache the graph will see."""
    p, keep, q2 = cache_problem(q, k_cache, v_cache, kwargs)
    with torch.cuda.device(q2.device):
        default_context(device_index(q2.device)).prepare(p)
    del keep
