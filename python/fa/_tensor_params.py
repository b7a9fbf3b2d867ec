"""Filling fa_params / fa_bwd_params from torch tensors (no copies), and the checks made before (check_forward,
check_backward: fa.shape_rules over the tensors' shapes, then dtypes and devices).

Inputs are the op-level views: fixed length q [B, Sq, Hq, D], k [B, Sk, Hkv, D], v [B, Sk, Hkv, Dv] with any
element strides and a contiguous last dim; varlen q [Tq, Hq, D], k [Tk, Hkv, D], v [Tk, Hkv, Dv] with int32
cu_seqlens of batch+1 offsets (batch stride 0). Outputs are allocated here, contiguous: o like q with Dv,
lse float32 [B, Hq, Sq] or [Hq, Tq]. Bias is broadcast (expand, stride 0) to [B, Hq, Sq, Sk].
"""

from __future__ import annotations

import torch

from . import _lib
from . import _structs as S
from . import shape_rules as rules

_DTYPES = {torch.float16: S.FA_DTYPE_FP16, torch.bfloat16: S.FA_DTYPE_BF16, torch.float32: S.FA_DTYPE_FP32}
# FA_DTYPE_E4M3 / FA_DTYPE_E5M2 (a torch without float8 dtypes has none to pass): fp8 q / k / v (fa.attention with
# descales) and fp8 KV caches (fa.attention_with_kvcache)
FP8_DTYPES = {
    getattr(torch, n): c
    for n, c in (("float8_e4m3fn", S.FA_DTYPE_E4M3), ("float8_e5m2", S.FA_DTYPE_E5M2))
    if hasattr(torch, n)
}


def dtype_code(dtype: torch.dtype, fp8: bool = False) -> int:
    """The fa_dtype of q / k / v's dtype; fp8 ones only where the caller takes them (`fp8`)."""
    code = _DTYPES.get(dtype) or (FP8_DTYPES.get(dtype) if fp8 else None)
    if code is None:
        allowed = "float16, bfloat16, float32, float8_e4m3fn or float8_e5m2" if fp8 else "float16, bfloat16 or float32"
        raise TypeError(f"fa: q/k/v dtype must be {allowed}, got {dtype}")
    return code


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


def shape_of(t):
    """t.shape, or None for no tensor."""
    return None if t is None else t.shape


def check_devices(q, named, fp8: bool = False) -> None:
    """q is on a CUDA device with a dtype fa takes (fp8 ones with `fp8`), and every (name, tensor or None) of `named`
    on q's device."""
    dtype_code(q.dtype, fp8)
    if q.device.type != "cuda":
        rules.fail(f"q: device {q.device}; expected a CUDA device")
    for name, t in named:
        if t is not None:
            rules.match(name, "device", t.device, "q", "device", q.device)


def check_int32(named) -> None:
    """Every (name, tensor or None) of `named` is int32 (offsets, lengths, page tables)."""
    for name, t in named:
        if t is not None and t.dtype != torch.int32:
            rules.fail(f"{name}: dtype {t.dtype}; expected torch.int32")


def check_forward(q, k, v, rest, fp8: bool = False) -> None:
    """Every check of a forward's op-level views and the op's other arguments `rest` (bias, alibi_slopes,
    cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, ...; in varlen mode the maxima may still be None), made
    before anything is allocated: the shape rules (fa.shape_rules.attention), dtypes (fp8 ones with `fp8`) and
    devices."""
    bias, alibi_slopes, cu_q, cu_k, max_q, max_k = rest[:6]
    varlen = cu_q is not None or cu_k is not None
    rules.attention(
        q.shape,
        k.shape,
        v.shape,
        bias=shape_of(bias),
        alibi_slopes=shape_of(alibi_slopes),
        cu_seqlens_q=shape_of(cu_q),
        cu_seqlens_k=shape_of(cu_k),
        max_seqlen_q=max_q if varlen else None,
        max_seqlen_k=max_k if varlen else None,
    )
    rules.same_dtype(("q", q.dtype), ("k", k.dtype), ("v", v.dtype))
    check_devices(
        q,
        (
            ("k", k),
            ("v", v),
            ("bias", bias),
            ("alibi_slopes", alibi_slopes),
            ("cu_seqlens_q", cu_q),
            ("cu_seqlens_k", cu_k),
        ),
        fp8,
    )
    check_int32((("cu_seqlens_q", cu_q), ("cu_seqlens_k", cu_k)))


