#!/usr/bin/env python3
"""ring_scale.py -- issue 23 on a host with several GPUs: fa.ring (causal zigzag ring attention over NCCL) against
single-GPU fa on the same inputs, and its scaling.

check  For each world W (--worlds): W processes (torch.multiprocessing, NCCL, one GPU each) build the same full
       inputs (seeded), run single-GPU fa (fa.attention with autograd) on the full sequence, and fa.ring_attention on
       their zigzag shards; the ring's output and gradients are compared with single-GPU fa's shards, and both with
       a float32 reference (SDPA on float32 copies, GQA heads expanded): the ring passes when its error against the
       reference is at most 2x single-GPU fa's plus one bf16 ulp of the largest value (rounding level).
speed  For each total length L (--tokens): one GPU runs fa.attention forward and forward + backward on the whole
       sequence; each world W runs the ring on its shards. Seconds per step are medians over --iters steps after a
       warm-up step (the slowest rank's, CUDA-synchronized, barriers around); tokens/s per GPU = L / t / W and the
       scaling efficiency = t(1 GPU) / (W * t(W)) at the same L (goal >= 0.85 at 4 GPUs).

Defaults: bf16, batch 1, 16 query heads of 128 (hidden 2048), 16 KV heads for speed and 4 (GQA) for the check.
FA_TUNE_POLICY should be `defaults` (no tuning inside the timings); FA_CACHE_PATH one file shared by the ranks.
--cpu runs the same flow on CPU processes over gloo with the ring's reference blocks and a plain-torch baseline
(small shapes only): a check of the orchestration on machines without GPUs.

  FA_TUNE_POLICY=defaults FA_LIBRARY=build/lib/libfa.so PYTHONPATH=python python3 bench/ring_scale.py \
      --worlds 2,4 --check-tokens 16384 --tokens 131072,524288 --json out.json
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import result_schema  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402


def make_inputs(tokens, heads, kv_heads, dim, dtype, device, seed):
    """q, k, v, dout of one batch, N(0, 1), drawn on `device` (its own seeded generator: no host copy of the full
    sequence, which at 512k tokens would cost GBs per rank)."""
    g = torch.Generator(device=device).manual_seed(seed)
    shape_q, shape_kv = (1, tokens, heads, dim), (1, tokens, kv_heads, dim)
    return tuple(
        torch.randn(sh, generator=g, device=device, dtype=torch.float32).to(dtype)
        for sh in (shape_q, shape_kv, shape_kv, shape_q)
    )


def single_attention(cpu):
    """The one-GPU baseline: fa.attention (autograd), or plain torch on the CPU."""
    if not cpu:
        import fa

        return lambda q, k, v: fa.attention(q, k, v, causal=True)

    def ref(q, k, v):
        gq = q.shape[2] // k.shape[2]
        kk, vv = k.repeat_interleave(gq, dim=2), v.repeat_interleave(gq, dim=2)
        o = torch.nn.functional.scaled_dot_product_attention(
            q.transpose(1, 2), kk.transpose(1, 2), vv.transpose(1, 2), is_causal=True
        )
        return o.transpose(1, 2)

    return ref


def fwd_bwd(fn, q, k, v, dout):
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    o = fn(q, k, v)
    o.backward(dout)
    return o.detach(), q.grad, k.grad, v.grad


def reference32(q, k, v, dout):
    """Float32 attention (SDPA on float32 copies, GQA heads expanded) and its gradients."""
    q, k, v = (t.detach().float().requires_grad_() for t in (q, k, v))
    gq = q.shape[2] // k.shape[2]
    kk, vv = k.repeat_interleave(gq, dim=2), v.repeat_interleave(gq, dim=2)
    o = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2), kk.transpose(1, 2), vv.transpose(1, 2), is_causal=True
    ).transpose(1, 2)
    o.backward(dout.float())
    return o.detach(), q.grad, k.grad, v.grad


def timed(step, iters, sync, barrier):
    """Seconds per call of step(): one warm-up, then `iters` calls timed one by one (barrier, sync around each)."""
    step()
    sync()
    out = []
    for _ in range(iters):
        barrier()
        sync()
        t0 = time.perf_counter()
        step()
        sync()
        out.append(time.perf_counter() - t0)
    return out


def run_rank(rank, world, work, args):
    cpu = args.cpu
    if not cpu:
        torch.cuda.set_device(rank)
    dist.init_process_group(
        "gloo" if cpu else "nccl", init_method=f"file://{work}/rendezvous_{world}", rank=rank, world_size=world
    )
    try:
        from fa.ring import ring_attention, zigzag_shard

        device = "cpu" if cpu else f"cuda:{rank}"
        dtype = torch.float32 if cpu else torch.bfloat16
        sync = (lambda: None) if cpu else torch.cuda.synchronize
        result = {"world": world}

        def worst(x):  # the largest value over the ranks
            t = torch.tensor([float(x)], dtype=torch.float64, device=device)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            return float(t.item())

        # ---- check: the ring against single-GPU fa and a float32 reference, on the same inputs
        n = args.check_tokens
        q, k, v, dout = make_inputs(n, args.heads, args.check_kv_heads, args.dim, dtype, device, seed=7)
        for t in (q, k, v, dout):  # every rank holds rank 0's inputs
            dist.broadcast(t, src=0)
        single = fwd_bwd(single_attention(cpu), q, k, v, dout)
        ref = reference32(q, k, v, dout)
        shard = lambda t: zigzag_shard(t, rank, world)  # noqa: E731
        qs, ks, vs = (shard(t).detach().requires_grad_() for t in (q, k, v))
        o = ring_attention(qs, ks, vs, causal=True, reference=cpu)
        o.backward(shard(dout))
        ring = (o.detach(), qs.grad, ks.grad, vs.grad)
        check = {}
        for name, r, s, f in zip(("o", "dq", "dk", "dv"), ring, single, ref):
            s, f = shard(s).float(), shard(f).float()
            r = r.float()
            ulp = f.abs().max().item() * (2.0**-7 if dtype == torch.bfloat16 else 2.0**-20)
            e_ring = worst((r - f).abs().max().item())
            e_single = worst((s - f).abs().max().item())
            d_rs = worst((r - s).abs().max().item())
            bad = worst(0.0 if torch.isfinite(r).all() else 1.0)
            ok = bad == 0.0 and e_ring <= 2.0 * e_single + worst(ulp)
            check[name] = {"ring_vs_single": d_rs, "ring_vs_f32": e_ring, "single_vs_f32": e_single, "ok": ok}
        result["check"] = {"tokens": n, "kv_heads": args.check_kv_heads, "fields": check}
        del q, k, v, dout, single, ref, qs, ks, vs, o, ring
        if not cpu:
            torch.cuda.empty_cache()

        # ---- speed: the ring's forward and forward + backward at each total length
        speed = []
        barrier = dist.barrier
        for L in args.tokens:
            q, k, v, dout = make_inputs(L, args.heads, args.heads, args.dim, dtype, device, seed=11)
            qs, ks, vs, ds = (zigzag_shard(t, rank, world).contiguous() for t in (q, k, v, dout))
            del q, k, v, dout
            qs, ks, vs = (t.requires_grad_() for t in (qs, ks, vs))

            def fwd():
                with torch.no_grad():
                    ring_attention(qs, ks, vs, causal=True, reference=cpu)

            def train():
                for t in (qs, ks, vs):
                    t.grad = None
                ring_attention(qs, ks, vs, causal=True, reference=cpu).backward(ds)

            tf = statistics.median(timed(fwd, args.iters, sync, barrier))
            tt = statistics.median(timed(train, args.iters, sync, barrier))
            speed.append({"tokens": L, "fwd_s": worst(tf), "fwd_bwd_s": worst(tt)})
            del qs, ks, vs, ds
            if not cpu:
                torch.cuda.empty_cache()
        result["speed"] = speed
        if rank == 0:
            with open(os.path.join(work, f"world_{world}.json"), "w") as f:
                json.dump(result, f)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def one_gpu(args):
    """The one-GPU baseline at each total length: fa.attention forward and forward + backward."""
    device = "cpu" if args.cpu else "cuda:0"
    dtype = torch.float32 if args.cpu else torch.bfloat16
    sync = (lambda: None) if args.cpu else torch.cuda.synchronize
    fn = single_attention(args.cpu)
    out = []
    for L in args.tokens:
        q, k, v, dout = make_inputs(L, args.heads, args.heads, args.dim, dtype, device, seed=11)
        q, k, v = (t.requires_grad_() for t in (q, k, v))

        def fwd():
            with torch.no_grad():
                fn(q, k, v)

        def train():
            for t in (q, k, v):
                t.grad = None
            fn(q, k, v).backward(dout)

        tf = statistics.median(timed(fwd, args.iters, sync, lambda: None))
        tt = statistics.median(timed(train, args.iters, sync, lambda: None))
        out.append({"tokens": L, "fwd_s": tf, "fwd_bwd_s": tt})
        print(f"[ring_scale] 1 GPU, {L} tokens: fwd {tf:.4f} s, fwd+bwd {tt:.4f} s", flush=True)
        del q, k, v, dout
        if not args.cpu:
            torch.cuda.empty_cache()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worlds", default="2,4")
    ap.add_argument("--tokens", default="131072,524288", help="total sequence lengths of the speed part")
    ap.add_argument("--check-tokens", type=int, default=16384)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--check-kv-heads", type=int, default=4)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--cpu", action="store_true", help="gloo on CPU processes, reference blocks (small shapes)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    args.worlds = [int(w) for w in args.worlds.split(",") if w]
    args.tokens = [int(t) for t in args.tokens.split(",") if t]
    gpus = 0 if args.cpu else torch.cuda.device_count()
    if not args.cpu and gpus < max(args.worlds):
        sys.exit(f"ring_scale: worlds {args.worlds} need {max(args.worlds)} GPUs, this host has {gpus}")
    for w in args.worlds:
        for L in args.tokens + [args.check_tokens]:
            if L % (2 * w) != 0:
                sys.exit(f"ring_scale: {L} tokens do not split into {2 * w} zigzag chunks")
    report = {
        "device": "cpu" if args.cpu else torch.cuda.get_device_name(0),
        "gpus": gpus,
        "heads": args.heads,
        "dim": args.dim,
        "iters": args.iters,
        "one_gpu": one_gpu(args),
        "worlds": [],
    }
    if not args.cpu:
        torch.cuda.empty_cache()
    with tempfile.TemporaryDirectory() as work:
        for w in args.worlds:
            t0 = time.perf_counter()
            mp.spawn(run_rank, args=(w, work, args), nprocs=w, join=True)
            with open(os.path.join(work, f"world_{w}.json")) as f:
                r = json.load(f)
            r["wall_s"] = time.perf_counter() - t0
            report["worlds"].append(r)
            for name, c in r["check"]["fields"].items():
                print(
                    f"[ring_scale] check world {w}, {r['check']['tokens']} tokens: {name} max|ring - single| "
                    f"{c['ring_vs_single']:.3g}, against float32: ring {c['ring_vs_f32']:.3g}, single "
                    f"{c['single_vs_f32']:.3g} -> {'ok' if c['ok'] else 'FAIL'}",
                    flush=True,
                )
    base = {s["tokens"]: s for s in report["one_gpu"]}
    print("\n| GPUs | tokens | fwd s | fwd+bwd s | fwd+bwd tokens/s per GPU | efficiency fwd | efficiency fwd+bwd |")
    print("|---|---|---|---|---|---|---|")
    for s in report["one_gpu"]:
        print(
            f"| 1 | {s['tokens']} | {s['fwd_s']:.4f} | {s['fwd_bwd_s']:.4f} | "
            f"{s['tokens'] / s['fwd_bwd_s']:.0f} | 1.00 | 1.00 |"
        )
    for r in report["worlds"]:
        w = r["world"]
        for s in r["speed"]:
            b = base[s["tokens"]]
            s["eff_fwd"] = b["fwd_s"] / (w * s["fwd_s"])
            s["eff_fwd_bwd"] = b["fwd_bwd_s"] / (w * s["fwd_bwd_s"])
            print(
                f"| {w} | {s['tokens']} | {s['fwd_s']:.4f} | {s['fwd_bwd_s']:.4f} | "
                f"{s['tokens'] / s['fwd_bwd_s'] / w:.0f} | {s['eff_fwd']:.2f} | {s['eff_fwd_bwd']:.2f} |"
            )
    fails = [(r["world"], n) for r in report["worlds"] for n, c in r["check"]["fields"].items() if not c["ok"]]
    print(
        f"RING SUMMARY: checks {'all ok' if not fails else 'FAILED ' + str(fails)}; "
        + "; ".join(
            f"{r['world']} GPUs at {s['tokens']}: efficiency fwd+bwd {s['eff_fwd_bwd']:.2f}, fwd {s['eff_fwd']:.2f}"
            for r in report["worlds"]
            for s in r["speed"]
        ),
        flush=True,
    )
    if args.json:
        write_result(args, report)
    return 1 if fails else 0


def write_result(args, report):
    """bench/results/SCHEMA.md: a row per (GPUs, tokens) with its times and efficiencies; the checks in extra."""
    rows = [dict(gpus=1, **s, eff_fwd=1.0, eff_fwd_bwd=1.0) for s in report["one_gpu"]]
    rows += [dict(gpus=r["world"], **s) for r in report["worlds"] for s in r["speed"]]
    extra = {
        "heads": args.heads,
        "dim": args.dim,
        "iters": args.iters,
        "checks": [dict(world=r["world"], **r["check"]) for r in report["worlds"]],
        "wall_s": {str(r["world"]): r["wall_s"] for r in report["worlds"]},
    }
    doc = result_schema.document(
        "ring_scale", rows, args=vars(args), extra=extra, gpu_count=max(args.worlds) if not args.cpu else 1
    )
    if args.cpu:
        doc["gpu"] = "cpu (gloo)"
    result_schema.write(args.json, doc)


if __name__ == "__main__":
    sys.exit(main())
