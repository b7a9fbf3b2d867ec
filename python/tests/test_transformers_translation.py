"""fa.integrations.transformers.attention_forward on the CPU (torch needed; no GPU, no transformers): fa.attention
replaced by fa's semantics in PyTorch (bottom-right masks, softcap, the backend's key-padding mask_mod read from its
buffer), against torch's SDPA over the 4-D mask transformers' own mask functions would build (cache positions,
causal, sliding window, padding), in float64: the plumbing of the backend (transposes, key cuts, the window, the
mask buffer) before a GPU runs it."""

import itertools
import math

import pytest

from conftest import HAS_TORCH

pytestmark = pytest.mark.skipif(not HAS_TORCH, reason="PyTorch is not installed")
if HAS_TORCH:
    import torch

    import fa
    from attention_ref import visible_mask
    from fa.integrations import transformers as backend


def fa_semantics(q, k, v, *, causal=False, window=(-1, -1), softcap=0.0, scale=None, mods=None, sinks=None):
    """fa.attention of [B, S, H, D] tensors as fa.h states it; mods: the backend's key-padding mask_mod; sinks: one
    more softmax column per head (fa.h, "Attention sinks")."""
    b, sq, hq, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    k, v = k.repeat_interleave(hq // hk, dim=2), v.repeat_interleave(hq // hk, dim=2)
    s = torch.einsum("bihd,bjhd->bhij", q, k) * (scale or 1.0 / math.sqrt(d))
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    vis = visible_mask(sq, sk, causal, window, q.device)[None, None]
    if mods is not None:
        assert mods.mask_mod == backend.KEY_PADDING and mods.depends == "b"
        vis = vis & (mods.buffers[0] != 0)[:, None, None, :]
    s = s.masked_fill(~vis, float("-inf"))
    if sinks is not None:  # the sink column first, softmax over both, the column dropped
        col = sinks.to(s.dtype).reshape(1, -1, 1, 1).expand(b, hq, sq, 1)
        p = torch.softmax(torch.cat([col, s], dim=-1), dim=-1)[..., 1:]
        return torch.einsum("bhij,bjhd->bihd", p, v)
    empty = (s == float("-inf")).all(dim=-1, keepdim=True)
    p = torch.softmax(s.masked_fill(empty, 0.0), dim=-1).masked_fill(empty, 0.0)
    return torch.einsum("bhij,bjhd->bihd", p, v)


class Module:
    is_causal = True


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("window", [None, 1, 3])
def test_backend_against_transformers_masks(monkeypatch, causal, window):
    monkeypatch.setattr(backend, "attention", fa_semantics)
    module = Module()
    for sq, past, cap, pad in itertools.product((1, 4), (0, 3), (0, 2), (False, True)):
        used = past + sq
        skv = used + cap  # a static cache holds `cap` unused slots past the used keys
        torch.manual_seed(sq * 100 + past * 10 + cap)
        q = torch.randn(2, 4, sq, 8, dtype=torch.float64)
        k, v = torch.randn(2, 2, skv, 8, dtype=torch.float64), torch.randn(2, 2, skv, 8, dtype=torch.float64)
        mask2d = torch.ones(2, used, dtype=torch.bool)
        if pad:
            mask2d[1, :2] = False  # left padding of the second sequence
        if cap == 0 and not pad:
            mask2d = None  # what the flash mask function hands over when nothing is padded
        got, none = backend.attention_forward(module, q, k, v, mask2d, scaling=0.3, sliding_window=window,
                                              softcap=5.0, is_causal=causal)  # fmt: skip
        assert none is None and got.shape == (2, sq, 4, 8)
        pos = torch.arange(past, used)[:, None]  # transformers' cache positions of the queries
        j = torch.arange(used)[None, :]
        keep = (j <= pos) if causal else torch.ones(sq, used, dtype=torch.bool)
        if window is not None:
            keep = keep & ((j > pos - window) if causal else ((pos - j).abs() <= window))
        keep = keep[None, None] & (torch.ones(2, used, dtype=torch.bool) if mask2d is None else mask2d)[:, None, None]
        s = torch.einsum("bhid,bhjd->bhij", q, k[:, :, :used].repeat_interleave(2, dim=1)) * 0.3
        s = (5.0 * torch.tanh(s / 5.0)).masked_fill(~keep, float("-inf"))
        empty = ~keep.any(dim=-1, keepdim=True)
        p = torch.softmax(s.masked_fill(empty, 0.0), dim=-1).masked_fill(empty, 0.0)
        want = torch.einsum("bhij,bhjd->bihd", p, v[:, :, :used].repeat_interleave(2, dim=1))
        torch.testing.assert_close(got, want, atol=1e-12, rtol=1e-12)


def test_padding_mask_function():
    m = torch.ones(2, 6, dtype=torch.bool)
    assert backend.padding_mask(2, None, 6, attention_mask=m) is None  # nothing padded
    assert backend.padding_mask(2, None, 9, attention_mask=m).shape == (2, 6)  # a static cache: the used length
    m[0, 4] = False
    assert torch.equal(backend.padding_mask(2, None, 4, attention_mask=m), m[:, -4:])  # a sliding layer: the last 4
    assert backend.padding_mask(2, None, 1, attention_mask=m) is None  # the pad is outside the last one
    assert backend.padding_mask(2, None, 6, attention_mask=None) is None


def test_s_aux_becomes_fa_sinks(monkeypatch):
    """gpt-oss's s_aux: transformers' eager formula (the sinks concatenated to the scaled, masked scores, softmax,
    the column dropped) against the backend through fa's semantics, with left padding."""
    monkeypatch.setattr(backend, "attention", fa_semantics)
    torch.manual_seed(3)
    q = torch.randn(2, 4, 5, 8, dtype=torch.float64)
    k, v = torch.randn(2, 2, 5, 8, dtype=torch.float64), torch.randn(2, 2, 5, 8, dtype=torch.float64)
    sinks = torch.tensor([0.5, -1.0, 3.0, -30.0], dtype=torch.float64)
    mask2d = torch.ones(2, 5, dtype=torch.bool)
    mask2d[1, :2] = False
    got, _ = backend.attention_forward(Module(), q, k, v, mask2d, scaling=0.4, sliding_window=3, s_aux=sinks)
    pos, j = torch.arange(5)[:, None], torch.arange(5)[None, :]
    keep = ((j <= pos) & (j > pos - 3))[None, None] & mask2d[:, None, None]
    s = torch.einsum("bhid,bhjd->bhij", q, k.repeat_interleave(2, dim=1)) * 0.4
    s = s.masked_fill(~keep, float("-inf"))
    combined = torch.cat([sinks.reshape(1, -1, 1, 1).expand(2, 4, 5, 1), s], dim=-1)
    p = torch.softmax(combined - combined.max(dim=-1, keepdim=True).values, dim=-1)[..., 1:]
    want = torch.einsum("bhij,bhjd->bihd", p, v.repeat_interleave(2, dim=1))
    torch.testing.assert_close(got, want, atol=1e-12, rtol=1e-12)
    with pytest.raises(fa.InvalidArgument, match="s_aux: shape"):
        backend.attention_forward(Module(), q, k, v, None, s_aux=sinks[:3])
