"""fa.scaled_dot_product_attention on a GPU against torch's SDPA: outputs and gradients of the calls fa runs
(fa.sdpa_plan says so) against torch's math backend in float64, with FlashAttention's rule (fa's max error at most
twice that of torch's math backend at the same precision, plus a small slack): causal with L < S, L == S and L > S
(torch's top-left alignment), boolean / additive / broadcast masks with fully masked rows, GQA, scales, ranks 3 to
5, float16 and bfloat16, and random draws of them together. The calls fa leaves to torch (dropout, CPU, float32,
is_causal with a mask, heads without enable_gqa) return torch's own result or raise torch's own error."""

import os

import pytest

from conftest import cuda_reason

REASON = cuda_reason()
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")
if REASON is None:
    os.environ.setdefault("FA_TUNE_POLICY", "defaults")
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import fa

OUT_SLACK = 1e-3
GRAD_SLACK = 2e-3


def rand(*shape, dtype, requires_grad=True):
    return torch.randn(*shape, device="cuda").to(dtype).requires_grad_(requires_grad)


def math_sdpa(q, k, v, mask, **kw):
    """torch's math backend at q's precision: its fp16 / bf16 reductions allowed (since torch 2.5 it computes half
    inputs in float32 unless told otherwise, which is not the same precision as a tensor-core kernel's)."""
    allowed = getattr(torch.backends.cuda, "fp16_bf16_reduction_math_sdp_allowed", None)
    before = allowed() if allowed else None
    if allowed:
        torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True)
    try:
        with sdpa_kernel(SDPBackend.MATH):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **kw)
    finally:
        if allowed:
            torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(before)


def max_err(a, b):
    a, b = a.double(), b.double()
    assert not torch.isnan(a).any(), "NaN in fa's result"
    return (a - b).abs().max().item() if a.numel() else 0.0


def check_close(name, got, low, ref, slack):
    e_fa, e_pt = max_err(got, ref), max_err(low, ref)
    assert e_fa <= 2 * e_pt + slack, f"{name}: fa error {e_fa:.3e} > 2 x torch error {e_pt:.3e} + {slack}"


def compare(q, k, v, mask=None, backward=True, **kw):
    """fa against torch's math backend in float64 (reference) and at q's precision, forward and gradients."""
    plan = fa.sdpa_plan(q, k, v, mask, **kw)
    assert plan.fallback is None, plan  # the case runs in fa, else the test checks nothing of fa
    o = fa.scaled_dot_product_attention(q, k, v, mask, **kw)
    leaves = (q, k, v)
    ref_in = [t.detach().double().requires_grad_() for t in leaves]
    low_in = [t.detach().clone().requires_grad_() for t in leaves]
    ref_mask = mask if mask is None or mask.dtype == torch.bool else mask.double()
    o_ref = math_sdpa(*ref_in, ref_mask, **kw)
    o_low = math_sdpa(*low_in, mask if mask is None or mask.dtype != torch.float32 else mask.to(q.dtype), **kw)
    assert o.shape == o_ref.shape and o.dtype == q.dtype
    check_close("o", o, o_low, o_ref, OUT_SLACK)
    if not backward:
        return o
    do = torch.randn_like(o_ref)
    g = torch.autograd.grad(o, leaves, do.to(o.dtype))
    g_ref = torch.autograd.grad(o_ref, ref_in, do)
    g_low = torch.autograd.grad(o_low, low_in, do.to(o_low.dtype))
    for name, got, low, ref in zip(("dq", "dk", "dv"), g, g_low, g_ref):
        assert got.shape == ref.shape
        check_close(name, got, low, ref, GRAD_SLACK)
    return o


DTYPES = ["float16", "bfloat16"]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lq,s", [(128, 128), (77, 77), (64, 200), (1, 93), (200, 64), (93, 1), (130, 129)])
def test_causal_top_left(dtype, lq, s):
    torch.manual_seed(lq * 1000 + s)
    dt = getattr(torch, dtype)
    q, k, v = rand(2, 4, lq, 64, dtype=dt), rand(2, 4, s, 64, dtype=dt), rand(2, 4, s, 64, dtype=dt)
    compare(q, k, v, is_causal=True)


