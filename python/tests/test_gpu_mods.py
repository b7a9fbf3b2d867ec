"""fa.attention with user code (fa.Mods): each ready mod against the float32 reference given the mod's PyTorch
restatement, forward and backward (autograd; score_mods with their derivative); a mod restating a built-in agrees
with the built-in, gradients too; new buffer contents and scalars never recompile; a body that does not compile
raises fa.CompileError naming its line; a score_mod without its derivative refuses the backward; torch.compile
traces the ops, forward and backward; the kept block classification follows new buffer contents (version counter,
mods.changed()) and a captured graph classifies on every replay."""

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


def inputs(b=2, s=333, hq=4, hkv=2, d=64, dtype="bfloat16", seed=0):
    torch.manual_seed(seed)
    dt = getattr(torch, dtype)
    q = torch.randn(b, s, hq, d, device="cuda", dtype=dt)
    k = torch.randn(b, s, hkv, d, device="cuda", dtype=dt)
    v = torch.randn(b, s, hkv, d, device="cuda", dtype=dt)
    return q, k, v


def ready_mods(s, hq):
    docs = torch.cumsum((torch.rand(2, s, device="cuda") < 0.02).to(torch.int32), dim=1).to(torch.int32)
    table = torch.randn(hq, 2 * 32 + 1, device="cuda", dtype=torch.float32)
    return {
        "document": fa.mods.document(docs),
        "prefix_lm": fa.mods.prefix_lm(41),
        "sinks_window": fa.mods.sinks_window(4, 64),
        "chunked": fa.mods.chunked(100),
        "relative_bias": fa.mods.relative_bias(table, 32),
    }


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", ["document", "prefix_lm", "sinks_window", "chunked", "relative_bias"])
def test_ready_mods_match_the_reference(name, dtype):
    q, k, v = inputs(dtype=dtype, seed=hash(name) % 1000)
    mods = ready_mods(q.shape[1], q.shape[2])[name]
    causal = name == "relative_bias"
    o, lse = fa.attention(q, k, v, mods=mods, causal=causal, return_lse=True)
    o_ref, lse_ref = attention_ref(q, k, v, causal=causal, mods=mods)
    assert not torch.isnan(o).any()
    assert (o.float() - o_ref).abs().max().item() < 2e-2
    for _ in range(2):  # the inference path without LSE (its own kernel), its first call and a kept entry
        o2 = fa.attention(q, k, v, mods=mods, causal=causal)
        assert torch.equal(o2, o)
    fin = torch.isfinite(lse_ref)
    assert torch.equal(fin, torch.isfinite(lse))
    assert (lse[fin] - lse_ref[fin]).abs().max().item() < 1e-3


def test_restated_causal_and_softcap_agree_with_the_builtins():
    q, k, v = inputs(seed=3)
    builtin = fa.attention(q, k, v, causal=True, softcap=20.0)
    mods = fa.Mods(mask_mod="return j <= i;", score_mod="return u.scalar[0] * tanhf(s / u.scalar[0]);", scalars=[20.0])
    restated = fa.attention(q, k, v, mods=mods)
    assert (builtin.float() - restated.float()).abs().max().item() < 2e-2


def test_new_contents_and_scalars_never_recompile():
    q, k, v = inputs(seed=4)
    key1 = fa.problem_key(q, k, v, mods=fa.mods.prefix_lm(10))
    key2 = fa.problem_key(q, k, v, mods=fa.mods.prefix_lm(200))
    assert key1 == key2 and ".mod" in key1
    a = fa.attention(q, k, v, mods=fa.mods.prefix_lm(10))
    b = fa.attention(q, k, v, mods=fa.mods.prefix_lm(200))
    assert not torch.equal(a, b), "the scalar reached the kernel"


