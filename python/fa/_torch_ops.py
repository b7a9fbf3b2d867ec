"""The PyTorch operators fa::attention_fwd / fa::attention_bwd and the user-facing fa.attention / fa.prepare /
fa.is_supported / fa.problem_key.

The ops take the op-level views (see _tensor_params) and plain int/float arguments only, derive every size from the
tensor shapes, and have fake (meta) implementations with the exact output shapes, so torch.compile(dynamic=True,
fullgraph=True) traces them without graph breaks or specialisation on sequence length. Autograd wires the backward
op to fa_run_backward; bias, alibi slopes and cu_seqlens get no gradient, lse is not differentiable. Every call is
checked (fa.shape_rules, dtypes, devices) before anything is allocated; a call of a kept signature was checked when
its entry was made. Work is enqueued on torch.cuda.current_stream() of the tensors' device with that device's
default fa.Context.

How fa.attention sends a call (attention() below is the one dispatch):
  fixed length, bshd, no bias or ALiBi, eager: an entry kept per signature (a known one skips every check)
    q, k or v requires grad   -> _grad_step.grad_step   the training step: kept forward and backward params
    no gradient, no user code -> eager_plain            inference: kept params
    no gradient, user code    -> _mods_op.eager_mods    inference: kept params and fa_mods
  anything else (bias, ALiBi, varlen, bhsd, while torch.compile traces, or what an entry cannot describe: a strided
  last dim, an empty tensor): the op's arguments (op_args, checked; op_args_fixed keeps them per signature), then
  the op: _forward (plain; eager: _EagerAttention, the op pair's implementations under an autograd.Function) or
  _mods_op.forward_with_mods (user code).
  sinks (attention sinks, with or without user code): no kept entry; the op's arguments as above, then
  _sinks_op.forward_with_sinks (the sinks get their gradient too).
  fp8 q / k / v: _fp8.attention_fp8 (descale_q / k / v, out_dtype).
fa.prepare / fa.is_supported / fa.problem_key build the fa_params of the call their arguments describe: _problem
(16-bit), _fp8.fp8_problem (fp8 q / k / v, fa.attention's keywords with descales and out_dtype), or
_kvcache.cache_problem (a 16-bit q over fp8 k / v, or k_scale / v_scale given: attention_with_kvcache's keywords).
"""

# No `from __future__ import annotations` here: torch.library.custom_op reads the annotations as types.
import ctypes
import inspect
from typing import Optional, Tuple

import torch
from torch import Tensor

from . import _structs as S
from . import shape_rules as rules
from ._grad_step import grad_step
from ._fp8 import attention_fp8, fp8_problem
from ._kvcache import cache_problem
from ._mods_op import eager_mods, forward_with_mods
from ._sinks_op import check_sinks, forward_with_sinks
from ._tensor_params import FP8_DTYPES, build_bwd_params, build_params, last_dim_contiguous, output_shapes
from ._torch_common import (
    PARAMS_CACHE,
    cached_forward,
    device_index,
    eager_function,
    op_args,
    op_args_fixed,
    run_backward,
    run_forward,
    signature,
)
from .context import default_context
from .errors import InvalidArgument
from .support import Support


def fwd_impl(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    bias: Optional[Tensor],
    alibi_slopes: Optional[Tensor],
    cu_seqlens_q: Optional[Tensor],
    cu_seqlens_k: Optional[Tensor],
    max_seqlen_q: int,
    max_seqlen_k: int,
    mask: int,
    window_left: int,
    window_right: int,
    softcap: float,
    scale: float,
) -> Tuple[Tensor, Tensor]:
    """fa::attention_fwd: (o, lse) of the op-level views; a plain fixed-length call keeps its params per signature
    (LSE always written)."""
    q, k, v = last_dim_contiguous(q), last_dim_contiguous(k), last_dim_contiguous(v)
    if bias is None and alibi_slopes is None and cu_seqlens_q is None and cu_seqlens_k is None:
        rest = (None, None, None, None, 0, 0, mask, window_left, window_right, softcap, scale)
        return cached_forward(("op",) + signature(q, k, v) + rest[6:], q, k, v, True, lambda: rest)
    return run_forward(
        q,
        k,
        v,
        (
            bias,
            alibi_slopes,
            cu_seqlens_q,
            cu_seqlens_k,
            max_seqlen_q,
            max_seqlen_k,
            mask,
            window_left,
            window_right,
            softcap,
            scale,
        ),
    )


