"""Attention sinks on a GPU (fa.attention(..., sinks=), fa.attention_with_kvcache(..., sinks=), transformers' s_aux)
against the float32 reference (attention_ref with sinks): outputs, LSE (the sink included) and the gradients of q, k,
v and the sinks, FlashAttention's rule (fa's max error at most twice that of the same-precision PyTorch
implementation plus a slack); fixed length, varlen, GQA, causal and windows, user code beside the sinks, a bf16 sinks
parameter (its gradient in bf16), fully masked rows (o = 0, lse = sink), KV caches contiguous and paged with split
and unsplit runs, torch.compile without graph breaks, and the argument rules."""

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
    from test_gpu_attention import GRAD_SLACK, OUT_SLACK, check_close, max_err


def sinks_of(hq, seed, dtype=None):
    """Logits as a model's could be: typical ones, one large enough to dominate its rows, one very negative (float32
    unless `dtype`)."""
    g = torch.Generator().manual_seed(seed)
    s = torch.randn(hq, generator=g) * 2
    s[hq // 2] = 12.0
    s[-1] = -40.0
    return s.to(device="cuda", dtype=dtype or torch.float32)


def compare(q, k, v, sinks, **kw):
    """fa against the float32 and the same-precision reference: o, lse, and dq, dk, dv, dsinks."""
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    sinks = sinks.detach().requires_grad_()
    o, lse = fa.attention(q, k, v, sinks=sinks, return_lse=True, **kw)
    ref_kw = {key: val for key, val in kw.items() if key in ("causal", "window", "softcap", "scale", "mods")}
    leaves32 = [t.detach().float().requires_grad_() for t in (q, k, v, sinks)]
    o_ref, lse_ref = attention_ref(*leaves32[:3], sinks=leaves32[3], upcast=True, **ref_kw)
    leaves_lo = [t.detach().clone().requires_grad_() for t in (q, k, v, sinks)]
    o_pt, _ = attention_ref(*leaves_lo[:3], sinks=leaves_lo[3], upcast=False, **ref_kw)
    check_close("o", o, o_pt, o_ref, OUT_SLACK)
    assert lse.dtype == torch.float32 and lse.shape == lse_ref.shape
    assert max_err(lse, lse_ref) <= 2e-3 + 1e-5 * lse_ref.abs().max().item()
    do = torch.randn_like(o_ref)
    grads = torch.autograd.grad(o, (q, k, v, sinks), do.to(o.dtype))
    g_ref = torch.autograd.grad(o_ref, leaves32, do)
    g_pt = torch.autograd.grad(o_pt, leaves_lo, do.to(o_pt.dtype))
    for name, got, low, ref in zip(("dq", "dk", "dv", "dsinks"), grads, g_pt, g_ref):
        assert got.shape == ref.shape and got.dtype == low.dtype
        check_close(name, got, low, ref, GRAD_SLACK)
    return o, lse


@pytest.mark.parametrize("dtype_name", ["float16", "bfloat16"])
@pytest.mark.parametrize("mask", ["none", "causal", "window"])
@pytest.mark.parametrize("heads", [(8, 8), (8, 2)])
def test_forward_and_gradients(dtype_name, mask, heads):
    dtype = getattr(torch, dtype_name)
    hq, hk = heads
    torch.manual_seed(11)
    q = torch.randn(2, 200, hq, 64, device="cuda", dtype=dtype)
    k = torch.randn(2, 333, hk, 64, device="cuda", dtype=dtype)
    v = torch.randn(2, 333, hk, 64, device="cuda", dtype=dtype)
    kw = {"causal": mask == "causal", "window": (40, 5) if mask == "window" else (-1, -1)}
    compare(q, k, v, sinks_of(hq, 1), **kw)


def test_fully_masked_rows_give_the_sink():
    """Causal with more queries than keys: the first rows see no key; o = 0 there and lse = the sink."""
    torch.manual_seed(12)
    q = torch.randn(1, 40, 4, 64, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, 9, 4, 64, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(1, 9, 4, 64, device="cuda", dtype=torch.bfloat16)
    sinks = sinks_of(4, 2)
    o, lse = compare(q, k, v, sinks, causal=True)
    hidden = 40 - 9  # rows 0 .. 30 see no key (bottom-right)
    assert o[:, :hidden].abs().max().item() == 0.0
    assert torch.allclose(lse[0, :, :hidden], sinks[:, None].expand(4, hidden).float(), rtol=1e-6, atol=0)


def test_varlen_and_bhsd():
    torch.manual_seed(13)
    lens_q, lens_k = [30, 0, 77], [50, 20, 77]
    cu_q = torch.tensor([0, 30, 30, 107], dtype=torch.int32, device="cuda")
    cu_k = torch.tensor([0, 50, 70, 147], dtype=torch.int32, device="cuda")
    q = torch.randn(107, 6, 64, device="cuda", dtype=torch.float16, requires_grad=True)
    k = torch.randn(147, 2, 64, device="cuda", dtype=torch.float16, requires_grad=True)
    v = torch.randn(147, 2, 64, device="cuda", dtype=torch.float16, requires_grad=True)
    sinks = sinks_of(6, 3).requires_grad_()
    o = fa.attention(q, k, v, sinks=sinks, causal=True, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
    do = torch.randn_like(o)
    dq, dk, dv, ds = torch.autograd.grad(o, (q, k, v, sinks), do)
    ds_ref = torch.zeros_like(ds)
    for b in range(3):
        sq0, sk0 = int(cu_q[b]), int(cu_k[b])
        if lens_q[b] == 0:
            continue
        qb = q.detach()[None, sq0 : sq0 + lens_q[b]].float().requires_grad_()
        kb = k.detach()[None, sk0 : sk0 + lens_k[b]].float().requires_grad_()
        vb = v.detach()[None, sk0 : sk0 + lens_k[b]].float().requires_grad_()
        sb = sinks.detach().float().requires_grad_()
        o_ref, _ = attention_ref(qb, kb, vb, causal=True, sinks=sb)
        assert max_err(o[sq0 : sq0 + lens_q[b]], o_ref[0]) <= 1e-2
        g = torch.autograd.grad(o_ref, (qb, kb, vb, sb), do[None, sq0 : sq0 + lens_q[b]].float())
        assert max_err(dq[sq0 : sq0 + lens_q[b]], g[0][0]) <= 3e-2
        ds_ref += g[3]
    assert max_err(ds, ds_ref) <= 3e-2 * max(1.0, ds_ref.abs().max().item())
    # bhsd views of the same problem as a fixed-length one: the layout moves nothing
    qf = torch.randn(1, 6, 90, 64, device="cuda", dtype=torch.float16)
    kf = torch.randn(1, 2, 90, 64, device="cuda", dtype=torch.float16)
    o_bhsd = fa.attention(qf, kf, kf, sinks=sinks.detach(), layout="bhsd", causal=True)
    o_bshd = fa.attention(qf.transpose(1, 2), kf.transpose(1, 2), kf.transpose(1, 2), sinks=sinks.detach(), causal=True)
    assert torch.equal(o_bhsd, o_bshd.transpose(1, 2))


def test_bf16_parameter_and_user_code():
    """A bf16 nn.Parameter of sinks (transformers' gpt-oss) gets a bf16 gradient; sinks beside a key-padding
    mask_mod (the transformers backend's padding) match the reference."""
    torch.manual_seed(14)
    q = torch.randn(2, 64, 8, 64, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(2, 64, 2, 64, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(2, 64, 2, 64, device="cuda", dtype=torch.bfloat16)
    keep = torch.ones(2, 64, dtype=torch.int32, device="cuda")
    keep[1, :10] = 0  # left padding of sequence 1
    mods = fa.Mods(
        mask_mod="return static_cast<const fa_buf0_t*>(u.buf[0])[b * u.stride[0][0] + j * u.stride[0][1]] != 0;",
        buffers=[keep],
        depends="b",
        reference_mask=lambda b, h, i, j: keep[b][j] != 0,
    )
    param = torch.nn.Parameter(sinks_of(8, 4, torch.bfloat16))
    o = fa.attention(q, k, v, sinks=param, causal=True, mods=mods)
    o.float().square().sum().backward()
    assert param.grad is not None and param.grad.dtype == torch.bfloat16 and param.grad.shape == (8,)
    compare(q, k, v, param.detach().float(), causal=True, mods=mods)


@pytest.mark.parametrize("paged", [False, True])
def test_kvcache_split_and_unsplit(paged):
    torch.manual_seed(15)
    cap, page = 512, 64
    q = torch.randn(3, 1, 8, 128, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(3, cap, 2, 128, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(3, cap, 2, 128, device="cuda", dtype=torch.bfloat16)
    lens = torch.tensor([cap, 0, 77], dtype=torch.int32, device="cuda")
    sinks = sinks_of(8, 5)
    kw = {"cache_seqlens": lens}
    kc, vc = k, v
    if paged:
        n = 3 * cap // page
        perm = torch.randperm(n, device="cuda")
        kc = torch.empty(n, page, 2, 128, device="cuda", dtype=k.dtype)
        vc = torch.empty_like(kc)
        kc[perm], vc[perm] = k.reshape(n, page, 2, 128), v.reshape(n, page, 2, 128)
        kw["block_table"] = perm.reshape(3, cap // page).to(torch.int32)
    for splits in (1, 4, 0):
        o, lse = fa.attention_with_kvcache(q, kc, vc, sinks=sinks, num_splits=splits, return_lse=True, **kw)
        for b in range(3):
            n = int(lens[b])
            o_ref, lse_ref = attention_ref(q[b : b + 1], k[b : b + 1, :n], v[b : b + 1, :n], sinks=sinks)
            assert max_err(o[b : b + 1], o_ref) <= 2e-2, f"splits {splits} sequence {b}"
            assert max_err(lse[b : b + 1], lse_ref) <= 2e-3, f"splits {splits} sequence {b}"
        assert torch.allclose(lse[1], sinks[:, None], rtol=1e-6, atol=0), "a sequence without keys: lse = the sink"


def test_compile_has_no_graph_breaks():
    torch.manual_seed(16)
    q = torch.randn(2, 128, 8, 64, device="cuda", dtype=torch.float16, requires_grad=True)
    k = torch.randn(2, 128, 2, 64, device="cuda", dtype=torch.float16, requires_grad=True)
    v = torch.randn(2, 128, 2, 64, device="cuda", dtype=torch.float16, requires_grad=True)
    sinks = sinks_of(8, 6).requires_grad_()

    def step(q, k, v, sinks):
        return fa.attention(q, k, v, sinks=sinks, causal=True).float().square().sum()

    compiled = torch.compile(step, fullgraph=True, dynamic=True)
    loss = compiled(q, k, v, sinks)
    got = torch.autograd.grad(loss, (q, k, v, sinks))
    want = torch.autograd.grad(step(q, k, v, sinks), (q, k, v, sinks))
    for g, w in zip(got, want):
        assert torch.allclose(g.float(), w.float(), rtol=1e-3, atol=1e-3)


def test_argument_rules():
    q = torch.randn(1, 16, 4, 64, device="cuda", dtype=torch.float16)
    with pytest.raises(fa.InvalidArgument, match=r"sinks: shape \(3,\) does not match q's heads 4"):
        fa.attention(q, q, q, sinks=torch.zeros(3, device="cuda"))
    with pytest.raises(fa.InvalidArgument, match="sinks: device"):
        fa.attention(q, q, q, sinks=torch.zeros(4))
    with pytest.raises(fa.InvalidArgument, match="sinks: dtype torch.int32"):
        fa.attention(q, q, q, sinks=torch.zeros(4, dtype=torch.int32, device="cuda"))
    with pytest.raises(fa.InvalidArgument, match=r"sinks: shape \(4, 1\)"):
        fa.attention_with_kvcache(q[:, :1], q, q, sinks=torch.zeros(4, 1, device="cuda"))
    assert ".sinks" in fa.problem_key(q, q, q, sinks=torch.zeros(4, device="cuda"))
    assert ".sinks" not in fa.problem_key(q, q, q)


def test_transformers_backend_passes_s_aux():
    """The transformers backend's attention_forward with gpt-oss's s_aux (a bf16 parameter) against transformers'
    eager formula (the sinks concatenated to the scaled, masked scores; softmax; the column dropped), with padding."""
    from fa.integrations import transformers as backend

    class Module:
        is_causal = True

    torch.manual_seed(17)
    q = torch.randn(2, 8, 33, 64, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(2, 2, 33, 64, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(2, 2, 33, 64, device="cuda", dtype=torch.bfloat16)
    s_aux = torch.nn.Parameter(sinks_of(8, 7, torch.bfloat16))
    mask2d = torch.ones(2, 33, dtype=torch.bool, device="cuda")
    mask2d[0, :5] = False
    got, _ = backend.attention_forward(Module(), q, k, v, mask2d, scaling=0.125, sliding_window=16, s_aux=s_aux)
    pos, j = torch.arange(33, device="cuda")[:, None], torch.arange(33, device="cuda")[None, :]
    keep = ((j <= pos) & (j > pos - 16))[None, None] & mask2d[:, None, None]
    s = torch.einsum("bhid,bhjd->bhij", q.float(), k.float().repeat_interleave(4, dim=1)) * 0.125
    s = s.masked_fill(~keep, float("-inf"))
    combined = torch.cat([s_aux.detach().float().reshape(1, -1, 1, 1).expand(2, 8, 33, 1), s], dim=-1)
    p = torch.softmax(combined, dim=-1)[..., 1:]
    want = torch.einsum("bhij,bhjd->bihd", p, v.float().repeat_interleave(4, dim=1))
    valid = mask2d[:, :, None, None].expand_as(want)  # padded queries' rows are the model's to ignore
    assert max_err(got.float()[valid], want[valid]) <= 2e-2
    got.float().sum().backward()
    assert s_aux.grad is not None and s_aux.grad.dtype == torch.bfloat16
