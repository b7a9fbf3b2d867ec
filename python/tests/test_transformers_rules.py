"""fa.integrations.transformers_rules without torch or a GPU: over every small (Sq, Skv, mask length, causal,
sliding window), the keys fa shows each query equal those transformers' own mask functions keep; transformers' four
KV-cache layers (dynamic, static, dynamic sliding, static sliding) restated in plain Python over several steps, with
and without a padding mask, left or right padding, eager or under torch.compile: the mask function's plan, then the
attention's, show each query exactly the keys transformers' eager masks keep (padding, sliding window, causal with a
cache offset, a static cache's unused capacity); packed sequences, varlen, sinks; each error names its field."""

import itertools
import math

import pytest

import fa
from fa.integrations import transformers_rules as R

from test_sdpa_rules import fa_visible

Q, K, V = (2, 8, 3, 64), (2, 2, 10, 64), (2, 2, 10, 64)


def hf_keeps(sq: int, used: int, causal: bool, window, i: int, j: int) -> bool:
    """transformers' mask (masking_utils: causal_mask_function, sliding_window_overlay, the bidirectional overlay)
    for query i of sq at cache position p = used - sq + i over key position j of `used` keys."""
    if j >= used:
        return False
    p = used - sq + i
    keep = j <= p if causal else True
    if window is not None:
        keep = keep and (j > p - window if causal else abs(p - j) <= window)
    return keep


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("skv", range(1, 8))
def test_masks_match_transformers(causal, skv):
    for sq, window in itertools.product(range(1, skv + 2), (None, 1, 2, 3, 4, 5, 6, 7, 9)):
        for lm, all_true in itertools.chain([(None, False)], itertools.product(range(1, skv + 1), (False, True))):
            used = skv if lm is None else lm
            if causal and sq > used:
                continue  # an error: test_causal_needs_the_queries_keys
            mask = None if lm is None else (2, lm)
            c = R.plan((2, 4, sq, 16), (2, 2, skv, 16), (2, 2, skv, 16), attention_mask=mask, is_causal=causal,
                       sliding_window=window, mask_all_true=all_true)  # fmt: skip
            assert c.keys == used and c.key_padding == (lm is not None and not all_true)
            assert all(w >= -1 for w in c.window) and not (c.documents or c.varlen or c.sinks)
            for i, j in itertools.product(range(sq), range(skv)):
                got = j < c.keys and fa_visible(sq, c.keys, c.causal, c.window, i, j)
                assert got == hf_keeps(sq, used, causal, window, i, j), (sq, skv, lm, causal, window, i, j, c)


# ---- transformers' cache layers in plain Python (cache_utils: get_mask_sizes, get_query_offset, update) ----------
def layer_step(kind: str, past: int, q: int, window: int, capacity: int):
    """(kv_length, kv_offset, q_offset, slots) of one forward of q tokens after `past` cached ones: the mask sizes
    transformers' layer reports, the query offset (None: a device tensor) and, for each key slot of the keys the
    layer's update returns, the position it holds (None: an unused slot of a static buffer)."""
    seen = past + q
    if kind == "dynamic":
        return seen, 0, past, list(range(seen))
    if kind == "static":  # StaticLayer: the whole buffer; get_seq_length is a device tensor once initialized
        return capacity, 0, (None if past else 0), [p if p < seen else None for p in range(capacity)]
    if kind == "dynamic_sliding":  # keeps the last window - 1 keys, returns them with the new ones
        kv_offset = max(past - window + 1, 0)
        kept = min(past, window - 1)
        return (window - 1 + q if past >= window else seen), kv_offset, past, list(range(past - kept, seen))
    # StaticSlidingWindowLayer over a buffer of `window` (capacity >= window)
    if past >= window:  # full: a single query gets the rolled buffer, more get keys[1:] + new
        first = past - window + 1
        return window + q - 1, first, past, list(range(first, seen))
    if seen > window:  # becoming full: every key so far
        return seen, 0, past, list(range(seen))
    return window, 0, past, [p if p < seen else None for p in range(window)]


def fa_sees(call, mask, sq: int, i: int, j: int) -> bool:
    """Key slot j for query i under `call` with the mask the backend hands over (a list of rows, None, or
    "true": a broadcast True)."""
    if j >= call.keys or not fa_visible(sq, call.keys, call.causal, call.window, i, j):
        return False
    return mask[j] if call.key_padding else True


def backend_mask(mp, row, slots_len, kv_length, q_offset_value, q, kv_offset):
    """The mask function's result for one sequence as transformers.py builds it from the MaskPlan: (shape length,
    all_true, row of booleans or None)."""
    if mp.source == "none":
        return None
    if mp.source == "used":
        used = mp.length if mp.length is not None else q_offset_value + q - kv_offset
        return None if used >= kv_length else (used, True, None)
    if mp.device_used:
        used = q_offset_value + q - kv_offset
        return kv_length, False, [k < used for k in range(kv_length)]
    m = row[-kv_length:]
    if mp.check_all and all(m):
        return None if mp.length == kv_length else (mp.length, True, None)
    if mp.pad_to is not None:
        m = m + [False] * (mp.pad_to - mp.length)
    return len(m), False, m