attention_fwd = torch.library.custom_op("fa::attention_fwd", mutates_args=())(fwd_impl)


@attention_fwd.register_fake
def _attention_fwd_fake(
    q,
    k,
    v,
    bias,
    alibi_slopes,
    cu_seqlens_q,
    cu_seqlens_k,
    max_seqlen_q,
    max_seqlen_k,
    mask,
    window_left,
    window_right,
    softcap,
    scale,
):
    o_shape, lse_shape = output_shapes(q, k, v, cu_seqlens_q)
    return q.new_empty(o_shape), q.new_empty(lse_shape, dtype=torch.float32)


def bwd_impl(
    dout: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    o: Tensor,
    lse: Tensor,
    bias: Optional[Tensor],
    alibi_slopes: Optional[Tensor],
    cu_seqlens_q: Optional[Tensor],
    cu_seqlens_k: Optional[Tensor],
    max_seqlen_q: int,
    max_seqlen_k: int,
    mask: int,
    window_left: int,
    window_right: int,
    softcap: float,
    scale: float,
    deterministic: bool,
) -> Tuple[Tensor, Tensor, Tensor]:
    """fa::attention_bwd: (dq, dk, dv) of the op-level views (_torch_common.run_backward)."""
    return run_backward(
        dout,
        q,
        k,
        v,
        o,
        lse,
        (
            bias,
            alibi_slopes,
            cu_seqlens_q,
            cu_seqlens_k,
            max_seqlen_q,
            max_seqlen_k,
            mask,
            window_left,
            window_right,
            softcap,
            scale,
        ),
        deterministic,
    )


attention_bwd = torch.library.custom_op("fa::attention_bwd", mutates_args=())(bwd_impl)


@attention_bwd.register_fake
def _attention_bwd_fake(
    dout,
    q,
    k,
    v,
    o,
    lse,
    bias,
    alibi_slopes,
    cu_seqlens_q,
    cu_seqlens_k,
    max_seqlen_q,
    max_seqlen_k,
    mask,
    window_left,
    window_right,
    softcap,
    scale,
    deterministic,
):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _setup_context(ctx, inputs, output):
    (
        q,
        k,
        v,
        bias,
        alibi_slopes,
        cu_seqlens_q,
        cu_seqlens_k,
        max_seqlen_q,
        max_seqlen_k,
        mask,
        window_left,
        window_right,
        softcap,
        scale,
    ) = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse, bias, alibi_slopes, cu_seqlens_q, cu_seqlens_k)
    ctx.fa_args = (max_seqlen_q, max_seqlen_k, mask, window_left, window_right, softcap, scale)
    ctx.mark_non_differentiable(lse)


def _grads(bwd, ctx, dout):
    """The gradients of the forward's 14 inputs through `bwd` (the op, or its implementation in eager mode)."""
    q, k, v, o, lse, bias, alibi_slopes, cu_seqlens_q, cu_seqlens_k = ctx.saved_tensors
    dq, dk, dv = bwd(
        dout,
        q,
        k,
        v,
        o,
        lse,
        bias,
        alibi_slopes,
        cu_seqlens_q,
        cu_seqlens_k,
        *ctx.fa_args,
        torch.are_deterministic_algorithms_enabled(),
    )
    return dq, dk, dv, None, None, None, None, None, None, None, None, None, None, None


def _backward(ctx, dout, _dlse):
    return _grads(torch.ops.fa.attention_bwd, ctx, dout)


attention_fwd.register_autograd(_backward, setup_context=_setup_context)

_EagerAttention = eager_function(fwd_impl, bwd_impl, _setup_context, _grads)


def _forward(q, k, v, rest):
    """(o, lse): the op while torch.compile traces; else the implementation, under autograd only when needed."""
    if torch.compiler.is_compiling():
        return torch.ops.fa.attention_fwd(q, k, v, *rest)
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        return _EagerAttention.apply(q, k, v, tuple(rest))
    return fwd_impl(q, k, v, *rest)


