"""fa.scaled_dot_product_attention's translation on the CPU (torch needed, no GPU): fa.attention is replaced by a
float64 PyTorch statement of fa's semantics (include/fa/fa.h: bottom-right masks, bias, GQA, rows whose scores are
all -inf give 0), which also checks what the wrapper hands fa (layout "bhsd" views, the bias' dtype, contiguous keys
and shape against fa.shape_rules); the plan is asked as for float16 CUDA tensors. Every call fa would run must then
equal torch's own SDPA (math backend, float64) in value and gradient: causal with L <, ==, > S, boolean, additive
and broadcast masks with empty rows, GQA, scales, ranks 3 to 5. Fallbacks on the CPU return torch's result."""

import itertools
import math

import pytest

from conftest import HAS_TORCH

pytestmark = pytest.mark.skipif(not HAS_TORCH, reason="PyTorch is not installed")
if HAS_TORCH:
    import torch
    import torch.nn.functional as F

    import fa
    from attention_ref import visible_mask
    from fa import _sdpa, sdpa_rules, shape_rules

CALLS = []


def fa_semantics(q, k, v, *, causal=False, window=(-1, -1), bias=None, scale=None, layout="bshd"):
    """fa.attention's result as fa.h states it, in PyTorch (q, k, v [B, H, S, D] views with layout "bhsd")."""
    assert layout == "bhsd" and q.dim() == 4
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # the op-level [B, S, H, D] views
    b, sq, hq, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    shape_rules.attention(q.shape, k.shape, v.shape, bias=None if bias is None else bias.shape)
    k, v = k.repeat_interleave(hq // hk, dim=2), v.repeat_interleave(hq // hk, dim=2)
    s = torch.einsum("bihd,bjhd->bhij", q, k) * (scale or 1.0 / math.sqrt(d))
    if bias is not None:
        assert bias.dtype == q.dtype and bias.stride(-1) == 1 or bias.shape[-1] == 1
        s = s + bias
    left, right = window
    vis = visible_mask(sq, sk, causal, (left, right), q.device)
    s = s.masked_fill(~vis, float("-inf"))
    empty = (s == float("-inf")).all(dim=-1, keepdim=True)
    p = torch.softmax(s.masked_fill(empty, 0.0), dim=-1).masked_fill(empty, 0.0)
    CALLS.append((causal, tuple(window), sk))
    return torch.einsum("bhij,bjhd->bhid", p, v)  # [B, H, Sq, Dv]: o in q's layout


@pytest.fixture
def as_fa(monkeypatch):
    """fa.attention -> fa_semantics; the plan asked as for float16 CUDA tensors (float64 masks as q's dtype)."""
    real = sdpa_rules.plan

    def plan(q, k, v, **kw):
        kw["device"] = "cuda" if kw["device"] == "cpu" else kw["device"]
        kw["dtypes"] = tuple("float16" if t == "float64" else t for t in kw["dtypes"])
        if kw.get("mask_dtype") == "float64":
            kw["mask_dtype"] = "float16"
        return real(q, k, v, **kw)

    monkeypatch.setattr(sdpa_rules, "plan", plan)
    monkeypatch.setattr(_sdpa, "attention", fa_semantics)
    CALLS.clear()
    return CALLS


def rand(*shape):
    return torch.randn(*shape, dtype=torch.float64).requires_grad_()


def check(q, k, v, mask=None, **kw):
    plan = fa.sdpa_plan(q, k, v, mask, **kw)
    assert plan.fallback is None, plan
    o = fa.scaled_dot_product_attention(q, k, v, mask, **kw)
    qs, ks, vs = (t.detach().clone().requires_grad_() for t in (q, k, v))
    want = F.scaled_dot_product_attention(qs, ks, vs, attn_mask=mask, **kw)
    torch.testing.assert_close(o, want, atol=1e-10, rtol=1e-10)
    do = torch.randn_like(want)
    got_g = torch.autograd.grad(o, (q, k, v), do)
    want_g = torch.autograd.grad(want, (qs, ks, vs), do)
    for g, w in zip(got_g, want_g):
        torch.testing.assert_close(g, w, atol=1e-10, rtol=1e-10)
    return plan


def test_causal_every_small_alignment(as_fa):
    for lq, s in itertools.product(range(1, 10), repeat=2):
        torch.manual_seed(lq * 10 + s)
        plan = check(rand(1, 2, lq, 8), rand(1, 2, s, 8), rand(1, 2, s, 8), is_causal=True)
        assert as_fa[-1] == (plan.causal, plan.window, plan.keys)


@pytest.mark.parametrize(
    "mask_shape", [(2, 3, 6, 9), (2, 1, 6, 9), (1, 3, 1, 9), (6, 9), (1, 9), (6, 1), (2, 1, 1, 1), (1, 1)]
)
def test_masks(as_fa, mask_shape):
    torch.manual_seed(len(mask_shape))
    q, k, v = rand(2, 3, 6, 8), rand(2, 3, 9, 8), rand(2, 3, 9, 16)
    m = torch.rand(*mask_shape) > 0.4
    if mask_shape[-2:] == (6, 9):
        m[..., 2, :] = False  # a row with no key: 0 in both
    check(q, k, v, m)
    additive = torch.randn(*mask_shape, dtype=torch.float64).masked_fill(~m, float("-inf"))
    check(q, k, v, additive)


def test_mask_already_a_bias(as_fa):
    q, k, v = rand(2, 3, 6, 8), rand(2, 3, 16, 8), rand(2, 3, 16, 8)
    mask = torch.randn(2, 1, 6, 16, dtype=torch.float64)
    assert check(q, k, v, mask).bias_direct


@pytest.mark.parametrize("hq,hk", [(6, 2), (6, 1), (4, 4)])
def test_gqa_and_scales(as_fa, hq, hk):
    torch.manual_seed(hq + hk)
    for scale, causal in itertools.product((None, 0.2, 3.0), (False, True)):
        check(rand(2, hq, 5, 8), rand(2, hk, 7, 8), rand(2, hk, 7, 8), is_causal=causal, scale=scale, enable_gqa=True)


@pytest.mark.parametrize("lead", [(), (2, 3), (2, 1, 2)])
def test_ranks(as_fa, lead):
    torch.manual_seed(len(lead))
    q, k, v = rand(*lead, 2, 5, 8), rand(*lead, 2, 7, 8), rand(*lead, 2, 7, 8)
    check(q, k, v, is_causal=True)
    full = lead + (2, 5, 7)
    m = torch.rand(*((full[0],) + (1,) * (len(full) - 3) + (5, 7) if lead else (5, 7))) > 0.3
    check(q, k, v, m)


def test_views_without_copy(as_fa):
    qb, kb, vb = rand(2, 5, 3, 8), rand(2, 7, 3, 8), rand(2, 7, 3, 8)
    check(qb.transpose(1, 2), kb.transpose(1, 2), vb.transpose(1, 2), is_causal=True)


def test_cpu_fallback_is_torch():
    q, k, v = (torch.randn(2, 3, 5, 8) for _ in range(3))
    assert fa.sdpa_plan(q, k, v).fallback == sdpa_rules.DEVICE
    assert torch.equal(fa.scaled_dot_product_attention(q, k, v, is_causal=True),
                       F.scaled_dot_product_attention(q, k, v, is_causal=True))  # fmt: skip
    for m, causal in ((torch.ones(5, 5, dtype=torch.bool), True), (torch.ones(5, dtype=torch.bool), False)):
        with pytest.raises(Exception) as want:
            F.scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=causal)
        with pytest.raises(type(want.value)) as got:
            fa.scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=causal)
        assert str(got.value) == str(want.value)
