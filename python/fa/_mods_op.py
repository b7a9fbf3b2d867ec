"""The PyTorch operators fa::attention_mods / fa::attention_mods_bwd: the forward and backward with user code
(fa.Mods).

Same op-level views and arguments as fa::attention_fwd / fa::attention_bwd (see _torch_ops), plus the Mods' bodies,
buffers and scalars as plain op arguments, with fake (meta) implementations so that torch.compile traces them, and
autograd wired from the forward op to the backward one (q, k, v get gradients; buffers, scalars, bias, ALiBi slopes
and cu_seqlens none). In eager mode the same implementations run under a plain autograd.Function, as _torch_ops does.

Host cost: the fa_mods struct of a signature is filled once (mods.mods_struct; each call copies it and sets the
contents' epoch that keys the library's classification cache), and a fixed-length forward without bias or ALiBi
keeps its filled fa_params per signature as the plain forward does (_torch_common.cached_forward). fa.attention's
eager inference call (eager_mods) keeps one entry per signature holding both, and writes LSE only when asked.
"""

# No `from __future__ import annotations` here: torch.library.custom_op reads the annotations as types.
import ctypes
from typing import List, Optional, Tuple

import torch
from torch import Tensor

from ._tensor_params import last_dim_contiguous, output_shapes
from ._torch_common import (
    cached_forward,
    call_key,
    device_index,
    eager_function,
    fill_and_run,
    forward_outputs,
    op_args_fixed,
    run_backward,
    run_filled,
    run_forward,
    signature,
)
from .mods import _STRUCTS_MAX, Mods, copy_struct, filled_struct, mods_struct


def _attach(mask_mod, score_mod, score_mod_grad, buffers, scalars, iscalars, depends, device, contents=()):
    """attach(params) for run_forward / run_backward: the fa_mods of these op arguments (epoch over the buffers
    and `contents`: the varlen offsets), kept alive by the caller."""

    def attach(p):
        m, keep = mods_struct(
            mask_mod, score_mod, score_mod_grad, buffers, scalars, iscalars, depends, device, contents
        )
        p.mods = ctypes.pointer(m)
        return m, keep

    return attach


def _mods_impl(
    q: Tensor,
    k: Tensor,
    v: Tensor,
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
    rest = (
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
    )
    if bias is None and alibi_slopes is None and cu_seqlens_q is None and cu_seqlens_k is None:
        return _fixed_forward(q, k, v, mask_mod, score_mod, score_mod_grad, buffers, scalars, iscalars, depends, rest)
    attach = _attach(
        mask_mod, score_mod, score_mod_grad, buffers, scalars, iscalars, depends, q.device, (cu_seqlens_q, cu_seqlens_k)
    )
    return run_forward(q, k, v, rest, attach)


attention_mods = torch.library.custom_op("fa::attention_mods", mutates_args=())(_mods_impl)


@attention_mods.register_fake
def _attention_mods_fake(
    q,
    k,
    v,
    mask_mod,
    score_mod,
    score_mod_grad,
    buffers,
    scalars,
    iscalars,
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
    depends,
):
    o_shape, lse_shape = output_shapes(q, k, v, cu_seqlens_q)
    return q.new_empty(o_shape), q.new_empty(lse_shape, dtype=torch.float32)


def _mods_bwd_impl(
    dout: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    o: Tensor,
    lse: Tensor,
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
) -> Tuple[Tensor, Tensor, Tensor]:
    rest = (
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
    )
    attach = _attach(
        mask_mod, score_mod, score_mod_grad, buffers, scalars, iscalars, depends, q.device, (cu_seqlens_q, cu_seqlens_k)
    )
    return run_backward(dout, q, k, v, o, lse, rest, deterministic, attach)


attention_mods_bwd = torch.library.custom_op("fa::attention_mods_bwd", mutates_args=())(_mods_bwd_impl)


@attention_mods_bwd.register_fake
def _attention_mods_bwd_fake(dout, q, k, v, o, lse, *_rest):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _setup_context(ctx, inputs, output):
    (
        q,
        k,
        v,
        mask_mod,
        score_mod,
        score_mod_grad,
        buffers,
        scalars,
        iscalars,
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
        depends,
    ) = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse, bias, alibi_slopes, cu_seqlens_q, cu_seqlens_k, *buffers)
    ctx.fa_buffers = len(buffers)
    ctx.fa_code = (mask_mod, score_mod, score_mod_grad)
    ctx.fa_scalars = (list(scalars), list(iscalars))
    ctx.fa_args = (max_seqlen_q, max_seqlen_k, mask, window_left, window_right, softcap, scale, depends)
    ctx.mark_non_differentiable(lse)


