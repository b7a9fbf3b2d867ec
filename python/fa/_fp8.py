"""fa.attention over fp8 q / k / v (torch.float8_e4m3fn or torch.float8_e5m2, all three alike): the Hopper fp8
forward (sm_90; include/fa/fa.h, "FP8 inputs").

Each of q, k, v is read as its codes times its descale (FlashAttention 3's descale_q / descale_k / descale_v): None
(1), a float, a float32 tensor of one factor (() or (1,)), or one factor per (batch, KV head) ((B, Hkv)); the KV head
of a query head is its GQA group's. The output has out_dtype (torch.bfloat16 by default, or torch.float16), the LSE
is float32. Inference only (no autograd), no bias or user code; fixed length (bshd / bhsd) or varlen as
fa.attention. The op fa::attention_fp8 has a fake (meta) implementation, so torch.compile traces it. fa.prepare,
fa.is_supported and fa.problem_key take the same arguments (fp8_problem: the call's fa_params, checked alike).
"""

# No `from __future__ import annotations` here: torch.library.custom_op reads the annotations as types.
from typing import Optional, Tuple

import torch
from torch import Tensor

from . import _structs as S
from . import shape_rules as rules
from ._tensor_params import FP8_DTYPES, build_params, check_devices, last_dim_contiguous, output_shapes, shape_of
from ._torch_common import device_index, op_args, stream
from .context import default_context

_OUT_DTYPES = {torch.bfloat16: S.FA_DTYPE_BF16, torch.float16: S.FA_DTYPE_FP16}


def _descale_tensor(name, d, device):
    """A descale as a float32 tensor on `device` (a float: one factor), or None."""
    if d is None:
        return None
    if isinstance(d, (int, float)):
        return torch.full((1,), float(d), dtype=torch.float32, device=device)
    if not isinstance(d, Tensor):
        raise TypeError(f"fa: {name} must be None, a float or a float32 tensor, got {type(d).__name__}")
    return d.to(torch.float32).contiguous() if d.dtype != torch.float32 or not d.is_contiguous() else d


def _set_descale(p, name, d, keep):
    """fa_params' descale `name` (pointer, batch / head strides in elements) from a checked tensor or None."""
    if d is None:
        return
    setattr(p, name, d.data_ptr())
    per = d.dim() == 2
    setattr(p, f"{name}_stride_batch", int(d.stride(0)) if per else 0)
    setattr(p, f"{name}_stride_head", int(d.stride(1)) if per else 0)
    keep.append(d)


def _outputs(q, k, v, cu_seqlens_q, out_dtype):
    """(o of fa_dtype out_dtype, float32 lse) for op-level q, k, v."""
    o_shape, lse_shape = output_shapes(q, k, v, cu_seqlens_q)
    dtype = torch.bfloat16 if out_dtype == S.FA_DTYPE_BF16 else torch.float16
    return (
        torch.empty(o_shape, dtype=dtype, device=q.device),
        torch.empty(lse_shape, dtype=torch.float32, device=q.device),
    )


def _fp8_params(q, k, v, o, lse, alibi_slopes, cu_q, cu_k, max_q, max_k, mask, wl, wr, softcap, scale, dq, dk, dv, out):
    """(fa_params, kept tensors) of the op's checked arguments over the outputs o, lse."""
    p, keep = build_params(q, k, v, o, lse, None, alibi_slopes, cu_q, cu_k, max_q, max_k, mask, wl, wr, softcap, scale)
    p.o_dtype = int(out)
    for name, d in (("descale_q", dq), ("descale_k", dk), ("descale_v", dv)):
        _set_descale(p, name, d, keep)
    return p, keep


def _fp8_impl(
    q: Tensor,
    k: Tensor,
    v: Tensor,
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
    descale_q: Optional[Tensor],
    descale_k: Optional[Tensor],
    descale_v: Optional[Tensor],
    out_dtype: int,
) -> Tuple[Tensor, Tensor]:
    """fa::attention_fp8: (o, lse) of checked op-level views (bshd or varlen), o of fa_dtype out_dtype."""
    q, k, v = last_dim_contiguous(q), last_dim_contiguous(k), last_dim_contiguous(v)
    o, lse = _outputs(q, k, v, cu_seqlens_q, out_dtype)
    if o.numel() == 0:
        lse.fill_(float("-inf"))
        return o, lse
    p, keep = _fp8_params(
        q,
        k,
        v,
        o,
        lse,
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
        descale_q,
        descale_k,
        descale_v,
        out_dtype,
    )
    with torch.cuda.device(q.device):
        default_context(device_index(q.device)).run(p, stream(q.device))
    del keep
    return o, lse


