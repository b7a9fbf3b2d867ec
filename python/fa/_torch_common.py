"""What the torch entry points share: the device's current stream, the forward's outputs, the filled fa_params kept
per signature and their launch, the generic forward and backward launches, an op pair's eager autograd.Function,
and fa.attention's arguments turned into the ops' arguments (op_args: every check first).

_torch_ops (fa.attention and the plain ops), _grad_step (the training step's kept entries), _mods_op (user code),
_kvcache and _merge import this module, which imports none of them (python/tests/test_import_graph.py).

Host cost: the kept params are keyed by everything their checks read (every shape, stride, dtype and device of the
tensors, the scalar arguments), so a call of a known signature skips the checks and copies a struct; a new signature
is checked (fa.shape_rules, dtypes, devices) before anything is allocated.
"""

import ctypes

import torch

from . import _structs as S
from . import shape_rules as rules
from ._tensor_params import (
    build_bwd_params,
    build_params,
    check_backward,
    check_forward,
    last_dim_contiguous,
    output_shapes,
)
from .context import default_context
from .mods import contents_epoch

_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # the handle without a Stream object


def device_index(device: torch.device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()


def stream_of(index: int) -> int:
    """The current stream's handle on device `index`."""
    return _raw_stream(index) if _raw_stream is not None else torch.cuda.current_stream(index).cuda_stream


def stream(device: torch.device) -> int:
    return stream_of(device_index(device))


def signature(q, k, v) -> tuple:
    """The part of a kept entry's key that q, k and v give: shapes, strides, dtypes and devices (what the checks
    of a new signature read)."""
    return (
        q.shape,
        k.shape,
        v.shape,
        q.stride(),
        k.stride(),
        v.stride(),
        q.dtype,
        k.dtype,
        v.dtype,
        q.device,
        k.get_device(),
        v.get_device(),
    )


# ---- the kept forward params ----------------------------------------------------------------------------------------
# A fixed-length forward (no bias, ALiBi or varlen) keeps one filled fa_params per key: a call of a known key
# allocates the outputs, copies the params, sets the data pointers and calls fa_run on the current raw stream. No
# `torch.cuda.device` switch: fa_run binds its own context and the stream names the device.
PARAMS_CACHE_MAX = 256
PARAMS_CACHE: dict = {}  # key -> (filled params' bytes, device index); eager_plain asks whether a key is kept


def forward_outputs(q, v, want_lse: bool):
    """(o, lse or None) of a fixed-length bshd forward, uninitialized."""
    o = torch.empty((q.shape[0], q.shape[1], q.shape[2], v.shape[3]), dtype=q.dtype, device=q.device)
    lse = torch.empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32, device=q.device) if want_lse else None
    return o, lse


def cached_forward(key, q, k, v, want_lse: bool, rest_of, mods=None):
    """(o, lse or None) of the fixed-length forward of op-level views q, k, v (last dim contiguous) kept under `key`
    (signature(q, k, v) and every other argument the params hold). A new key: rest_of() gives the op's other
    arguments, every check runs before anything is allocated, and the filled params are kept. `mods`: an fa_mods
    (S.Mods) the call points at (user code; the key then holds everything of the params but the code's own struct)."""
    entry = PARAMS_CACHE.get(key)
    if entry is None:
        rest = rest_of()
        check_forward(q, k, v, rest)
        o, lse = forward_outputs(q, v, want_lse)
        if o.numel() == 0:
            if lse is not None:
                lse.fill_(float("-inf"))
            return o, lse
        p = build_params(q, k, v, o, lse, *rest)[0]
        if len(PARAMS_CACHE) >= PARAMS_CACHE_MAX:
            PARAMS_CACHE.clear()
        entry = (bytes(p), device_index(q.device))
        PARAMS_CACHE[key] = entry
    else:
        o, lse = forward_outputs(q, v, want_lse)
    run_filled(entry[0], entry[1], q, k, v, o, lse, mods)
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
    default_context(device).run(p, stream_of(device))


def fill_and_run(q, k, v, o, lse, rest, m, device) -> bytes:
    """An entry's first call: fa_params filled from the op arguments `rest` (every check made before), pointing at
    the entry's fa_mods `m` (or None), run on the current stream of device index `device`; returns its bytes."""
    p, held = build_params(q, k, v, o, lse, *rest)
    if m is not None:
        p.mods = ctypes.pointer(m)
    default_context(device).run(p, stream_of(device))
    del held
    return bytes(p)


