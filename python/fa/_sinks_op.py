"""The PyTorch operators fa::attention_sinks / fa::attention_sinks_bwd: fa.attention with attention sinks (one logit
per query head, gpt-oss's; include/fa/fa.h, "Attention sinks"), differentiable in q, k, v and the sinks, with or
without user code (fa.Mods: transformers' padding mask runs as one).

The op-level views and arguments of fa::attention_mods / fa::attention_mods_bwd (_mods_op) with `sinks` (float32
[Hq], contiguous) after v; the backward returns dsinks (float32 [Hq], fa_bwd_params.dsinks) after dq, dk, dv. Fake
implementations let torch.compile trace them; in eager mode the same implementations run under a plain
autograd.Function (_torch_common.eager_function's reason: the dispatcher's host cost), which also passes the sinks'
gradient. Every call takes the generic path (run_forward / run_backward: every check first).
"""

# No `from __future__ import annotations` here: torch.library.custom_op reads the annotations as types.
import ctypes
from typing import List, Optional, Tuple

import torch
from torch import Tensor

from . import shape_rules as rules
from ._mods_op import _list_grad
from ._tensor_params import last_dim_contiguous, output_shapes
from ._torch_common import run_backward, run_forward
from .mods import mods_struct


def check_sinks(q: Tensor, sinks: Tensor, varlen: bool) -> None:
    """sinks holds one float32 logit per query head of the op-level q, on q's device."""
    rules.sink_logits(sinks.shape, int(q.shape[1] if varlen else q.shape[2]))
    if sinks.dtype != torch.float32:
        rules.fail(f"sinks: dtype {sinks.dtype}; expected torch.float32")
    rules.match("sinks", "device", sinks.device, "q", "device", q.device)


def _attach(sinks, code, device, contents):
    """attach(params) for run_forward / run_backward: the sinks, and the fa_mods of user code `code` (mask_mod,
    score_mod, score_mod_grad, buffers, scalars, iscalars, depends) when it holds any."""

    def attach(p):
        p.sinks = sinks.data_ptr()
        if code[0] is None and code[1] is None:
            return sinks
        m, keep = mods_struct(*code, device, contents)
        p.mods = ctypes.pointer(m)
        return sinks, m, keep

    return attach


def _fwd_impl(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    sinks: Tensor,
    mask_mod: Optional[str],
    score_mod: Optional[str],
    score_mod_grad: Optional[str],
    buffers: List[Tensor],
    scalars: List[float],
    iscalars: List[int],
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
    depends: str,
) -> Tuple[Tensor, Tensor]:
    q, k, v = last_dim_contiguous(q), last_dim_contiguous(k), last_dim_contiguous(v)
    check_sinks(q, sinks, cu_seqlens_q is not None)
    rest = (bias, alibi_slopes, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    rest += (mask, window_left, window_right, softcap, scale)
    code = (mask_mod, score_mod, score_mod_grad, buffers, scalars, iscalars, depends)
    return run_forward(q, k, v, rest, _attach(sinks, code, q.device, (cu_seqlens_q, cu_seqlens_k)))


attention_sinks = torch.library.custom_op("fa::attention_sinks", mutates_args=())(_fwd_impl)


@attention_sinks.register_fake
def _attention_sinks_fake(q, k, v, sinks, *args):
    o_shape, lse_shape = output_shapes(q, k, v, args[8])  # args[8]: cu_seqlens_q
    return q.new_empty(o_shape), q.new_empty(lse_shape, dtype=torch.float32)


def _bwd_impl(
    dout: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    o: Tensor,
    lse: Tensor,
    sinks: Tensor,
    mask_mod: Optional[str],
    score_mod: Optional[str],
    score_mod_grad: Optional[str],
    buffers: List[Tensor],
    scalars: List[float],
    iscalars: List[int],
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
    depends: str,
    deterministic: bool,
) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    check_sinks(q, sinks, cu_seqlens_q is not None)
    rest = (bias, alibi_slopes, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    rest += (mask, window_left, window_right, softcap, scale)
    code = (mask_mod, score_mod, score_mod_grad, buffers, scalars, iscalars, depends)
    dsinks = torch.empty_like(sinks)
    attach = _attach(sinks, code, q.device, (cu_seqlens_q, cu_seqlens_k))
    dq, dk, dv = run_backward(dout, q, k, v, o, lse, rest, deterministic, attach, dsinks)
    return dq, dk, dv, dsinks


attention_sinks_bwd = torch.library.custom_op("fa::attention_sinks_bwd", mutates_args=())(_bwd_impl)


@attention_sinks_bwd.register_fake
def _attention_sinks_bwd_fake(dout, q, k, v, o, lse, sinks, *_rest):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape), sinks.new_empty(sinks.shape)


def _setup_context(ctx, inputs, output):
    q, k, v, sinks, mask_mod, score_mod, score_mod_grad, buffers, scalars, iscalars = inputs[:10]
    bias, alibi_slopes, cu_seqlens_q, cu_seqlens_k = inputs[10:14]
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse, sinks, bias, alibi_slopes, cu_seqlens_q, cu_seqlens_k, *buffers)
    ctx.fa_buffers = len(buffers)
    ctx.fa_code = (mask_mod, score_mod, score_mod_grad)
    ctx.fa_scalars = (list(scalars), list(iscalars))
    ctx.fa_args = tuple(inputs[14:])  # max_seqlen_q .. scale, depends
    ctx.mark_non_differentiable(lse)


