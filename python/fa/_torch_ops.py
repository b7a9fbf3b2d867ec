"""The PyTorch operators fa::attention_fwd / fa::attention_bwd and the user-facing fa.attention / fa.prepare.

The ops take the op-level views (see _tensor_params) and plain int/float arguments only, derive every size from the
tensor shapes, and have fake (meta) implementations with the exact output shapes, so torch.compile(dynamic=True,
fullgraph=True) traces them without graph breaks or specialisation on sequence length. Autograd wires the backward
op to fa_run_backward; bias, alibi slopes and cu_seqlens get no gradient, lse is not differentiable. In eager mode
fa.attention calls the same implementations through a plain autograd.Function (_EagerAttention), which skips the
custom-op dispatcher's per-call host cost (a fixed-length bshd call without bias or ALiBi goes through _grad_step's
kept entries instead); the ops themselves stay as they are for torch.compile and opcheck.
Work is enqueued on torch.cuda.current_stream() of the tensors' device with that device's default fa.Context.
"""

# No `from __future__ import annotations` here: torch.library.custom_op reads the annotations as types.
import ctypes
from typing import Optional, Tuple

import torch
from torch import Tensor

from . import _structs as S
from ._tensor_params import (build_bwd_params, build_params, check_inputs, last_dim_contiguous, output_shapes)
from .context import default_context
from .support import Support


_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # the handle without a Stream object


def _device_index(device: torch.device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()


def _stream_of(index: int) -> int:
    """The current stream's handle on device `index`."""
    return _raw_stream(index) if _raw_stream is not None else torch.cuda.current_stream(index).cuda_stream


def _stream(device: torch.device) -> int:
    return _stream_of(_device_index(device))


# Host cost: a plain fixed-length forward (no bias, ALiBi, varlen or user code) keeps one filled fa_params per
# signature of its arguments (shapes, strides, dtype, device, mask, softcap, scale, whether LSE is written); a call of
# a known signature allocates the outputs, copies the params, sets the data pointers and calls fa_run on the current
# raw stream. No `torch.cuda.device` switch: fa_run binds its own context and the stream names the device.
_PARAMS_CACHE: dict = {}
_PARAMS_CACHE_MAX = 256


def _cached_forward(key, q, k, v, want_lse: bool, params_of, mods=None):
    """(o, lse or None) of the plain forward of `key`; params_of(o, lse) fills fa_params on the first call of a key
    (and makes every check there: the key holds all that they read). `mods`: an fa_mods (S.Mods) the call points at
    (user code; the key then holds everything of the params but the code's own struct)."""
    o, lse = forward_outputs(q, v, want_lse)
    entry = _PARAMS_CACHE.get(key)
    if entry is None:
        if o.numel() == 0:
            if lse is not None:
                lse.fill_(float("-inf"))
            return o, lse
        p = params_of(o, lse)
        if len(_PARAMS_CACHE) >= _PARAMS_CACHE_MAX:
            _PARAMS_CACHE.clear()
        entry = (bytes(p), _device_index(q.device))
        _PARAMS_CACHE[key] = entry
    run_filled(entry[0], entry[1], q, k, v, o, lse, mods)
    return o, lse


def forward_outputs(q, v, want_lse: bool):
    """(o, lse or None) of a fixed-length bshd forward, uninitialized."""
    o = torch.empty((q.shape[0], q.shape[1], q.shape[2], v.shape[3]), dtype=q.dtype, device=q.device)
    lse = (torch.empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32, device=q.device)
           if want_lse else None)
    return o, lse


def run_filled(blob, device, q, k, v, o, lse, mods=None) -> None:
    """fa_run of filled fa_params `blob` (bytes) with this call's data pointers (and fa_mods `mods`, when given) on
    the current raw stream of device index `device`."""
    p = S.Params.from_buffer_copy(blob)
    p.q, p.k, p.v, p.o = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr()
    if lse is not None:
        p.lse = lse.data_ptr()
    if mods is not None:
        p.mods = ctypes.pointer(mods)
    default_context(device).run(p, _stream_of(device))