def test_bad_code_raises_compile_error_with_its_line():
    q, k, v = inputs(seed=5)
    bad = fa.Mods(mask_mod="int x = i;\nreturn no_such_function(x, j);")
    with pytest.raises(fa.CompileError) as e:
        fa.attention(q, k, v, mods=bad)
    assert "mask_mod(2)" in str(e.value)


def grads_vs_reference(q, k, v, mods, causal=False, **kw):
    """(fa's gradient error, torch's own error in q's dtype) per input, each against the float32 reference's
    gradients through the mod's PyTorch restatement (attention_ref)."""
    qs, ks, vs = (t.detach().clone().requires_grad_() for t in (q, k, v))
    o = fa.attention(qs, ks, vs, mods=mods, causal=causal, **kw)
    do = torch.randn_like(o)
    got = torch.autograd.grad(o, (qs, ks, vs), do)
    q32, k32, v32 = (t.detach().float().requires_grad_() for t in (q, k, v))
    o_ref, _ = attention_ref(q32, k32, v32, causal=causal, mods=mods)
    ref = torch.autograd.grad(o_ref, (q32, k32, v32), do.float())
    ql, kl, vl = (t.detach().clone().requires_grad_() for t in (q, k, v))
    o_low, _ = attention_ref(ql, kl, vl, causal=causal, mods=mods, upcast=False)
    low = torch.autograd.grad(o_low, (ql, kl, vl), do)
    out = []
    for g, r, lo in zip(got, ref, low):
        assert not torch.isnan(g).any()
        out.append(((g.float() - r).abs().max().item(), (lo.float() - r).abs().max().item()))
    return out


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", ["document", "prefix_lm", "sinks_window", "chunked", "relative_bias", "softcap"])
def test_ready_mods_backward_match_the_reference(name, dtype):
    """Autograd through fa.attention with each ready mod (score_mods with their derivative) against the reference's
    gradients: within twice torch's own error in the same dtype, plus a small slack."""
    q, k, v = inputs(dtype=dtype, seed=hash(name) % 1000 + 17)
    mods = ready_mods(q.shape[1], q.shape[2])[name] if name != "softcap" else fa.mods.softcap(5.0)
    causal = name == "relative_bias"
    for e_fa, e_torch in grads_vs_reference(q, k, v, mods, causal=causal):
        assert e_fa <= 2 * e_torch + 2e-3, (e_fa, e_torch)


def test_restated_builtins_give_the_builtins_gradients():
    """Causal + softcap restated as user code (mask_mod; score_mod with its derivative) give the built-in's
    gradients; ALiBi restated through a buffer of slopes likewise."""
    q, k, v = inputs(seed=3)
    do = torch.randn(q.shape[:3] + (v.shape[3],), device="cuda", dtype=q.dtype)

    def grads(**kw):
        qs, ks, vs = (t.detach().clone().requires_grad_() for t in (q, k, v))
        return torch.autograd.grad(fa.attention(qs, ks, vs, **kw), (qs, ks, vs), do)

    restated = fa.Mods(
        mask_mod="return j <= i;",
        score_mod="return u.scalar[0] * tanhf(s / u.scalar[0]);",
        score_mod_grad="const float t = tanhf(s / u.scalar[0]);\nreturn 1.0f - t * t;",
        scalars=[20.0],
    )
    for a, b in zip(grads(causal=True, softcap=20.0), grads(mods=restated)):
        assert (a.float() - b.float()).abs().max().item() < 3e-2
    slopes = torch.rand(q.shape[2], device="cuda", dtype=torch.float32)
    alibi = fa.Mods(
        score_mod="const float* sl = static_cast<const float*>(u.buf[0]);\nreturn s - sl[h] * fabsf((float)(i - j));",
        score_mod_grad="return 1.0f;",
        buffers=[slopes],
    )
    for a, b in zip(grads(alibi_slopes=slopes), grads(mods=alibi)):
        assert (a.float() - b.float()).abs().max().item() < 3e-2


