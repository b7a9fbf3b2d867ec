#!/usr/bin/env python3
"""mods_probe.py -- where the Hopper forward's time goes on masks that visit few key blocks (issue 22): the forward
kernel alone (torch.profiler: the last fa kernel of each call) for user masks next to mask-equivalent variants that
isolate one cost, at bf16, d128, 16 heads, batch 1 (8k tokens by default):
  chunked        the ready mod (two integer divisions per pair)       chunked_shift   the same mask with shifts
  chunked_cmp    the same mask as one compare ((i & ~1023) <= j <= i)  b8x1k_causal    the built-in causal over a batch
                                                                                       of 8 x 1k (the same blocks)
  causal_mod / causal, window_mod / window (the built-in), document, sinks_window.
Prints per case: fa kernels per call, the classification (first kernel) and forward (last) medians in ms.
--ncu CASE: run CASE three times and nothing else (for `ncu --launch-skip 2*kernels --launch-count ...`).
--i20: issue 20's short causal cells instead (bf16, 16k tokens per batch, hidden 2048): fa's built-in causal
against SDPA's cuDNN backend, CUDA-event medians of whole calls in interleaved rounds, and their ratio.
"""

import argparse
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
os.environ.setdefault("FA_TUNE_POLICY", "defaults")
import torch  # noqa: E402

import fa  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/
from bench_mods import fa_kernel_times  # noqa: E402
from bench_peers import event_times  # noqa: E402

H, D, DT = 16, 128, torch.bfloat16


def cases(s):
    n_docs = 8
    g = torch.Generator(device="cuda").manual_seed(0)
    ids = torch.sort(torch.randint(0, n_docs, (s,), device="cuda", dtype=torch.int32, generator=g)).values
    ids[:n_docs] = torch.arange(n_docs, device="cuda", dtype=torch.int32)
    ids = torch.sort(ids).values.contiguous()
    chunk = s // 8
    sh = chunk.bit_length() - 1
    return {
        "chunked": ({"mods": fa.mods.chunked(chunk)}, 1),
        "chunked_shift": ({"mods": fa.Mods(mask_mod=f"return j <= i && (i >> {sh}) == (j >> {sh});", depends="")}, 1),
        "chunked_cmp": ({"mods": fa.Mods(mask_mod=f"return j <= i && (i & ~{chunk - 1}) <= j;", depends="")}, 1),
        "b8x1k_causal": ({"causal": True}, 8),
        "causal_mod": ({"mods": fa.Mods(mask_mod="return j <= i;", depends="")}, 1),
        "causal": ({"causal": True}, 1),
        "window_mod": ({"mods": fa.Mods(mask_mod="return j <= i && i - j < 1024;", depends="")}, 1),
        "window": ({"window": (1023, 0)}, 1),
        "document": ({"mods": fa.mods.document(ids)}, 1),
        "sinks_window": ({"mods": fa.mods.sinks_window(4, 1024)}, 1),
    }


def inputs(s, batches):
    # b8x1k: the same tokens as 8 sequences of s / 8
    shape = (batches, s // batches, H, D)
    return tuple(torch.randn(shape, device="cuda", dtype=DT) for _ in range(3))


def kernel_ms(fn, calls=10):
    """(fa kernels per call, median ms of the first, median ms of the last)."""
    dur = fa_kernel_times(fn, calls)
    per = len(dur) // calls
    return per, statistics.median(dur[0::per]), statistics.median(dur[per - 1 :: per])


def i20(cells, rounds=3, iters=30):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    tag = os.environ.get("PROBE_TAG", "")
    for d, s in cells:
        b, h = max(1, 16384 // s), 2048 // d
        q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=DT) for _ in range(3))
        qh, kh, vh = (t.transpose(1, 2) for t in (q, k, v))
        fa_call = lambda: fa.attention(q, k, v, causal=True)  # noqa: E731

        def cudnn_call():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return torch.nn.functional.scaled_dot_product_attention(qh, kh, vh, is_causal=True)

        o1, o2 = fa_call(), cudnn_call().transpose(1, 2)
        err = (o1.float() - o2.float()).abs().max().item()
        t_fa, t_cu = [], []
        for _ in range(rounds):
            t_fa += event_times(fa_call, 3, iters)
            t_cu += event_times(cudnn_call, 3, iters)
        a, c = statistics.median(t_fa), statistics.median(t_cu)
        print(
            f"I20 {tag:<10} d{d:<4} s{s:<6} fa {a:.4f} ms  cuDNN {c:.4f} ms  fa/cuDNN speed {c / a:.3f}  "
            f"max|diff| {err:.4f}",
            flush=True,
        )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seq", type=int, default=8192)
    ap.add_argument("--only", help="comma-separated case names")
    ap.add_argument("--ncu", help="run this case three times and nothing else")
    ap.add_argument("--i20", action="store_true", help="issue 20's short causal cells against cuDNN")
    args = ap.parse_args()
    if args.i20:
        i20([(64, 512), (64, 1024), (64, 2048), (64, 4096), (128, 1024)])
        return
    table = cases(args.seq)
    if args.ncu:
        kw, nb = table[args.ncu]
        q, k, v = inputs(args.seq, nb)
        for _ in range(3):
            fa.attention(q, k, v, **kw)
        torch.cuda.synchronize()
        return
    names = args.only.split(",") if args.only else list(table)
    tag = os.environ.get("PROBE_TAG", "")
    for name in names:
        kw, nb = table[name]
        q, k, v = inputs(args.seq, nb)
        o = fa.attention(q, k, v, **kw)
        if not torch.isfinite(o).all():
            print(f"{name}: non-finite output")
        per, first, last = kernel_ms(lambda: fa.attention(q, k, v, **kw))
        print(
            f"PROBE {tag:<10} {name:<14} kernels {per}  cls {first if per > 1 else float('nan'):7.4f}  "
            f"fwd {last:7.4f} ms",
            flush=True,
        )


if __name__ == "__main__":
    main()