def _fast_fwd(q, k, v, mask, window_left, window_right, softcap, scale):
    """The op's plain forward (op-level views, LSE always written)."""
    key = ("op", q.shape, q.stride(), k.shape, k.stride(), v.shape, v.stride(), q.dtype, q.device, mask, window_left,
           window_right, softcap, scale)
    return _cached_forward(key, q, k, v, True, lambda o, lse: build_params(
        q, k, v, o, lse, None, None, None, None, 0, 0, mask, window_left, window_right, softcap, scale)[0])


def _fwd_impl(q: Tensor, k: Tensor, v: Tensor, bias: Optional[Tensor], alibi_slopes: Optional[Tensor],
                  cu_seqlens_q: Optional[Tensor], cu_seqlens_k: Optional[Tensor], max_seqlen_q: int,
                  max_seqlen_k: int, mask: int, window_left: int, window_right: int, softcap: float,
                  scale: float) -> Tuple[Tensor, Tensor]:
    q, k, v = last_dim_contiguous(q), last_dim_contiguous(k), last_dim_contiguous(v)
    if bias is None and alibi_slopes is None and cu_seqlens_q is None and cu_seqlens_k is None:
        return _fast_fwd(q, k, v, mask, window_left, window_right, softcap, scale)
    return run_forward(q, k, v, (bias, alibi_slopes, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, mask,
                                 window_left, window_right, softcap, scale))


def run_forward(q, k, v, rest, attach=None) -> Tuple[Tensor, Tensor]:
    """(o, lse) of the op-level views: outputs allocated, fa_params filled (then `attach(params)` may add to it and
    return what it must keep alive), fa_run on the current stream."""
    o_shape, lse_shape = output_shapes(q, k, v, rest[2])
    o = torch.empty(o_shape, dtype=q.dtype, device=q.device)
    lse = torch.empty(lse_shape, dtype=torch.float32, device=q.device)
    if o.numel() == 0:
        lse.fill_(float("-inf"))
        return o, lse
    p, keep = build_params(q, k, v, o, lse, *rest)
    keep_attached = attach(p) if attach is not None else None
    with torch.cuda.device(q.device):
        default_context(_device_index(q.device)).run(p, _stream(q.device))
    del keep, keep_attached
    return o, lse


attention_fwd = torch.library.custom_op("fa::attention_fwd", mutates_args=())(_fwd_impl)


@attention_fwd.register_fake
def _attention_fwd_fake(q, k, v, bias, alibi_slopes, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, mask,
                        window_left, window_right, softcap, scale):
    o_shape, lse_shape = output_shapes(q, k, v, cu_seqlens_q)
    return q.new_empty(o_shape), q.new_empty(lse_shape, dtype=torch.float32)


def _bwd_impl(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, o: Tensor, lse: Tensor, bias: Optional[Tensor],
                  alibi_slopes: Optional[Tensor], cu_seqlens_q: Optional[Tensor], cu_seqlens_k: Optional[Tensor],
                  max_seqlen_q: int, max_seqlen_k: int, mask: int, window_left: int, window_right: int,
                  softcap: float, scale: float, deterministic: bool) -> Tuple[Tensor, Tensor, Tensor]:
    return run_backward(dout, q, k, v, o, lse, (bias, alibi_slopes, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                                max_seqlen_k, mask, window_left, window_right, softcap, scale),
                        deterministic)


def run_backward(dout, q, k, v, o, lse, rest, deterministic: bool, attach=None) -> Tuple[Tensor, Tensor, Tensor]:
    """(dq, dk, dv) of the op-level views: gradients allocated, fa_params filled from the forward's arguments `rest`
    (then `attach(params)` may add to it, as in run_forward), fa_run_backward on the current stream."""
    q, k, v = last_dim_contiguous(q), last_dim_contiguous(k), last_dim_contiguous(v)
    o, dout = last_dim_contiguous(o), last_dim_contiguous(dout)
    dq = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    dk = torch.empty(k.shape, dtype=k.dtype, device=k.device)
    dv = torch.empty(v.shape, dtype=v.dtype, device=v.device)
    if q.numel() == 0 or k.numel() == 0:
        return dq.zero_(), dk.zero_(), dv.zero_()
    if rest[0] is None and rest[1] is None and rest[2] is None and rest[3] is None:
        return _cached_backward(dout, q, k, v, o, lse, dq, dk, dv, rest, deterministic, attach)
    p, keep = build_params(q, k, v, o, lse, *rest)
    keep_attached = attach(p) if attach is not None else None
    bp = build_bwd_params(p, dout, dq, dk, dv, rest[2] is not None, deterministic)
    with torch.cuda.device(q.device):
        default_context(_device_index(q.device)).run_backward(bp, _stream(q.device))
    del keep, keep_attached
    return dq, dk, dv


