"""fa.attention's eager call under autograd (a training step): fixed length, bshd, no bias, ALiBi or varlen, with
or without user code (fa.Mods).

Host cost: the generic eager path (_torch_ops._EagerAttention, _mods_op._EagerModsAttention) passes the op's
arguments through autograd.Function.apply, rebuilds its keys and the user code's fa_mods in the forward and again in
the backward, and saves nine tensors. Here one entry per signature of the raw arguments (shapes, strides, dtype,
device, mask, softcap, scale; with user code its bodies, scalars and each buffer's address, dtype, shape and strides)
holds the filled fa_params of the forward (its `mods` pointing at the entry's own fa_mods) and the filled
fa_bwd_params per (dO strides, deterministic); a call of a known signature allocates, copies a struct, sets the data
pointers and calls the library, in the forward and in the backward. The entry is made with every check of the full
path (op_args_fixed; a score_mod without its derivative is refused), and a buffer whose contents changed (a new
epoch, mods.contents_epoch) makes a new one, as the inference path does (_mods_op.eager_mods). Problems the entry
cannot describe (a last dim with a stride, an empty tensor) return None: the caller takes the generic path.
"""

import ctypes

import torch

from . import _structs as S
from . import shape_rules as rules
from ._tensor_params import build_bwd_params, last_dim_contiguous
from ._torch_common import call_key, device_index, fill_and_run, forward_outputs, op_args_fixed, run_filled, stream_of
from .context import default_context
from .mods import _STRUCTS_MAX, contents_epoch, copy_struct, filled_struct


class _Entry:
    """One signature: the op arguments (`rest`), the filled forward params once the first call ran (`fwd`, bytes),
    the filled backward params per (dO strides, deterministic) (`bwd`), the device index, and with user code the
    entry's own fa_mods (`m`, which `fwd` points at), the code's bytes it points at and the buffers' epoch."""

    __slots__ = ("rest", "fwd", "bwd", "device", "m", "code", "epoch")

    def __init__(self, rest, device, m, code, epoch):
        self.rest, self.fwd, self.bwd, self.device = rest, None, {}, device
        self.m, self.code, self.epoch = m, code, epoch


class _Step(torch.autograd.Function):
    """o, lse = attention(q, k, v) of an entry; `bufs`: the user code's buffers, saved for the backward as the generic
    path saves them (an in-place write between the forward and the backward is refused by autograd's version check;
    one behind the version counter, followed by mods.changed(), gives the backward a new epoch)."""

    @staticmethod
    def forward(ctx, q, k, v, ent, bufs):
        o, lse = forward_outputs(q, v, True)
        if ent.fwd is None:  # the entry's first call (every check was made with the entry)
            ent.fwd = fill_and_run(q, k, v, o, lse, ent.rest, ent.m, ent.device)
        else:
            run_filled(ent.fwd, ent.device, q, k, v, o, lse)
        ctx.save_for_backward(q, k, v, o, lse, *bufs)
        ctx.fa_entry = ent
        ctx.set_materialize_grads(False)  # no zero-filled tensor for lse's (never used) gradient
        ctx.mark_non_differentiable(lse)
        return o, lse

    @staticmethod
    def backward(ctx, dout, _dlse):
        if dout is None:  # o took no part in the loss
            return None, None, None, None, None
        q, k, v, o, lse, *bufs = ctx.saved_tensors
        rules.grad_output(dout.shape, o.shape)
        ent = ctx.fa_entry
        dout = last_dim_contiguous(dout)
        dq = torch.empty(q.shape, dtype=q.dtype, device=q.device)
        dk = torch.empty(k.shape, dtype=k.dtype, device=k.device)
        dv = torch.empty(v.shape, dtype=v.dtype, device=v.device)
        p = S.Params.from_buffer_copy(ent.fwd)
        p.q, p.k, p.v, p.o, p.lse = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr()
        m = None
        if ent.m is not None and ent.epoch != 0:
            epoch = contents_epoch(bufs)
            if epoch != ent.epoch:  # mods.changed() since the forward: the backward classifies afresh
                m = S.Mods.from_buffer_copy(bytes(ent.m))
                m.mask_epoch = epoch
                p.mods = ctypes.pointer(m)
        det = torch.are_deterministic_algorithms_enabled()
        bkey = (dout.stride(), det)
        blob = ent.bwd.get(bkey)
        if blob is None:
            blob = bytes(build_bwd_params(p, dout, dq, dk, dv, False, det))
            ent.bwd[bkey] = blob
        bp = S.BwdParams.from_buffer_copy(blob)
        bp.fwd = ctypes.pointer(p)
        bp.dout, bp.dq, bp.dk, bp.dv = dout.data_ptr(), dq.data_ptr(), dk.data_ptr(), dv.data_ptr()
        default_context(ent.device).run_backward(bp, stream_of(ent.device))
        del m
        return dq, dk, dv, None, None


_ENTRIES: dict = {}


def grad_step(q, k, v, mods, causal, window, softcap, scale, want_lse=True):
    """(o, lse) of fa.attention(q, k, v, mods=mods, ...) under autograd (bshd, fixed length, no bias or ALiBi), or
    None when the generic path must run it. LSE is written whatever want_lse says (the backward reads it)."""
    key, epoch = call_key(q, k, v, mods, causal, window, softcap, scale)
    ent = _ENTRIES.get(key)
    if ent is None or ent.epoch != epoch:
        ent = _new_entry(q, k, v, mods, causal, window, softcap, scale, epoch)
        if ent is None:
            return None
        if len(_ENTRIES) >= _STRUCTS_MAX:
            _ENTRIES.clear()
        _ENTRIES[key] = ent
    return _Step.apply(q, k, v, ent, () if mods is None else tuple(mods.buffers))


def _new_entry(q, k, v, mods, causal, window, softcap, scale, epoch):
    """A signature's entry after every check of the full path; None for what only the generic path runs."""
    if mods is not None and mods.score_mod is not None and mods.score_mod_grad is None:
        raise ValueError(
            "fa: the backward of a score_mod needs its derivative: give fa.Mods(score_mod_grad=...), "
            "the body of d score_mod / d s at the same s (include/fa/fa.h, fa_mods)"
        )
    if q.stride(-1) != 1 or k.stride(-1) != 1 or v.stride(-1) != 1:
        return None
    q2, k2, v2, rest, _ = op_args_fixed(q, k, v, causal, window, softcap, scale, "bshd")
    if q2.numel() == 0 or k2.numel() == 0:
        return None
    m = code = None
    if mods is not None:
        filled = filled_struct(
            mods.mask_mod,
            mods.score_mod,
            mods.score_mod_grad,
            mods.buffers,
            mods.scalars,
            mods.iscalars,
            mods.depends,
            q2.device,
        )
        m, code = copy_struct(filled, epoch), filled[1]
    return _Entry(rest, device_index(q2.device), m, code, epoch)
