"""The rules of fa's transformers attention backend: which fa call runs a call of transformers' attention interface,
over shapes and flags alone, in plain Python (no torch), so that CI tests each rule
(python/tests/test_transformers_rules.py). The backend (fa/integrations/transformers.py) asks plan() and does what
the Call says.

What transformers hands an attention function (AttentionInterface; modeling code of Llama, Mistral, Qwen, Gemma,
gpt-oss): query [B, Hq, Sq, D], key [B, Hkv, Skv, D], value [B, Hkv, Skv, Dv] (after the KV cache's update: the
cached keys first, the queries' own keys last), attention_mask, and keywords dropout, scaling, is_causal (None: the
module's), sliding_window, softcap, s_aux (gpt-oss's sinks). The mask comes from the mask function registered under
the backend's name; fa's backend registers flash-attention's kind: None when nothing is padded, else the 2-D
padding mask [B, Lm] (True = a real token) over the last kv_length positions. It expects [B, Sq, Hq, Dv] back.
The rules:
  - causal: bottom-right (fa's own alignment): query i sits at key position i + Skv - Sq, as it does with a KV cache
    (a prefill without one has Skv == Sq). Causal attention with Sq > Skv cannot come from a cache: an error. A
    single query (decode) sees every key either way and runs without the causal mask.
  - sliding_window w: transformers' causal mask keeps key j for query position p iff p - w < j <= p, w - 1 keys
    back: fa's window (w - 1, 0); its bidirectional mask keeps |p - j| <= w: fa's window (w, w) (transformers' own
    flash path passes (w - 1, w - 1) there, one key short of its eager and sdpa masks, which these rules follow). A
    side that cannot hide a key at these lengths is -1 (unbounded). w < 1 is an error.
  - padding: the 2-D mask becomes a mask_mod over that mask as its buffer (key j of sequence b is visible iff
    mask[b, j]; depends on b), ANDed with the causal mask and window by fa: any pattern (left padding in generation,
    right padding in training), q, k, v where they are, autograd and CUDA graphs, and fa's block classification
    skips key blocks that are all padding. Not varlen (unpadding gathers q, k, v and needs the lengths on the host)
    nor used lengths (they describe right padding only, on the decode path without autograd), never a dense bias.
    A mask of Lm < Skv positions (a static cache's unused capacity beyond it) cuts the keys to its Lm; Lm > Skv or a
    batch other than B is an error; a 4-D mask (a dense mask: another mask function was registered, or a custom
    mask) is not supported: fa would have to run it as a bias.
  - softcap: None or 0 off, > 0 fa's softcap. scaling None: 1/sqrt(D); else finite and > 0 (fa reads 0 as None).
  - s_aux (gpt-oss's sinks, one logit per query head [Hq], concatenated to the scaled scores before the softmax and
    dropped after it): fa's sinks (the same units; differentiable), with every mask above.
  - not supported (fa.NotSupported): dropout > 0 (fa has no dropout), a 4-D mask. Shapes that disagree
    (fa.InvalidArgument naming both): ranks, batch, heads (Hq a multiple of Hkv, key's and value's equal; s_aux one
    per query head), head dims, key counts.
Not seen by these rules: packed sequences without a mask (transformers detects them from position_ids, a device
tensor; the backend must pass them as varlen itself).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .. import shape_rules as rules
from .._structs import FA_ERROR_NOT_SUPPORTED, STATUS_NAMES
from ..errors import NotSupported

BHSD = ("batch", "heads", "seqlen", "head dim")


@dataclass(frozen=True)
class Call:
    """The fa.attention call: q, k, v as [B, S, H, D] views of transformers' [B, H, S, D] tensors, k and v cut to
    their first `keys` keys; causal, window, softcap, scale (None: 1/sqrt(D)) as fa.attention takes them; key_padding:
    a mask_mod over the 2-D mask's first `keys` columns (key j of sequence b visible iff mask[b, j]); sinks: s_aux
    passed as fa's sinks."""

    keys: int
    causal: bool = False
    window: tuple = (-1, -1)
    key_padding: bool = False
    softcap: float = 0.0
    scale: float | None = None
    sinks: bool = False


def unsupported(message: str):
    """Raises fa.NotSupported(FA_ERROR_NOT_SUPPORTED) with `message`."""
    raise NotSupported(FA_ERROR_NOT_SUPPORTED, STATUS_NAMES[FA_ERROR_NOT_SUPPORTED], message)


