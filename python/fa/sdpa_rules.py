"""The rules of fa.scaled_dot_product_attention: which of torch's SDPA calls fa runs, and how, decided over shapes,
dtypes (their names: "float16", ...) and flags alone, in plain Python (no torch), so that CI tests every rule
(python/tests/test_sdpa_rules.py). The torch wrapper (fa/_sdpa.py) asks plan() and does what the Plan says.

torch.nn.functional.scaled_dot_product_attention(query [..., Hq, L, E], key [..., Hk, S, E], value [..., Hv, S, Ev],
attn_mask, dropout_p, is_causal, scale, enable_gqa) against fa's semantics (include/fa/fa.h):
  - alignment: torch's causal mask is TOP-LEFT (query i sees key j iff j <= i), fa's masks are bottom-right
    (j <= i + S - L). L == S: the same mask, fa's causal. L < S: no query sees a key j >= L, so fa's causal over the
    first L keys (a view of k and v; their other keys get zero gradients, as in torch). L > S: fa's sliding window
    (left -1 = unbounded, right L - S): j <= i + S - L + (L - S) = i, exactly torch's mask (every row sees key 0).
  - masks: a boolean attn_mask (True = takes part) becomes an additive bias of 0 / -inf, a float one is the bias
    itself, broadcast as torch broadcasts it to [..., Hq, L, S]. A row whose keys are all hidden (every score -inf)
    gives 0 in both: torch's math backend zeroes such rows (_safe_softmax, torch >= 2.5) and fa writes o = 0 and
    lse = -inf there (fa.h), with zero gradients. The bias is stored as fa's fast kernels read it (keys contiguous,
    each row a multiple of 8 elements) unless the mask already is (bias_direct).
  - heads: equal, or with enable_gqa Hq a multiple of Hk == Hv (query head h reads key head h // (Hq / Hk), as
    torch's repeat_interleave does). Without enable_gqa, differing heads are torch's to reject (or broadcast).
  - scale: None is 1/sqrt(E) in both; fa reads 0 as "the default", so a scale that is not a finite positive number
    runs in torch.
  - leading dims: [..., H, L, E] of rank 3 or more, the same leading dims in q, k and v, flattened into one batch.
Everything else runs torch's own SDPA (the Plan's `fallback` says why): dropout (fa has none), is_causal together
with attn_mask (torch raises, so torch is called and raises its own error), tensors off CUDA, dtypes other than
float16 / bfloat16 (fa's float32 runs only the reference kernels; mixed dtypes are torch's to reject), ranks below 3,
leading dims that differ (torch broadcasts or raises), head dims fa lacks (multiples of 8 in [8, 256] run), empty
tensors, a float mask that requires grad (fa computes no bias gradient), mask dtypes torch rejects, masks of rank
below 2 (torch reads their dim -2) or beyond q's rank (torch raises, or for a 3-D q takes one leading 1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

FA_DTYPES = ("float16", "bfloat16")
MAX_HEAD_DIM = 256  # fa's forward and backward (beyond: forward only, MLA shapes)
BIAS_ROW_ALIGN = 8  # elements: fa's fast kernels need 16-byte bias rows (fa.h, fa_params' pointers)

# Why torch runs a call (Plan.fallback); the tests name them.
DROPOUT = "dropout_p > 0: fa has no dropout"
CAUSAL_AND_MASK = "is_causal with attn_mask: torch rejects it and raises its own error"
DEVICE = "not a CUDA tensor"
DTYPE = "dtype: fa runs float16 and bfloat16 (the same in q, k and v)"
RANK = "rank below 3: no heads dim"
LEADING = "leading dims differ between q, k and v: torch broadcasts them or raises"
HEADS = "heads differ (without enable_gqa, or not a GQA grouping): torch broadcasts them or raises"
SHAPES = "q and k head dims, or k and v key counts, differ: torch raises"
HEAD_DIM = f"head dim: fa runs multiples of 8 in [8, {MAX_HEAD_DIM}]"
EMPTY = "an empty tensor"
SCALE = "scale: fa runs finite scales > 0 (it reads 0 as 1/sqrt(E))"
MASK_DTYPE = "attn_mask dtype: bool, q's dtype or float32 run in fa"
MASK_SHAPE = "attn_mask of rank below 2 (torch raises) or not broadcast to [..., Hq, L, S] (torch raises or broadcasts)"
MASK_GRAD = "attn_mask requires grad: fa computes no bias gradient"


@dataclass(frozen=True)
class Plan:
    """What fa.scaled_dot_product_attention does. fallback: None (fa runs) or why torch's SDPA runs (the reasons
    above). For fa: q, k, v reshaped to [batch, H, L|S, E] (layout "bhsd"), k and v cut to their first `keys` keys,
    fa.attention(causal, window, bias, scale); bias None, "bool" (0 / -inf) or "additive", held in a tensor of
    `bias_shape` [batch or 1, Hq or 1, L or 1, S rounded up to 8] cut to S keys, unless bias_direct (the mask is
    passed as it is)."""

    fallback: str | None = None
    batch: int = 0
    keys: int = 0
    causal: bool = False
    window: tuple = (-1, -1)
    bias: str | None = None
    bias_shape: tuple | None = None
    bias_direct: bool = False
    scale: float | None = None


def _fallback(reason: str) -> Plan:
    return Plan(fallback=reason)


def causal_mapping(seqlen_q: int, seqlen_k: int) -> tuple:
    """(keys, causal, window) of fa that give torch's top-left causal mask of L = seqlen_q queries over S = seqlen_k
    keys (module docstring: alignment)."""
    if seqlen_q <= seqlen_k:
        return seqlen_q, True, (-1, -1)
    return seqlen_k, False, (-1, seqlen_q - seqlen_k)


def mask_broadcasts(mask, target) -> bool:
    """mask (a shape) broadcasts to target (torch's rules: aligned right, each extent 1 or the target's)."""
    if len(mask) > len(target):
        return False
    skip = len(target) - len(mask)
    return all(e == 1 or e == target[skip + i] for i, e in enumerate(mask))


def bias_storage(mask, target, batch: int) -> tuple:
    """[batch or 1, Hq or 1, L or 1, S rounded up to BIAS_ROW_ALIGN] holding mask (broadcast to target = leading
    dims + (Hq, L, S)) as fa's bias: the batch dims kept when any of them is not 1 (flattened into `batch`), heads
    and queries kept as the mask has them, keys always materialized (fa's fast kernels read them contiguous)."""
    full = (1,) * (len(target) - len(mask)) + tuple(mask)
    lead = full[:-3]
    b = batch if any(e != 1 for e in lead) else 1
    s = target[-1]
    row = -(-s // BIAS_ROW_ALIGN) * BIAS_ROW_ALIGN
    return (b, full[-3], full[-2], row)


def bias_direct(mask, strides, target, mask_dtype: str, q_dtype: str) -> bool:
    """The mask can be fa's bias without a copy: q's dtype (additive), of rank 4 or less over one batch dim at most,
    its keys not broadcast and contiguous, and its other strides multiples of BIAS_ROW_ALIGN (or over extents of 1)."""
    if mask_dtype != q_dtype or len(target) > 4 or not mask or mask[-1] != target[-1]:
        return False
    if strides[-1] != 1:
        return False
    return all(e == 1 or st % BIAS_ROW_ALIGN == 0 for e, st in zip(mask[:-1], strides[:-1]))


def _shapes_fallback(q, k, v, enable_gqa: bool) -> str | None:
    """Why q, k, v (shapes) cannot run in fa, or None."""
    if min(len(q), len(k), len(v)) < 3:
        return RANK
    if not (len(q) == len(k) == len(v)) or not (q[:-3] == k[:-3] == v[:-3]):
        return LEADING
    hq, hk, hv = q[-3], k[-3], v[-3]
    if not (hq == hk == hv) and not (enable_gqa and hk == hv and hk > 0 and hq % hk == 0):
        return HEADS
    if q[-1] != k[-1] or k[-2] != v[-2]:
        return SHAPES
    if 0 in q or 0 in k or 0 in v:
        return EMPTY
    for d in (q[-1], v[-1]):
        if d % 8 != 0 or d > MAX_HEAD_DIM:
            return HEAD_DIM
    return None


def plan(
    q,
    k,
    v,
    *,
    dtypes=("float16", "float16", "float16"),
    device: str = "cuda",
    mask=None,
    mask_strides=None,
    mask_dtype: str | None = None,
    mask_requires_grad: bool = False,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale=None,
    enable_gqa: bool = False,
) -> Plan:
    """The Plan of torch's SDPA call over q, k, v (shapes), their dtypes' names, the device type, attn_mask's shape,
    strides, dtype name and whether it requires grad (mask None: no attn_mask), dropout_p, is_causal, scale,
    enable_gqa. Never raises: what fa cannot run is torch's (its errors included)."""
    if dropout_p > 0:
        return _fallback(DROPOUT)
    if is_causal and mask is not None:
        return _fallback(CAUSAL_AND_MASK)
    if device != "cuda":
        return _fallback(DEVICE)
    if dtypes[0] not in FA_DTYPES or not (dtypes[0] == dtypes[1] == dtypes[2]):
        return _fallback(DTYPE)
    why = _shapes_fallback(tuple(q), tuple(k), tuple(v), enable_gqa)
    if why is not None:
        return _fallback(why)
    if scale is not None and not (math.isfinite(scale) and scale > 0):
        return _fallback(SCALE)
    batch = math.prod(q[:-3])
    seqlen_q, seqlen_k = q[-2], k[-2]
    keys, causal, window = seqlen_k, False, (-1, -1)
    if is_causal:
        keys, causal, window = causal_mapping(seqlen_q, seqlen_k)
    out = Plan(batch=batch, keys=keys, causal=causal, window=window, scale=scale)
    if mask is None:
        return out
    if mask_dtype not in ("bool", dtypes[0], "float32"):
        return _fallback(MASK_DTYPE)
    target = tuple(q[:-3]) + (q[-3], seqlen_q, seqlen_k)
    if len(mask) < 2 or not mask_broadcasts(tuple(mask), target):
        return _fallback(MASK_SHAPE)
    if mask_dtype != "bool" and mask_requires_grad:
        return _fallback(MASK_GRAD)
    kind = "bool" if mask_dtype == "bool" else "additive"
    direct = kind == "additive" and bias_direct(tuple(mask), tuple(mask_strides or ()), target, mask_dtype, dtypes[0])
    shape = None if direct else bias_storage(tuple(mask), target, batch)
    return Plan(
        batch=batch,
        keys=keys,
        causal=causal,
        window=window,
        scale=scale,
        bias=kind,
        bias_shape=shape,
        bias_direct=direct,
    )