# ---- the generic launches -------------------------------------------------------------------------------------------
def run_forward(q, k, v, rest, attach=None):
    """(o, lse) of the op-level views, every check first: outputs allocated, fa_params filled (then
    `attach(params)` may add to it and return what it must keep alive), fa_run on the current stream."""
    check_forward(q, k, v, rest)
    o_shape, lse_shape = output_shapes(q, k, v, rest[2])
    o = torch.empty(o_shape, dtype=q.dtype, device=q.device)
    lse = torch.empty(lse_shape, dtype=torch.float32, device=q.device)
    if o.numel() == 0:
        lse.fill_(float("-inf"))
        return o, lse
    p, keep = build_params(q, k, v, o, lse, *rest)
    keep_attached = attach(p) if attach is not None else None
    with torch.cuda.device(q.device):
        default_context(device_index(q.device)).run(p, stream(q.device))
    del keep, keep_attached
    return o, lse


# The backward of a fixed-length call without bias or ALiBi keeps its filled fa_params and fa_bwd_params per key
# (every shape, stride, dtype and device of the six tensors, the scalar arguments, deterministic); a call of a known
# key copies both, sets the data pointers (and the user code's fa_mods through `attach`) and calls fa_run_backward
# on the current raw stream, without a device switch.
_BWD_CACHE: dict = {}


def run_backward(dout, q, k, v, o, lse, rest, deterministic: bool, attach=None, dsinks=None):
    """(dq, dk, dv) of the op-level views, every check first (for a kept key: when it was made): gradients
    allocated, fa_params filled from the forward's arguments `rest` (then `attach(params)` may add to it, as in
    run_forward), fa_run_backward on the current stream. `dsinks`: float32 [Hq] the backward writes the sinks'
    gradient into (attach then sets the forward's sinks)."""
    q, k, v = last_dim_contiguous(q), last_dim_contiguous(k), last_dim_contiguous(v)
    o, dout = last_dim_contiguous(o), last_dim_contiguous(dout)
    key = None
    if rest[0] is None and rest[1] is None and rest[2] is None and rest[3] is None:
        key = signature(q, k, v) + (
            o.shape,
            o.stride(),
            o.dtype,
            o.get_device(),
            dout.shape,
            dout.stride(),
            dout.dtype,
            dout.get_device(),
            lse.shape,
            lse.dtype,
            lse.get_device(),
            rest[4:],
            deterministic,
            dsinks is not None,  # a kept entry with sinks never serves a call without (its params point at them)
        )
        entry = _BWD_CACHE.get(key)
        if entry is None:
            check_backward(dout, q, k, v, o, lse, rest)
    else:
        entry = None
        check_backward(dout, q, k, v, o, lse, rest)
    dq = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    dk = torch.empty(k.shape, dtype=k.dtype, device=k.device)
    dv = torch.empty(v.shape, dtype=v.dtype, device=v.device)
    if q.numel() == 0 or k.numel() == 0:  # no query, or no key: every o is 0, so is the sinks' gradient
        if dsinks is not None:
            dsinks.zero_()
        return dq.zero_(), dk.zero_(), dv.zero_()
    if key is None:
        p, keep = build_params(q, k, v, o, lse, *rest)
        keep_attached = attach(p) if attach is not None else None
        bp = build_bwd_params(p, dout, dq, dk, dv, rest[2] is not None, deterministic)
        if dsinks is not None:
            bp.dsinks = dsinks.data_ptr()
        with torch.cuda.device(q.device):
            default_context(device_index(q.device)).run_backward(bp, stream(q.device))
        del keep, keep_attached
        return dq, dk, dv
    if entry is None:
        p, _ = build_params(q, k, v, o, lse, *rest)
        bp = build_bwd_params(p, dout, dq, dk, dv, False, deterministic)
        if len(_BWD_CACHE) >= PARAMS_CACHE_MAX:
            _BWD_CACHE.clear()
        entry = (bytes(p), bytes(bp), device_index(q.device))
        _BWD_CACHE[key] = entry
    fblob, bblob, device = entry
    p = S.Params.from_buffer_copy(fblob)
    p.q, p.k, p.v, p.o, p.lse = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr()
    keep_attached = attach(p) if attach is not None else None
    bp = S.BwdParams.from_buffer_copy(bblob)
    bp.fwd = ctypes.pointer(p)
    bp.dout, bp.dq, bp.dk, bp.dv = dout.data_ptr(), dq.data_ptr(), dk.data_ptr(), dv.data_ptr()
    if dsinks is not None:
        bp.dsinks = dsinks.data_ptr()
    default_context(device).run_backward(bp, stream_of(device))
    del keep_attached
    return dq, dk, dv


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


