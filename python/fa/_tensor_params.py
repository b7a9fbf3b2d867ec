"""Filling fa_params / fa_bwd_params from torch tensors (no copies).

Inputs are the op-level views: fixed length q [B, Sq, Hq, D], k [B, Sk, Hkv, D], v [B, Sk, Hkv, Dv] with any
element strides and a contiguous last dim; varlen q [Tq, Hq, D], k [Tk, Hkv, D], v [Tk, Hkv, Dv] with int32
cu_seqlens of batch+1 offsets (batch stride 0). Outputs are allocated here, contiguous: o like q with Dv,
lse float32 [B, Hq, Sq] or [Hq, Tq]. Bias is broadcast (expand, stride 0) to [B, Hq, Sq, Sk].
"""

from __future__ import annotations

import torch

from . import _lib
from . import _structs as S

_DTYPES = {torch.float16: S.FA_DTYPE_FP16, torch.bfloat16: S.FA_DTYPE_BF16, torch.float32: S.FA_DTYPE_FP32}


def dtype_code(dtype: torch.dtype) -> int:
    try:
        return _DTYPES[dtype]
    except KeyError:
        raise TypeError(f"fa: q/k/v dtype must be float16, bfloat16 or float32, got {dtype}") from None


def last_dim_contiguous(t: torch.Tensor) -> torch.Tensor:
    return t if t.stride(-1) == 1 or t.size(-1) == 1 else t.contiguous()


def _ptr(t: torch.Tensor | None) -> int | None:
    return None if t is None else (t.data_ptr() or None)


def _bsh_strides(t: torch.Tensor, varlen: bool) -> tuple[int, int, int]:
    if varlen:
        return 0, t.stride(0), t.stride(1)
    return t.stride(0), t.stride(1), t.stride(2)


def _set_strided(p, name: str, t: torch.Tensor, varlen: bool) -> None:
    sb, ss, sh = _bsh_strides(t, varlen)
    setattr(p, name, _ptr(t))
    setattr(p, f"{name}_stride_batch", sb)
    setattr(p, f"{name}_stride_seq", ss)
    setattr(p, f"{name}_stride_head", sh)


def check_like_q(q, named, rank: int, want: str) -> None:
    """Every (name, tensor) of `named` has `rank` dims, q's dtype and q's device; q is on a CUDA device with a
    dtype fa takes."""
    for name, t in named:
        if t.dim() != rank:
            raise ValueError(f"fa: {name} must be {rank}-D {want}, got shape {tuple(t.shape)}")
        if t.dtype != q.dtype:
            raise TypeError(f"fa: {name}.dtype {t.dtype} differs from q.dtype {q.dtype}")
        if t.device != q.device:
            raise ValueError(f"fa: {name} is on {t.device}, q on {q.device}")
    dtype_code(q.dtype)
    if q.device.type != "cuda":
        raise ValueError(f"fa: tensors must be on a CUDA device, got {q.device}")


def check_inputs(q, k, v, cu_seqlens_q, cu_seqlens_k) -> bool:
    """Shape/dtype/device consistency that the C library cannot see; returns varlen."""
    varlen = cu_seqlens_q is not None or cu_seqlens_k is not None
    if varlen and (cu_seqlens_q is None or cu_seqlens_k is None):
        raise ValueError("fa: cu_seqlens_q and cu_seqlens_k must be given together")
    check_like_q(q, (("q", q), ("k", k), ("v", v)), 3 if varlen else 4,
                 "[total, heads, head_dim]" if varlen else "[batch, seqlen, heads, head_dim]")
    if varlen:
        for name, t in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
            if t.dtype != torch.int32 or t.dim() != 1 or t.device != q.device:
                raise ValueError(f"fa: {name} must be a 1-D int32 tensor on {q.device}, got {t.dtype} "
                                 f"{tuple(t.shape)} on {t.device}")
    return varlen


