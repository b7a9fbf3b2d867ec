#!/usr/bin/env python3
"""bwd_probe.py -- one attention shape, forward + backward through fa (and FlashAttention-2 via SDPA for the
ratio), timed with CUDA events; small enough to run under a profiler, e.g.
  ncu -k regex:fa_kernel --launch-skip 2 --launch-count 1 python3 bench/bwd_probe.py --iters 0
(with --iters 0 it launches exactly one forward and one backward: fa_kernel launches are fwd, bwd_pre, bwd_mma,
bwd_post). The tuning policy comes from --tune (default: the heuristic defaults, so no tuning launches)."""
import argparse
import os
import sys

import torch
import torch.nn.functional as F

import fa

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_peers import flops, time_ms  # noqa: E402  (the benchmark's own timer and FLOP count)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--seqlen", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--tune", default="defaults", choices=["defaults", "first_use"])
    a = ap.parse_args()
    dt = torch.bfloat16 if a.dtype == "bf16" else torch.float16
    fa.set_default_context(fa.Context(0, tune_policy=a.tune))
    shape = (a.batch, a.seqlen, a.heads, a.d)
    q, k, v = (torch.randn(shape, device="cuda", dtype=dt, requires_grad=True) for _ in range(3))
    do = torch.randn(shape, device="cuda", dtype=dt)
    o = fa.attention(q, k, v, causal=a.causal)
    o.backward(do)
    torch.cuda.synchronize()
    if a.iters == 0:
        return
    f = flops(a.batch, a.heads, a.seqlen, a.seqlen, a.d, a.causal, backward=True)

    def timed(fn):
        return time_ms(fn, warmup=3, iters=a.iters)

    of = fa.attention(q, k, v, causal=a.causal)
    t_fa = timed(lambda: torch.autograd.grad(of, (q, k, v), do, retain_graph=True))
    qt, kt, vt = (x.detach().transpose(1, 2).requires_grad_() for x in (q, k, v))
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.FLASH_ATTENTION):
        os_ = F.scaled_dot_product_attention(qt, kt, vt, is_causal=a.causal)
    dot = do.transpose(1, 2)
    t_fa2 = timed(lambda: torch.autograd.grad(os_, (qt, kt, vt), dot, retain_graph=True))
    print(f"bwd d{a.d} s{a.seqlen} b{a.batch} h{a.heads} causal{int(a.causal)} {a.dtype}: fa {t_fa:.3f} ms "
          f"({f / t_fa / 1e9:.0f} TFLOP/s), FA2 {t_fa2:.3f} ms ({f / t_fa2 / 1e9:.0f} TFLOP/s), "
          f"fa/FA2 {t_fa2 / t_fa:.2f}")


if __name__ == "__main__":
    main()
