"""fa.integrations.transformers on the CPU (torch needed; no GPU, no transformers): fa.attention replaced by fa's
semantics in PyTorch (transformers_support.fake_attention: bottom-right masks, softcap, the backend's mask_mods
through their reference masks, varlen), against torch's SDPA over the 4-D mask transformers' own mask functions
would build (cache positions, causal, sliding window, padding, a static cache's unused slots, packed sequences), in
float64: the plumbing of the backend (transposes, key cuts, the window, the mask buffers) before a GPU runs it; and
the mask function's result for each of its plans."""

import itertools

import pytest

from conftest import HAS_TORCH

pytestmark = pytest.mark.skipif(not HAS_TORCH, reason="PyTorch is not installed")
if HAS_TORCH:
    import torch

    import fa
    from fa.integrations import transformers as backend
    from transformers_support import fake_attention


class Module:
    is_causal = True


def reference(q, k, v, keep, scale=0.3, cap=5.0):
    """SDPA-style attention over [B, H, S, D] with a boolean keep [B, 1, Sq, Sk] (GQA repeated), softcap `cap`;
    rows that keep nothing give 0 -> [B, Sq, H, D]."""
    rep = q.shape[1] // k.shape[1]
    s = torch.einsum("bhid,bhjd->bhij", q, k.repeat_interleave(rep, dim=1)) * scale
    s = (cap * torch.tanh(s / cap)).masked_fill(~keep, float("-inf"))
    empty = ~keep.any(dim=-1, keepdim=True)
    p = torch.softmax(s.masked_fill(empty, 0.0), dim=-1).masked_fill(empty, 0.0)
    return torch.einsum("bhij,bhjd->bihd", p, v.repeat_interleave(rep, dim=1))


def hf_keep(pos, used, causal, window, mask2d):
    """transformers' eager mask for queries at positions `pos` over `used` keys and a 2-D mask (None: all)."""
    j = torch.arange(used)[None, :]
    keep = (j <= pos) if causal else torch.ones(pos.shape[0], used, dtype=torch.bool)
    if window is not None:
        keep = keep & ((j > pos - window) if causal else ((pos - j).abs() <= window))
    rows = torch.ones(2, used, dtype=torch.bool) if mask2d is None else mask2d[:, :used]
    return keep[None, None] & rows[:, None, None]


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("window", [None, 1, 3])
def test_backend_against_transformers_masks(monkeypatch, causal, window):
    monkeypatch.setattr(backend, "attention", fake_attention)
    for sq, past, cap, pad in itertools.product((1, 4), (0, 3), (0, 2), (False, True)):
        used = past + sq
        skv = used + cap  # a static cache holds `cap` unused slots past the used keys
        torch.manual_seed(sq * 100 + past * 10 + cap)
        q = torch.randn(2, 4, sq, 8, dtype=torch.float64)
        k, v = torch.randn(2, 2, skv, 8, dtype=torch.float64), torch.randn(2, 2, skv, 8, dtype=torch.float64)
        mask2d = torch.ones(2, used, dtype=torch.bool)
        if pad:
            mask2d[1, :2] = False  # left padding of the second sequence
        offset = torch.tensor(past) if cap else past  # a static cache's offset is a device tensor
        given = backend.padding_mask(2, sq, skv, offset, 0, attention_mask=mask2d if pad else None)
        got, none = backend.attention_forward(Module(), q, k, v, given, scaling=0.3, sliding_window=window,
                                              softcap=5.0, is_causal=causal)  # fmt: skip
        assert none is None and got.shape == (2, sq, 4, 8)
        keep = hf_keep(torch.arange(past, used)[:, None], used, causal, window, mask2d)
        want = reference(q, k[:, :, :used], v[:, :, :used], keep)
        torch.testing.assert_close(got, want, atol=1e-12, rtol=1e-12)


def test_static_cache_decode_under_compile(monkeypatch):
    """A single query over a static buffer: the compiled mask function pads the 2-D mask to the buffer (or computes
    key < used on the device), the attention keeps every key and hides the unused ones."""
    monkeypatch.setattr(backend, "attention", fake_attention)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    torch.manual_seed(1)
    q = torch.randn(2, 4, 1, 8, dtype=torch.float64)
    k, v = torch.randn(2, 2, 9, 8, dtype=torch.float64), torch.randn(2, 2, 9, 8, dtype=torch.float64)
    mask2d = torch.ones(2, 6, dtype=torch.bool)
    mask2d[0, 0] = False
    for given2d, offset in ((mask2d, 5), (None, torch.tensor(5))):
        m = backend.padding_mask(2, 1, 9, offset, 0, attention_mask=given2d)
        assert m.shape == (2, 9) and not bool(m[:, 6:].any())
        got, _ = backend.attention_forward(Module(), q, k, v, m, scaling=0.3, softcap=5.0)
        keep = hf_keep(torch.tensor([[5]]), 6, True, None, given2d)
        torch.testing.assert_close(got, reference(q, k[:, :, :6], v[:, :, :6], keep), atol=1e-12, rtol=1e-12)