def _grads(bwd, ctx, dout, list_grads=(None, None, None)):
    """The gradients of the forward's 21 inputs through `bwd` (the op, or its implementation in eager mode); the
    entries of the list inputs (buffers, scalars, iscalars) are `list_grads` (an autograd.Function wants None, the
    op's autograd a value shaped as it flattens the input: see _list_grad)."""
    q, k, v, o, lse, bias, alibi_slopes, cu_seqlens_q, cu_seqlens_k, *buffers = ctx.saved_tensors
    dq, dk, dv = bwd(
        dout,
        q,
        k,
        v,
        o,
        lse,
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
    return (dq, dk, dv, None, None, None, *list_grads) + (None,) * 12


def _list_grad(n: int, of_tensors: bool):
    """The gradient entry the op's autograd expects for a list input of n items: it flattens a list of tensors (and
    an empty list, of anything) into its items, so those take a list of Nones, and keeps any other list whole."""
    return [None] * n if of_tensors or n == 0 else None


def _backward(ctx, dout, _dlse):
    scalars, iscalars = ctx.fa_scalars
    return _grads(
        torch.ops.fa.attention_mods_bwd,
        ctx,
        dout,
        (_list_grad(ctx.fa_buffers, True), _list_grad(len(scalars), False), _list_grad(len(iscalars), False)),
    )


attention_mods.register_autograd(_backward, setup_context=_setup_context)


# Eager mode: the implementations under a plain autograd.Function (no dispatcher cost per call).
_EagerModsAttention = eager_function(_mods_impl, _mods_bwd_impl, _setup_context, _grads)


def _params_key(q, k, v, rest) -> tuple:
    """cached_forward's key of a fixed-length forward with user code (the code's own struct is set per call)."""
    return ("mods",) + signature(q, k, v) + tuple(rest[6:])


def _fixed_forward(q, k, v, mask_mod, score_mod, score_mod_grad, buffers, scalars, iscalars, depends, rest):
    """(o, lse) of a fixed-length forward with user code and no bias or ALiBi (q, k, v last-dim contiguous): the
    signature's fa_mods (mods_struct) and filled fa_params (cached_forward), both kept per signature."""
    m, keep = mods_struct(mask_mod, score_mod, score_mod_grad, buffers, scalars, iscalars, depends, q.device)
    out = cached_forward(_params_key(q, k, v, rest), q, k, v, True, lambda: rest, mods=m)
    del keep  # the code's bytes m points at, alive through the call
    return out


# fa.attention's eager, gradient-free call with user code (bshd, fixed length, no bias or ALiBi: an inference loop)
# under one key of the raw arguments, the Mods (code, scalars, buffers' address, dtype, shape, strides) and whether
# LSE is wanted. The key's entry holds the filled fa_params (its `mods` pointing at the entry's own fa_mods) and the
# buffers' contents epoch it was filled at: a call of a known key whose buffers are unchanged allocates the outputs,
# copies the params, sets the data pointers and calls fa_run, as the plain path does (cached_forward); a new key or
# changed buffers (a new epoch) take the full path with every check and refill the entry.
_EAGER: dict = {}


def eager_mods(q, k, v, mods: Mods, causal, window, softcap, scale, want_lse: bool):
    """(o, lse or None) of fa.attention(q, k, v, mods=mods, ...) in eager mode without gradient (bshd)."""
    key, epoch = call_key(q, k, v, mods, causal, window, softcap, scale)
    key += (want_lse,)
    ent = _EAGER.get(key)
    if ent is not None and ent[2] == epoch:
        blob, _m, _, device, _code = ent  # the locals keep the fa_mods and the code's bytes alive through the call
        o, lse = forward_outputs(q, v, want_lse)
        run_filled(blob, device, q, k, v, o, lse)
        return o, lse
    direct = q.stride(-1) == 1 and k.stride(-1) == 1 and v.stride(-1) == 1  # a hit passes q, k, v as they are
    q, k, v, rest, _ = op_args_fixed(q, k, v, causal, window, softcap, scale, "bshd")
    q, k, v = last_dim_contiguous(q), last_dim_contiguous(k), last_dim_contiguous(v)
    filled = filled_struct(
        mods.mask_mod,
        mods.score_mod,
        mods.score_mod_grad,
        mods.buffers,
        mods.scalars,
        mods.iscalars,
        mods.depends,
        q.device,
    )
    m = copy_struct(filled, epoch)
    o, lse = forward_outputs(q, v, want_lse)
    if o.numel() == 0:
        if lse is not None:
            lse.fill_(float("-inf"))
        return o, lse
    device = device_index(q.device)
    blob = fill_and_run(q, k, v, o, lse, rest, m, device)
    if direct:
        if len(_EAGER) >= _STRUCTS_MAX:
            _EAGER.clear()
        _EAGER[key] = (blob, m, epoch, device, filled[1])
    return o, lse


def forward_with_mods(q, k, v, mods: Mods, rest) -> Tuple[Tensor, Tensor]:
    """(o, lse) of the op-level views with user code: the op while torch.compile traces, else its implementation
    (under autograd when q, k or v requires grad; the backward then runs fa_run_backward with the same code)."""
    if (
        mods.score_mod is not None
        and mods.score_mod_grad is None
        and torch.is_grad_enabled()
        and (q.requires_grad or k.requires_grad or v.requires_grad)
    ):
        raise ValueError(
            "fa: the backward of a score_mod needs its derivative: give fa.Mods(score_mod_grad=...), "
            "the body of d score_mod / d s at the same s (include/fa/fa.h, fa_mods)"
        )
    args = (
        q,
        k,
        v,
        mods.mask_mod,
        mods.score_mod,
        mods.score_mod_grad,
        list(mods.buffers),
        list(mods.scalars),
        list(mods.iscalars),
        *rest,
        mods.depends,
    )
    if torch.compiler.is_compiling():
        return torch.ops.fa.attention_mods(*args)
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        return _EagerModsAttention.apply(q, k, v, args[3:])
    return _mods_impl(*args)
