"""Tensors that disagree, through every torch entry point on a GPU (issue 40): random inconsistent shapes (the
perturbations of test_shape_rules, as tensors) through fa.attention (without and with requires_grad, fixed length
and varlen), the backward op, fa.attention_with_kvcache (contiguous and paged) and fa.merge_attention each raise
fa.InvalidArgument with the shape rule's own message, launch nothing, and leave a context on which a valid call
afterwards gives the reference's answer (outputs poisoned with NaN beforehand, so an element fa never wrote fails).
Issue 40's reported cases are among them word for word. Run it under compute-sanitizer memcheck too (without
torch's caching allocator, so that an access past a tensor is past its own allocation):
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck python3 -m pytest -q \
      python/tests/test_gpu_shape_mismatch.py"""

import math
import os
import warnings
import random

import pytest

from conftest import cuda_reason
from test_shape_rules import (
    FORWARD_ARGS,
    backward_case,
    backward_perturbations,
    fixed_case,
    fixed_perturbations,
    kv_case,
    kv_perturbations,
    merge_case,
    merge_perturbations,
    raises,
    run_backward,
    run_fixed,
    run_kv,
    run_merge,
    run_varlen,
    varlen_case,
    varlen_perturbations,
)

REASON = cuda_reason()
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")
if REASON is None:
    os.environ.setdefault("FA_TUNE_POLICY", "defaults")
    import torch

    import fa
    from attention_ref import attention_ref

SEEDS = range(8)
MAX_ELEMENTS = 1 << 24  # per case: the random shapes stay small enough for memcheck


def rule_message(run, case) -> str:
    """The shape rule's message for `case` (what the torch layer must raise)."""
    return raises(lambda: run(case)).message


def tensor(shape, dtype=None):
    return torch.randn(tuple(shape), device="cuda", dtype=torch.float32).to(dtype or torch.bfloat16)


def offsets(n, total, rng):
    """An int32 cu_seqlens of n entries from 0 to total (n >= 2), any n for a wrong length."""
    inner = sorted(rng.randint(0, total) for _ in range(max(n - 2, 0)))
    vals = ([0] + inner + [total])[:n] if n >= 2 else [0] * n
    return torch.tensor(vals, dtype=torch.int32, device="cuda")


def elements(case) -> int:
    return sum(math.prod(s) for s in case.values() if isinstance(s, tuple))


def cases(make, perturb, seeds=SEEDS):
    """(changed case, expected message) for the perturbations of random valid cases within MAX_ELEMENTS."""
    for seed in seeds:
        rng = random.Random(1000 + seed)
        c = make(rng)
        while elements(c) > MAX_ELEMENTS:
            c = make(rng)
        for changed, *_ in perturb(rng, c):
            if elements(changed) <= 2 * MAX_ELEMENTS:
                yield changed


def forward_tensors(c, rng, grad=False):
    q, k, v = (tensor(c[n]).requires_grad_(grad) for n in ("q", "k", "v"))
    kw = {}
    if c.get("bias") is not None:
        kw["bias"] = tensor(c["bias"])
    if c.get("alibi_slopes") is not None:
        kw["alibi_slopes"] = torch.rand(c["alibi_slopes"], device="cuda")
    if "cu_seqlens_q" in c:
        kw["cu_seqlens_q"] = offsets(c["cu_seqlens_q"][0], c["q"][0], rng)
        kw["cu_seqlens_k"] = offsets(c["cu_seqlens_k"][0], c["k"][0], rng)
        kw["max_seqlen_q"], kw["max_seqlen_k"] = c["max_seqlen_q"], c["max_seqlen_k"]
    return q, k, v, kw


def assert_refused(call, message):
    """call raises fa.InvalidArgument with `message` and enqueued nothing that fails."""
    with pytest.raises(fa.InvalidArgument) as info:
        call()
    assert info.value.message == message
    torch.cuda.synchronize()


