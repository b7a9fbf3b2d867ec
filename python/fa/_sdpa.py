"""fa.scaled_dot_product_attention: torch.nn.functional.scaled_dot_product_attention's signature and semantics, run
by fa where fa has a kernel for the call and by torch's own SDPA everywhere else. Which, and how, is decided by
fa.sdpa_rules.plan over shapes and flags (its docstring holds every rule); this module only does what the Plan says.
Differentiable in q, k and v through fa.attention (a float attn_mask that requires grad runs in torch)."""

from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from . import sdpa_rules
from ._torch_ops import attention
from .errors import NotSupported


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def torch_sdpa(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa):
    """torch's own SDPA with these arguments (enable_gqa passed only when set: older torch lacks it)."""
    extra = {"enable_gqa": True} if enable_gqa else {}
    return F.scaled_dot_product_attention(
        query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale, **extra
    )


def _one_device(query, key, value, attn_mask) -> bool:
    return key.device == query.device == value.device and (attn_mask is None or attn_mask.device == query.device)


def bias_of(plan: sdpa_rules.Plan, attn_mask: Tensor, query: Tensor, key: Tensor) -> Tensor:
    """fa's bias for attn_mask as the Plan lays it out: the mask itself (bias_direct), or a [b, h, l, row] tensor
    of q's dtype cut to S keys, holding 0 / -inf (a boolean mask) or the mask's values, broadcast as torch does."""
    if plan.bias_direct:
        return attn_mask
    target = tuple(query.shape[:-3]) + (query.shape[-3], query.shape[-2], key.shape[-2])
    b, h, lq, row = plan.bias_shape
    lead = target[:-3] if b > 1 else (1,) * (len(target) - 3)
    m = attn_mask.reshape((1,) * (len(target) - attn_mask.dim()) + tuple(attn_mask.shape))
    m = m.expand(*lead, h, lq, target[-1]).reshape(b, h, lq, target[-1])
    store = torch.empty((b, h, lq, row), dtype=query.dtype, device=query.device)[..., : target[-1]]
    if plan.bias == "bool":
        store.zero_().masked_fill_(~m, float("-inf"))
    else:
        store.copy_(m)
    return store


def _run_fa(plan: sdpa_rules.Plan, query, key, value, attn_mask) -> Tensor:
    lead = tuple(query.shape[:-3])
    hq, lq, hk, sk = query.shape[-3], query.shape[-2], key.shape[-3], key.shape[-2]
    q = query.reshape(plan.batch, hq, lq, query.shape[-1])
    k = key.reshape(plan.batch, hk, sk, key.shape[-1])
    v = value.reshape(plan.batch, hk, sk, value.shape[-1])
    if plan.keys != sk:
        k, v = k[:, :, : plan.keys], v[:, :, : plan.keys]
    bias = None if plan.bias is None else bias_of(plan, attn_mask, query, key)
    o = attention(
        q, k, v, causal=plan.causal, window=plan.window, bias=bias, scale=plan.scale, layout="bhsd"
    )  # [batch, Hq, L, Ev]
    return o.reshape(lead + (hq, lq, value.shape[-1]))


def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Optional[Tensor] = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: Optional[float] = None,
    enable_gqa: bool = False,
) -> Tensor:
    """torch.nn.functional.scaled_dot_product_attention, run by fa where it has a kernel (fa.sdpa_rules): query
    [..., Hq, L, E], key [..., Hk, S, E], value [..., Hk, S, Ev] -> [..., Hq, L, Ev]; top-left causal alignment,
    boolean (True takes part) or additive attn_mask broadcast to [..., Hq, L, S], enable_gqa, scale None =
    1/sqrt(E). Everything fa does not run (dropout, CPU tensors, float32, ...) and every error torch raises is
    torch's own SDPA. fa.sdpa_plan(...) with the same arguments says which runs and why."""
    plan = sdpa_plan(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    if plan.fallback is None:
        try:
            return _run_fa(plan, query, key, value, attn_mask)
        except NotSupported:  # fa has no kernel for this GPU / problem: torch's result, as for any fallback
            pass
    return torch_sdpa(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)


def sdpa_plan(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Optional[Tensor] = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: Optional[float] = None,
    enable_gqa: bool = False,
) -> sdpa_rules.Plan:
    """The sdpa_rules.Plan fa.scaled_dot_product_attention follows for these arguments (plan.fallback: None when
    fa runs the call, else why torch's SDPA does): sdpa_rules.plan over the tensors' shapes, dtypes and device."""
    mask = attn_mask
    return sdpa_rules.plan(
        query.shape,
        key.shape,
        value.shape,
        dtypes=(_dtype_name(query.dtype), _dtype_name(key.dtype), _dtype_name(value.dtype)),
        device=query.device.type if _one_device(query, key, value, attn_mask) else "mixed",
        mask=None if mask is None else tuple(mask.shape),
        mask_strides=None if mask is None else mask.stride(),
        mask_dtype=None if mask is None else _dtype_name(mask.dtype),
        mask_requires_grad=mask is not None and mask.requires_grad,
        dropout_p=dropout_p,
        is_causal=is_causal,
        scale=scale,
        enable_gqa=enable_gqa,
    )
