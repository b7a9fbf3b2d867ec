#!/usr/bin/env python3
"""bwd_probe.py -- one attention shape, forward + backward through fa (and FlashAttention-2 via SDPA for the
ratio), timed with CUDA events; small enough to run under a profiler, e.g.
  ncu -k regex:fa_kernel --launch-skip 2 --launch-count 1 python3 bench/probes/bwd_probe.py --iters 0
(with --iters 0 it launches exactly one forward and one backward: fa_kernel launches are fwd, bwd_pre, bwd_mma,
bwd_post). The tuning policy comes from --tune (default: the heuristic defaults, so no tuning launches)."""

import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F

import fa

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/
from bench_peers import flops, round_ratio_range, spread, time_interleaved  # noqa: E402  (the benchmark's own)


def kernel_table(name, fn, iters):
    """Mean GPU time per call of each kernel that `fn` launches (torch.profiler), largest first."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
    # fa launches three kernels of one name (fa_kernel) per backward: bwd_pre, bwd_mma, bwd_post; split them by
    # launch order.
    kern = sorted(
        (e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA and e.name == "fa_kernel"),
        key=lambda e: e.time_range.start,
    )
    if kern and len(kern) % 3 == 0:
        for i, part in enumerate(("bwd_pre", "bwd_mma", "bwd_post")):
            ts = [e.time_range.elapsed_us() for e in kern[i::3]]
            print(f"    {part}: {sum(ts) / len(ts):.1f} us per call (min {min(ts):.1f})")
    rows = []
    for e in prof.key_averages():
        t = getattr(e, "device_time_total", None)
        if t is None:
            t = getattr(e, "cuda_time_total", 0)
        if t > 0 and e.count >= iters:
            rows.append((t / iters, e.count // iters, e.key))
    rows.sort(reverse=True)
    total = sum(r[0] for r in rows)
    print(
        f"  {name} backward kernels (us per call, total {total:.0f}; host {1e6 * (t1 - t0) / iters:.0f} us per call, "
        f"wall {1e6 * (t2 - t0) / iters:.0f}):"
    )
    for us, n, key in rows[:8]:
        print(f"    {us:9.1f}  x{n}  {key[:90]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--seqlen", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=4, help="interleaved timing rounds (as bench_peers.py)")
    ap.add_argument("--tune", default="defaults", choices=["defaults", "first_use"])
    ap.add_argument(
        "--kernels",
        action="store_true",
        help="also print each backward's per-kernel GPU time (torch.profiler), fa and FA2",
    )
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

    of = fa.attention(q, k, v, causal=a.causal)
    qt, kt, vt = (x.detach().transpose(1, 2).requires_grad_() for x in (q, k, v))
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.FLASH_ATTENTION):
        os_ = F.scaled_dot_product_attention(qt, kt, vt, is_causal=a.causal)
    dot = do.transpose(1, 2)
    # The benchmark's interleaved rounds: whichever runs first on a just-woken GPU reads slower otherwise.
    timed = time_interleaved(
        {
            "fa": lambda: torch.autograd.grad(of, (q, k, v), do, retain_graph=True),
            "FA2": lambda: torch.autograd.grad(os_, (qt, kt, vt), dot, retain_graph=True),
        },
        argparse.Namespace(rounds=a.rounds, iters=a.iters, warmup=3, verbose=True),
    )
    t_fa, t_fa2 = timed["fa"][0], timed["FA2"][0]
    rng = round_ratio_range(timed["fa"][2], timed["FA2"][2])
    if a.kernels:
        kernel_table("fa", lambda: torch.autograd.grad(of, (q, k, v), do, retain_graph=True), a.iters)
        kernel_table("FA2", lambda: torch.autograd.grad(os_, (qt, kt, vt), dot, retain_graph=True), a.iters)
    print(
        f"bwd d{a.d} s{a.seqlen} b{a.batch} h{a.heads} causal{int(a.causal)} {a.dtype}: fa {t_fa:.3f} ms "
        f"({f / t_fa / 1e9:.0f} TFLOP/s), FA2 {t_fa2:.3f} ms ({f / t_fa2 / 1e9:.0f} TFLOP/s), "
        f"fa/FA2 {t_fa2 / t_fa:.2f} (rounds {spread(rng)})"
    )


if __name__ == "__main__":
    main()
