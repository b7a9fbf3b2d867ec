#!/usr/bin/env python3
"""fwd_short_probe.py -- where fwd_wgmma's time goes at issue 20's short causal cells (bf16, 16k tokens per batch,
hidden 2048): fa at fixed tunable points and stage-out variants against SDPA's cuDNN and flash (FA2) backends,
CUDA-event medians of whole calls (back to back, as bench_peers.py times them) in interleaved rounds, one process.

Variants need a library built with bench/fwd_short_probe.patch applied (`git apply`, never merged): the patch makes
fwd_wgmma's defaults read FA_PROBE_T ("consumers,block_n,stages,ping_pong,intra_overlap,persistent") and appends
`#define FA_PROBE_<NAME> 1` to the rendered source for each name in FA_PROBE_DEF: NOEPI (no O stores), NOEXP (exp2
replaced by its argument), NOMASK (no causal mask code), KV0 (every K/V copy reads key block 0: L2 hits instead of
DRAM), KVH0 (every K/V copy reads its block of the first (batch, head): after the first touch every K/V byte comes
from L2, a tile's first blocks too); results are wrong under each of them (max|diff| against FA2 shows it: a variant that did not apply shows the
normal error). EMU8 / EMU4 / EMU2 compute 1/8, 1/4 or 1/2 of P's exp2 on the FMA pipe (a cubic on the fraction
plus an exponent-field add, relative error 1e-4) instead of MUFU's ex2; LAZY keeps a row's running max while a
block's max exceeds it by at most 8 (log2 units; P <= 256) and skips the O rescale when no row of the warp moved
(FA4's lazy rescale). Results stay right under both (bf16 rounding). NOSNAKE: the masked persistent round robin
without its reversed odd waves; L2SEC=G (an entry NAME=value defines FA_PROBE_NAME as value): tiles in sections of G
(batch, head)s, query-block-major inside a section (fewer DRAM bytes, worse balance; session 16's probe). Each variant gets its own context and cache file: the library memoizes a configuration's compile
hash per process, so variants of one tunable point sharing a cache file would all load the first one's cubin.
(The run in bench/results/h200_fwd_short_probe.log used this script and patch as on branch fwd-short-experiments,
with its per-warpgroup block skipping (NOTRIM: without it) and two_ctas knob (a 7th value in FA_PROBE_T).)

Cells are head_dim:seqlen (causal) or head_dim:seqlen:none (not causal; session 18: the non-causal 512 cells).

  FA_LIBRARY=... PYTHONPATH=python python3 bench/fwd_short_probe.py [--cells 64:512,128:512:none] [--rounds 3]
"""
import argparse
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))
import torch  # noqa: E402

import fa  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_peers import event_times  # noqa: E402