@pytest.mark.parametrize("hq,hk", [(8, 2), (6, 1), (4, 4)])
@pytest.mark.parametrize("causal", [False, True])
def test_gqa(hq, hk, causal):
    torch.manual_seed(hq * 10 + hk)
    q = rand(2, hq, 96, 128, dtype=torch.bfloat16)
    k, v = rand(2, hk, 150, 128, dtype=torch.bfloat16), rand(2, hk, 150, 128, dtype=torch.bfloat16)
    compare(q, k, v, is_causal=causal, enable_gqa=True)


@pytest.mark.parametrize("scale", [None, 0.05, 0.3, 2.0])
def test_scales(scale):
    torch.manual_seed(7)
    q, k, v = (rand(1, 3, 70, 64, dtype=torch.float16) for _ in range(3))
    compare(q, k, v, scale=scale)


def random_bool_mask(shape, empty_rows=True):
    m = torch.rand(*shape, device="cuda") > 0.3
    if empty_rows and shape[-2] > 3:
        m[..., 1, :] = False  # a row with no key at all: torch's math backend gives 0, and so does fa
        m[..., 3, :] = False
    return m


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "mask_shape",
    [(2, 4, 50, 83), (2, 1, 50, 83), (1, 4, 50, 83), (50, 83), (1, 83), (2, 1, 1, 83), (50, 1), (1, 1, 1, 1)],
)
def test_bool_masks(dtype, mask_shape):
    torch.manual_seed(len(mask_shape) * 100 + mask_shape[-1])
    dt = getattr(torch, dtype)
    q, k, v = rand(2, 4, 50, 64, dtype=dt), rand(2, 4, 83, 64, dtype=dt), rand(2, 4, 83, 64, dtype=dt)
    compare(q, k, v, random_bool_mask(mask_shape))


@pytest.mark.parametrize("mask_dtype", ["same", "float32"])
@pytest.mark.parametrize("mask_shape", [(2, 4, 50, 83), (1, 1, 50, 83), (2, 1, 1, 83), (50, 88), (2, 4, 50, 88)])
def test_additive_masks(mask_dtype, mask_shape):
    torch.manual_seed(mask_shape[-1] + len(mask_shape))
    sk = mask_shape[-1]
    q, k, v = rand(2, 4, 50, 64, dtype=torch.bfloat16), rand(2, 4, sk, 64, dtype=torch.bfloat16), None
    v = rand(2, 4, sk, 64, dtype=torch.bfloat16)
    mask = torch.randn(*mask_shape, device="cuda")
    mask = mask.masked_fill(torch.rand(*mask_shape, device="cuda") > 0.8, float("-inf"))
    if mask_shape[-2] > 3:
        mask[..., 2, :] = float("-inf")  # a fully masked row
    mask = mask.to(torch.bfloat16 if mask_dtype == "same" else torch.float32)
    compare(q, k, v, mask)


def test_additive_mask_used_as_is():
    torch.manual_seed(3)
    q, k, v = rand(2, 4, 64, 64, dtype=torch.float16), rand(2, 4, 128, 64, dtype=torch.float16), None
    v = rand(2, 4, 128, 64, dtype=torch.float16)
    mask = torch.randn(2, 1, 64, 128, device="cuda", dtype=torch.float16)
    assert fa.sdpa_plan(q, k, v, mask).bias_direct
    compare(q, k, v, mask)


@pytest.mark.parametrize("lead", [(), (2, 3)])
def test_other_ranks(lead):
    torch.manual_seed(len(lead))
    q = rand(*lead, 4, 40, 64, dtype=torch.float16)
    k, v = rand(*lead, 4, 90, 64, dtype=torch.float16), rand(*lead, 4, 90, 32, dtype=torch.float16)
    compare(q, k, v, is_causal=True)
    mask = random_bool_mask((lead[0], 1, 1, 40, 90) if lead else (40, 90))  # over the first leading dim only
    compare(q, k, v, mask)


def test_strided_views_and_head_dims():
    """[B, S, H, D] tensors transposed to [B, H, S, D] (no copy), Ev != E."""
    torch.manual_seed(11)
    qb = rand(2, 70, 4, 128, dtype=torch.bfloat16)
    kb, vb = rand(2, 110, 2, 128, dtype=torch.bfloat16), rand(2, 110, 2, 64, dtype=torch.bfloat16)
    q, k, v = qb.transpose(1, 2), kb.transpose(1, 2), vb.transpose(1, 2)
    compare(q, k, v, is_causal=True, enable_gqa=True)