# ---- fa.attention's arguments -> the ops' arguments -----------------------------------------------------------------
def mask_args(causal: bool, window) -> tuple:
    """(fa_mask, window_left, window_right) of fa.attention's causal and window=(left, right)."""
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


def op_args(
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
    fp8=False,
):
    """(op-level q, k, v, the remaining op arguments, bhsd) of fa.attention's arguments, every check made (fp8
    q / k / v taken with `fp8`)."""
    if layout not in ("bshd", "bhsd"):
        raise ValueError(f'fa: layout must be "bshd" or "bhsd", got {layout!r}')
    bhsd = layout == "bhsd"
    varlen = cu_seqlens_q is not None or cu_seqlens_k is not None
    if bhsd:
        if varlen:
            raise ValueError('fa: layout="bhsd" is for fixed-length 4-D tensors; varlen ones are [total, heads, dim]')
        for name, t in (("q", q), ("k", k), ("v", v)):
            rules.rank(name, t.shape, ("batch", "heads", "seqlen", "head dim"))
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    given = (bias, alibi_slopes, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    check_forward(q, k, v, given, fp8)
    if varlen:
        if max_seqlen_q is None:
            max_seqlen_q = int((cu_seqlens_q[1:] - cu_seqlens_q[:-1]).max().item())
        if max_seqlen_k is None:
            max_seqlen_k = int((cu_seqlens_k[1:] - cu_seqlens_k[:-1]).max().item())
        if bias is not None and None in given[4:]:  # the bias against the maxima now known
            check_forward(q, k, v, given[:4] + (max_seqlen_q, max_seqlen_k), fp8)
    else:
        max_seqlen_q, max_seqlen_k = 0, 0
    mask, wl, wr = mask_args(causal, window)
    if softcap is None:
        softcap = 0.0
    if scale is None:
        scale = 0.0
    rest = (
        bias,
        alibi_slopes,
        cu_seqlens_q,
        cu_seqlens_k,
        max_seqlen_q,
        max_seqlen_k,
        mask,
        wl,
        wr,
        float(softcap),
        float(scale),
    )
    return q, k, v, rest, bhsd


# op_args of a fixed-length call without bias or ALiBi, keyed by the raw arguments: the checks and the remaining op
# arguments of a known signature are taken from the first call (fa.attention's generic eager path: host cost).
_OP_ARGS_CACHE: dict = {}


def op_args_fixed(q, k, v, causal, window, softcap, scale, layout):
    key = signature(q, k, v) + (causal, None if window is None else tuple(window), softcap, scale, layout)
    rest = _OP_ARGS_CACHE.get(key)
    if rest is None:
        out = op_args(q, k, v, causal, window, None, None, softcap, scale, layout, None, None, None, None)
        if len(_OP_ARGS_CACHE) >= PARAMS_CACHE_MAX:
            _OP_ARGS_CACHE.clear()
        _OP_ARGS_CACHE[key] = out[3]
        return out
    if layout == "bhsd":
        return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), rest, True
    return q, k, v, rest, False


def call_key(q, k, v, mods, causal, window, softcap, scale):
    """(key, epoch) of an eager fixed-length bshd call: the raw arguments (signature(q, k, v), mask, softcap,
    scale) and with user code its bodies, scalars and each buffer's address, dtype, shape and strides; the buffers'
    contents epoch (mods.contents_epoch; 0 without a mask_mod). Keys the training step's entries (_grad_step) and
    the inference call's (_mods_op.eager_mods)."""
    key = signature(q, k, v) + (causal, None if window is None else tuple(window), softcap, scale)
    if mods is None:
        return key, 0
    bufs = mods.buffers
    key += (
        mods.mask_mod,
        mods.score_mod,
        mods.score_mod_grad,
        mods.depends,
        tuple(mods.scalars),
        tuple(mods.iscalars),
        tuple([(t.data_ptr(), t.dtype, t.shape, t.stride()) for t in bufs]),
    )
    return key, contents_epoch(bufs) if mods.mask_mod is not None else 0