attention_fp8_op = torch.library.custom_op("fa::attention_fp8", mutates_args=())(_fp8_impl)


@attention_fp8_op.register_fake
def _attention_fp8_fake(
    q,
    k,
    v,
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
    descale_q,
    descale_k,
    descale_v,
    out_dtype,
):
    o_shape, lse_shape = output_shapes(q, k, v, cu_seqlens_q)
    dtype = torch.bfloat16 if out_dtype == S.FA_DTYPE_BF16 else torch.float16
    return q.new_empty(o_shape, dtype=dtype), q.new_empty(lse_shape, dtype=torch.float32)


def checked_call(q, k, v, args: dict):
    """(the op's arguments, bhsd) of fa.attention's fp8 call: `args` holds fa.attention's keyword arguments; every
    check made (fa.attention, fa.prepare, fa.is_supported and fa.problem_key share it)."""
    if args["sinks"] is not None:
        rules.fail(f"sinks: given with fp8 q ({q.dtype}); expected None (the fp8 forward has no sinks yet)")
    if args["bias"] is not None or args["mods"] is not None:
        rules.fail("q: fp8 (" + str(q.dtype) + ") takes no bias and no mods; expected bias=None, mods=None")
    if q.requires_grad or k.requires_grad or v.requires_grad:
        rules.fail("q: fp8 attention is inference only; expected q, k and v without requires_grad")
    out_dtype = args["out_dtype"] if args["out_dtype"] is not None else torch.bfloat16
    if out_dtype not in _OUT_DTYPES:
        rules.fail(f"out_dtype: {out_dtype} with fp8 q / k / v; expected torch.bfloat16 or torch.float16")
    q2, k2, v2, rest, bhsd = op_args(
        q,
        k,
        v,
        args["causal"],
        args["window"],
        None,
        args["alibi_slopes"],
        args["softcap"],
        args["scale"],
        args["layout"],
        args["cu_seqlens_q"],
        args["cu_seqlens_k"],
        args["max_seqlen_q"],
        args["max_seqlen_k"],
        fp8=True,
    )
    if q2.dtype not in FP8_DTYPES:
        rules.fail(f"q: dtype {q2.dtype}; expected torch.float8_e4m3fn or torch.float8_e5m2")
    names = ("descale_q", "descale_k", "descale_v")
    ds = [_descale_tensor(n, args[n], q2.device) for n in names]
    varlen = rest[2] is not None
    batch = int(rest[2].shape[0]) - 1 if varlen else int(q2.shape[0])
    rules.descales(*(shape_of(d) for d in ds), batch, int(k2.shape[-2]))
    check_devices(q2, tuple(zip(names, ds)), fp8=True)
    return (q2, k2, v2, *rest[1:], *ds, _OUT_DTYPES[out_dtype]), bhsd


def attention_fp8(q, k, v, args: dict):
    """fa.attention's fp8 path: `args` holds fa.attention's keyword arguments. Returns o (q's layout, head dim Dv) and
    the LSE, every check made first."""
    call, bhsd = checked_call(q, k, v, args)
    o, lse = torch.ops.fa.attention_fp8(*call) if torch.compiler.is_compiling() else _fp8_impl(*call)
    return (o.transpose(1, 2) if bhsd else o), lse


def fp8_problem(q, k, v, args: dict):
    """(fa_params, kept tensors, op-level q) of fa.attention(q, k, v, **args) over fp8 q / k / v, as the call would
    fill them (outputs allocated, not run): for fa.prepare, fa.is_supported and fa.problem_key."""
    call, _ = checked_call(q, k, v, args)
    q2, k2, v2 = (last_dim_contiguous(t) for t in call[:3])
    o, lse = _outputs(q2, k2, v2, call[4], call[-1])
    p, keep = _fp8_params(q2, k2, v2, o, lse, *call[3:])
    keep += [o, lse]
    return p, keep, q2