def test_score_mod_without_its_derivative_refuses_the_backward_clearly():
    q, k, v = inputs(seed=6)
    q.requires_grad_(True)
    no_grad = fa.Mods(score_mod="return 2.0f * s;")
    with pytest.raises(ValueError, match="score_mod_grad"):
        fa.attention(q, k, v, mods=no_grad)
    with torch.no_grad():
        fa.attention(q, k, v, mods=no_grad)  # the forward alone needs no derivative
    fa.attention(q, k, v, mods=fa.mods.prefix_lm(5)).sum().backward()  # a mask_mod needs nothing more
    assert q.grad is not None and not torch.isnan(q.grad).any()


@pytest.mark.parametrize("docs", [1, 8])
def test_document_block_skipping_backward_matches_the_reference(docs):
    """Several query and key blocks, GQA: the backward's block skipping gives the reference's gradients, in the
    deterministic mode too."""
    q, k, v = inputs(b=2, s=1100, hq=4, hkv=2, d=128, seed=docs + 40)
    cuts = torch.rand((2, 1100), device="cuda").argsort(dim=-1) < (docs - 1)
    mods = fa.mods.document(torch.cumsum(cuts.to(torch.int32), dim=-1).to(torch.int32))
    for deterministic in (False, True):
        torch.use_deterministic_algorithms(deterministic)
        try:
            for e_fa, e_torch in grads_vs_reference(q, k, v, mods):
                assert e_fa <= 2 * e_torch + 2e-3, (e_fa, e_torch)
        finally:
            torch.use_deterministic_algorithms(False)


def test_training_step_entries_give_the_generic_paths_gradients():
    """fa.attention under autograd keeps one entry per signature (_grad_step): its first call, a kept entry, a dO with
    other strides, the deterministic mode and document ids rewritten between the forward and the backward (behind
    the version counter, then mods.changed()) give the generic path's outputs bit for bit and its gradients to
    rounding (layout="bhsd" views of the same memory take that path; the backward accumulates some gradients with
    atomics in any order), with and without user code; an in-place write to a buffer between the forward and the
    backward is refused in both paths."""
    q, k, v = inputs(b=2, s=700, hq=4, hkv=2, d=64, seed=31)
    ids = torch.cumsum((torch.rand(2, 700, device="cuda") < 0.01).to(torch.int32), dim=1).to(torch.int32)
    new_ids = torch.cumsum((torch.rand(2, 700, device="cuda") < 0.02).to(torch.int32), dim=1).to(torch.int32)
    do = torch.randn(q.shape[:3] + (v.shape[3],), device="cuda", dtype=q.dtype)
    do_t = do.transpose(1, 2).contiguous().transpose(1, 2)  # the same values, other strides

    def step(mods, layout, dout, kw, rewrite=None):
        qs, ks, vs = (t.detach().clone().requires_grad_() for t in (q, k, v))
        if layout == "bhsd":
            a, b_, c = (t.transpose(1, 2) for t in (qs, ks, vs))
            o = fa.attention(a, b_, c, mods=mods, layout="bhsd", **kw).transpose(1, 2)
        else:
            o = fa.attention(qs, ks, vs, mods=mods, **kw)
        if rewrite is not None:
            rewrite()
        return (o.detach(),) + torch.autograd.grad(o, (qs, ks, vs), dout)

    cases = [
        ("plain causal", lambda: None, dict(causal=True)),
        ("prefix_lm", lambda: fa.mods.prefix_lm(77), {}),
        ("document", lambda: fa.mods.document(ids), {}),
    ]

    def agree(fast, generic, det, name):
        assert torch.equal(fast[0], generic[0]), f"{name}: o"  # the forward is deterministic
        for what, a, b in zip(("dq", "dk", "dv"), fast[1:], generic[1:]):
            assert not torch.isnan(a).any(), f"{name}: {what}"
            diff, top = (a.float() - b.float()).abs().max().item(), b.float().abs().max().item()
            assert diff <= 1e-2 * top, f"{name}, deterministic {det}: {what} differs by {diff} (max {top})"

    for name, make, kw in cases:
        for dout, det in ((do, True), (do, True), (do_t, True), (do, False)):
            torch.use_deterministic_algorithms(det)
            try:
                agree(step(make(), "bshd", dout, kw), step(make(), "bhsd", dout, kw), det, name)
            finally:
                torch.use_deterministic_algorithms(False)
    keep = ids.clone()
    for layout in ("bshd", "bhsd"):
        with pytest.raises(RuntimeError, match="inplace"):
            step(fa.mods.document(ids), layout, do, {}, rewrite=lambda: ids.copy_(new_ids))
        ids.copy_(keep)

    def behind(mods):  # a write autograd cannot see, announced as the docs ask
        def rewrite():
            ids.data.copy_(new_ids)
            mods.changed()

        return rewrite

    m_fast, m_generic = fa.mods.document(ids), fa.mods.document(ids)
    fast = step(m_fast, "bshd", do, {}, rewrite=behind(m_fast))
    ids.data.copy_(keep)
    m_fast.changed()
    generic = step(m_generic, "bhsd", do, {}, rewrite=behind(m_generic))
    ids.data.copy_(keep)
    m_generic.changed()
    agree(fast, generic, False, "rewritten ids")  # both classify the backward afresh (a new epoch)
    unchanged = step(fa.mods.document(ids), "bshd", do, {})
    diff = (fast[1].float() - unchanged[1].float()).abs().max().item()
    assert diff > 0.1 * unchanged[1].float().abs().max().item(), f"the rewrite reached the backward ({diff})"


