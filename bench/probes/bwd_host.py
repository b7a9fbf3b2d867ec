"""bwd_host.py -- where fa's forward + backward host time goes through Python, piece by piece, beside torch SDPA's
FlashAttention-2 backend (b1 s64 h16 d128 bf16 causal: a problem small enough that the host is the bound). Each
figure: host microseconds per call, enqueue only, the median of 5 loops of 300 calls after 20 warm-ups. "OLD" is the
autograd.Function shape fa used before 2026-11-25 (the op's 14 inputs as separate arguments) over the same
implementations, for comparison.

  FA_LIBRARY=build/lib/libfa.so PYTHONPATH=python python3 bench/probes/bwd_host.py
"""

import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: host_overhead
import fa  # noqa: E402
from fa import _torch_common as TC  # noqa: E402
from fa import _torch_ops as T  # noqa: E402
from fa._tensor_params import build_params, build_bwd_params  # noqa: E402
from host_overhead import host_us as loop_us  # noqa: E402


def host_us(fn, n=300):
    """Median over 5 loops of host_overhead.py's timer (n calls each), after 20 warm-up calls."""
    for _ in range(20):
        fn()
    return statistics.median(loop_us(fn, n) for _ in range(5))


def main() -> int:
    if not torch.cuda.is_available() or not fa.available():
        print("bwd_host: skipped (no GPU or no libfa)")
        return 0
    S = 64
    q, k, v = (torch.randn(1, S, 16, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    do = torch.randn(1, S, 16, 128, device="cuda", dtype=torch.bfloat16)
    qd, kd, vd = q.detach(), k.detach(), v.detach()
    o, lse = T.fwd_impl(qd, kd, vd, None, None, None, None, 0, 0, 1, -1, -1, 0.0, 0.0)
    rest = (None, None, None, None, 0, 0, 1, -1, -1, 0.0, 0.0)
    ctxo = fa.context.default_context(0)
    dq, dk, dv = (torch.empty_like(x) for x in (qd, kd, vd))
    p, keep = build_params(qd, kd, vd, o, lse, *rest)
    bp = build_bwd_params(p, do, dq, dk, dv, False, False)
    stream = TC.stream(q.device)

    def device_switch():
        with torch.cuda.device(q.device):
            pass

    class Ident(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a, b, c):
            return a.clone()

        @staticmethod
        def backward(ctx, g):
            return g, None, None

    class Old(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *inputs):
            o, lse = T.fwd_impl(*inputs)
            T._setup_context(ctx, inputs, (o, lse))
            return o, lse

        @staticmethod
        def backward(ctx, dout, _dlse):
            return T._grads(T.bwd_impl, ctx, dout)

    cases = {
        "OLD 14-arg Function fwd+grad": lambda: torch.autograd.grad(Old.apply(q, k, v, *rest)[0], (q, k, v), do),
        "fa fwd+grad (autograd)": lambda: torch.autograd.grad(fa.attention(q, k, v, causal=True), (q, k, v), do),
        "fa fwd (nograd)": lambda: fa.attention(qd, kd, vd, causal=True),
        "_bwd_impl direct": lambda: T.bwd_impl(do, qd, kd, vd, o, lse, *rest, False),
        "build_params+bwd": lambda: build_bwd_params(
            build_params(qd, kd, vd, o, lse, *rest)[0], do, dq, dk, dv, False, False
        ),
        "ctx.run_backward (C call)": lambda: ctxo.run_backward(bp, stream),
        "with torch.cuda.device: pass": device_switch,
        "autograd identity fn": lambda: torch.autograd.grad(Ident.apply(q, k, v), (q,), do),
        "3x torch.empty": lambda: [torch.empty(x.shape, dtype=x.dtype, device=x.device) for x in (qd, kd, vd)],
    }

    def sdpa():
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            return torch.autograd.grad(
                F.scaled_dot_product_attention(qt, kt, vt, is_causal=True), (q, k, v), do.transpose(1, 2)
            )

    cases["FA2 fwd+grad (autograd)"] = sdpa
    for name, fn in cases.items():
        print(f"{name:<40} host {host_us(fn):8.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