def problem_dims(q, k, v, cu_seqlens_q, max_seqlen_q, max_seqlen_k):
    """(batch, sq, sk, hq, hkv, d, dv) of the op-level views."""
    if cu_seqlens_q is not None:
        return (cu_seqlens_q.shape[0] - 1, max_seqlen_q, max_seqlen_k, q.shape[1], k.shape[1], q.shape[2],
                v.shape[2])
    return q.shape[0], q.shape[1], k.shape[1], q.shape[2], k.shape[2], q.shape[3], v.shape[3]


def output_shapes(q, k, v, cu_seqlens_q):
    """(o shape, lse shape); used by the real op and the fake (meta) implementation alike."""
    dv = v.shape[-1]
    if cu_seqlens_q is not None:
        return (q.shape[0], q.shape[1], dv), (q.shape[1], q.shape[0])
    return (q.shape[0], q.shape[1], q.shape[2], dv), (q.shape[0], q.shape[2], q.shape[1])


def build_params(q, k, v, o, lse, bias, alibi_slopes, cu_seqlens_q, cu_seqlens_k, max_seqlen_q: int,
                 max_seqlen_k: int, mask: int, window_left: int, window_right: int, softcap: float,
                 scale: float) -> tuple[S.Params, list]:
    """An initialised fa_params pointing at the tensors, and the list of tensors it keeps alive."""
    varlen = cu_seqlens_q is not None
    batch, sq, sk, hq, hkv, d, dv = problem_dims(q, k, v, cu_seqlens_q, max_seqlen_q, max_seqlen_k)
    p = _lib.new_params()
    keep = [q, k, v, o, lse]
    p.dtype = dtype_code(q.dtype)
    p.batch, p.seqlen_q, p.seqlen_k = int(batch), int(sq), int(sk)
    p.heads_q, p.heads_kv = int(hq), int(hkv)
    p.head_dim, p.head_dim_v = int(d), int(dv)
    _set_strided(p, "q", q, varlen)
    _set_strided(p, "k", k, varlen)
    _set_strided(p, "v", v, varlen)
    _set_strided(p, "o", o, varlen)
    if varlen:
        p.cu_seqlens_q, p.cu_seqlens_k = _ptr(cu_seqlens_q), _ptr(cu_seqlens_k)
        p.max_seqlen_q, p.max_seqlen_k = int(max_seqlen_q), int(max_seqlen_k)
        p.total_q, p.total_k = int(q.shape[0]), int(k.shape[0])
        keep += [cu_seqlens_q, cu_seqlens_k]
    p.mask, p.window_left, p.window_right = int(mask), int(window_left), int(window_right)
    if bias is not None:
        if bias.dtype != q.dtype:
            bias = bias.to(q.dtype)
        if bias.dim() > 4:
            raise ValueError(f"fa: bias must broadcast to [batch, heads_q, seqlen_q, seqlen_k], got {tuple(bias.shape)}")
        bias = bias.expand(int(batch), int(hq), int(sq), int(sk))
        keep.append(bias)
        p.bias = _ptr(bias)
        p.bias_stride_batch, p.bias_stride_head, p.bias_stride_q, p.bias_stride_k = bias.stride()
    if alibi_slopes is not None:
        if alibi_slopes.dtype != torch.float32 or not alibi_slopes.is_contiguous():
            alibi_slopes = alibi_slopes.to(torch.float32).contiguous()
        if alibi_slopes.numel() != hq:
            raise ValueError(f"fa: alibi_slopes must hold heads_q={hq} float32 values, got {tuple(alibi_slopes.shape)}")
        keep.append(alibi_slopes)
        p.alibi_slopes = _ptr(alibi_slopes)
    p.softcap = float(softcap)
    p.softmax_scale = float(scale)
    p.lse = _ptr(lse)
    return p, keep


def build_bwd_params(fwd: S.Params, dout, dq, dk, dv, varlen: bool, deterministic: bool) -> S.BwdParams:
    import ctypes
    bp = _lib.new_bwd_params()
    bp.fwd = ctypes.pointer(fwd)
    _set_strided(bp, "dout", dout, varlen)
    _set_strided(bp, "dq", dq, varlen)
    _set_strided(bp, "dk", dk, varlen)
    _set_strided(bp, "dv", dv, varlen)
    bp.deterministic = 1 if deterministic else 0
    return bp