# Host cost of the backward, as the forward's _cached_forward: a fixed-length backward without bias or ALiBi keeps
# its filled fa_params and fa_bwd_params per signature (every shape and stride, dtype, device, the scalar arguments,
# deterministic); a call of a known signature copies both, sets the data pointers (and the user code's fa_mods
# through `attach`) and calls fa_run_backward on the current raw stream, without a device switch.
_BWD_CACHE: dict = {}


def _cached_backward(dout, q, k, v, o, lse, dq, dk, dv, rest, deterministic, attach):
    key = (q.shape, q.stride(), k.shape, k.stride(), v.shape, v.stride(), o.stride(), dout.stride(), q.dtype,
           q.device, rest[4:], deterministic)
    entry = _BWD_CACHE.get(key)
    if entry is None:
        p, _ = build_params(q, k, v, o, lse, *rest)
        bp = build_bwd_params(p, dout, dq, dk, dv, False, deterministic)
        if len(_BWD_CACHE) >= _PARAMS_CACHE_MAX:
            _BWD_CACHE.clear()
        entry = (bytes(p), bytes(bp), _device_index(q.device))
        _BWD_CACHE[key] = entry
    fblob, bblob, device = entry
    p = S.Params.from_buffer_copy(fblob)
    p.q, p.k, p.v, p.o, p.lse = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr()
    keep_attached = attach(p) if attach is not None else None
    bp = S.BwdParams.from_buffer_copy(bblob)
    bp.fwd = ctypes.pointer(p)
    bp.dout, bp.dq, bp.dk, bp.dv = dout.data_ptr(), dq.data_ptr(), dk.data_ptr(), dv.data_ptr()
    default_context(device).run_backward(bp, _stream_of(device))
    del keep_attached
    return dq, dk, dv


attention_bwd = torch.library.custom_op("fa::attention_bwd", mutates_args=())(_bwd_impl)


@attention_bwd.register_fake
def _attention_bwd_fake(dout, q, k, v, o, lse, bias, alibi_slopes, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                        max_seqlen_k, mask, window_left, window_right, softcap, scale, deterministic):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _setup_context(ctx, inputs, output):
    (q, k, v, bias, alibi_slopes, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, mask, window_left,
     window_right, softcap, scale) = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse, bias, alibi_slopes, cu_seqlens_q, cu_seqlens_k)
    ctx.fa_args = (max_seqlen_q, max_seqlen_k, mask, window_left, window_right, softcap, scale)
    ctx.mark_non_differentiable(lse)


def _grads(bwd, ctx, dout):
    """The gradients of the forward's 14 inputs through `bwd` (the op, or its implementation in eager mode)."""
    q, k, v, o, lse, bias, alibi_slopes, cu_seqlens_q, cu_seqlens_k = ctx.saved_tensors
    dq, dk, dv = bwd(dout, q, k, v, o, lse, bias, alibi_slopes, cu_seqlens_q, cu_seqlens_k, *ctx.fa_args,
                     torch.are_deterministic_algorithms_enabled())
    return dq, dk, dv, None, None, None, None, None, None, None, None, None, None, None


def _backward(ctx, dout, _dlse):
    return _grads(torch.ops.fa.attention_bwd, ctx, dout)


attention_fwd.register_autograd(_backward, setup_context=_setup_context)


