"""fa.ring (context parallelism) and fa.merge_attention: the zigzag layout, the merge against the formula, the
reference blocks against autograd, and ring attention with worlds of 2 and 4 (gloo, CPU processes, reference blocks)
against the single-process float64 reference on the same inputs (forward and gradients, rounding level); on a GPU,
a world of 1 (NCCL) against fa.attention, and a world of 2 on one GPU (gloo, host-staged send / recv) running fa's
kernels against fa.attention on the full sequence."""

import math
import tempfile

import pytest

from conftest import HAS_TORCH, cuda_reason, requires_torch

if HAS_TORCH:
    import torch

pytestmark = requires_torch


def full_reference(q, k, v, dout, causal, scale):
    """o, lse, dq, dk, dv of plain softmax attention (float64, autograd) on the full sequence."""
    q, k, v = (t.detach().to(torch.float64).requires_grad_() for t in (q, k, v))
    g = q.shape[2] // k.shape[2]
    kk, vv = k.repeat_interleave(g, dim=2), v.repeat_interleave(g, dim=2)
    s = torch.einsum("bqhd,bkhd->bhqk", q, kk) * scale
    if causal:
        n = q.shape[1]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    lse = torch.logsumexp(s, -1)
    o = torch.einsum("bhqk,bkhd->bqhd", torch.softmax(s, -1), vv)
    o.backward(dout.to(torch.float64))
    return o.detach(), lse.detach(), q.grad, k.grad, v.grad


def rel(a, b):
    a, b = a.to(torch.float64), b.to(torch.float64)
    return float((a - b).norm() / b.norm())


def test_zigzag_round_trip_and_balance():
    from fa.ring import zigzag_shard, zigzag_unshard

    x = torch.arange(2 * 24 * 3).reshape(2, 24, 3)
    for world in (1, 2, 3, 4):
        shards = [zigzag_shard(x, r, world) for r in range(world)]
        assert torch.equal(zigzag_unshard(shards), x)
        c = 24 // (2 * world)
        for r, s in enumerate(shards):  # chunks r and 2W-1-r, in sequence order
            assert s[0, 0, 0] == x[0, r * c, 0] and s[0, c, 0] == x[0, (2 * world - 1 - r) * c, 0]
    with pytest.raises(ValueError, match="multiple of 2"):
        zigzag_shard(x, 0, 5)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_merge_attention_matches_one_pass(device):
    """CPU: the reference formula on float64 parts; CUDA: fa_merge_partials on float32 parts."""
    import fa

    if device == "cuda" and cuda_reason() is not None:
        pytest.skip(cuda_reason())
    torch.manual_seed(0)
    B, S, H, D = 2, 40, 3, 16
    q, k, v = (torch.randn(B, S, H, D, dtype=torch.float64) for _ in range(3))
    o_full, lse_full, *_ = full_reference(q, k, v, torch.zeros(B, S, H, D), True, 0.3)
    cuts = [0, 7, 7, 25, S]  # an empty range included
    outs, lses = [], []
    i = torch.arange(S).unsqueeze(1)
    for a, b in zip(cuts[:-1], cuts[1:]):
        # keys [a, b) under the global causal mask: query i sees key a + j iff a + j <= i
        s = torch.einsum("bqhd,bkhd->bhqk", q, k[:, a:b]) * 0.3
        s = s.masked_fill(torch.arange(a, b).unsqueeze(0) > i, -math.inf)
        lse_s = torch.logsumexp(s, -1) if b > a else torch.full((B, H, S), -math.inf, dtype=torch.float64)
        p = torch.exp(s - lse_s.unsqueeze(-1)).nan_to_num(0.0)
        o_s = torch.einsum("bhqk,bkhd->bqhd", p, v[:, a:b])
        none = torch.isinf(lse_s).permute(0, 2, 1).unsqueeze(-1).expand_as(o_s)
        outs.append(torch.where(none, torch.full_like(o_s, float("nan")), o_s))  # never read
        lses.append(lse_s)
    if device == "cuda":
        outs = [o.to(device, torch.float32) for o in outs]
        lses = [x.to(device, torch.float32) for x in lses]
    o, lse = fa.merge_attention(outs, lses)
    o, lse = o.cpu(), lse.cpu()
    tol = 1e-12 if device == "cpu" else 1e-6
    assert not torch.isnan(o).any()
    assert rel(o, o_full) < tol
    assert torch.allclose(lse.double(), lse_full, rtol=0, atol=tol * 10)
    # every part -inf: o 0, lse -inf
    o0, lse0 = fa.merge_attention(
        [torch.full((1, 3, 1, 8), float("nan"), device=device)] * 2,
        [torch.full((1, 1, 3), -math.inf, device=device)] * 2,
    )
    o0, lse0 = o0.cpu(), lse0.cpu()
    assert torch.equal(o0, torch.zeros_like(o0)) and bool((lse0 == -math.inf).all())


def test_reference_blocks_match_autograd():
    from fa.ring import ref_block_backward, ref_block_forward

    torch.manual_seed(1)
    B, S, H, Hk, D = 2, 24, 4, 2, 8
    q = torch.randn(B, S, H, D, dtype=torch.float64)
    k, v = torch.randn(B, S, Hk, D, dtype=torch.float64), torch.randn(B, S, Hk, D, dtype=torch.float64)
    dout = torch.randn(B, S, H, D, dtype=torch.float64)
    for causal in (True, False):
        o_ref, lse_ref, dq_ref, dk_ref, dv_ref = full_reference(q, k, v, dout, causal, 0.4)
        o, lse = ref_block_forward(q, k, v, causal, 0.4)
        assert rel(o, o_ref) < 1e-13 and torch.allclose(lse, lse_ref, atol=1e-12)
        dq, dk, dv = ref_block_backward(dout, q, k, v, o, lse, causal, 0.4)
        assert rel(dq, dq_ref) < 1e-12 and rel(dk, dk_ref) < 1e-12 and rel(dv, dv_ref) < 1e-12