def test_padding_mask_function():
    m = torch.ones(2, 6, dtype=torch.bool)
    assert backend.padding_mask(2, 6, 6, 0, 0, attention_mask=m) is None  # nothing padded
    cut = backend.padding_mask(2, 6, 9, 0, 0, attention_mask=m)  # a static cache: the used length, a broadcast True
    assert cut.shape == (2, 6) and backend.is_broadcast_true(cut) and bool(cut.all())
    m[0, 4] = False
    assert torch.equal(backend.padding_mask(2, 1, 4, 5, 2, attention_mask=m), m[:, -4:])  # a sliding layer
    assert backend.padding_mask(2, 1, 1, 5, 5, attention_mask=m) is None  # the pad is outside the last key
    assert backend.padding_mask(2, 6, 6, 0, 0, attention_mask=None) is None
    assert backend.padding_mask(2, 3, 6, 3, 0) is None  # a dynamic cache: every key used
    used = backend.padding_mask(2, 3, 16, torch.tensor(4), 0)  # a static cache, no mask: the used keys, read once
    assert used.shape == (2, 7) and backend.is_broadcast_true(used)
    assert not backend.is_broadcast_true(m) and not backend.is_broadcast_true(m[:, :1].expand(2, 5))
    hidden = torch.tensor(False).expand(2, 6)  # a caller's broadcast mask (every key hidden) stays a mask
    got = backend.padding_mask(2, 6, 6, 0, 0, attention_mask=hidden)
    assert not backend.is_broadcast_true(got) and not bool(got.any())
    with pytest.raises(fa.NotSupported, match="mask_function: the model adds its own mask"):
        backend.padding_mask(2, 6, 6, 0, 0, attention_mask=m, use_vmap=True)  # an or / and mask function


def test_packed_sequences(monkeypatch):
    monkeypatch.setattr(backend, "attention", fake_attention)
    torch.manual_seed(2)
    lens = (3, 5, 4)
    pos = torch.cat([torch.arange(n) for n in lens])[None]
    q = torch.randn(1, 4, 12, 8, dtype=torch.float64)
    k, v = torch.randn(1, 2, 12, 8, dtype=torch.float64), torch.randn(1, 2, 12, 8, dtype=torch.float64)
    docs = backend.packed_documents(pos, 1, 12)
    assert docs.tolist() == [[0] * 3 + [1] * 5 + [2] * 4] and backend.packed_documents(pos, 1, 12) is docs
    assert backend.packed_documents(torch.arange(12)[None], 1, 12) is None  # one sequence
    assert backend.packed_documents(pos.expand(2, 12), 2, 12) is None  # a batch of rows: not packed
    cu = torch.tensor([0, 3, 8, 12], dtype=torch.int32)
    for kw in ({"position_ids": pos}, {"cu_seq_lens_q": cu, "cu_seq_lens_k": cu, "max_length_q": 5, "max_length_k": 5}):
        for window in (None, 2):
            got, _ = backend.attention_forward(Module(), q, k, v, None, scaling=0.3, softcap=5.0,
                                               sliding_window=window, **kw)  # fmt: skip
            i = torch.arange(12)
            same = (docs[0][:, None] == docs[0][None, :])[None, None]
            keep = same & (i[None, :] <= i[:, None]) & (True if window is None else i[None, :] > i[:, None] - window)
            torch.testing.assert_close(got, reference(q, k, v, keep), atol=1e-12, rtol=1e-12)


def test_errors_before_anything_runs(monkeypatch):
    def never(*_a, **_k):
        raise AssertionError("fa.attention ran")

    monkeypatch.setattr(backend, "attention", never)
    q, k = torch.zeros(2, 4, 3, 8), torch.zeros(2, 2, 5, 8)
    with pytest.raises(fa.NotSupported, match="dropout: 0.1"):
        backend.attention_forward(Module(), q, k, k, None, dropout=0.1)
    with pytest.raises(fa.InvalidArgument, match=r"s_aux: shape \(3,\) does not match query's heads \(4,\)"):
        backend.attention_forward(Module(), q, k, k, None, s_aux=torch.zeros(3))
    with pytest.raises(fa.NotSupported, match="a 4-D mask"):
        backend.attention_forward(Module(), q, k, k, torch.ones(2, 1, 3, 5, dtype=torch.bool))