@pytest.mark.parametrize("seed", range(12))
def test_random_combinations(seed):
    """Masks (none, boolean, additive, broadcast or not), is_causal, GQA and scales drawn together at random lengths
    (a mask never with is_causal: torch refuses the pair)."""
    g = torch.Generator().manual_seed(seed)

    def pick(options):
        return options[int(torch.randint(len(options), (1,), generator=g))]

    hq, hk = pick([(4, 4), (8, 2), (6, 3), (4, 1)])
    lq, s = int(torch.randint(1, 160, (1,), generator=g)), int(torch.randint(1, 160, (1,), generator=g))
    dt, d = pick([torch.float16, torch.bfloat16]), pick([64, 128])
    torch.manual_seed(seed)
    q, k, v = rand(2, hq, lq, d, dtype=dt), rand(2, hk, s, d, dtype=dt), rand(2, hk, s, d, dtype=dt)
    kind, shape = pick(["none", "causal", "bool", "additive"]), pick([(2, hq, lq, s), (2, 1, lq, s), (lq, s), (1, s)])
    mask = None
    if kind == "bool":
        mask = random_bool_mask(shape)
    elif kind == "additive":
        mask = torch.randn(*shape, device="cuda").masked_fill(torch.rand(*shape, device="cuda") > 0.8, float("-inf"))
        mask = mask.to(pick([dt, torch.float32]))
    compare(q, k, v, mask, is_causal=kind == "causal", scale=pick([None, 0.1, 0.5]), enable_gqa=hq != hk)


def outcome(fn, *args, **kw):
    """("ok", result) or ("raised", exception type, message) of fn, seeded alike for dropout."""
    torch.manual_seed(5)
    try:
        return ("ok", fn(*args, **kw))
    except Exception as exc:  # torch's own error, whatever it is
        return ("raised", type(exc), str(exc))


def same_as_torch(q, k, v, mask=None, **kw):
    """fa gives torch's own outcome: the same tensor, or the same error."""
    want = outcome(F.scaled_dot_product_attention, q, k, v, attn_mask=mask, **kw)
    got = outcome(fa.scaled_dot_product_attention, q, k, v, mask, **kw)
    assert got[0] == want[0], (got, want)
    if want[0] == "ok":  # NaN where torch gives NaN (heads that broadcast without enable_gqa, in some versions)
        torch.testing.assert_close(got[1], want[1], rtol=0, atol=0, equal_nan=True)
    else:
        assert got[1:] == want[1:]
    return want[0]


def test_fallbacks_return_torchs_result():
    torch.manual_seed(1)
    q, k, v = (rand(2, 4, 33, 64, dtype=torch.float16, requires_grad=False) for _ in range(3))
    assert fa.sdpa_plan(q, k, v, dropout_p=0.2).fallback is not None
    assert same_as_torch(q, k, v, dropout_p=0.2) == "ok"
    assert same_as_torch(q.float(), k.float(), v.float(), is_causal=True) == "ok"
    assert same_as_torch(q.cpu().float(), k.cpu().float(), v.cpu().float(), is_causal=True) == "ok"
    assert same_as_torch(q, k, v, scale=0.0) == "ok"
    same_as_torch(q, k[:, :1], v[:, :1])  # heads differ without enable_gqa: torch broadcasts or raises


def test_fallbacks_raise_torchs_errors():
    """Masks with is_causal, masks that do not broadcast, heads that do not divide: whatever this torch does (raise,
    or accept some of them), fa does the same."""
    q, k, v = (rand(2, 4, 33, 64, dtype=torch.float16, requires_grad=False) for _ in range(3))
    outcomes = [
        same_as_torch(q, k, v, torch.ones(33, 33, dtype=torch.bool, device="cuda"), is_causal=True),
        same_as_torch(q, k, v, torch.ones(3, 33, 33, dtype=torch.bool, device="cuda")),
        same_as_torch(q, k, v, torch.ones(33, dtype=torch.bool, device="cuda")),
    ]
    k3 = rand(2, 3, 33, 64, dtype=torch.float16, requires_grad=False)
    outcomes.append(same_as_torch(q, k3, k3, enable_gqa=True))  # 4 heads over 3
    assert "raised" in outcomes, outcomes  # [3, 33, 33] cannot broadcast against 2 x 4 heads in any version