@pytest.mark.parametrize("which", ["relative_bias", "softcap", "sinks_window"])
def test_compile_traces_the_mods_backward(which):
    # The three shapes of the op's list inputs (buffers, scalars, iscalars): empty, of tensors, of numbers.
    q, k, v = inputs(seed=8)
    mods = {
        "relative_bias": lambda: fa.mods.relative_bias(torch.randn(q.shape[2], 17, device="cuda"), 8),
        "softcap": lambda: fa.mods.softcap(20.0),
        "sinks_window": lambda: fa.mods.sinks_window(4, 64),
    }[which]()
    qs, ks, vs = (t.detach().clone().requires_grad_() for t in (q, k, v))

    def f(q, k, v):
        return fa.attention(q, k, v, mods=mods, causal=True)

    out = torch.compile(f, fullgraph=True, dynamic=True)(qs, ks, vs)
    out.float().square().sum().backward()
    q2, k2, v2 = (t.detach().clone().requires_grad_() for t in (q, k, v))
    fa.attention(q2, k2, v2, mods=mods, causal=True).float().square().sum().backward()
    for a, b in ((qs.grad, q2.grad), (ks.grad, k2.grad), (vs.grad, v2.grad)):
        assert (a.float() - b.float()).abs().max().item() < 1e-2


def test_compile_traces_the_mods_op():
    q, k, v = inputs(seed=7)
    mods = fa.mods.chunked(64)

    def f(q, k, v):
        return fa.attention(q, k, v, mods=mods) + 1

    out = torch.compile(f, fullgraph=True, dynamic=True)(q, k, v)
    ref, _ = attention_ref(q, k, v, mods=mods)
    assert (out.float() - 1 - ref).abs().max().item() < 3e-2


