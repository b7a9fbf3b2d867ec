"""PyTorch reference attention with fa's semantics (include/fa/fa.h): bottom-right aligned masks, GQA, softcap,
bias, ALiBi, attention sinks (one more softmax column per head, without a value: a fully hidden row then gives
o = 0 and lse = the sink); fully hidden rows give o = 0 and lse = -inf. upcast=True computes in float32 (the reference);
upcast=False computes in the inputs' precision (the "same-precision PyTorch implementation" whose error against the
reference sets the tolerance, FlashAttention's rule)."""

import math

import torch


def visible_mask(sq, sk, causal, window, device):
    i = torch.arange(sq, device=device)[:, None]
    j = torch.arange(sk, device=device)[None, :]
    diag = i + sk - sq
    left, right = window
    if causal:
        right = 0
    vis = torch.ones(sq, sk, dtype=torch.bool, device=device)
    if left >= 0:
        vis &= j >= diag - left
    if right >= 0:
        vis &= j <= diag + right
    return vis


def attention_ref(
    q,
    k,
    v,
    *,
    causal=False,
    window=(-1, -1),
    bias=None,
    alibi_slopes=None,
    softcap=0.0,
    scale=None,
    upcast=True,
    mods=None,
    sinks=None,
):
    """q [B, Sq, Hq, D], k [B, Sk, Hkv, D], v [B, Sk, Hkv, Dv] -> (o [B, Sq, Hq, Dv], lse float32 [B, Hq, Sq])."""
    if upcast:
        q, k, v = q.float(), k.float(), v.float()
        bias = bias.float() if bias is not None else None
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    k = k.repeat_interleave(hq // hkv, dim=2)
    v = v.repeat_interleave(hq // hkv, dim=2)
    scale = scale if scale else 1.0 / math.sqrt(d)
    s = torch.einsum("bihd,bjhd->bhij", q * scale, k)
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    if bias is not None:
        s = s + bias.to(s.dtype)
    if alibi_slopes is not None:
        i = torch.arange(sq, device=q.device)[:, None]
        j = torch.arange(sk, device=q.device)[None, :]
        dist = (i + sk - sq - j).abs().to(torch.float32)
        s = s - (alibi_slopes.float()[None, :, None, None] * dist).to(s.dtype)
    vis = visible_mask(sq, sk, causal, window, q.device)[None, None].expand(b, hq, sq, sk)
    if mods is not None and (mods.reference_mask is not None or mods.reference_score is not None):
        # fa.Mods restated in PyTorch, per (batch, head) over local positions i [Sq, 1], j [1, Sk]
        i = torch.arange(sq, device=q.device)[:, None]
        j = torch.arange(sk, device=q.device)[None, :]
        s, vis = s.clone(), vis.clone()
        for bb in range(b):
            for hh in range(hq):
                if mods.reference_score is not None:
                    s[bb, hh] = mods.reference_score(s[bb, hh], bb, hh, i, j).to(s.dtype)
                if mods.reference_mask is not None:
                    vis[bb, hh] &= mods.reference_mask(bb, hh, i, j)
    s = s.masked_fill(~vis, float("-inf"))
    if sinks is not None:  # finite sinks: every row has its sink column (differentiable in sinks)
        col = (sinks.float() if upcast else sinks).to(s.dtype).reshape(1, hq, 1, 1).expand(b, hq, sq, 1)
        full = torch.cat([col, s], dim=-1)
        p = torch.softmax(full, dim=-1)[..., 1:]
        return torch.einsum("bhij,bjhd->bihd", p.to(v.dtype), v), torch.logsumexp(full.float(), dim=-1)
    lse = torch.logsumexp(s.float(), dim=-1)
    hidden = ~vis.any(dim=-1, keepdim=True)  # fully hidden rows: o = 0, and no NaN in the forward or its gradient
    p = torch.softmax(s.masked_fill(hidden, 0.0), dim=-1).masked_fill(hidden, 0.0)
    o = torch.einsum("bhij,bjhd->bihd", p.to(v.dtype), v)
    return o, lse