# ---- user-facing -----------------------------------------------------------------------------------------------------
def attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    causal: bool = False,
    window=(-1, -1),
    bias: Optional[Tensor] = None,
    alibi_slopes: Optional[Tensor] = None,
    softcap: float = 0.0,
    scale: Optional[float] = None,
    layout: str = "bshd",
    cu_seqlens_q: Optional[Tensor] = None,
    cu_seqlens_k: Optional[Tensor] = None,
    max_seqlen_q: Optional[int] = None,
    max_seqlen_k: Optional[int] = None,
    return_lse: bool = False,
    mods=None,
    sinks: Optional[Tensor] = None,
    descale_q=None,
    descale_k=None,
    descale_v=None,
    out_dtype: Optional[torch.dtype] = None,
):
    """FlashAttention forward (differentiable, with user code `mods` (fa.Mods) too: a score_mod then needs its
    score_mod_grad). See python/README.md and include/fa/fa.h for the semantics.

    q [B, Sq, Hq, D], k [B, Sk, Hkv, D], v [B, Sk, Hkv, Dv] (layout="bshd"), or [B, H, S, D] views
    (layout="bhsd", no copy), or varlen [total, H, D] with cu_seqlens_q/k (int32 [B+1]). Masks are aligned to the
    bottom-right corner. window=(left, right), -1 unbounded; causal with a window means right=0. bias broadcasts to
    [B, Hq, Sq, Sk]; alibi_slopes is float32 [Hq]; softcap 0 is off; scale None is 1/sqrt(D). Tensors that
    disagree (batch, keys, heads, head dims, bias, ALiBi, cu_seqlens, sinks) raise fa.InvalidArgument naming both.
    sinks: attention sinks (gpt-oss), one logit per query head [Hq] (any floating dtype, read as float32), an extra
    column of every row's softmax without a value, in the units of the scaled scores; differentiable (its gradient
    in its own dtype). Returns o (same layout as q, head dim Dv), and lse (float32 [B, Hq, Sq] or [Hq, total]; with
    sinks it includes them) when return_lse.
    FP8 (q, k, v torch.float8_e4m3fn or torch.float8_e5m2; the Hopper fp8 forward, inference only): each read as
    codes times descale_q / descale_k / descale_v (None: 1; a float, or float32 of shape (), (1,) or [B, Hkv]), o of
    out_dtype (torch.bfloat16 by default, or torch.float16); no bias, mods or sinks (fa._fp8).
    """
    if q.dtype in FP8_DTYPES:
        if sinks is not None:
            rules.fail(f"sinks: given with fp8 q ({q.dtype}); expected None (the fp8 forward has no sinks yet)")
        o, lse = attention_fp8(q, k, v, locals())
        return (o, lse) if return_lse else o
    _no_fp8_arguments(q, descale_q, descale_k, descale_v, out_dtype)
    plain = bias is None and alibi_slopes is None and cu_seqlens_q is None and cu_seqlens_k is None
    eager = not torch.compiler.is_compiling()
    if plain and eager and layout == "bshd" and sinks is None:  # a kept entry per signature (the docstring's table)
        if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
            kept = grad_step
        elif mods is None:
            kept = eager_plain
        else:
            kept = eager_mods
        out = kept(q, k, v, mods, causal, window, softcap, scale, return_lse)
        if out is not None:  # None: a call the entry cannot describe
            return out if return_lse else out[0]
    if plain and eager:
        q2, k2, v2, rest, bhsd = op_args_fixed(q, k, v, causal, window, softcap, scale, layout)
    else:
        q2, k2, v2, rest, bhsd = op_args(
            q,
            k,
            v,
            causal,
            window,
            bias,
            alibi_slopes,
            softcap,
            scale,
            layout,
            cu_seqlens_q,
            cu_seqlens_k,
            max_seqlen_q,
            max_seqlen_k,
        )
    if sinks is not None:
        o, lse = forward_with_sinks(q2, k2, v2, sinks, mods, rest)
    else:
        o, lse = _forward(q2, k2, v2, rest) if mods is None else forward_with_mods(q2, k2, v2, mods, rest)
    if bhsd:
        o = o.transpose(1, 2)
    return (o, lse) if return_lse else o


def _no_fp8_arguments(q, descale_q, descale_k, descale_v, out_dtype):
    """A 16-bit q takes no descales and no out_dtype other than its own."""
    for name, given in (("descale_q", descale_q), ("descale_k", descale_k), ("descale_v", descale_v)):
        if given is not None:
            rules.fail(f"{name}: given, but q is {q.dtype}; expected None (descales are for fp8 q / k / v)")
    if out_dtype is not None and out_dtype != q.dtype:
        rules.fail(f"out_dtype: {out_dtype} with q of {q.dtype}; expected None or q's dtype (it is for fp8 q / k / v)")