@pytest.mark.parametrize("docs", [1, 2, 8])
@pytest.mark.parametrize("per_batch", [False, True])
def test_document_block_skipping_matches_the_reference(docs, per_batch):
    """Several query and key blocks: block skipping (classified tiles, shared over heads / batch entries by depends)
    gives the reference's answer."""
    q, k, v = inputs(b=2, s=1100, hq=4, hkv=2, d=128, seed=docs)
    shape = (2, 1100) if per_batch else (1100,)
    cuts = torch.rand(shape, device="cuda").argsort(dim=-1) < (docs - 1)
    ids = torch.cumsum(cuts.to(torch.int32), dim=-1).to(torch.int32)
    mods = fa.mods.document(ids)
    assert mods.depends == ("b" if per_batch else "")
    o, lse = fa.attention(q, k, v, mods=mods, return_lse=True)
    o_ref, lse_ref = attention_ref(q, k, v, mods=mods)
    assert (o.float() - o_ref).abs().max().item() < 2e-2
    fin = torch.isfinite(lse_ref)
    assert torch.equal(fin, torch.isfinite(lse))
    assert (lse[fin] - lse_ref[fin]).abs().max().item() < 1e-3


def test_per_head_mask():
    q, k, v = inputs(b=1, s=700, hq=4, hkv=4, d=64, seed=9)
    mods = fa.Mods(
        mask_mod="return j <= i && (h % 2 == 0 || i - j < 100 * h);",
        reference_mask=lambda b, h, i, j: (j <= i) & ((h % 2 == 0) | (i - j < 100 * h)),
        depends="h",
    )
    o = fa.attention(q, k, v, mods=mods)
    o_ref = attention_ref(q, k, v, mods=mods)
    o_ref = o_ref[0] if isinstance(o_ref, tuple) else o_ref
    assert (o.float() - o_ref).abs().max().item() < 2e-2


def test_changed_buffers_give_the_new_answer():
    """The library keeps a mask_mod's block classification across calls (fa.h: fa_mods.mask_epoch); Python keys it
    on each buffer's identity and version counter. New ids written in place, and a write behind the version counter
    followed by mods.changed(), give the new ids' answer; without changed() such a write is not seen (the cache was
    in use)."""
    s = 1100
    q, k, v = inputs(b=1, s=s, hq=4, hkv=4, d=64, seed=50)
    ids = torch.zeros(s, device="cuda", dtype=torch.int32)  # one document
    mods = fa.mods.document(ids)

    def error():
        o = fa.attention(q, k, v, mods=mods)
        o_ref, _ = attention_ref(q, k, v, mods=mods)
        return (o.float() - o_ref).abs().max().item()

    assert error() < 2e-2
    assert error() < 2e-2  # the same buffers: the kept classification
    ids.copy_(torch.sort(torch.randint(0, 8, (s,), device="cuda", dtype=torch.int32)).values)  # in place
    assert error() < 2e-2
    ids.data.copy_(torch.zeros_like(ids))  # .data: a write the version counter does not see
    stale = error()
    mods.changed()
    assert error() < 2e-2
    assert stale > 2e-2, "the write behind the version counter was seen without mods.changed(): nothing was cached"


def test_graph_replays_classify_every_time():
    """A captured call classifies on every replay (nothing is cached or looked up while capturing): ids written into
    the captured buffer between replays give their own answer, also after eager calls kept a classification."""
    s = 900
    q, k, v = inputs(b=1, s=s, hq=4, hkv=4, d=64, seed=51)
    ids = torch.zeros(s, device="cuda", dtype=torch.int32)
    mods = fa.mods.document(ids)
    fa.prepare(q, k, v, mods=mods)
    fa.attention(q, k, v, mods=mods)
    fa.attention(q, k, v, mods=mods)  # eager: kept, then reused
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        with torch.cuda.graph(graph, stream=stream):
            out = fa.attention(q, k, v, mods=mods)
    torch.cuda.current_stream().wait_stream(stream)
    for docs in (8, 1, 3):
        ids.copy_(torch.sort(torch.randint(0, docs, (s,), device="cuda", dtype=torch.int32)).values)
        graph.replay()
        torch.cuda.synchronize()
        o_ref, _ = attention_ref(q, k, v, mods=mods)
        assert (out.float() - o_ref).abs().max().item() < 2e-2, docs
