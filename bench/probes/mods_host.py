#!/usr/bin/env python3
"""mods_host.py -- host time per call of fa.attention with user code (issue 22) against the built-in: a restated
causal (mask_mod "return j <= i;") and a document mask (ids in a buffer) beside the built-in causal, on a problem
small enough that the GPU never holds the host back (bf16, d128, 16 heads, batch 1, --seq tokens). Each figure: the
host clock around --calls back-to-back calls (enqueue only, synchronized before and after), the median of --rounds
rounds, the contenders interleaved. Rows: fa.attention without grad (inference), with q requiring grad (the
forward under autograd), a training step (q, k, v requiring grad: the forward and torch.autograd.grad with a given
dO; "generic": the same through the generic autograd path, fa._grad_step's entries off), and fa_run alone through
ctypes on filled params (the C library's own cost per call, ctypes included; the mod with its classification kept,
mask_epoch 1, and classified on every call, epoch 0: mask_blocks, a memset and a workspace per call).
--profile: cProfile of the restated causal's inference calls and of its training steps, top functions by own time.

  FA_LIBRARY=build/lib/libfa.so PYTHONPATH=python python3 bench/probes/mods_host.py [--calls N] [--rounds R] [--profile]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

from host_overhead import host_us  # the same timer as the plain path's figure

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: host_overhead
os.environ.setdefault("FA_TUNE_POLICY", "defaults")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    import torch

    import fa
    from fa import _torch_ops

    torch.manual_seed(0)
    s = args.seq
    q, k, v = (torch.randn(1, s, 16, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    qg = q.detach().clone().requires_grad_()
    qt, kt, vt = (t.detach().clone().requires_grad_() for t in (q, k, v))
    do = torch.randn_like(q)
    ids = torch.sort(torch.randint(0, 4, (s,), device="cuda", dtype=torch.int32)).values
    causal_mod = fa.Mods(mask_mod="return j <= i;", depends="")
    doc_mod = fa.mods.document(ids)
    stream = torch.cuda.current_stream().cuda_stream
    ctx = fa.default_context(torch.cuda.current_device())

    def generic(fn):
        """fn through the generic autograd path (the training-step entries of fa._grad_step switched off)."""

        def call():
            kept = _torch_ops.grad_step
            _torch_ops.grad_step = lambda *_a: None
            try:
                return fn()
            finally:
                _torch_ops.grad_step = kept

        return call

    def raw(epoch=None, **kw):
        """fa_run on filled params; `epoch`: the fa_mods' mask_epoch (to_struct leaves 0: classified every call)."""
        p, keep, _ = _torch_ops._problem(q, k, v, dict(kw))
        if epoch is not None:
            p.mods.contents.mask_epoch = epoch
        return lambda: ctx.run(p, stream) or keep

    contenders = {
        "built-in causal": lambda: fa.attention(q, k, v, causal=True),
        "causal (mod)": lambda: fa.attention(q, k, v, mods=causal_mod),
        "document (mod)": lambda: fa.attention(q, k, v, mods=doc_mod),
        "built-in causal, q grad": lambda: fa.attention(qg, k, v, causal=True),
        "causal (mod), q grad": lambda: fa.attention(qg, k, v, mods=causal_mod),
        "built-in causal, step": lambda: torch.autograd.grad(fa.attention(qt, kt, vt, causal=True), (qt, kt, vt), do),
        "causal (mod), step": lambda: torch.autograd.grad(fa.attention(qt, kt, vt, mods=causal_mod), (qt, kt, vt), do),
        "document (mod), step": lambda: torch.autograd.grad(fa.attention(qt, kt, vt, mods=doc_mod), (qt, kt, vt), do),
        "built-in causal, step, generic": generic(
            lambda: torch.autograd.grad(fa.attention(qt, kt, vt, causal=True), (qt, kt, vt), do)
        ),
        "causal (mod), step, generic": generic(
            lambda: torch.autograd.grad(fa.attention(qt, kt, vt, mods=causal_mod), (qt, kt, vt), do)
        ),
        "fa_run: built-in causal": raw(causal=True),
        "fa_run: causal (mod)": raw(mods=causal_mod, epoch=1),
        "fa_run: causal (mod), epoch 0": raw(mods=causal_mod),
    }
    for fn in contenders.values():  # compile, warm up
        for _ in range(20):
            fn()
    torch.cuda.synchronize()

    per = {name: [] for name in contenders}
    names = list(contenders)
    for r in range(args.rounds):
        for name in names if r % 2 == 0 else reversed(names):
            per[name].append(host_us(contenders[name], args.calls))
    print(f"host us per call (median of {args.rounds} rounds of {args.calls} calls; min), s {s}:")
    for name in names:
        print(f"  {name:<32}{statistics.median(per[name]):>8.1f}{min(per[name]):>8.1f}")
    if args.profile:
        import cProfile
        import pstats

        for name in ("causal (mod)", "causal (mod), step"):
            print(f"cProfile: {name}, {args.calls} calls")
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(args.calls):
                contenders[name]()
            prof.disable()
            torch.cuda.synchronize()
            pstats.Stats(prof).sort_stats("tottime").print_stats(18)
    return 0


if __name__ == "__main__":
    sys.exit(main())