def eager_plain(q, k, v, mods, causal, window, softcap, scale, want_lse):
    """(o, lse or None) of fa.attention's eager, gradient-free call without bias, ALiBi, varlen or user code
    (inference loops; `mods` is None), or None: take the generic path. Keyed by the raw arguments (signature, mask,
    softcap, scale, whether LSE is wanted): a known key allocates the outputs, copies the filled fa_params, sets its
    five pointers and calls fa_run on the current raw stream (the C library still validates every call); a new key
    is checked in full (op_args) before anything is allocated. LSE only when asked (fa.prepare readies that kernel
    too)."""
    key = (
        ("eager",) + signature(q, k, v) + (causal, None if window is None else tuple(window), softcap, scale, want_lse)
    )
    if key not in PARAMS_CACHE and (q.stride(-1) != 1 or k.stride(-1) != 1 or v.stride(-1) != 1):
        return None  # the generic path makes the last dims contiguous

    def rest_of():
        return op_args(q, k, v, causal, window, None, None, softcap, scale, "bshd", None, None, None, None)[3]

    return cached_forward(key, q, k, v, want_lse, rest_of)


def _problem(q, k, v, kwargs):
    _no_fp8_arguments(q, *(kwargs.pop(n, None) for n in ("descale_q", "descale_k", "descale_v", "out_dtype")))
    q2, k2, v2, rest, _ = op_args(
        q,
        k,
        v,
        kwargs.pop("causal", False),
        kwargs.pop("window", (-1, -1)),
        kwargs.pop("bias", None),
        kwargs.pop("alibi_slopes", None),
        kwargs.pop("softcap", 0.0),
        kwargs.pop("scale", None),
        kwargs.pop("layout", "bshd"),
        kwargs.pop("cu_seqlens_q", None),
        kwargs.pop("cu_seqlens_k", None),
        kwargs.pop("max_seqlen_q", None),
        kwargs.pop("max_seqlen_k", None),
    )
    kwargs.pop("return_lse", None)
    mods = kwargs.pop("mods", None)
    sinks = kwargs.pop("sinks", None)
    if kwargs:
        raise TypeError(f"fa: unexpected keyword arguments {sorted(kwargs)}")
    q2, k2, v2 = last_dim_contiguous(q2), last_dim_contiguous(k2), last_dim_contiguous(v2)
    if sinks is not None:
        sinks = sinks.detach().to(torch.float32).contiguous()
        check_sinks(q2, sinks, rest[2] is not None)
    o_shape, lse_shape = output_shapes(q2, k2, v2, rest[2])
    o = torch.empty(o_shape, dtype=q2.dtype, device=q2.device)
    lse = torch.empty(lse_shape, dtype=torch.float32, device=q2.device)
    p, keep = build_params(q2, k2, v2, o, lse, *rest)
    if sinks is not None:
        p.sinks = sinks.data_ptr()
        keep.append(sinks)
    if mods is not None:
        m, keep_m = mods.to_struct(q2.device)
        p.mods = ctypes.pointer(m)
        keep += [m, *keep_m]
    return p, keep, (q2, k2, v2, o, rest)


def _fp8_kind(q, k, kwargs) -> Optional[str]:
    """The kind of fp8 call: 'inputs' (fp8 q / k / v), 'cache' (a 16-bit q over fp8 k / v, or k_scale / v_scale
    given) or None (16-bit)."""
    if q.dtype in FP8_DTYPES:
        return "inputs"
    if k.dtype in FP8_DTYPES or kwargs.get("k_scale") is not None or kwargs.get("v_scale") is not None:
        return "cache"
    return None


def _attention_kwargs(kwargs: dict) -> dict:
    """fa.attention's keyword arguments: its defaults, overridden by `kwargs` (an unknown name: TypeError)."""
    params = inspect.signature(attention).parameters
    defaults = {n: p.default for n, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}
    unknown = sorted(set(kwargs) - set(defaults))
    if unknown:
        raise TypeError(f"fa: unexpected keyword arguments {unknown}")
    return {**defaults, **kwargs}