def check_backward(dout, q, k, v, o, lse, rest) -> None:
    """The backward's shape rules (fa.shape_rules.attention_backward: the forward's, o as the forward writes it,
    dout shaped as o, lse), then check_forward's dtypes and devices, o and dout in q's dtype, lse float32, all on
    q's device."""
    varlen = rest[2] is not None or rest[3] is not None
    rules.attention_backward(
        dout.shape,
        q.shape,
        k.shape,
        v.shape,
        o.shape,
        lse.shape,
        bias=shape_of(rest[0]),
        alibi_slopes=shape_of(rest[1]),
        cu_seqlens_q=shape_of(rest[2]),
        cu_seqlens_k=shape_of(rest[3]),
        max_seqlen_q=rest[4] if varlen else None,
        max_seqlen_k=rest[5] if varlen else None,
    )
    check_forward(q, k, v, rest)
    rules.same_dtype(("q", q.dtype), ("o", o.dtype), ("dout", dout.dtype))
    if lse.dtype != torch.float32:
        rules.fail(f"lse: dtype {lse.dtype}; expected torch.float32")
    check_devices(q, (("o", o), ("dout", dout), ("lse", lse)))


def problem_dims(q, k, v, cu_seqlens_q, max_seqlen_q, max_seqlen_k):
    """(batch, sq, sk, hq, hkv, d, dv) of the op-level views."""
    if cu_seqlens_q is not None:
        return (cu_seqlens_q.shape[0] - 1, max_seqlen_q, max_seqlen_k, q.shape[1], k.shape[1], q.shape[2], v.shape[2])
    return q.shape[0], q.shape[1], k.shape[1], q.shape[2], k.shape[2], q.shape[3], v.shape[3]


def output_shapes(q, k, v, cu_seqlens_q):
    """(o shape, lse shape); used by the real op and the fake (meta) implementation alike."""
    dv = v.shape[-1]
    if cu_seqlens_q is not None:
        return (q.shape[0], q.shape[1], dv), (q.shape[1], q.shape[0])
    return (q.shape[0], q.shape[1], q.shape[2], dv), (q.shape[0], q.shape[2], q.shape[1])


def build_params(
    q,
    k,
    v,
    o,
    lse,
    bias,
    alibi_slopes,
    cu_seqlens_q,
    cu_seqlens_k,
    max_seqlen_q: int,
    max_seqlen_k: int,
    mask: int,
    window_left: int,
    window_right: int,
    softcap: float,
    scale: float,
) -> tuple[S.Params, list]:
    """An initialised fa_params pointing at the tensors, and the list of tensors it keeps alive (the arguments
    passed check_forward, or the KV cache's check)."""
    varlen = cu_seqlens_q is not None
    batch, sq, sk, hq, hkv, d, dv = problem_dims(q, k, v, cu_seqlens_q, max_seqlen_q, max_seqlen_k)
    p = _lib.new_params()
    keep = [q, k, v, o, lse]
    p.dtype = dtype_code(q.dtype, fp8=True)  # (checked before: fp8 only where the caller takes it)
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
        bias = bias.expand(int(batch), int(hq), int(sq), int(sk))
        keep.append(bias)
        p.bias = _ptr(bias)
        p.bias_stride_batch, p.bias_stride_head, p.bias_stride_q, p.bias_stride_k = bias.stride()
    if alibi_slopes is not None:
        if alibi_slopes.dtype != torch.float32 or not alibi_slopes.is_contiguous():
            alibi_slopes = alibi_slopes.to(torch.float32).contiguous()
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
