"""fa.attention over fp8 q / k / v (the Hopper fp8 forward): e4m3 / e5m2 inputs with per-tensor and per-(batch, KV
head) descales, bf16 / fp16 outputs, bshd / bhsd / varlen, causal, GQA, against the float64 reference over the
dequantized inputs within the bound P's rounding to e4m3 allows (tests/gpu/fp8_forward_support.h: 2^-3 sum_j P |V|
plus the output's rounding); and the rules: descales only with fp8, out_dtype bf16 / fp16, no bias, shapes."""

import os

import pytest

from conftest import cuda_reason

REASON = cuda_reason()
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")
if REASON is None:
    os.environ.setdefault("FA_TUNE_POLICY", "defaults")
    import torch

    import fa
    from attention_ref import attention_ref

    HOPPER = torch.cuda.get_device_capability() == (9, 0)
    FP8 = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
    FP8_MAX = {"e4m3": 448.0, "e5m2": 57344.0}
else:
    HOPPER = False

needs_hopper = pytest.mark.skipif(not HOPPER, reason="the fp8 forward runs on sm_90")


def quantize(x, fmt, per_head):
    """(codes, float32 descales [B, Hkv] or (1,)) of x [B, S, H, D] (H: KV heads; per (batch, head) or per tensor)."""
    amax = x.abs().amax(dim=(1, 3)) if per_head else x.abs().amax().reshape(1)
    descale = (amax.float() / FP8_MAX[fmt]).clamp(min=1e-12)
    scale = descale[:, None, :, None] if per_head else descale
    return (x.float() / scale).clamp(-FP8_MAX[fmt], FP8_MAX[fmt]).to(FP8[fmt]), descale


def dequant(codes, descale, group=1):
    """codes [B, S, H, D] times descale ([B, Hkv] or (1,)) as float64 (q: its heads' groups share a factor)."""
    if descale.dim() == 2:
        return codes.double() * descale.double().repeat_interleave(group, dim=1)[:, None, :, None]
    return codes.double() * descale.double()


def check_bound(o, q, k, v, causal, out_dtype):
    """o within the rounding bound of the float64 reference over q, k, v (float64, dequantized)."""
    ref, lse = attention_ref(q, k, v, causal=causal, upcast=False)
    mag, _ = attention_ref(q, k, v.abs(), causal=causal, upcast=False)
    err = (o.double() - ref).abs()
    bound = mag / 8 + ref.abs() * 2.0**-8 + 1e-3 * mag.max()
    assert torch.isfinite(o).all()
    worst = float((err / bound).max())
    assert worst <= 1.0, f"error {float(err.max()):.3g} above the bound (worst share {worst:.3f})"
    return ref, lse


@needs_hopper
@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
@pytest.mark.parametrize("d,dv", [(64, 64), (128, 128), (256, 256), (192, 128)])
def test_fp8_matches_reference(fmt, d, dv):
    g = torch.Generator(device="cuda").manual_seed(d + dv)
    b, sq, sk, hq, hkv = 2, 333, 517, 4, 2
    causal = d == 128
    per_head = d != 64
    out_dtype = torch.float16 if dv == 128 else torch.bfloat16
    x = [torch.randn(b, s, h, e, device="cuda", generator=g) for s, h, e in ((sq, hq, d), (sk, hkv, d), (sk, hkv, dv))]
    # q's descales are per (batch, KV head): quantize its heads' groups together
    q8, dq = quantize(x[0].reshape(b, sq, hkv, -1), fmt, per_head)
    q8 = q8.reshape(b, sq, hq, d)
    (k8, dk), (v8, dv_) = quantize(x[1], fmt, per_head), quantize(x[2], fmt, per_head)
    o, lse = fa.attention(
        q8, k8, v8, causal=causal, descale_q=dq, descale_k=dk, descale_v=dv_, out_dtype=out_dtype, return_lse=True
    )
    assert o.dtype == out_dtype and o.shape == (b, sq, hq, dv)
    qd = dequant(q8.reshape(b, sq, hkv, -1), dq).reshape(b, sq, hq, d) if per_head else dequant(q8, dq)
    _, lse_ref = check_bound(o, qd, dequant(k8, dk), dequant(v8, dv_), causal, out_dtype)
    assert torch.allclose(lse.double(), lse_ref.double(), atol=5e-3, rtol=1e-3)


