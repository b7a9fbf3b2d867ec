"""Host cost per forward through Python: fa.attention against torch SDPA's FLASH_ATTENTION backend (FlashAttention-2)
on a tiny problem (bf16 d128 causal b1 s64 h1, BSHD): --rounds interleaved rounds (the order of the two alternates
between rounds), each N back-to-back calls per contender on the current stream after a warm-up, the host clock
around the loop (enqueue only); the figure per contender is the median over rounds (the minimum beside it). A single
loop of each moved by up to 50% between runs on the same machine, hence the rounds. Exit 0 when fa's median host
time per call is <= FA2's (the issue 19 goal), 1 otherwise, 0 with "skipped" when torch, a GPU or the library is
missing.

  FA_LIBRARY=build/lib/libfa.so PYTHONPATH=python python3 bench/host_overhead.py [--calls N] [--rounds R] [--json F]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time


def host_us(fn, n):
    """Host microseconds per call of fn over n calls enqueued back to back (the device drained before and after; the
    clock stops when the last call returns, before the device finishes)."""
    import torch

    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return 1e6 * (t1 - t0) / n


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=5000, help="calls per contender per round")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--profile", action="store_true", help="also print where fa.attention's host time goes (cProfile)")
    ap.add_argument("--json", help="write the figures to this file (bench/results/SCHEMA.md)")
    args = ap.parse_args()
    try:
        import torch
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
        import fa
    except Exception as e:  # noqa: BLE001
        print(f"host_overhead: skipped ({e})")
        return 0
    if not torch.cuda.is_available() or not fa.available():
        print("host_overhead: skipped (no GPU or no libfa)")
        return 0
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 64, 1, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))  # BHSD views for SDPA

    def run_fa():
        return fa.attention(q, k, v, causal=True)

    def run_fa2():
        return F.scaled_dot_product_attention(qt, kt, vt, is_causal=True)

    def run_fa2_backend():
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return run_fa2()

    def timed_fa2(n):
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return host_us(run_fa2, n)

    ref = run_fa2_backend()
    out = run_fa()
    torch.cuda.synchronize()
    err = (out.float() - ref.transpose(1, 2).float()).abs().max().item()
    for _ in range(200):  # warm-up of both
        run_fa()
        run_fa2_backend()
    times = {"fa": [], "FA2": []}
    for r in range(args.rounds):
        order = (("fa", lambda n: host_us(run_fa, n)), ("FA2", timed_fa2))
        for name, fn in order if r % 2 == 0 else order[::-1]:
            times[name].append(fn(args.calls))
    med = {n: statistics.median(t) for n, t in times.items()}
    ok = med["fa"] <= med["FA2"]
    print(
        f"host_overhead: torch {torch.__version__}, {torch.cuda.get_device_name()}, bf16 d128 causal b1 s64 h1, "
        f"{args.rounds} interleaved rounds of {args.calls} calls each (max |fa - FA2| {err:.3g})"
    )
    for n in ("fa", "FA2"):
        label = "fa.attention" if n == "fa" else "SDPA FA2"
        print(
            f"  {label:14s} {med[n]:7.2f} us/call enqueue, median of rounds (min {min(times[n]):.2f}, max "
            f"{max(times[n]):.2f}; rounds {' '.join(f'{x:.1f}' for x in times[n])})"
        )
    print(
        f"  fa / FA2 host time {med['fa'] / med['FA2']:.2f}x (medians) -> {'PASS' if ok else 'FAIL'} (goal: fa <= FA2)"
    )
    if args.json:
        import result_schema  # bench/: the one result layout

        rows = [
            {
                "contender": n,
                "dtype": "bf16",
                "d": 128,
                "causal": True,
                "b": 1,
                "sq": 64,
                "sk": 64,
                "h": 1,
                "us_per_call": med[n],
                "us_min": min(times[n]),
                "rounds_us": times[n],
            }
            for n in ("fa", "FA2")
        ]
        result_schema.write(args.json, result_schema.document("host_overhead", rows, args=vars(args)))
    if args.profile:
        import cProfile
        import pstats

        prof = cProfile.Profile()
        prof.enable()
        for _ in range(args.calls):
            run_fa()
        prof.disable()
        torch.cuda.synchronize()
        pstats.Stats(prof).sort_stats("tottime").print_stats(18)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
