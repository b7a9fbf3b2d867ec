#!/usr/bin/env python3
"""fwd_short_probe.py -- where fwd_wgmma's time goes at issue 20's short cells (bf16, 16k tokens per batch, hidden
2048): fa at fixed tunable points, optionally with one stage left out, against SDPA's cuDNN and flash (FA2) backends,
CUDA-event medians of whole calls (back to back, as bench_peers.py times them) in interleaved rounds, one process.

Each variant is a tunable point, pinned through $FA_PIN_TUNABLES ("fwd_wgmma:c2.n128.s2.pp1.ov1.p1": consumers,
block_n, stages, ping_pong, intra_overlap, persistent; runtime/pinned_tunables.h), and optionally a list of stage-out
hooks in $FA_PROBE_DEF, which only a library built with bench/probes/fwd_wgmma_stage_out.patch applied honours
(NOEPI: no O stores, NOEXP: exp2 replaced by its argument, NOMASK: no mask code, KV0: every K/V copy reads key
block 0, KVH0: every K/V copy reads its block of the first (batch, head)). Results are wrong under each hook; the
max|diff| column against FA2 shows whether a hook applied (an unpatched library shows the normal error). Points alone
(--points) need no patch: an A/B of two libraries at fixed points. Each variant gets its own context (the pin is
read when a context is made) and cache file: the library memoizes a configuration's compile hash per process, so
hook variants of one point sharing a cache file would all load the first one's cubin.

Cells are head_dim:seqlen (causal) or head_dim:seqlen:none (not causal).

  FA_LIBRARY=... PYTHONPATH=python python3 bench/probes/fwd_short_probe.py [--cells 64:512,128:512:none] [--rounds 3]
  ... --points '128:none=c2.n128.s2.pp1.ov1.p1;64=c3.n128.s3.pp0.ov1.p1'
"""

import argparse
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
import torch  # noqa: E402

import fa  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_peers import event_times  # noqa: E402

