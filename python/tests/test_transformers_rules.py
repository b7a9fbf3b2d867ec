"""fa.integrations.transformers_rules without torch or a GPU: over every small (Sq, Skv, mask length, causal,
sliding window), the keys fa shows each query equal those transformers' own mask functions keep (positions of a KV
cache: the queries are the last Sq of the used keys; causal p - w < j <= p, bidirectional |p - j| <= w); padding
becomes a key mask_mod, never a bias; s_aux becomes fa's sinks; each error (shapes, dropout, s_aux's shape, 4-D
masks, bad scalars) names its field."""

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
        for lm in (None,) + tuple(range(1, skv + 1)):
            used = skv if lm is None else lm
            if causal and sq > used:
                continue  # an error: test_causal_needs_the_queries_keys
            mask = None if lm is None else (2, lm)
            c = R.plan((2, 4, sq, 16), (2, 2, skv, 16), (2, 2, skv, 16), attention_mask=mask, is_causal=causal,
                       sliding_window=window)  # fmt: skip
            assert c.keys == used and c.key_padding == (lm is not None)
            assert all(w >= -1 for w in c.window)
            for i, j in itertools.product(range(sq), range(skv)):
                got = j < c.keys and fa_visible(sq, c.keys, c.causal, c.window, i, j)
                assert got == hf_keeps(sq, used, causal, window, i, j), (sq, skv, lm, causal, window, i, j, c)


def test_mapping_by_case():
    assert R.plan(Q, K, V) == R.Call(keys=10, causal=True, window=(-1, -1))  # chunked prefill over a cache
    assert R.plan((2, 8, 1, 64), K, V) == R.Call(keys=10)  # decode: one query sees every key
    assert R.plan(Q, K, V, sliding_window=4) == R.Call(keys=10, causal=True, window=(3, 0))
    assert R.plan(Q, K, V, sliding_window=10) == R.Call(keys=10, causal=True)  # hides nothing here
    assert R.plan(Q, K, V, is_causal=False, sliding_window=1) == R.Call(keys=10, window=(1, 1))
    assert R.plan(Q, K, V, is_causal=False, sliding_window=2) == R.Call(keys=10, window=(2, -1))  # 3 queries
    c = R.plan(Q, K, V, attention_mask=(2, 7), scaling=0.125, softcap=30.0)
    assert c == R.Call(keys=7, causal=True, key_padding=True, softcap=30.0, scale=0.125)
    assert R.plan(Q, K, V, softcap=0.0).softcap == 0.0 and R.plan(Q, K, V, softcap=None).softcap == 0.0


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


def test_s_aux_is_fa_sinks():
    """gpt-oss's s_aux (one logit per query head) runs as fa's sinks, with every mask; another shape is an error
    naming s_aux and query's heads."""
    assert R.plan(Q, K, V, s_aux=(8,)) == R.Call(keys=10, causal=True, sinks=True)
    c = R.plan(Q, K, V, s_aux=(8,), attention_mask=(2, 7), sliding_window=4)
    assert c == R.Call(keys=7, causal=True, window=(3, 0), key_padding=True, sinks=True)
    assert not R.plan(Q, K, V).sinks
    for shape in ((64,), (8, 1), ()):
        msg = expect(fa.InvalidArgument, f"s_aux: shape {shape}", s_aux=shape)
        assert "query's heads 8" in msg, msg


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
