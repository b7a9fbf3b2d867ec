"""fa.merge_attention: the merge of partial attention results over disjoint key sets (fa_merge_partials).

Given, for the same queries, outputs o_s and natural-log LSEs lse_s computed over disjoint sets of keys, the merge
gives what one pass over all the keys gives:  lse = log(sum_s exp(lse_s)),  o = sum_s exp(lse_s - lse) o_s  (every
lse_s = -inf: o = 0, lse = -inf; never NaN). CUDA tensors go through the library (float32 parts, the split-KV
combine kernel); CPU tensors through the same formula in torch (the reference the ring's CPU path uses).
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch
from torch import Tensor

from . import _lib
from . import shape_rules as rules
from ._tensor_params import dtype_code
from ._torch_common import device_index, stream_of
from .context import default_context


def _part_dtype(t: Tensor) -> torch.dtype:
    """float32 parts, float64 kept on the CPU (the reference path's exact tests)."""
    return torch.float64 if (t.dtype == torch.float64 and not t.is_cuda) else torch.float32


def merge_parts(part_o: Tensor, part_lse: Tensor, out: Tensor, lse_out: Optional[Tensor]) -> None:
    """Merges parts laid out as fa_merge_partials takes them -- part_o [n, B, H, S, D] and part_lse [n, B, H, S],
    contiguous (float32 on CUDA) -- into out (any [B, S, H, D] view with a contiguous last dim: fp16 / bf16 / fp32 on
    CUDA) and lse_out ([B, H, S] contiguous float32, or None). Enqueued on the current stream on CUDA."""
    rules.merge_parts(part_o.shape, part_lse.shape, out.shape, None if lse_out is None else lse_out.shape)
    n, B, H, Sq, D = part_o.shape
    if not part_o.is_cuda:
        o, lse = _merge_reference(part_o, part_lse)
        out.copy_(o.permute(0, 2, 1, 3))
        if lse_out is not None:
            lse_out.copy_(lse)
        return
    if part_o.dtype != torch.float32 or part_lse.dtype != torch.float32:
        raise TypeError("fa: merge parts on CUDA must be float32")
    if not (part_o.is_contiguous() and part_lse.is_contiguous()) or out.stride(-1) != 1:
        raise ValueError("fa: merge parts must be contiguous and the output's last dim contiguous")
    if lse_out is not None and (lse_out.dtype != torch.float32 or not lse_out.is_contiguous()):
        raise ValueError("fa: merge lse output must be contiguous float32 [B, H, S]")
    p = _lib.new_merge_params()
    p.dtype = dtype_code(out.dtype)
    p.num_parts, p.batch, p.heads, p.seqlen, p.head_dim = int(n), int(B), int(H), int(Sq), int(D)
    p.part_o, p.part_lse = part_o.data_ptr(), part_lse.data_ptr()
    p.o = out.data_ptr()
    p.o_stride_batch, p.o_stride_seq, p.o_stride_head = out.stride(0), out.stride(1), out.stride(2)
    p.lse = lse_out.data_ptr() if lse_out is not None else None
    index = device_index(part_o.device)
    default_context(index).merge_partials(p, stream_of(index))


def _merge_reference(part_o: Tensor, part_lse: Tensor) -> tuple[Tensor, Tensor]:
    """(o [B, H, S, D], lse [B, H, S]) of parts [n, B, H, S, D] / [n, B, H, S] by the formula, max factored out."""
    m = part_lse.max(dim=0).values
    m_safe = torch.where(torch.isinf(m) & (m < 0), torch.zeros_like(m), m)
    w = torch.exp(part_lse - m_safe)  # 0 for -inf parts
    total = w.sum(dim=0)
    seen = total > 0
    lse = torch.where(
        seen, m_safe + torch.log(torch.where(seen, total, torch.ones_like(total))), torch.full_like(m, float("-inf"))
    )
    weight = torch.where(seen, w / torch.where(seen, total, torch.ones_like(total)), torch.zeros_like(w))
    o_parts = torch.where((w > 0).unsqueeze(-1), part_o, torch.zeros_like(part_o))  # -inf parts' outputs never read
    return (weight.unsqueeze(-1) * o_parts).sum(dim=0), lse


def merge_attention(
    outs: Sequence[Tensor] | Tensor, lses: Sequence[Tensor] | Tensor, *, out_dtype: Optional[torch.dtype] = None
) -> tuple[Tensor, Tensor]:
    """Merges partial results over disjoint key sets into (o, lse) as one pass over all the keys gives.

    outs: n tensors [B, S, H, D] (fa.attention's layout), or one [n, B, S, H, D]; lses: n float32 [B, H, S] (as
    fa.attention(..., return_lse=True) gives them), or one [n, B, H, S]. A part that saw no key for a row has LSE
    -inf there (its output is ignored). Returns o [B, S, H, D] in out_dtype (default: the outputs' dtype) and lse
    float32 [B, H, S] (float64 for float64 CPU inputs). Not differentiable.
    """
    outs = list(outs.unbind(0)) if isinstance(outs, Tensor) else list(outs)
    lses = list(lses.unbind(0)) if isinstance(lses, Tensor) else list(lses)
    rules.merge([t.shape for t in outs], [t.shape for t in lses])
    for name, ts in (("outs", outs), ("lses", lses)):
        for i, t in enumerate(ts):
            rules.match(f"{name}[{i}]", "device", t.device, "outs[0]", "device", outs[0].device)
    B, Sq, H, D = outs[0].shape
    pd = _part_dtype(outs[0])
    part_o = torch.empty((len(outs), B, H, Sq, D), dtype=pd, device=outs[0].device)
    for i, o in enumerate(outs):
        part_o[i].copy_(o.permute(0, 2, 1, 3))
    part_lse = torch.stack([x.to(pd) for x in lses]).contiguous()
    out = torch.empty((B, Sq, H, D), dtype=out_dtype or outs[0].dtype, device=outs[0].device)
    lse = torch.empty((B, H, Sq), dtype=pd, device=outs[0].device)
    merge_parts(part_o, part_lse, out, lse)
    return out, lse