def _qkv(query, key, value) -> None:
    for name, t in (("query", query), ("key", key), ("value", value)):
        rules.rank(name, t, BHSD)
    for name, t in (("key", key), ("value", value)):
        rules.match(name, "batch", t[0], "query", "batch", query[0])
    rules.match("value", "heads", value[1], "key", "heads", key[1])
    if key[1] < 1 or query[1] % key[1] != 0:
        rules.fail(f"query: heads {query[1]} is not a multiple of key's heads {key[1]}")
    rules.match("value", "seqlen", value[2], "key", "seqlen", key[2])
    rules.match("key", "head dim", key[3], "query", "head dim", query[3])


def _keys(query, key, attention_mask) -> tuple:
    """(keys, key_padding) of the mask (a shape, or None)."""
    if attention_mask is None:
        return key[2], False
    if len(attention_mask) == 4:
        unsupported(
            f"attention_mask: a 4-D mask {tuple(attention_mask)} (a dense mask); fa's backend takes the 2-D padding "
            "mask [batch, kv_length] of the flash-attention mask function its register() installs"
        )
    rules.rank("attention_mask", attention_mask, ("batch", "kv_length"))
    rules.match("attention_mask", "batch", attention_mask[0], "query", "batch", query[0])
    if attention_mask[1] > key[2]:
        rules.fail(f"attention_mask: kv_length {attention_mask[1]} exceeds key's seqlen {key[2]}")
    return attention_mask[1], True


def window_of(sliding_window, causal: bool, seqlen_q: int, keys: int) -> tuple:
    """fa's (window_left, window_right) of transformers' sliding_window w over seqlen_q queries and `keys` keys
    (bottom-right): causal (w - 1, 0), bidirectional (w, w); a side is -1 where it hides no key at these lengths."""
    if sliding_window is None:
        return (-1, 0) if causal else (-1, -1)
    if sliding_window < 1:
        rules.fail(f"sliding_window: {sliding_window}; expected a whole number >= 1 (or None)")
    back = sliding_window - 1 if causal else sliding_window
    left = back if back < keys - 1 else -1
    if causal:
        return left, 0
    return left, sliding_window if sliding_window < seqlen_q - 1 else -1


def plan(
    query,
    key,
    value,
    *,
    attention_mask=None,
    is_causal: bool = True,
    dropout: float = 0.0,
    scaling=None,
    sliding_window=None,
    softcap=None,
    s_aux=None,
) -> Call:
    """The Call that runs transformers' attention call over query, key, value (shapes [B, H, S, D]), attention_mask
    (its shape, or None), is_causal (resolved: the keyword, else the module's), dropout, scaling, sliding_window,
    softcap and s_aux (its shape, or None). Raises fa.NotSupported or fa.InvalidArgument (module docstring)."""
    if dropout > 0:
        unsupported(f"dropout: {dropout}; fa has no dropout (transformers passes attention_dropout while training)")
    _qkv(query, key, value)
    if s_aux is not None:
        rules.sink_logits(s_aux, query[1], "s_aux", "query")
    keys, padding = _keys(query, key, attention_mask)
    seqlen_q = query[2]
    if is_causal and seqlen_q > keys:
        rules.fail(
            f"query: seqlen {seqlen_q} exceeds the {keys} keys; causal attention's keys hold its queries (KV cache)"
        )
    if scaling is not None and not (math.isfinite(scaling) and scaling > 0):
        rules.fail(f"scaling: {scaling}; expected a finite number > 0 (or None: 1/sqrt(head dim))")
    if softcap is not None and not (math.isfinite(softcap) and softcap >= 0):
        rules.fail(f"softcap: {softcap}; expected a finite number >= 0 (0 or None: off)")
    window = window_of(sliding_window, is_causal, seqlen_q, keys)
    causal = is_causal and seqlen_q > 1
    if window == (-1, 0):  # causal without a window: fa's causal mask (or none for a single query)
        window = (-1, -1)
    return Call(
        keys=keys,
        causal=causal,
        window=window,
        key_padding=padding,
        softcap=float(softcap or 0.0),
        scale=None if scaling is None else float(scaling),
        sinks=s_aux is not None,
    )
