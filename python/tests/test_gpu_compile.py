"""torch.compile(dynamic=True, fullgraph=True) over fa's operators: one graph for 20 sequence lengths (no
recompile), results equal to eager, and the backward through AOTAutograd."""

import os

import pytest

from conftest import cuda_reason

REASON = cuda_reason()
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")
if REASON is None:
    os.environ.setdefault("FA_TUNE_POLICY", "defaults")
    import torch
    import torch._dynamo
    import torch._dynamo.testing

    import fa

LENGTHS = [17, 64, 100, 128, 129, 255, 256, 300, 333, 384, 511, 512, 600, 700, 777, 800, 900, 999, 1000, 1024]


def counter():
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    cls = getattr(torch._dynamo.testing, "CompileCounterWithBackend", None)
    return cls("inductor") if cls is not None else torch._dynamo.testing.CompileCounter()


class NoRecompile:
    """Backend compilations counted after the first call must stay at zero (the first call may compile more than
    one frame, e.g. an empty helper graph), and dynamo must have captured one unique graph."""

    def __init__(self, cnt):
        self.cnt, self.after_first = cnt, None

    def called(self):
        if self.after_first is None:
            self.after_first = self.cnt.frame_count

    def check(self, calls):
        assert self.after_first is not None and self.after_first >= 1
        assert self.cnt.frame_count == self.after_first, (
            f"recompiled: {self.cnt.frame_count - self.after_first} more compilations over {calls} calls"
        )
        unique = torch._dynamo.utils.counters["stats"].get("unique_graphs")
        if unique is not None:
            assert unique == 1, f"{unique} unique graphs"


def qkv(s, requires_grad=False, dtype=None):
    dtype = dtype or torch.bfloat16
    return tuple(torch.randn(2, s, 4, 64, device="cuda", dtype=dtype).requires_grad_(requires_grad) for _ in range(3))


def test_forward_one_graph_for_20_lengths():
    assert len(set(LENGTHS)) == 20
    cnt = counter()
    watch = NoRecompile(cnt)

    def f(q, k, v):
        return fa.attention(q, k, v, causal=True) * 2.0

    cf = torch.compile(f, backend=cnt, dynamic=True, fullgraph=True)
    for s in LENGTHS:
        q, k, v = qkv(s)
        got = cf(q, k, v)
        watch.called()
        want = fa.attention(q, k, v, causal=True) * 2.0
        assert got.shape == want.shape
        torch.testing.assert_close(got, want, atol=0, rtol=0)
    watch.check(len(LENGTHS))


def test_lse_and_bhsd_under_compile():
    cnt = counter()
    watch = NoRecompile(cnt)

    def f(q, k, v):
        o, lse = fa.attention(q, k, v, layout="bhsd", return_lse=True)
        return o, lse

    cf = torch.compile(f, backend=cnt, dynamic=True, fullgraph=True)
    for s in LENGTHS[:6]:
        q, k, v = (t.transpose(1, 2) for t in qkv(s))
        o, lse = cf(q, k, v)
        watch.called()
        o2, lse2 = f(q, k, v)
        assert o.shape == (2, 4, s, 64) and lse.shape == (2, 4, s)
        torch.testing.assert_close(o, o2, atol=0, rtol=0)
        torch.testing.assert_close(lse, lse2, atol=0, rtol=0)
    watch.check("several")


def test_backward_one_graph():
    cnt = counter()
    watch = NoRecompile(cnt)

    def loss(q, k, v):
        return (fa.attention(q, k, v, causal=True).float() ** 2).sum()

    cf = torch.compile(loss, backend=cnt, dynamic=True, fullgraph=True)
    for s in LENGTHS[:8]:
        q, k, v = qkv(s, requires_grad=True)
        try:
            grads = torch.autograd.grad(cf(q, k, v), (q, k, v))
            watch.called()
        except fa.NotSupported as exc:
            pytest.skip(f"fa backward not supported: {exc}")
        want = torch.autograd.grad(loss(q, k, v), (q, k, v))
        for g, w in zip(grads, want):
            torch.testing.assert_close(g, w, atol=2e-2, rtol=2e-2)
    watch.check("several")


def test_varlen_under_compile():
    cnt = counter()
    watch = NoRecompile(cnt)

    def f(q, k, v, cu_q, cu_k, mq: int, mk: int):
        return fa.attention(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=mq, max_seqlen_k=mk)

    cf = torch.compile(f, backend=cnt, dynamic=True, fullgraph=True)
    for lens in ([30, 50], [64, 3, 90], [200, 100, 7, 9], [11, 12]):
        cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.int32, device="cuda")
        q, k, v = (torch.randn(sum(lens), 4, 64, device="cuda", dtype=torch.float16) for _ in range(3))
        try:
            got = cf(q, k, v, cu, cu, max(lens), max(lens))
            watch.called()
        except fa.NotSupported as exc:
            pytest.skip(f"varlen not supported: {exc}")
        torch.testing.assert_close(got, f(q, k, v, cu, cu, max(lens), max(lens)), atol=0, rtol=0)
    watch.check("4")