@needs_hopper
def test_fp8_layouts_and_varlen():
    g = torch.Generator(device="cuda").manual_seed(7)
    b, s, h, d = 2, 200, 4, 128
    x = [torch.randn(b, s, h, d, device="cuda", generator=g) for _ in range(3)]
    (q8, dq), (k8, dk), (v8, dv) = (quantize(t, "e4m3", False) for t in x)
    o = fa.attention(q8, k8, v8, causal=True, descale_q=dq, descale_k=dk, descale_v=dv)
    assert o.dtype == torch.bfloat16
    # bhsd views: the same values
    ob = fa.attention(
        q8.transpose(1, 2), k8.transpose(1, 2), v8.transpose(1, 2), causal=True, layout="bhsd", descale_q=dq,
        descale_k=dk, descale_v=dv,
    )  # fmt: skip
    assert torch.equal(ob.transpose(1, 2), o)
    # varlen: the two sequences packed give each sequence's fixed-length result
    cu = torch.tensor([0, s, 2 * s], dtype=torch.int32, device="cuda")
    ov = fa.attention(
        q8.reshape(-1, h, d), k8.reshape(-1, h, d), v8.reshape(-1, h, d), causal=True, cu_seqlens_q=cu,
        cu_seqlens_k=cu, max_seqlen_q=s, max_seqlen_k=s, descale_q=dq, descale_k=dk, descale_v=dv,
    )  # fmt: skip
    check_bound(ov.reshape(b, s, h, d), dequant(q8, dq), dequant(k8, dk), dequant(v8, dv), True, torch.bfloat16)
    check_bound(o, dequant(q8, dq), dequant(k8, dk), dequant(v8, dv), True, torch.bfloat16)


def test_fp8_rules():
    x = torch.zeros(1, 8, 2, 64, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(fa.InvalidArgument, match="descale_q: given"):
        fa.attention(x, x, x, descale_q=torch.ones(1, device="cuda"))
    with pytest.raises(fa.InvalidArgument, match="out_dtype"):
        fa.attention(x, x, x, out_dtype=torch.float16)
    x8 = x.to(torch.float8_e4m3fn)
    with pytest.raises(fa.InvalidArgument, match="out_dtype"):
        fa.attention(x8, x8, x8, out_dtype=torch.float32)
    with pytest.raises(fa.InvalidArgument, match="bias"):
        fa.attention(x8, x8, x8, bias=torch.zeros(1, 2, 8, 8, device="cuda"))
    with pytest.raises(fa.InvalidArgument, match="descale_k: batch 3 does not match q's batch 1"):
        fa.attention(x8, x8, x8, descale_k=torch.ones(3, 2, device="cuda"))
    with pytest.raises(fa.InvalidArgument, match="dtype"):
        fa.attention(x8, x8.to(torch.float8_e5m2), x8)


@needs_hopper
def test_fp8_prepare_is_supported_and_key():
    """fa.prepare / fa.is_supported / fa.problem_key take fa.attention's fp8 arguments (descales, out_dtype): the key
    names the fp8 dtype and the output dtype, a prepared call gives the unprepared call's result, bad descales are
    refused naming the argument."""
    g = torch.Generator(device="cuda").manual_seed(3)
    x = [torch.randn(2, 256, 4, 128, device="cuda", generator=g) for _ in range(3)]
    (q8, dq), (k8, dk), (v8, dv) = (quantize(t, "e4m3", True) for t in x)
    kw = dict(causal=True, descale_q=dq, descale_k=dk, descale_v=dv, out_dtype=torch.float16)
    key = fa.problem_key(q8, k8, v8, **kw)
    assert "fwd_wgmma" in key and "e4m3" in key and "o_fp16" in key, key
    assert "e5m2" in fa.problem_key(*(t.to(torch.float8_e5m2) for t in (q8, k8, v8)), causal=True)
    assert fa.is_supported(q8, k8, v8, **kw)
    no = fa.is_supported(q8, k8, v8, descale_k=torch.ones(3, 4, device="cuda"))
    assert not no and "descale_k: batch 3 does not match q's batch 2" in no.reason
    want = fa.attention(q8, k8, v8, **kw)
    fa.prepare(q8, k8, v8, **kw)
    assert torch.equal(fa.attention(q8, k8, v8, **kw), want)
    with pytest.raises(fa.InvalidArgument, match="backward: True"):
        fa.prepare(q8, k8, v8, backward=True, **kw)