# ---- a valid call afterwards ----------------------------------------------------------------------------------------
def poison(*outputs):
    """Leaves NaN blocks of each (shape, dtype) of `outputs` free in torch's caching allocator (the cache emptied
    first, then 64 blocks of each size filled and freed), so that the outputs fa allocates next start as NaN. The
    caching allocator may still hand out a block it coalesced with other free memory, so this is best effort: a probe
    that does not come back all NaN is reported as a warning, and the checks after it (no NaN, the reference's answer)
    hold either way. Without the caching allocator (PYTORCH_NO_CUDA_MEMORY_CACHING=1, which lets memcheck see every
    tensor's own bounds) nothing can be poisoned."""
    if os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING") == "1":
        return
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    blocks = [
        torch.full(tuple(shape), float("nan"), dtype=dtype, device="cuda")
        for shape, dtype in outputs
        for _ in range(64)
    ]
    torch.cuda.synchronize()
    del blocks
    for shape, dtype in outputs:
        probe = torch.empty(tuple(shape), device="cuda", dtype=dtype)
        if not torch.isnan(probe).all():
            warnings.warn(f"poisoning the allocator did not reach {tuple(shape)} {dtype}")
        del probe


def close(name, got, ref, low, slack):
    """FlashAttention's rule: fa's error at most twice the same-precision torch error, plus slack; never NaN."""
    assert not torch.isnan(got).any(), f"{name}: NaN (an element never written)"
    e_fa, e_pt = (got.float() - ref).abs().max().item(), (low.float() - ref).abs().max().item()
    assert e_fa <= 2 * e_pt + slack, f"{name}: fa error {e_fa:.3e} > 2 x torch error {e_pt:.3e} + {slack}"


def check_valid_attention(grad: bool):
    """A valid fa.attention (and its backward) on the same context gives the reference's answer."""
    torch.manual_seed(3)
    q = tensor((2, 96, 8, 64), torch.float16).requires_grad_(grad)
    k, v = (tensor((2, 160, 2, 64), torch.float16).requires_grad_(grad) for _ in range(2))
    poison(((2, 96, 8, 64), torch.float16), ((2, 8, 96), torch.float32))
    o, lse = fa.attention(q, k, v, causal=True, return_lse=True)
    q32, k32, v32 = (t.detach().float().requires_grad_(grad) for t in (q, k, v))
    ref, ref_lse = attention_ref(q32, k32, v32, causal=True)
    ql, kl, vl = (t.detach().clone().requires_grad_(grad) for t in (q, k, v))
    low, _ = attention_ref(ql, kl, vl, causal=True, upcast=False)
    close("o", o, ref, low, 1e-3)
    assert not torch.isnan(lse).any() and (lse - ref_lse).abs().max().item() <= 2e-3
    if grad:
        do = tensor(o.shape, torch.float16)
        poison((q.shape, torch.float16), (k.shape, torch.float16))
        got = torch.autograd.grad(o, (q, k, v), do)
        want = torch.autograd.grad(ref, (q32, k32, v32), do.float())
        lows = torch.autograd.grad(low, (ql, kl, vl), do)
        for name, g, r, lo in zip(("dq", "dk", "dv"), got, want, lows):
            close(name, g, r, lo, 2e-3)


