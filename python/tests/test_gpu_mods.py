"""fa.attention with user code (fa.Mods): each ready mod against the float32 reference given the mod's PyTorch
restatement; a mod restating a built-in agrees with the built-in; new buffer contents and scalars never recompile;
a body that does not compile raises fa.CompileError naming its line; torch.compile traces the op."""
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
    fin = torch.isfinite(lse_ref)
    assert torch.equal(fin, torch.isfinite(lse))
    assert (lse[fin] - lse_ref[fin]).abs().max().item() < 1e-3


def test_restated_causal_and_softcap_agree_with_the_builtins():
    q, k, v = inputs(seed=3)
    builtin = fa.attention(q, k, v, causal=True, softcap=20.0)
    mods = fa.Mods(mask_mod="return j <= i;", score_mod="return u.scalar[0] * tanhf(s / u.scalar[0]);",
                   scalars=[20.0])
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


def test_backward_with_mods_is_refused_clearly():
    q, k, v = inputs(seed=6)
    q.requires_grad_(True)
    with pytest.raises(NotImplementedError):
        fa.attention(q, k, v, mods=fa.mods.prefix_lm(5))


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
    mods = fa.Mods(mask_mod="return j <= i && (h % 2 == 0 || i - j < 100 * h);",
                   reference_mask=lambda b, h, i, j: (j <= i) & ((h % 2 == 0) | (i - j < 100 * h)), depends="h")
    o = fa.attention(q, k, v, mods=mods)
    o_ref = attention_ref(q, k, v, mods=mods)
    o_ref = o_ref[0] if isinstance(o_ref, tuple) else o_ref
    assert (o.float() - o_ref).abs().max().item() < 2e-2
