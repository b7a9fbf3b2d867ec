"""The PyTorch operator fa::attention_mods: the forward with user code (fa.Mods), forward only.

Same op-level views and arguments as fa::attention_fwd (see _torch_ops), plus the Mods' bodies, buffers and
scalars as plain op arguments, with a fake (meta) implementation so that torch.compile traces it.
"""

# No `from __future__ import annotations` here: torch.library.custom_op reads the annotations as types.
import ctypes
from typing import List, Optional, Tuple

import torch
from torch import Tensor

from ._tensor_params import last_dim_contiguous, output_shapes
from ._torch_ops import run_forward
from .mods import Mods


def _mods_impl(q: Tensor, k: Tensor, v: Tensor, mask_mod: Optional[str], score_mod: Optional[str],
               buffers: List[Tensor], scalars: List[float], iscalars: List[int], bias: Optional[Tensor],
               alibi_slopes: Optional[Tensor], cu_seqlens_q: Optional[Tensor], cu_seqlens_k: Optional[Tensor],
               max_seqlen_q: int, max_seqlen_k: int, mask: int, window_left: int, window_right: int, softcap: float,
               scale: float, depends: str) -> Tuple[Tensor, Tensor]:
    q, k, v = last_dim_contiguous(q), last_dim_contiguous(k), last_dim_contiguous(v)

    def attach(p):
        m, keep = Mods(mask_mod, score_mod, buffers, scalars, iscalars, depends=depends).to_struct(q.device)
        p.mods = ctypes.pointer(m)
        return m, keep

    rest = (bias, alibi_slopes, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, mask, window_left,
            window_right, softcap, scale)
    return run_forward(q, k, v, rest, attach)


attention_mods = torch.library.custom_op("fa::attention_mods", mutates_args=())(_mods_impl)


@attention_mods.register_fake
def _attention_mods_fake(q, k, v, mask_mod, score_mod, buffers, scalars, iscalars, bias, alibi_slopes, cu_seqlens_q,
                         cu_seqlens_k, max_seqlen_q, max_seqlen_k, mask, window_left, window_right, softcap, scale,
                         depends):
    o_shape, lse_shape = output_shapes(q, k, v, cu_seqlens_q)
    return q.new_empty(o_shape), q.new_empty(lse_shape, dtype=torch.float32)


def forward_with_mods(q, k, v, mods: Mods, rest) -> Tuple[Tensor, Tensor]:
    """(o, lse) of the op-level views with user code: the op while torch.compile traces, else its implementation."""
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        raise NotImplementedError("fa: the backward with user code (mods) is not supported yet; run the forward "
                                  "under torch.no_grad() or without requires_grad")
    args = (q, k, v, mods.mask_mod, mods.score_mod, list(mods.buffers), list(mods.scalars), list(mods.iscalars),
            *rest, mods.depends)
    if torch.compiler.is_compiling():
        return torch.ops.fa.attention_mods(*args)
    return _mods_impl(*args)