KINDS = ("dynamic", "static", "dynamic_sliding", "static_sliding")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("compiling", [False, True])
@pytest.mark.parametrize("padding", [None, "none", "left", "right"])
def test_cache_layers_over_steps(kind, compiling, padding):
    window, capacity, checked = 4, 11, 0
    for prompt, chunk in itertools.product((1, 2, 3, 5, 7), (1, 2, 3)):
        past = 0
        for q in [prompt] + [chunk] * 3:
            if past + q > capacity:
                break
            kv_length, kv_offset, q_offset, slots = layer_step(kind, past, q, window, capacity)
            assert len(slots) <= kv_length or kind == "static"
            seen = past + q
            row = [True] * seen
            if padding == "left":
                row[: min(2, seen - 1)] = [False] * min(2, seen - 1)
            elif padding == "right" and past == 0:
                row[seen - 1 :] = [False]  # the last prompt token is a pad (training-style right padding)
            sliding = window if "sliding" in kind else None
            mp = R.mask_plan(q, kv_length, q_offset, kv_offset, None if padding is None else seen, compiling)
            got_mask = backend_mask(mp, row, len(slots), kv_length, past, q, kv_offset)
            shape = None if got_mask is None else (1, got_mask[0])
            call = R.plan((1, 4, q, 8), (1, 2, len(slots), 8), (1, 2, len(slots), 8), attention_mask=shape,
                          mask_all_true=got_mask is not None and got_mask[1], sliding_window=sliding)  # fmt: skip
            for i, j in itertools.product(range(q), range(len(slots))):
                p, pos = past + i, slots[j]
                want = pos is not None and pos <= p and row[pos] and (sliding is None or pos > p - sliding)
                got = fa_sees(call, None if got_mask is None else got_mask[2], q, i, j)
                assert got == want, (kind, padding, compiling, past, q, i, j, pos, mp, call)
                checked += 1
            past = seen
    assert checked > 500


def test_mask_plan_by_case():
    assert R.mask_plan(3, 10, 7, 0, None, False) == R.MaskPlan("none")  # dynamic cache: every key used
    assert R.mask_plan(3, 16, 7, 0, None, False) == R.MaskPlan("used", 10)  # static, int offset (first call)
    assert R.mask_plan(3, 16, None, 0, None, False) == R.MaskPlan("used")  # static, device offset: read once
    assert R.mask_plan(1, 16, None, 0, None, False) == R.MaskPlan("used")
    assert R.mask_plan(1, 16, None, 0, None, True) == R.MaskPlan("mask", 16, device_used=True)  # compiled decode
    assert R.mask_plan(3, 16, None, 0, None, True) == R.MaskPlan("used")  # a compiled prefill reads it too
    assert R.mask_plan(3, 10, 7, 0, 10, False) == R.MaskPlan("mask", 10, check_all=True)
    assert R.mask_plan(3, 4, 7, 7, 10, False) == R.MaskPlan("mask", 4, check_all=True)  # sliding: the last keys
    assert R.mask_plan(1, 16, None, 0, 10, True) == R.MaskPlan("mask", 10, pad_to=16)  # static shapes per step
    assert R.mask_plan(3, 16, None, 0, 10, True) == R.MaskPlan("mask", 10)


def test_mask_overlays_are_refused():
    msg = raises(fa.NotSupported, lambda: R.mask_plan(3, 10, 7, 0, 10, False, overlay=True))
    assert msg.startswith("mask_function: the model adds its own mask") and '"sdpa"' in msg


def test_mapping_by_case():
    assert R.plan(Q, K, V) == R.Call(keys=10, causal=True, window=(-1, -1))  # chunked prefill over a cache
    assert R.plan((2, 8, 1, 64), K, V) == R.Call(keys=10)  # decode: one query sees every key
    assert R.plan(Q, K, V, sliding_window=4) == R.Call(keys=10, causal=True, window=(3, 0))
    assert R.plan(Q, K, V, sliding_window=10) == R.Call(keys=10, causal=True)  # hides nothing here
    assert R.plan(Q, K, V, is_causal=False, sliding_window=1) == R.Call(keys=10, window=(1, 1))
    assert R.plan(Q, K, V, is_causal=False, sliding_window=2) == R.Call(keys=10, window=(2, -1))  # 3 queries
    c = R.plan(Q, K, V, attention_mask=(2, 7), scaling=0.125, softcap=30.0)
    assert c == R.Call(keys=7, causal=True, key_padding=True, softcap=30.0, scale=0.125)
    assert R.plan(Q, K, V, attention_mask=(2, 7), mask_all_true=True) == R.Call(keys=7, causal=True)  # only cut
    assert R.plan(Q, K, V, softcap=0.0).softcap == 0.0 and R.plan(Q, K, V, softcap=None).softcap == 0.0