def eager_function(fwd_impl, bwd_impl, setup_context, grads):
    """Eager mode: an op pair's own implementations under a plain autograd.Function. The dispatcher path of a
    torch.library.custom_op costs a few hundred microseconds of host time per call (H200, torch 2.11: backward
    312 us through torch.ops.fa.attention_bwd against 88 us for the library call it wraps), which is more than the
    GPU time of a small problem; torch.compile still sees the ops (attention() picks them while compiling).
    Called as .apply(q, k, v, rest) with the op's other inputs in one tuple: autograd.Function.apply and the
    backward's gradient tuple cost host time per argument, and only q, k and v take gradients."""

    class _Eager(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, rest):
            inputs = (q, k, v) + rest
            o, lse = fwd_impl(*inputs)
            setup_context(ctx, inputs, (o, lse))
            ctx.set_materialize_grads(False)  # no zero-filled tensor for lse's (never used) gradient
            return o, lse

        @staticmethod
        def backward(ctx, dout, _dlse):
            if dout is None:  # o took no part in the loss
                return None, None, None, None
            g = grads(bwd_impl, ctx, dout)
            return g[0], g[1], g[2], None

    return _Eager


_EagerAttention = eager_function(_fwd_impl, _bwd_impl, _setup_context, _grads)


def _forward(q, k, v, rest):
    """(o, lse): the op while torch.compile traces; else the implementation, under autograd only when needed."""
    if torch.compiler.is_compiling():
        return torch.ops.fa.attention_fwd(q, k, v, *rest)
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        return _EagerAttention.apply(q, k, v, tuple(rest))
    return _fwd_impl(q, k, v, *rest)


# ---- user-facing -----------------------------------------------------------------------------------------------------
def _mask_args(causal: bool, window) -> tuple[int, int, int]:
    left, right = (int(window[0]), int(window[1])) if window is not None else (-1, -1)
    if left < -1 or right < -1:
        raise ValueError(f"fa: window entries must be >= 0 or -1 (unbounded), got {window}")
    if causal:
        if left == -1 and right in (-1, 0):
            return S.FA_MASK_CAUSAL, -1, -1
        return S.FA_MASK_SLIDING_WINDOW, left, 0
    if left == -1 and right == -1:
        return S.FA_MASK_NONE, -1, -1
    return S.FA_MASK_SLIDING_WINDOW, left, right


def _op_args(q, k, v, causal, window, bias, alibi_slopes, softcap, scale, layout, cu_seqlens_q, cu_seqlens_k,
             max_seqlen_q, max_seqlen_k):
    """(op-level q, k, v, the remaining op arguments, bhsd)."""
    if layout not in ("bshd", "bhsd"):
        raise ValueError(f'fa: layout must be "bshd" or "bhsd", got {layout!r}')
    bhsd = layout == "bhsd"
    varlen = cu_seqlens_q is not None or cu_seqlens_k is not None
    if bhsd:
        if varlen:
            raise ValueError('fa: layout="bhsd" is for fixed-length 4-D tensors; varlen tensors are [total, heads, dim]')
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    check_inputs(q, k, v, cu_seqlens_q, cu_seqlens_k)
    if varlen:
        if max_seqlen_q is None:
            max_seqlen_q = int((cu_seqlens_q[1:] - cu_seqlens_q[:-1]).max().item())
        if max_seqlen_k is None:
            max_seqlen_k = int((cu_seqlens_k[1:] - cu_seqlens_k[:-1]).max().item())
    else:
        max_seqlen_q, max_seqlen_k = 0, 0
    mask, wl, wr = _mask_args(causal, window)
    if softcap is None:
        softcap = 0.0
    if scale is None:
        scale = 0.0
    rest = (bias, alibi_slopes, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, mask, wl, wr, float(softcap),
            float(scale))
    return q, k, v, rest, bhsd


_eager_mods = None  # _mods_op.eager_mods, bound on first use
_grad_step = None  # _grad_step.grad_step, bound on first use