def _spawn_world(world, case, q, k, v, dout):
    """Runs ring_workers.run_rank on `world` processes; returns the unsharded o, lse, dq, dk, dv."""
    import torch.multiprocessing as mp
    from fa.ring import zigzag_unshard
    import ring_workers

    with tempfile.TemporaryDirectory() as work:
        torch.save({"q": q, "k": k, "v": v, "dout": dout}, f"{work}/inputs.pt")
        mp.spawn(ring_workers.run_rank, args=(world, work, case), nprocs=world, join=True)
        parts = [torch.load(f"{work}/rank{r}.pt") for r in range(world)]
    out = {name: zigzag_unshard([p[name] for p in parts]) for name in ("o", "dq", "dk", "dv")}
    out["lse"] = zigzag_unshard([p["lse"] for p in parts], dim=2)
    return out


@pytest.mark.parametrize("world,causal", [(2, True), (4, True), (2, False)])
def test_gloo_cpu_world_matches_single_process_reference(world, causal):
    torch.manual_seed(2 + world)
    B, S, H, Hk, D = 1, 16 * world, 4, 2, 16
    q = torch.randn(B, S, H, D, dtype=torch.float64)
    k, v = torch.randn(B, S, Hk, D, dtype=torch.float64), torch.randn(B, S, Hk, D, dtype=torch.float64)
    dout = torch.randn(B, S, H, D, dtype=torch.float64)
    got = _spawn_world(world, {"device": "cpu", "causal": causal}, q, k, v, dout)
    o, lse, dq, dk, dv = full_reference(q, k, v, dout, causal, 1.0 / math.sqrt(D))
    assert rel(got["o"], o) < 1e-12
    assert torch.allclose(got["lse"], lse, rtol=0, atol=1e-12)
    for name, ref in (("dq", dq), ("dk", dk), ("dv", dv)):
        assert rel(got[name], ref) < 1e-12, name


def _fa_single(q, k, v, dout, causal):
    import fa

    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    o, lse = fa.attention(q, k, v, causal=causal, return_lse=True)
    o.backward(dout)
    return o.detach(), lse, q.grad, k.grad, v.grad


@pytest.mark.skipif(cuda_reason() is not None, reason=cuda_reason() or "")
def test_gpu_world1_nccl_matches_fa_attention():
    import torch.distributed as dist
    import fa

    torch.manual_seed(3)
    B, S, H, Hk, D = 2, 1024, 8, 2, 64
    dev = torch.device("cuda", 0)
    q = torch.randn(B, S, H, D, device=dev, dtype=torch.bfloat16)
    k, v = (torch.randn(B, S, Hk, D, device=dev, dtype=torch.bfloat16) for _ in range(2))
    dout = torch.randn(B, S, H, D, device=dev, dtype=torch.bfloat16)
    with tempfile.TemporaryDirectory() as work:
        dist.init_process_group("nccl", init_method=f"file://{work}/rendezvous", rank=0, world_size=1)
        try:
            qr, kr, vr = (t.clone().requires_grad_() for t in (q, k, v))
            o, lse = fa.ring_attention(qr, kr, vr, causal=True, return_lse=True)
            o.backward(dout)
        finally:
            dist.destroy_process_group()
    o1, lse1, dq1, dk1, dv1 = _fa_single(q, k, v, dout, True)
    assert torch.equal(o, o1) and torch.equal(lse, lse1)
    for got, want in ((qr.grad, dq1), (kr.grad, dk1), (vr.grad, dv1)):
        assert rel(got, want) < 2e-3  # the backward's dq accumulation order may differ run to run


@pytest.mark.skipif(cuda_reason() is not None, reason=cuda_reason() or "")
@pytest.mark.parametrize("causal", [True, False])
def test_gpu_world2_on_one_gpu_matches_fa_attention(causal):
    torch.manual_seed(4)
    B, S, H, Hk, D = 1, 2048, 8, 2, 64
    q = torch.randn(B, S, H, D, dtype=torch.bfloat16)
    k, v = (torch.randn(B, S, Hk, D, dtype=torch.bfloat16) for _ in range(2))
    dout = torch.randn(B, S, H, D, dtype=torch.bfloat16)
    got = _spawn_world(2, {"device": "cuda:0", "causal": causal}, q, k, v, dout)
    dev = torch.device("cuda", 0)
    o1, lse1, dq1, dk1, dv1 = (t.cpu() for t in _fa_single(q.to(dev), k.to(dev), v.to(dev), dout.to(dev), causal))
    ref = full_reference(q, k, v, dout, causal, 1.0 / math.sqrt(D))
    # Ring and single-GPU fa agree to bf16 rounding, and are as close to the float64 reference as each other.
    assert rel(got["o"], o1) < 1e-2
    assert float((got["lse"] - lse1).abs().max()) < 1e-3
    for name, single, exact in (("o", o1, ref[0]), ("dq", dq1, ref[2]), ("dk", dk1, ref[3]), ("dv", dv1, ref[4])):
        assert rel(got[name], single) < 2e-2, name
        assert rel(got[name], exact) < 2 * rel(single, exact) + 5e-3, name
