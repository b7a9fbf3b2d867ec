"""The transformers backend inside real transformers models on the CPU (torch and transformers needed, skipped
without; no GPU): fa.attention replaced by fa's semantics in PyTorch (transformers_support.fake_attention), tiny
random float32 models of each decoder family the installed transformers has (Llama, Mistral, Qwen 2 / 3, Gemma 2 / 3)
with attn_implementation="fa" against "eager": logits with left and right padding, greedy generation with a dynamic
and a static cache (left padding included), packed sequences, and the loss and gradients of a training step. This
checks what the backend and its mask function make of transformers' own calls (masks, caches, sliding layers,
softcap, scaling) before a GPU runs fa there; gpt-oss (sinks) fails with fa.NotSupported until fa has sinks."""

import inspect

import pytest

from conftest import HAS_TORCH
from transformers_support import FAMILIES, HAS_TRANSFORMERS, family_classes

pytestmark = pytest.mark.skipif(not (HAS_TORCH and HAS_TRANSFORMERS), reason="PyTorch or transformers is missing")
if HAS_TORCH and HAS_TRANSFORMERS:
    import torch

    import fa
    from fa.integrations import transformers as backend
    from transformers_support import fake_attention, tiny_model

# float32 models: eager's fully padded rows overflow to NaN in float64 (finfo.min added to a score), and its softmax
# runs in float32 anyway; a wrong mask moves logits by ~0.1
TOL = 1e-4
DECODERS = [n for n in FAMILIES if n != "gpt_oss" and HAS_TRANSFORMERS and family_classes(n) is not None]


@pytest.fixture
def fake_fa(monkeypatch):
    backend.register()
    monkeypatch.setattr(backend, "attention", fake_attention)


def pair(name, **extra):
    return tiny_model(name, "eager", torch.float32, **extra), tiny_model(name, "fa", torch.float32, **extra)


def batch(pad: str, length: int = 12):
    torch.manual_seed(7)
    ids = torch.randint(3, 128, (3, length))
    mask = torch.ones(3, length, dtype=torch.long)
    if pad == "left":
        mask[1, :4], mask[2, :7] = 0, 0
    elif pad == "right":
        mask[1, -3:], mask[2, -8:] = 0, 0
    return ids.masked_fill(mask == 0, 0), mask


@pytest.mark.parametrize("name", DECODERS)
@pytest.mark.parametrize("pad", ["none", "left", "right"])
def test_logits_match_eager(fake_fa, name, pad):
    ref, got = pair(name)
    ids, mask = batch(pad)
    with torch.no_grad():
        a = ref(input_ids=ids, attention_mask=mask).logits
        b = got(input_ids=ids, attention_mask=mask).logits
    real = mask.bool()
    torch.testing.assert_close(b[real], a[real], atol=TOL, rtol=TOL)


@pytest.mark.parametrize("name", DECODERS)
@pytest.mark.parametrize("cache", ["dynamic", "static"])
def test_greedy_generation_matches_eager(fake_fa, name, cache):
    ref, got = pair(name)
    ids, mask = batch("left", 9)
    kw = dict(max_new_tokens=8, do_sample=False, output_scores=True, return_dict_in_generate=True, pad_token_id=0)
    if cache == "static":
        kw["cache_implementation"] = "static"
    a = ref.generate(input_ids=ids, attention_mask=mask, **kw)
    b = got.generate(input_ids=ids, attention_mask=mask, **kw)
    assert torch.equal(a.sequences, b.sequences)
    for sa, sb in zip(a.scores, b.scores):
        torch.testing.assert_close(sb, sa, atol=TOL, rtol=TOL)


@pytest.mark.parametrize("name", DECODERS)
def test_static_cache_without_a_mask(fake_fa, name):
    """A static cache and no attention_mask: the mask function tells the attention the used keys of the buffer."""
    from transformers import StaticCache

    ref, got = pair(name)
    ids = batch("none", 9)[0]
    steps = []
    for model in (ref, got):
        # transformers 5.17 names the cache past_key_values, later ones cache
        name = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
        kw = {name: StaticCache(config=model.config, max_cache_len=20), "use_cache": True}
        with torch.no_grad():
            first = model(input_ids=ids, **kw).logits
            token = first[:, -1:].argmax(-1)
            second = model(input_ids=token, **kw).logits
            third = model(input_ids=torch.cat([token, token], 1), **kw).logits
        steps.append((first, second, third))
    for a, b in zip(*steps):
        torch.testing.assert_close(b, a, atol=TOL, rtol=TOL)


@pytest.mark.parametrize("name", DECODERS)
def test_packed_sequences_match_eager(fake_fa, name):
    ref, got = pair(name)
    torch.manual_seed(3)
    ids = torch.randint(3, 128, (1, 14))
    pos = torch.cat([torch.arange(4), torch.arange(7), torch.arange(3)])[None]
    with torch.no_grad():
        a = ref(input_ids=ids, position_ids=pos, use_cache=False).logits
        b = got(input_ids=ids, position_ids=pos, use_cache=False).logits
    torch.testing.assert_close(b, a, atol=TOL, rtol=TOL)


@pytest.mark.parametrize("name", DECODERS)
def test_training_step_matches_eager(fake_fa, name):
    ref, got = pair(name)
    ids, mask = batch("right")
    labels = ids.masked_fill(mask == 0, -100)
    losses = []
    for model in (ref, got):
        model.train()
        out = model(input_ids=ids, attention_mask=mask, labels=labels)
        out.loss.backward()
        losses.append((out.loss.detach(), [p.grad for p in model.parameters()]))
    torch.testing.assert_close(losses[1][0], losses[0][0], atol=TOL, rtol=TOL)
    for ga, gb in zip(losses[0][1], losses[1][1]):
        torch.testing.assert_close(gb, ga, atol=TOL, rtol=TOL)


def test_dropout_while_training_fails_clearly(fake_fa):
    model = tiny_model(DECODERS[0], "fa", torch.float32, attention_dropout=0.1).train()
    ids, mask = batch("none")
    with pytest.raises(fa.NotSupported, match="dropout: 0.1; fa has no dropout"):
        model(input_ids=ids, attention_mask=mask)
    model.eval()(input_ids=ids, attention_mask=mask)  # eval: no dropout, runs


@pytest.mark.skipif(not HAS_TRANSFORMERS or family_classes("gpt_oss") is None, reason="no gpt-oss in transformers")
def test_gpt_oss_needs_sinks(fake_fa):
    model = tiny_model("gpt_oss", "fa")
    ids, mask = batch("none")
    if backend.SINKS:
        pytest.skip("fa has sinks: test_gpu_transformers runs gpt-oss against eager")
    with pytest.raises(fa.NotSupported, match="s_aux: attention sinks"):
        model(input_ids=ids, attention_mask=mask)