# (name, pinned fwd_wgmma point, FA_PROBE_DEF) per head dim (causal cells) or (head dim, "none") (non-causal cells).
# The non-causal points are session 17's fa-tune winners at 512 (d 128: 2 x 128 x 2 persistent; d 256: 2 x 64 x 2).
VARIANTS = {
    (128, "none"): [
        ("c2n128s2p (tuned)", "c2.n128.s2.pp1.ov1.p1", ""),
        ("c2n128s2", "c2.n128.s2.pp1.ov1.p0", ""),
        ("noepi", "c2.n128.s2.pp1.ov1.p1", "NOEPI"),
        ("noexp", "c2.n128.s2.pp1.ov1.p1", "NOEXP"),
        ("kv0", "c2.n128.s2.pp1.ov1.p1", "KV0"),
        ("kvh0", "c2.n128.s2.pp1.ov1.p1", "KVH0"),
        ("c3n80s2p", "c3.n80.s2.pp1.ov1.p1", ""),
    ],
    (256, "none"): [
        ("c2n64s2 (tuned)", "c2.n64.s2.pp1.ov1.p0", ""),
        ("c2n64s2p", "c2.n64.s2.pp1.ov1.p1", ""),
        ("noepi", "c2.n64.s2.pp1.ov1.p0", "NOEPI"),
        ("noexp", "c2.n64.s2.pp1.ov1.p0", "NOEXP"),
        ("kv0", "c2.n64.s2.pp1.ov1.p0", "KV0"),
        ("kvh0", "c2.n64.s2.pp1.ov1.p0", "KVH0"),
        ("c2n80s2", "c2.n80.s2.pp1.ov1.p0", ""),
    ],
    64: [
        ("c3n128s3p (default)", "c3.n128.s3.pp0.ov1.p1", ""),
        ("c2n128s3p", "c2.n128.s3.pp1.ov1.p1", ""),
        ("noepi", "c2.n128.s3.pp1.ov1.p1", "NOEPI"),
        ("noexp", "c2.n128.s3.pp1.ov1.p1", "NOEXP"),
        ("nomask", "c2.n128.s3.pp1.ov1.p1", "NOMASK"),
        ("kv0", "c2.n128.s3.pp1.ov1.p1", "KV0"),
        ("c2n128s3p no ping-pong", "c2.n128.s3.pp0.ov1.p1", ""),
    ],
    128: [
        ("c2n128s2 p2 (default)", "c2.n128.s2.pp1.ov1.p2", ""),
        ("c2n128s2", "c2.n128.s2.pp1.ov1.p0", ""),
        ("noepi", "c2.n128.s2.pp1.ov1.p2", "NOEPI"),
        ("noexp", "c2.n128.s2.pp1.ov1.p2", "NOEXP"),
        ("nomask", "c2.n128.s2.pp1.ov1.p2", "NOMASK"),
        ("kv0", "c2.n128.s2.pp1.ov1.p2", "KV0"),
    ],
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cells", default="64:512,64:1024,64:2048,128:1024")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--cache", default="/tmp/fwd_short_probe.sqlite", help="cache files: this path + .d.n")
    ap.add_argument(
        "--points",
        default="",
        help="instead of the variant lists: tunable points alone, 'D[:none]=KEY;...' (KEY: a fwd_wgmma "
        "tunables key), e.g. '128:none=c2.n128.s2.pp1.ov1.p1;64=c3.n128.s3.pp0.ov1.p1': an A/B of "
        "two libraries at fixed points (no patch needed)",
    )
    args = ap.parse_args()
    if args.points:
        chosen = {}
        for item in args.points.split(";"):
            key, t = item.split("=")
            kp = key.split(":")
            k = int(kp[0]) if len(kp) == 1 else (int(kp[0]), kp[1])
            chosen.setdefault(k, []).append((t, t, ""))
        VARIANTS.clear()
        VARIANTS.update(chosen)
    from torch.nn.attention import SDPBackend, sdpa_kernel

    ctxs = {}
    for cell in args.cells.split(","):
        parts = cell.split(":")  # d:s, or d:s:none for a non-causal cell
        d, s = int(parts[0]), int(parts[1])
        causal = len(parts) < 3 or parts[2] != "none"
        b, h = max(1, 16384 // s), 2048 // d
        flop = 4.0 * b * h * s * s * d / (2 if causal else 1)
        torch.manual_seed(0)
        q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        qh, kh, vh = (t.transpose(1, 2) for t in (q, k, v))

        def sdpa(backend):
            def call():
                with sdpa_kernel(backend):
                    return torch.nn.functional.scaled_dot_product_attention(qh, kh, vh, is_causal=causal)

            return call

        calls = {"cuDNN": sdpa(SDPBackend.CUDNN_ATTENTION), "FA2": sdpa(SDPBackend.FLASH_ATTENTION)}
        try:
            ref = calls["FA2"]().transpose(1, 2).float()
        except RuntimeError:  # a torch without the flash backend: cuDNN is the reference, FA2 a copy of it
            calls["FA2"] = calls["cuDNN"]
            ref = calls["cuDNN"]().transpose(1, 2).float()
        diffs = {}
        for name, t, defs in VARIANTS[d if causal else (d, "none")]:
            os.environ["FA_PIN_TUNABLES"] = "fwd_wgmma:" + t  # read when the variant's context is made
            os.environ["FA_PROBE_DEF"] = defs
            if (d, causal, name) not in ctxs:  # a cache file per variant: the library memoizes a config's compile hash
                ctxs[(d, causal, name)] = fa.Context(
                    torch.cuda.current_device(), tune_policy="defaults", cache_path=f"{args.cache}.{d}.{len(ctxs)}"
                )
            ctx = ctxs[(d, causal, name)]
            fa.set_default_context(ctx)
            o = fa.attention(q, k, v, causal=causal)  # selects and compiles with this variant's environment
            torch.cuda.synchronize()
            diffs[name] = (o.float() - ref).abs().max().item()

            def call(ctx=ctx):
                fa.set_default_context(ctx)
                return fa.attention(q, k, v, causal=causal)

            calls[name] = call
        times = {n: [] for n in calls}
        names = list(calls)
        for r in range(args.rounds):
            order = names[r % len(names) :] + names[: r % len(names)]
            for n in order:
                times[n] += event_times(calls[n], 3 if r == 0 else 1, args.iters)
        med = {n: statistics.median(t) for n, t in times.items()}
        cu = med["cuDNN"]
        print(
            f"== d{d} s{s} b{b} h{h} {'causal' if causal else 'none'} bf16: "
            f"cuDNN {cu:.4f} ms ({flop / cu / 1e9:.0f} TF/s), "
            f"FA2 {med['FA2']:.4f} ms",
            flush=True,
        )
        for n in names[2:]:
            print(
                f"PROBE d{d:<4} s{s:<6} {n:<20} {med[n]:.4f} ms  {flop / med[n] / 1e9:6.1f} TF/s  "
                f"fa/cuDNN {cu / med[n]:.3f}  max|diff| {diffs[n]:.4f}",
                flush=True,
            )
        del q, k, v, qh, kh, vh, ref, calls
        torch.cuda.empty_cache()
    os.environ.pop("FA_PIN_TUNABLES", None)
    os.environ.pop("FA_PROBE_DEF", None)


if __name__ == "__main__":
    main()