def test_packed_and_varlen():
    one = (1, 8, 12, 64), (1, 2, 12, 64), (1, 2, 12, 64)
    assert R.plan(*one, packed=True) == R.Call(keys=12, causal=True, documents=True)
    assert R.plan(*one, packed=True, sliding_window=4) == R.Call(keys=12, causal=True, window=(3, 0), documents=True)
    assert R.plan((1, 8, 1, 64), *one[1:], packed=True).documents is False  # one query: one sequence
    varlen = ((4,), (4,))
    assert R.plan(*one, varlen=varlen) == R.Call(keys=12, causal=True, varlen=True)
    # varlen: each sequence aligns on its own, so a window keeps both sides whatever the row's length
    assert R.plan(*one, varlen=varlen, sliding_window=20).window == (19, 0)
    assert R.plan(*one, varlen=varlen, is_causal=False, sliding_window=20).window == (20, 20)
    assert R.plan((1, 8, 1, 64), (1, 2, 1, 64), (1, 2, 1, 64), varlen=varlen).causal  # sequences of any length


def test_sinks_hook():
    msg = expect(fa.NotSupported, "s_aux: attention sinks (8,)", s_aux=(8,))
    assert "eager" in msg and "flex_attention" in msg
    assert R.plan(Q, K, V, s_aux=(8,), sinks_supported=True).sinks
    expect(fa.InvalidArgument, "s_aux: shape (4,) does not match query's heads (8,)", s_aux=(4,), sinks_supported=True)


def raises(cls, call) -> str:
    with pytest.raises(cls) as info:
        call()
    assert isinstance(info.value, fa.FaError)
    return info.value.message


def expect(cls, message_start, **kw):
    args = dict(query=Q, key=K, value=V)
    for name in ("query", "key", "value"):
        if name in kw:
            args[name] = kw.pop(name)
    msg = raises(cls, lambda: R.plan(args["query"], args["key"], args["value"], **kw))
    assert msg.startswith(message_start), msg
    return msg


def test_not_supported():
    assert "no dropout" in expect(fa.NotSupported, "dropout: 0.1", dropout=0.1)
    assert "(2, 1, 3, 10)" in expect(fa.NotSupported, "attention_mask: a 4-D mask", attention_mask=(2, 1, 3, 10))


def test_shape_errors_name_both():
    expect(fa.InvalidArgument, "query: expected 4 dims", query=(8, 3, 64))
    expect(fa.InvalidArgument, "key: batch 1 does not match query's batch 2", key=(1, 2, 10, 64))
    expect(fa.InvalidArgument, "value: batch 3 does not match query's batch 2", value=(3, 2, 10, 64))
    expect(fa.InvalidArgument, "value: heads 4 does not match key's heads 2", value=(2, 4, 10, 64))
    expect(fa.InvalidArgument, "query: heads 8 is not a multiple of key's heads 3", key=(2, 3, 10, 64),
           value=(2, 3, 10, 64))  # fmt: skip
    expect(fa.InvalidArgument, "value: seqlen 9 does not match key's seqlen 10", value=(2, 2, 9, 64))
    expect(fa.InvalidArgument, "key: head dim 32 does not match query's head dim 64", key=(2, 2, 10, 32))
    expect(fa.InvalidArgument, "attention_mask: expected 2 dims", attention_mask=(2, 1, 10))
    expect(fa.InvalidArgument, "attention_mask: batch 1 does not match query's batch 2", attention_mask=(1, 10))
    expect(fa.InvalidArgument, "attention_mask: kv_length 11 exceeds key's seqlen 10", attention_mask=(2, 11))
    expect(fa.InvalidArgument, "query: batch 2 with packed sequences; expected 1", packed=True)
    expect(fa.InvalidArgument, "query: batch 2 with packed sequences; expected 1", varlen=((3,), (3,)))
    one = dict(query=(1, 8, 3, 64), key=(1, 2, 10, 64), value=(1, 2, 10, 64))
    expect(fa.InvalidArgument, "attention_mask: given with packed sequences", attention_mask=(1, 10), packed=True,
           **one)  # fmt: skip
    expect(fa.InvalidArgument, "cu_seq_lens_q: expected 1 dims", varlen=((3, 1), (3,)), **one)
    expect(fa.InvalidArgument, "cu_seq_lens_k: length 4 does not match cu_seq_lens_q's length 3",
           varlen=((3,), (4,)), **one)  # fmt: skip


def test_causal_needs_the_queries_keys():
    expect(fa.InvalidArgument, "query: seqlen 3 exceeds the 2 keys", attention_mask=(2, 2))
    expect(fa.InvalidArgument, "query: seqlen 12 exceeds the 10 keys", query=(2, 8, 12, 64))
    assert R.plan((2, 8, 12, 64), K, V, is_causal=False) == R.Call(keys=10)  # cross-attention: any lengths


@pytest.mark.parametrize("bad", [0.0, -1.0, math.inf, math.nan])
def test_scalars(bad):
    expect(fa.InvalidArgument, f"scaling: {bad}", scaling=bad)
    if bad != 0.0:
        expect(fa.InvalidArgument, f"softcap: {bad}", softcap=bad)
    for w in (0, -1, -5):
        expect(fa.InvalidArgument, f"sliding_window: {w}", sliding_window=w)