# (name, FA_PROBE_T, FA_PROBE_DEF) per head dim (causal cells) or (head dim, "none") (non-causal cells); T = consumers,
# block_n, stages, ping_pong, intra_overlap, persistent. The non-causal points are session 17's fa-tune winners at 512
# (d 128: 2 x 128 x 2 persistent; d 256: 2 x 64 x 2, not persistent).
VARIANTS = {
    (128, "none"): [("c2n128s2p (tuned)", "2,128,2,1,1,1", ""), ("c2n128s2", "2,128,2,1,1,0", ""),
                    ("noepi", "2,128,2,1,1,1", "NOEPI"), ("noexp", "2,128,2,1,1,1", "NOEXP"),
                    ("kv0", "2,128,2,1,1,1", "KV0"), ("kvh0", "2,128,2,1,1,1", "KVH0"),
                    ("c3n80s2p", "3,80,2,1,1,1", "")],
    (256, "none"): [("c2n64s2 (tuned)", "2,64,2,1,1,0", ""), ("c2n64s2p", "2,64,2,1,1,1", ""),
                    ("noepi", "2,64,2,1,1,0", "NOEPI"), ("noexp", "2,64,2,1,1,0", "NOEXP"),
                    ("kv0", "2,64,2,1,1,0", "KV0"), ("kvh0", "2,64,2,1,1,0", "KVH0"),
                    ("c2n80s2", "2,80,2,1,1,0", "")],
    64: [("c2n128s3p", "2,128,3,1,1,1", ""), ("noepi", "2,128,3,1,1,1", "NOEPI"),
         ("noexp", "2,128,3,1,1,1", "NOEXP"), ("nomask", "2,128,3,1,1,1", "NOMASK"), ("kv0", "2,128,3,1,1,1", "KV0"),
         ("emu8", "2,128,3,1,1,1", "EMU8"), ("emu4", "2,128,3,1,1,1", "EMU4"), ("emu2", "2,128,3,1,1,1", "EMU2"),
         ("lazy", "2,128,3,1,1,1", "LAZY"), ("c2n128s3p no ping-pong", "2,128,3,0,1,1", ""),
         ("c3n128s2 (default)", "3,128,2,1,1,0", ""),
         ("c3 emu4", "3,128,2,1,1,0", "EMU4"), ("c3 lazy", "3,128,2,1,1,0", "LAZY")],
    128: [("c2n128s2 (default)", "2,128,2,1,1,0", ""), ("noepi", "2,128,2,1,1,0", "NOEPI"),
          ("noexp", "2,128,2,1,1,0", "NOEXP"), ("nomask", "2,128,2,1,1,0", "NOMASK"), ("kv0", "2,128,2,1,1,0", "KV0"),
          ("emu8", "2,128,2,1,1,0", "EMU8"), ("emu4", "2,128,2,1,1,0", "EMU4"), ("lazy", "2,128,2,1,1,0", "LAZY")],
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cells", default="64:512,64:1024,64:2048,128:1024")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--cache", default="/tmp/fwd_short_probe.sqlite", help="cache files: this path + .d.n")
    ap.add_argument("--points", default="",
                    help="instead of the variant lists: tunable points alone, 'D[:none]=T;...' (T as FA_PROBE_T), e.g. "
                         "'128:none=2,128,2,1,1,1;64=3,128,3,0,1,1': an A/B of two libraries at fixed points")
    args = ap.parse_args()
    if args.points:
        chosen = {}
        for item in args.points.split(";"):
            key, t = item.split("=")
            kp = key.split(":")
            k = int(kp[0]) if len(kp) == 1 else (int(kp[0]), kp[1])
            chosen.setdefault(k, []).append((t.replace(",", "."), t, ""))
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
            os.environ["FA_PROBE_T"] = t
            os.environ["FA_PROBE_DEF"] = defs
            if (d, causal, name) not in ctxs:  # a cache file per variant: the library memoizes a config's compile hash
                ctxs[(d, causal, name)] = fa.Context(torch.cuda.current_device(), tune_policy="defaults",
                                             cache_path=f"{args.cache}.{d}.{len(ctxs)}")
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
            order = names[r % len(names):] + names[:r % len(names)]
            for n in order:
                times[n] += event_times(calls[n], 3 if r == 0 else 1, args.iters)
        med = {n: statistics.median(t) for n, t in times.items()}
        cu = med["cuDNN"]
        print(f"== d{d} s{s} b{b} h{h} {'causal' if causal else 'none'} bf16: cuDNN {cu:.4f} ms ({flop / cu / 1e9:.0f} TF/s), "
              f"FA2 {med['FA2']:.4f} ms", flush=True)
        for n in names[2:]:
            print(f"PROBE d{d:<4} s{s:<6} {n:<20} {med[n]:.4f} ms  {flop / med[n] / 1e9:6.1f} TF/s  "
                  f"fa/cuDNN {cu / med[n]:.3f}  max|diff| {diffs[n]:.4f}", flush=True)
        del q, k, v, qh, kh, vh, ref, calls
        torch.cuda.empty_cache()
    os.environ.pop("FA_PROBE_T", None)
    os.environ.pop("FA_PROBE_DEF", None)


if __name__ == "__main__":
    main()
