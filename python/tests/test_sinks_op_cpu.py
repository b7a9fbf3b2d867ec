"""The attention-sinks op pair's plumbing on the CPU (torch needed; no GPU): fa::attention_sinks /
fa::attention_sinks_bwd get float64 CPU kernels that restate fa's semantics with sinks (the forward: one more softmax
column per head without a value; the backward in closed form, dsinks = -sum_i P_sink(i) D_i with D = rowsum(dO * O),
itself checked against autograd of the forward), and the gradients of q, k, v and the sinks through the op's
registered autograd, through the eager autograd.Function (the implementations replaced), with user code's list
arguments, and under torch.compile(fullgraph=True) match autograd of the reference: what the GPU suite then runs
with fa's kernels."""

import pytest

from conftest import HAS_TORCH

pytestmark = pytest.mark.skipif(not HAS_TORCH, reason="PyTorch is not installed")
if HAS_TORCH:
    import torch

    import fa
    from fa import _sinks_op


def scores(q, k, sinks, causal, scale):
    """The scores [B, Hq, Sq, 1 + Sk] with the sink column first."""
    b, sq, hq, _ = q.shape
    sk = k.shape[1]
    s = torch.einsum("bihd,bjhd->bhij", q, k.repeat_interleave(hq // k.shape[2], 2)) * scale
    if causal:
        i, j = torch.arange(sq)[:, None], torch.arange(sk)[None]
        s = s.masked_fill(j > i + sk - sq, float("-inf"))
    return torch.cat([sinks.reshape(1, -1, 1, 1).expand(b, hq, sq, 1), s], -1)


def reference(q, k, v, sinks, causal, scale):
    full = scores(q, k, sinks, causal, scale)
    p = torch.softmax(full, -1)[..., 1:]
    return torch.einsum("bhij,bjhd->bihd", p, v.repeat_interleave(q.shape[2] // v.shape[2], 2)), full.logsumexp(-1)


def cpu_fwd(q, k, v, sinks, *args):
    return reference(q, k, v, sinks, args[12] == 1, args[16])  # mask, scale


def cpu_bwd(dout, q, k, v, o, lse, sinks, *args):
    """The backward in closed form (no autograd inside a kernel): P over the keys and the sink, D = rowsum(dO O)."""
    assert isinstance(args[-1], bool)  # deterministic
    b, sq, hq, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    scale = args[16]
    full = scores(q, k, sinks, args[12] == 1, scale)
    pfull = torch.softmax(full, -1)
    p = pfull[..., 1:]
    kk, vv = k.repeat_interleave(hq // hk, 2), v.repeat_interleave(hq // hk, 2)
    delta = (dout * o).sum(-1).permute(0, 2, 1)[..., None]  # [B, Hq, Sq, 1]
    ds = p * (torch.einsum("bihd,bjhd->bhij", dout, vv) - delta)
    dq = torch.einsum("bhij,bjhd->bihd", ds, kk) * scale
    dk = (torch.einsum("bhij,bihd->bjhd", ds, q) * scale).reshape(b, sk, hk, hq // hk, d).sum(3)
    dv = torch.einsum("bhij,bihd->bjhd", p, dout).reshape(b, sk, hk, hq // hk, -1).sum(3)
    dsinks = -(pfull[..., 0] * delta[..., 0]).sum((0, 2))
    return dq, dk, dv, dsinks


@pytest.fixture(scope="module")
def cpu_kernels():
    torch.library.register_kernel("fa::attention_sinks", "cpu", cpu_fwd)
    torch.library.register_kernel("fa::attention_sinks_bwd", "cpu", cpu_bwd)


def problem(seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, 5, 4, 8, dtype=torch.float64, generator=g).requires_grad_()
    k = torch.randn(2, 7, 2, 8, dtype=torch.float64, generator=g).requires_grad_()
    v = torch.randn(2, 7, 2, 6, dtype=torch.float64, generator=g).requires_grad_()
    sinks = torch.tensor([0.3, -1.0, 12.0, -40.0], dtype=torch.float64).requires_grad_()
    dout = torch.randn(2, 5, 4, 6, dtype=torch.float64, generator=g)
    return q, k, v, sinks, dout


REST = (None, None, None, None, 0, 0, 1, -1, -1, 0.0, 0.3)  # causal, scale 0.3
NO_CODE = (None, None, None, [], [], [])


def expected(q, k, v, sinks, dout):
    o, _ = reference(q, k, v, sinks, True, 0.3)
    return torch.autograd.grad(o, (q, k, v, sinks), dout)


def test_closed_form_backward_is_the_gradient():
    q, k, v, sinks, dout = problem(1)
    o, lse = reference(q, k, v, sinks, True, 0.3)
    got = cpu_bwd(dout, q, k, v, o.detach(), lse, sinks, *NO_CODE, *REST, "bh", False)
    for a, b in zip(got, expected(q, k, v, sinks, dout)):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("code", [NO_CODE, ("return true;", None, None, "buffer", [1.5], [3])])
def test_op_autograd(cpu_kernels, code):
    q, k, v, sinks, dout = problem(2)
    if code[3] == "buffer":
        code = code[:3] + ([torch.ones(2, 7, dtype=torch.int32)],) + code[4:]
    o, lse = torch.ops.fa.attention_sinks(q, k, v, sinks, *code, *REST, "b")
    assert not lse.requires_grad
    got = torch.autograd.grad(o, (q, k, v, sinks), dout)
    for a, b in zip(got, expected(q, k, v, sinks, dout)):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-12)


def test_eager_function_passes_the_sinks_gradient(monkeypatch):
    monkeypatch.setattr(_sinks_op, "_fwd_impl", cpu_fwd)
    monkeypatch.setattr(_sinks_op, "_bwd_impl", cpu_bwd)
    q, k, v, sinks, dout = problem(3)
    o, _ = _sinks_op.forward_with_sinks(q, k, v, sinks, None, REST)  # sinks made float32 on the way, differentiably
    got = torch.autograd.grad(o, (q, k, v, sinks), dout)
    assert got[3].dtype == torch.float64
    for a, b in zip(got, expected(q, k, v, sinks.float().double(), dout)):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6)  # the sinks pass float32 both ways
    with pytest.raises(fa.InvalidArgument, match="sinks: dtype torch.int64"):
        _sinks_op.forward_with_sinks(q, k, v, torch.zeros(4, dtype=torch.int64), None, REST)


def test_compile_fullgraph(cpu_kernels):
    q, k, v, sinks, dout = problem(4)

    def step(q, k, v, sinks):
        return (torch.ops.fa.attention_sinks(q, k, v, sinks, *NO_CODE, *REST, "bh")[0] * dout).sum()

    compiled = torch.compile(step, backend="eager", fullgraph=True, dynamic=True)
    got = torch.autograd.grad(compiled(q, k, v, sinks), (q, k, v, sinks))
    for a, b in zip(got, expected(q, k, v, sinks, dout)):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-12)