def attention(q: Tensor, k: Tensor, v: Tensor, *, causal: bool = False, window=(-1, -1),
              bias: Optional[Tensor] = None, alibi_slopes: Optional[Tensor] = None, softcap: float = 0.0,
              scale: Optional[float] = None, layout: str = "bshd", cu_seqlens_q: Optional[Tensor] = None,
              cu_seqlens_k: Optional[Tensor] = None, max_seqlen_q: Optional[int] = None,
              max_seqlen_k: Optional[int] = None, return_lse: bool = False, mods=None):
    """FlashAttention forward (differentiable, with user code `mods` (fa.Mods) too: a score_mod then needs its
    score_mod_grad). See python/README.md and include/fa/fa.h for the semantics.

    q [B, Sq, Hq, D], k [B, Sk, Hkv, D], v [B, Sk, Hkv, Dv] (layout="bshd"), or [B, H, S, D] views
    (layout="bhsd", no copy), or varlen [total, H, D] with cu_seqlens_q/k (int32 [B+1]). Masks are aligned to the
    bottom-right corner. window=(left, right), -1 unbounded; causal with a window means right=0. bias broadcasts to
    [B, Hq, Sq, Sk]; alibi_slopes is float32 [Hq]; softcap 0 is off; scale None is 1/sqrt(D).
    Returns o (same layout as q, head dim Dv), and lse (float32 [B, Hq, Sq] or [Hq, total]) when return_lse.
    """
    global _eager_mods, _grad_step
    if (bias is None and alibi_slopes is None and cu_seqlens_q is None and cu_seqlens_k is None
            and layout == "bshd" and not torch.compiler.is_compiling()):
        if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
            if _grad_step is None:  # imported once (the module imports this one)
                from ._grad_step import grad_step as _grad_step
            out = _grad_step(q, k, v, mods, causal, window, softcap, scale)
            if out is not None:
                return out if return_lse else out[0]
        elif mods is None:
            out = _eager_plain(q, k, v, causal, window, softcap, scale, return_lse)
            if out is not None:
                return out
        else:
            if _eager_mods is None:  # imported once (the module imports this one)
                from ._mods_op import eager_mods as _eager_mods
            o, lse = _eager_mods(q, k, v, mods, causal, window, softcap, scale, return_lse)
            return (o, lse) if return_lse else o
    if (mods is not None and bias is None and alibi_slopes is None and cu_seqlens_q is None
            and cu_seqlens_k is None):
        q2, k2, v2, rest, bhsd = _op_args_fixed(q, k, v, causal, window, softcap, scale, layout)
    else:
        q2, k2, v2, rest, bhsd = _op_args(q, k, v, causal, window, bias, alibi_slopes, softcap, scale, layout,
                                          cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    if mods is not None:
        from ._mods_op import forward_with_mods
        o, lse = forward_with_mods(q2, k2, v2, mods, rest)
    else:
        o, lse = _forward(q2, k2, v2, rest)
    if bhsd:
        o = o.transpose(1, 2)
    return (o, lse) if return_lse else o


# _op_args of a fixed-length call without bias or ALiBi, keyed by the raw arguments: the checks and the remaining op
# arguments of a known signature are taken from the first call (fa.attention with user code: host cost per call).
_OP_ARGS_CACHE: dict = {}


def _op_args_fixed(q, k, v, causal, window, softcap, scale, layout):
    key = (q.shape, k.shape, v.shape, q.stride(), k.stride(), v.stride(), q.dtype, q.device, causal,
           None if window is None else tuple(window), softcap, scale, layout)
    rest = _OP_ARGS_CACHE.get(key)
    if rest is None:
        out = _op_args(q, k, v, causal, window, None, None, softcap, scale, layout, None, None, None, None)
        if len(_OP_ARGS_CACHE) >= _PARAMS_CACHE_MAX:
            _OP_ARGS_CACHE.clear()
        _OP_ARGS_CACHE[key] = out[3]
        return out
    if layout == "bhsd":
        return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), rest, True
    return q, k, v, rest, False


# The eager, gradient-free call without bias, ALiBi, varlen or user code (inference loops): keyed by the raw
# arguments (shapes, strides, dtype, device, mask, softcap, scale, whether lse is wanted). The first call of a key
# goes through every check and the full path below; later calls allocate the outputs, copy the filled fa_params,
# set its five pointers and call fa_run on the current raw stream (the C library still validates every call).
def _eager_plain(q, k, v, causal, window, softcap, scale, return_lse):
    """fa.attention's inference call (eager, no gradient, plain): keyed by the raw arguments, so a known signature
    skips _op_args' checks; LSE only when asked (fa.prepare readies that kernel too). None: take the full path."""
    key = ("eager", q.shape, k.shape, v.shape, q.stride(), k.stride(), v.stride(), q.dtype, q.device, causal,
           tuple(window), softcap, scale, return_lse)
    checked = None
    if key not in _PARAMS_CACHE:  # a new signature: every check, before anything is allocated
        if q.stride(-1) != 1 or k.stride(-1) != 1 or v.stride(-1) != 1:
            return None
        checked = _op_args(q, k, v, causal, window, None, None, softcap, scale, "bshd", None, None, None, None)

    def params_of(o, lse):
        q2, k2, v2, rest, _ = checked or _op_args(q, k, v, causal, window, None, None, softcap, scale, "bshd", None,
                                                  None, None, None)
        return build_params(q2, k2, v2, o, lse, *rest)[0]

    o, lse = _cached_forward(key, q, k, v, return_lse, params_of)
    return (o, lse) if return_lse else o