def _grads(bwd, ctx, dout, list_grads=(None, None, None)):
    """The gradients of the forward's 22 inputs through `bwd` (the op, or its implementation in eager mode): q, k,
    v and sinks; the list inputs' entries are `list_grads` (as _mods_op._grads)."""
    q, k, v, o, lse, sinks, bias, alibi_slopes, cu_seqlens_q, cu_seqlens_k, *buffers = ctx.saved_tensors
    dq, dk, dv, dsinks = bwd(
        dout,
        q,
        k,
        v,
        o,
        lse,
        sinks,
        *ctx.fa_code,
        list(buffers),
        *ctx.fa_scalars,
        bias,
        alibi_slopes,
        cu_seqlens_q,
        cu_seqlens_k,
        *ctx.fa_args,
        torch.are_deterministic_algorithms_enabled(),
    )
    return (dq, dk, dv, dsinks, None, None, None, *list_grads) + (None,) * 12


def _backward(ctx, dout, _dlse):
    scalars, iscalars = ctx.fa_scalars
    return _grads(
        torch.ops.fa.attention_sinks_bwd,
        ctx,
        dout,
        (_list_grad(ctx.fa_buffers, True), _list_grad(len(scalars), False), _list_grad(len(iscalars), False)),
    )


attention_sinks.register_autograd(_backward, setup_context=_setup_context)


class _Eager(torch.autograd.Function):
    """Eager mode: the implementations under a plain autograd.Function, called as .apply(q, k, v, sinks, args)
    with the op's other inputs in one tuple."""

    @staticmethod
    def forward(ctx, q, k, v, sinks, args):
        inputs = (q, k, v, sinks) + args
        o, lse = _fwd_impl(*inputs)
        _setup_context(ctx, inputs, (o, lse))
        ctx.set_materialize_grads(False)  # no zero-filled tensor for lse's (never used) gradient
        return o, lse

    @staticmethod
    def backward(ctx, dout, _dlse):
        if dout is None:  # o took no part in the loss
            return None, None, None, None, None
        g = _grads(_bwd_impl, ctx, dout)
        return g[0], g[1], g[2], g[3], None


def forward_with_sinks(q, k, v, sinks: Tensor, mods, rest) -> Tuple[Tensor, Tensor]:
    """(o, lse) of the op-level views with sinks (any floating dtype and shape (Hq,): made float32 and contiguous,
    differentiably, so a bf16 parameter gets its gradient in bf16) and user code `mods` (fa.Mods or None): the op
    while torch.compile traces, else its implementation (under autograd when q, k, v or sinks requires grad)."""
    if not isinstance(sinks, Tensor):
        raise TypeError(f"fa: sinks must be a tensor of one logit per query head, got {type(sinks).__name__}")
    if not sinks.is_floating_point():
        rules.fail(f"sinks: dtype {sinks.dtype}; expected a floating dtype (read as float32)")
    sinks = sinks.to(torch.float32).contiguous()
    grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v, sinks))
    if mods is not None and mods.score_mod is not None and mods.score_mod_grad is None and grad:
        raise ValueError(
            "fa: the backward of a score_mod needs its derivative: give fa.Mods(score_mod_grad=...), "
            "the body of d score_mod / d s at the same s (include/fa/fa.h, fa_mods)"
        )
    if mods is None:
        code = (None, None, None, [], [], [])
        depends = "bh"
    else:
        code = (mods.mask_mod, mods.score_mod, mods.score_mod_grad, list(mods.buffers), list(mods.scalars))
        code += (list(mods.iscalars),)
        depends = mods.depends
    args = code + tuple(rest) + (depends,)
    if torch.compiler.is_compiling():
        return torch.ops.fa.attention_sinks(q, k, v, sinks, *args)
    if grad:
        return _Eager.apply(q, k, v, sinks, args)
    return _fwd_impl(q, k, v, sinks, *args)