def _any_problem(q, k, v, kwargs: dict):
    """(fa_params, kept tensors, op-level q) of the call fa.attention(q, k, v, **kwargs) describes, or, over an fp8
    cache, attention_with_kvcache(q, k, v, **kwargs): every check made, outputs allocated, nothing run."""
    kind = _fp8_kind(q, k, kwargs)
    if kind == "inputs":
        rest = dict(kwargs)
        for name in ("k_scale", "v_scale"):
            if rest.pop(name, None) is not None:
                rules.fail(
                    f"{name}: given with fp8 q ({q.dtype}); expected None (scales are for an fp8 cache under a"
                    " 16-bit q; fp8 q / k / v take descale_q / descale_k / descale_v)"
                )
        return fp8_problem(q, k, v, _attention_kwargs(rest))
    if kind == "cache":
        rest = dict(kwargs)
        _no_fp8_arguments(q, *(rest.pop(n, None) for n in ("descale_q", "descale_k", "descale_v", "out_dtype")))
        return cache_problem(q, k, v, rest)
    p, keep, (q2, *_rest) = _problem(q, k, v, dict(kwargs))
    return p, keep, q2


def prepare(q: Tensor, k: Tensor, v: Tensor, *, backward: Optional[bool] = None, **kwargs) -> None:
    """Compile (and, by policy, tune) the kernels fa.attention(q, k, v, **kwargs) will use, so that it can be
    captured in a CUDA graph. Also prepares the backward when `backward` is True, or when it is None and grad mode
    is on and q, k, v (or sinks) requires grad. Same keyword arguments as fa.attention (fp8 q / k / v with
    descale_q / descale_k / descale_v and out_dtype); over an fp8 cache (k, v fp8 under a 16-bit q) those of
    fa.attention_with_kvcache (k_scale, v_scale, cache_seqlens, block_table, ...). fp8 has no backward."""
    if _fp8_kind(q, k, kwargs) is not None:
        if backward:
            rules.fail(
                f"backward: True with q {q.dtype}, k {k.dtype}; expected None or False (fp8 attention is"
                " inference only)"
            )
        p, keep, q2 = _any_problem(q, k, v, kwargs)
        with torch.cuda.device(q2.device):
            default_context(device_index(q2.device)).prepare(p)
        del keep
        return
    sinks_in = kwargs.get("sinks")
    p, keep, (q2, k2, v2, o, rest) = _problem(q, k, v, dict(kwargs))
    ctx = default_context(device_index(q2.device))
    with torch.cuda.device(q2.device):
        ctx.prepare(p)
        if rest[0] is None and rest[1] is None and rest[2] is None and sinks_in is None:
            # the eager inference path (with user code too) runs without LSE unless return_lse: its kernel too
            p_no_lse = S.Params.from_buffer_copy(bytes(p))
            p_no_lse.lse = None
            ctx.prepare(p_no_lse)
        if backward is None:
            backward = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (q, k, v, sinks_in))
        if backward:
            dq, dk, dv = (
                torch.empty_like(q2.contiguous()),
                torch.empty_like(k2.contiguous()),
                torch.empty_like(v2.contiguous()),
            )
            bp = build_bwd_params(
                p, torch.empty_like(o), dq, dk, dv, rest[2] is not None, torch.are_deterministic_algorithms_enabled()
            )
            dsinks = torch.empty(int(q2.shape[-2]), dtype=torch.float32, device=q2.device) if p.sinks else None
            if dsinks is not None:
                bp.dsinks = dsinks.data_ptr()
            ctx.prepare_backward(bp)
    del keep


def is_supported(q: Tensor, k: Tensor, v: Tensor, **kwargs) -> Support:
    """A fa.Support: truthy when fa.attention(q, k, v, **kwargs) would run, else falsy with the reason in .reason
    (tensors that disagree, as fa.attention would raise it: fa.shape_rules). Takes fa.prepare's arguments (fp8 q /
    k / v with their descales and out_dtype, an fp8 cache with k_scale / v_scale)."""
    try:
        p, keep, q2 = _any_problem(q, k, v, kwargs)
    except InvalidArgument as exc:
        return Support(False, str(exc))
    answer = default_context(device_index(q2.device)).is_supported(p)
    del keep
    return answer


def problem_key(q: Tensor, k: Tensor, v: Tensor, **kwargs) -> str:
    """The canonical kernel key of the problem (no sequence lengths or batch); fa.prepare's arguments."""
    p, keep, q2 = _any_problem(q, k, v, kwargs)
    key = default_context(device_index(q2.device)).problem_key(p)
    del keep
    return key