def check_valid_kvcache(paged: bool):
    torch.manual_seed(4)
    B, cap, page = 3, 256, 64
    q = tensor((B, 1, 8, 128), torch.float16)
    k, v = tensor((B, cap, 2, 128), torch.float16), tensor((B, cap, 2, 128), torch.float16)
    lens = torch.tensor([0, 77, 256], dtype=torch.int32, device="cuda")
    kw = {"cache_seqlens": lens}
    kc, vc = k, v
    if paged:
        perm = torch.randperm(B * cap // page, device="cuda")
        kc, vc = torch.empty_like(k.reshape(-1, page, 2, 128)), torch.empty_like(v.reshape(-1, page, 2, 128))
        kc[perm], vc[perm] = k.reshape(-1, page, 2, 128), v.reshape(-1, page, 2, 128)
        kw["block_table"] = perm.reshape(B, cap // page).to(torch.int32)
    poison((q.shape, torch.float16))
    o = fa.attention_with_kvcache(q, kc, vc, **kw)
    assert not torch.isnan(o).any()
    for b in range(B):
        n = int(lens[b])
        ref, _ = attention_ref(q[b : b + 1], k[b : b + 1, :n], v[b : b + 1, :n])
        err = (o[b : b + 1].float() - ref).abs().max().item()
        assert err <= 2e-2, f"sequence {b}: max |o - ref| = {err}"


def check_valid_merge():
    torch.manual_seed(5)
    q, k, v = (tensor((2, 64, 4, 64), torch.float16) for _ in range(3))
    parts = [attention_ref(q, k[:, s], v[:, s]) for s in (slice(0, 20), slice(20, 64))]
    poison(((2, 64, 4, 64), torch.float16), ((2, 4, 64), torch.float32))
    o, lse = fa.merge_attention([p[0].half() for p in parts], [p[1] for p in parts])
    ref, ref_lse = attention_ref(q, k, v)
    assert not torch.isnan(o).any() and not torch.isnan(lse).any()
    assert (o.float() - ref).abs().max().item() <= 4e-3
    assert (lse - ref_lse).abs().max().item() <= 1e-4


# ---- the entry points -----------------------------------------------------------------------------------------------
FORWARDS = {
    "fixed": (fixed_case, fixed_perturbations, run_fixed),
    "varlen": (varlen_case, varlen_perturbations, run_varlen),
}


@pytest.mark.parametrize("grad", [False, True])
@pytest.mark.parametrize("kind", sorted(FORWARDS))
def test_attention_refused(kind, grad):
    make, perturb, run = FORWARDS[kind]
    rng = random.Random(1)
    for c in cases(make, perturb):
        q, k, v, kw = forward_tensors(c, rng, grad)
        assert_refused(lambda: fa.attention(q, k, v, **kw), rule_message(run, c))
        if not kw:  # the same tensors as [B, H, S, D] views
            qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            assert_refused(lambda: fa.attention(qt, kt, vt, layout="bhsd"), rule_message(run, c))
    check_valid_attention(grad)


def test_backward_op_refused():
    """The backward op fed inconsistent o / dout / lse (and the forward's relations through it)."""
    rng = random.Random(3)

    def make(r):
        return backward_case(r, varlen=r.random() < 0.5)

    for c in cases(make, lambda r, c: backward_perturbations(r, c) + fixed_or_varlen(r, c)):
        q, k, v, kw = forward_tensors(c, rng)
        dout, o = tensor(c["dout"]), tensor(c["o"])
        lse = torch.zeros(c["lse"], device="cuda")
        args = [kw.get(n, 0 if n.startswith("max") else None) for n in FORWARD_ARGS]
        assert_refused(
            lambda: torch.ops.fa.attention_bwd(dout, q, k, v, o, lse, *args, 0, -1, -1, 0.0, 0.0, False),
            rule_message(run_backward, c),
        )
    check_valid_attention(grad=True)


def fixed_or_varlen(rng, c):
    """The forward's perturbations of a backward case (o, dout and lse following q and v)."""
    perturb = varlen_perturbations if "cu_seqlens_q" in c else fixed_perturbations
    out = []
    for changed, *want in perturb(rng, c):
        q, v = changed["q"], changed["v"]
        o = q[:-1] + (v[-1],)
        lse = (q[1], q[0]) if len(q) == 3 else (q[0], q[2], q[1])
        out.append((dict(changed, o=o, dout=o, lse=lse), *want))
    return out


@pytest.mark.parametrize("paged", [False, True])
def test_kvcache_refused(paged):
    for c in cases(lambda r: kv_case(r, paged), kv_perturbations):
        q, kc, vc = tensor(c["q"]), tensor(c["k_cache"]), tensor(c["v_cache"])
        kw = {}
        if c["cache_seqlens"] is not None:
            kw["cache_seqlens"] = torch.randint(0, 9, c["cache_seqlens"], dtype=torch.int32, device="cuda")
        if c["block_table"] is not None:
            kw["block_table"] = torch.randint(0, c["k_cache"][0], c["block_table"], dtype=torch.int32, device="cuda")
        if c["alibi_slopes"] is not None:
            kw["alibi_slopes"] = torch.rand(c["alibi_slopes"], device="cuda")
        assert_refused(lambda: fa.attention_with_kvcache(q, kc, vc, **kw), rule_message(run_kv, c))
        assert_refused(lambda: fa.prepare_kvcache(q, kc, vc, **kw), rule_message(run_kv, c))
    check_valid_kvcache(paged)


def test_merge_refused():
    for c in cases(merge_case, merge_perturbations):
        outs = [tensor(s, torch.float16) for s in c["outs"]]
        lses = [torch.zeros(s, device="cuda") for s in c["lses"]]
        assert_refused(lambda: fa.merge_attention(outs, lses), rule_message(run_merge, c))
    check_valid_merge()


def test_prepare_and_is_supported_refuse():
    q, k = tensor((4, 64, 8, 128)), tensor((1, 64, 8, 128))
    for call in (fa.prepare, fa.problem_key):
        assert_refused(lambda: call(q, k, k), "k: batch 1 does not match q's batch 4")
    answer = fa.is_supported(q, k, k)
    assert not answer and "k: batch 1 does not match q's batch 4" in answer.reason
    check_valid_attention(grad=False)


def test_kept_entries_do_not_hide_a_mismatch():
    """A signature run once keeps its params; the same shapes with k of another dtype or device, or a different
    batch, are still refused (the keys hold every dtype and device the checks read)."""
    q, k, v = (tensor((2, 64, 4, 64), torch.float16) for _ in range(3))
    for grad in (False, True):
        qg, kg, vg = (t.detach().requires_grad_(grad) for t in (q, k, v))
        fa.attention(qg, kg, vg)
        assert_refused(
            lambda: fa.attention(qg, kg.float(), vg), "k: dtype torch.float32 does not match q's dtype torch.float16"
        )
        assert_refused(lambda: fa.attention(qg, kg.cpu(), vg), "k: device cpu does not match q's device cuda:0")
        assert_refused(lambda: fa.attention(qg, kg[:1], vg[:1]), "k: batch 1 does not match q's batch 2")
    check_valid_attention(grad=True)


# ---- issue 40's cases ----------------------------------------------------------------------------------------------
def test_issue_40_cases():
    q4, kv1 = tensor((4, 256, 8, 128)), tensor((1, 256, 8, 128))
    batch = "k: batch 1 does not match q's batch 4"
    assert_refused(lambda: fa.attention(q4, kv1, kv1), batch)
    qg, kg, vg = (t.clone().requires_grad_() for t in (q4, kv1, kv1))
    assert_refused(lambda: fa.attention(qg, kg, vg).float().sum().backward(), batch)
    o, lse = tensor((4, 256, 8, 128)), torch.zeros((4, 8, 256), device="cuda")
    assert_refused(
        lambda: torch.ops.fa.attention_bwd(
            o, q4, kv1, kv1, o, lse, None, None, None, None, 0, 0, 0, -1, -1, 0.0, 0.0, False
        ),
        batch,
    )
    q1 = tensor((1, 256, 8, 128))
    assert_refused(
        lambda: fa.attention(q1, tensor((1, 4096, 8, 128)), tensor((1, 16, 8, 128))),
        "v: seqlen 16 does not match k's seqlen 4096",
    )
    assert_refused(
        lambda: fa.attention(q1, tensor((1, 256, 8, 128)), tensor((1, 256, 1, 128))),
        "v: heads 1 does not match k's heads 8",
    )
    assert_refused(
        lambda: fa.attention(q1, tensor((1, 256, 8, 64)), tensor((1, 256, 8, 64))),
        "k: head dim 64 does not match q's head dim 128",
    )
    cache = tensor((2, 4096, 8, 64))
    assert_refused(
        lambda: fa.attention_with_kvcache(tensor((2, 1, 8, 128)), cache, cache, cache_seqlens=100),
        "k_cache: head dim 64 does not match q's head dim 128",
    )
    check_valid_attention(grad=True)
    check_valid_kvcache(paged=False)
