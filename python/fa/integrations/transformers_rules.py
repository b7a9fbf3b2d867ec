"""The rules of fa's transformers attention backend: which fa call runs a call of transformers' attention interface,
and what the backend's mask function hands that call, over shapes and flags alone, in plain Python (no torch), so
that CI tests each rule (python/tests/test_transformers_rules.py). The backend (fa/integrations/transformers.py)
asks plan() and mask_plan() and does what they say.

What transformers hands an attention function (AttentionInterface; the modeling code of Llama, Mistral, Qwen 2 / 3,
Gemma 2 / 3, gpt-oss): query [B, Hq, Sq, D], key [B, Hkv, Skv, D], value [B, Hkv, Skv, Dv] (after the KV cache's
update: the cached keys first, the queries' own keys last; a static cache hands its whole buffer, used or not),
attention_mask (what the mask function registered under the backend's name made), and keywords dropout, scaling,
is_causal (None: the module's), sliding_window, softcap, s_aux (gpt-oss's sinks), position_ids, and, from a
padding-free collator, cu_seq_lens_q / cu_seq_lens_k / max_length_q / max_length_k. It expects [B, Sq, Hq, Dv].

The mask function (mask_plan) is flash-attention's kind: never a dense [B, 1, Sq, Skv] mask, only the 2-D padding
mask [B, Lm] (True = a real key) over the layer's keys, or None. transformers calls it once per forward and mask
kind (full / sliding layers) with kv_length (the keys the layers will hold), q_offset (the queries' first position:
an int, or a device tensor for a static cache) and kv_offset (the position of key 0):
  - a 2-D mask: its last kv_length columns (a sliding layer keeps the last keys). In eager mode, a mask that hides
    nothing gives None when it covers every key, else (a static cache's used part) a broadcast True of its length
    (strides 0: no mask_mod needed, the keys are only cut). While torch.compile traces, nothing data-dependent: the
    mask is kept, and a single query (decode) gets it padded with False to kv_length, so that every step of a static
    cache has the same shapes.
  - a mask function the model extended (or_mask_function / and_mask_function: transformers passes use_vmap=True,
    e.g. Gemma 3's bidirectional image tokens): fa.NotSupported, rather than a mask that leaves the extension out.
  - no mask: None when every key is used; else (a static cache's capacity beyond the used keys) a broadcast True
    over the used keys, their count known on the host (an int offset, or, outside torch.compile or for more than one
    query, the device offset read once per forward); a single query under torch.compile gets the full-length mask
    key < used, computed on the device.
Either way a mask [B, Lm] hands the attention the used keys first: Lm <= Skv, and the queries are the last Sq of
them, which is what fa's bottom-right alignment needs.

The attention's rules (plan):
  - causal: bottom-right (fa's own alignment): query i sits at key position i + keys - Sq, as it does with a KV cache
    (a prefill without one has keys == Sq). Causal attention with Sq > keys cannot come from a cache: an error. A
    single query sees every key either way and runs without the causal mask.
  - sliding_window w: transformers' causal mask keeps key j for query position p iff p - w < j <= p, w - 1 keys
    back: fa's window (w - 1, 0); its bidirectional mask keeps |p - j| <= w: fa's window (w, w) (transformers' own
    flash path passes (w - 1, w - 1) there, one key short of its eager and sdpa masks, which these rules follow). A
    side that cannot hide a key at these lengths is -1 (unbounded). w < 1 is an error.
  - padding: a mask [B, Lm] cuts k and v to their first Lm keys; unless it is a broadcast True it becomes a mask_mod
    over that mask as its buffer (key j of sequence b is visible iff mask[b, j]; depends on b), ANDed with fa's
    causal mask and window: any pattern (left padding in generation, right padding in training), q, k, v where they
    are, autograd, torch.compile and CUDA graphs, and fa's block classification skips key blocks that are all
    padding. Not varlen (unpadding gathers q, k, v and needs the lengths on the host) nor used lengths (right padding
    only, and no autograd). Lm > Skv or a batch other than B is an error; a 4-D mask (another mask function was
    registered, or a custom mask) is not supported: fa would have to run it as a dense bias.
  - packed sequences (batch 1, no mask, position_ids restarting inside the row: transformers' padding-free
    training): the backend finds them as transformers' flash path does and says packed=True; a mask_mod then keeps
    each query to the keys of its own sequence (document ids from position_ids, on the device), ANDed with causal
    and window. With cu_seq_lens_q / cu_seq_lens_k (and max_length_q / max_length_k) given, fa's varlen runs
    instead, over the batch's one row.
  - softcap: None or 0 off, > 0 fa's softcap. scaling None: 1/sqrt(D); else finite and > 0 (fa reads 0 as None).
  - sinks (s_aux, gpt-oss: a float [Hq] of logits added to each row's softmax denominator): run only when fa.attention
    takes them (sinks_supported; issue 42's C++ sinks), else fa.NotSupported naming the model's alternatives.
  - not supported (fa.NotSupported): dropout > 0 (fa has no dropout: transformers passes the config's
    attention_dropout while the module trains), a 4-D mask, sinks before fa has them. Shapes that disagree
    (fa.InvalidArgument naming both): ranks, batch, heads (Hq a multiple of Hkv, key's and value's equal), head dims,
    key counts, the mask's batch and length, s_aux's heads, cu_seq_lens' batch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .. import shape_rules as rules
from .._structs import FA_ERROR_NOT_SUPPORTED, STATUS_NAMES
from ..errors import NotSupported

BHSD = ("batch", "heads", "seqlen", "head dim")
UNBOUNDED = 2**31  # a length no window side reaches


@dataclass(frozen=True)
class Call:
    """The fa.attention call: q, k, v as [B, S, H, D] views of transformers' [B, H, S, D] tensors, k and v cut to
    their first `keys` keys; causal, window, softcap, scale (None: 1/sqrt(D)) as fa.attention takes them;
    key_padding: a mask_mod over the 2-D mask (key j of sequence b visible iff mask[b, j]); documents: a mask_mod
    keeping each query to its own packed sequence; varlen: fa's varlen over the one row with the given cu_seq_lens;
    sinks: s_aux passed to fa as the sink logits."""

    keys: int
    causal: bool = False
    window: tuple = (-1, -1)
    key_padding: bool = False
    documents: bool = False
    varlen: bool = False
    softcap: float = 0.0
    scale: float | None = None
    sinks: bool = False


@dataclass(frozen=True)
class MaskPlan:
    """What the mask function returns. source: "none" (None), "mask" (the 2-D mask's last kv_length columns, Lm =
    `length` of them), "used" (a broadcast True over `length` used keys; length None: the device offset is read
    once); check_all: in eager mode, a mask that hides nothing becomes None (length == kv_length) or a broadcast True;
    pad_to: the mask padded with False to that many keys (a single query under torch.compile); device_used: the
    full-length mask key < used, computed on the device (a single query under torch.compile)."""

    source: str
    length: int | None = None
    check_all: bool = False
    pad_to: int | None = None
    device_used: bool = False


def unsupported(message: str):
    """Raises fa.NotSupported(FA_ERROR_NOT_SUPPORTED) with `message`."""
    raise NotSupported(FA_ERROR_NOT_SUPPORTED, STATUS_NAMES[FA_ERROR_NOT_SUPPORTED], message)


def mask_plan(
    q_length: int, kv_length: int, q_offset, kv_offset: int, mask_length, compiling: bool, overlay: bool = False
) -> MaskPlan:
    """The mask function's MaskPlan (module docstring): q_offset an int, or None when it is a device tensor (a
    static cache); mask_length the 2-D mask's length, or None without one; compiling: torch.compile is tracing;
    overlay: the model ANDs or ORs its own mask function in (transformers says so with use_vmap), which fa cannot
    follow: fa.NotSupported."""
    if overlay:
        unsupported(
            "mask_function: the model adds its own mask (or_mask_function / and_mask_function, e.g. bidirectional "
            'image tokens); fa\'s backend runs causal, sliding-window and padding masks only: use "sdpa" or "eager"'
        )
    if mask_length is not None:
        length = min(mask_length, kv_length)
        if not compiling:
            return MaskPlan("mask", length, check_all=True)
        if q_length == 1 and length < kv_length:
            return MaskPlan("mask", length, pad_to=kv_length)
        return MaskPlan("mask", length)
    if q_offset is not None:
        used = q_offset + q_length - kv_offset
        return MaskPlan("none") if used >= kv_length else MaskPlan("used", used)
    if compiling and q_length == 1:
        return MaskPlan("mask", kv_length, device_used=True)
    return MaskPlan("used")


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


def _keys(query, key, attention_mask, mask_all_true: bool) -> tuple:
    """(keys, key_padding) of the mask (a shape, or None; mask_all_true: a broadcast True)."""
    if attention_mask is None:
        return key[2], False
    if len(attention_mask) == 4:
        unsupported(
            f"attention_mask: a 4-D mask {tuple(attention_mask)} (a dense mask); fa's backend takes the 2-D padding "
            "mask [batch, kv_length] of the mask function its register() installs"
        )
    rules.rank("attention_mask", attention_mask, ("batch", "kv_length"))
    rules.match("attention_mask", "batch", attention_mask[0], "query", "batch", query[0])
    if attention_mask[1] > key[2]:
        rules.fail(f"attention_mask: kv_length {attention_mask[1]} exceeds key's seqlen {key[2]}")
    return attention_mask[1], not mask_all_true


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


def _extras(query, s_aux, sinks_supported: bool, packed: bool, varlen, attention_mask) -> None:
    """The checks of sinks, packed sequences and varlen (cu_seq_lens shapes, or None)."""
    if s_aux is not None:
        if not sinks_supported:
            unsupported(
                f"s_aux: attention sinks {tuple(s_aux)} are not supported by this fa yet (issue 42); run this model "
                'with attn_implementation="eager" or "flex_attention"'
            )
        if tuple(s_aux) != (query[1],):
            rules.fail(f"s_aux: shape {tuple(s_aux)} does not match query's heads ({query[1]},)")
    if (packed or varlen is not None) and query[0] != 1:
        rules.fail(f"query: batch {query[0]} with packed sequences; expected 1 (the sequences share one row)")
    if (packed or varlen is not None) and attention_mask is not None:
        rules.fail("attention_mask: given with packed sequences; expected None (the sequences hold no padding)")
    if varlen is not None:
        cu_q, cu_k = varlen
        for name, cu in (("cu_seq_lens_q", cu_q), ("cu_seq_lens_k", cu_k)):
            rules.rank(name, cu, ("batch + 1",))
        rules.match("cu_seq_lens_k", "length", cu_k[0], "cu_seq_lens_q", "length", cu_q[0])


def plan(
    query,
    key,
    value,
    *,
    attention_mask=None,
    mask_all_true: bool = False,
    is_causal: bool = True,
    dropout: float = 0.0,
    scaling=None,
    sliding_window=None,
    softcap=None,
    s_aux=None,
    sinks_supported: bool = False,
    packed: bool = False,
    varlen=None,
) -> Call:
    """The Call that runs transformers' attention call over query, key, value (shapes [B, H, S, D]), attention_mask
    (its shape, or None; mask_all_true: a broadcast True), is_causal (resolved: the keyword, else the module's),
    dropout, scaling, sliding_window, softcap, s_aux (its shape, or None; sinks_supported: fa.attention takes sinks),
    packed (position_ids hold several sequences) and varlen ((cu_seq_lens_q shape, cu_seq_lens_k shape), or None).
    Raises fa.NotSupported or fa.InvalidArgument (module docstring)."""
    if dropout > 0:
        unsupported(f"dropout: {dropout}; fa has no dropout (transformers passes attention_dropout while training)")
    _qkv(query, key, value)
    _extras(query, s_aux, sinks_supported, packed, varlen, attention_mask)
    keys, padding = _keys(query, key, attention_mask, mask_all_true)
    seqlen_q = query[2]
    if varlen is None and is_causal and seqlen_q > keys:
        rules.fail(
            f"query: seqlen {seqlen_q} exceeds the {keys} keys; causal attention's keys hold its queries (KV cache)"
        )
    if scaling is not None and not (math.isfinite(scaling) and scaling > 0):
        rules.fail(f"scaling: {scaling}; expected a finite number > 0 (or None: 1/sqrt(head dim))")
    if softcap is not None and not (math.isfinite(softcap) and softcap >= 0):
        rules.fail(f"softcap: {softcap}; expected a finite number >= 0 (0 or None: off)")
    # varlen: each sequence's own lengths decide (fa's varlen aligns each bottom-right): no side is dropped here
    span_q, span_k = (seqlen_q, keys) if varlen is None else (UNBOUNDED, UNBOUNDED)
    window = window_of(sliding_window, is_causal, span_q, span_k)
    causal = is_causal and (seqlen_q > 1 or varlen is not None)
    if window == (-1, 0):  # causal without a window: fa's causal mask (or none for a single query)
        window = (-1, -1)
    return Call(
        keys=keys,
        causal=causal,
        window=window,
        key_padding=padding,
        documents=packed and varlen is None and seqlen_q > 1,
        varlen=varlen is not None,
        softcap=float(softcap or 0.0),
        scale=None if scaling is None else float(scaling),
        sinks=s_aux is not None,
    )