def _problem(q, k, v, kwargs):
    q2, k2, v2, rest, _ = _op_args(q, k, v, kwargs.pop("causal", False), kwargs.pop("window", (-1, -1)),
                                   kwargs.pop("bias", None), kwargs.pop("alibi_slopes", None),
                                   kwargs.pop("softcap", 0.0), kwargs.pop("scale", None),
                                   kwargs.pop("layout", "bshd"), kwargs.pop("cu_seqlens_q", None),
                                   kwargs.pop("cu_seqlens_k", None), kwargs.pop("max_seqlen_q", None),
                                   kwargs.pop("max_seqlen_k", None))
    kwargs.pop("return_lse", None)
    mods = kwargs.pop("mods", None)
    if kwargs:
        raise TypeError(f"fa: unexpected keyword arguments {sorted(kwargs)}")
    q2, k2, v2 = last_dim_contiguous(q2), last_dim_contiguous(k2), last_dim_contiguous(v2)
    o_shape, lse_shape = output_shapes(q2, k2, v2, rest[2])
    o = torch.empty(o_shape, dtype=q2.dtype, device=q2.device)
    lse = torch.empty(lse_shape, dtype=torch.float32, device=q2.device)
    p, keep = build_params(q2, k2, v2, o, lse, *rest)
    if mods is not None:
        import ctypes
        m, keep_m = mods.to_struct(q2.device)
        p.mods = ctypes.pointer(m)
        keep += [m, *keep_m]
    return p, keep, (q2, k2, v2, o, rest)


def prepare(q: Tensor, k: Tensor, v: Tensor, *, backward: Optional[bool] = None, **kwargs) -> None:
    """Compile (and, by policy, tune) the kernels fa.attention(q, k, v, **kwargs) will use, so that it can be
    captured in a CUDA graph. Also prepares the backward when `backward` is True, or when it is None and grad mode
    is on and q, k or v requires grad. Same keyword arguments as fa.attention."""
    p, keep, (q2, k2, v2, o, rest) = _problem(q, k, v, dict(kwargs))
    ctx = default_context(_device_index(q2.device))
    with torch.cuda.device(q2.device):
        ctx.prepare(p)
        if rest[0] is None and rest[1] is None and rest[2] is None:
            # the eager inference path (with user code too) runs without LSE unless return_lse: its kernel too
            p_no_lse = S.Params.from_buffer_copy(bytes(p))
            p_no_lse.lse = None
            ctx.prepare(p_no_lse)
        if backward is None:
            backward = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
        if backward:
            dq, dk, dv = torch.empty_like(q2.contiguous()), torch.empty_like(k2.contiguous()), torch.empty_like(
                v2.contiguous())
            bp = build_bwd_params(p, torch.empty_like(o), dq, dk, dv, rest[2] is not None,
                                  torch.are_deterministic_algorithms_enabled())
            ctx.prepare_backward(bp)
    del keep


def is_supported(q: Tensor, k: Tensor, v: Tensor, **kwargs) -> Support:
    """A fa.Support: truthy when fa.attention(q, k, v, **kwargs) would run, else falsy with the reason in .reason."""
    p, keep, (q2, *_rest) = _problem(q, k, v, dict(kwargs))
    answer = default_context(_device_index(q2.device)).is_supported(p)
    del keep
    return answer


def problem_key(q: Tensor, k: Tensor, v: Tensor, **kwargs) -> str:
    """The canonical kernel key of the problem (no sequence lengths or batch)."""
    p, keep, (q2, *_rest) = _problem(q, k, v, dict(kwargs))
    key = default_context(_device_index(q2.device)).problem_key(p)
    del keep
    return key
