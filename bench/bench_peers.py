#!/usr/bin/env python3
"""fa against its peers on one GPU: torch SDPA's FLASH_ATTENTION (FlashAttention-2), CUDNN_ATTENTION and
EFFICIENT_ATTENTION backends, and FlexAttention (torch.compile'd flex_attention); forward and backward; bf16/fp16.

Sweep (FlashAttention's standard one): head dim 64, 128, 256; causal and not; seqlen 512..16k with
batch * seqlen = 16k tokens and hidden 2048 (heads = 2048 / d); plus decode-like shapes (seqlen_q = 1,
seqlen_k 4k..64k) and odd head dims (80, 96, 112, 160). Every contender gets the same tensors (BSHD storage; SDPA
and Flex get the [B, H, S, D] transposed views). Each contender runs once first (fa's first-use tuning starts
there, and with --fa-tune first_use_sync finishes before that call returns: first_use tunes in the background while
the rounds run), then all are timed in --rounds interleaved rounds (the order rotating), so clock and thermal drift
within a cell reaches every contender alike; times are medians of per-call CUDA-event times;
TFLOP/s = 4 * b * h * sq * sk * d / t, halved for causal, x2.5 for the backward. A contender that fails or is not
supported prints "n/a". fa's output is checked against the flash backend once per shape (max abs diff printed), so a
fast but wrong kernel shows.

  python3 bench/bench_peers.py [--quick] [--fwd-only] [--dtypes bf16,fp16] [--hdims 64,128,256]
                               [--json out.json] [--out bench_out] [--iters 30] [--warmup 5]
"""

import argparse
import contextlib
import gc
import itertools
import math
import os
import platform
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import fa  # noqa: E402

sys.path.insert(0, str(REPO / "bench"))
import result_schema  # noqa: E402

CONTENDERS = ["fa", "FA2", "cuDNN", "efficient", "flex"]
SDPA_BACKENDS = {"FA2": "FLASH_ATTENTION", "cuDNN": "CUDNN_ATTENTION", "efficient": "EFFICIENT_ATTENTION"}
TOKENS, HIDDEN = 16384, 2048
SEQLENS = [512, 1024, 2048, 4096, 8192, 16384]
DECODE_SK = [4096, 8192, 16384, 32768, 65536]
ODD_HDIMS = [80, 96, 112, 160]


# ---- shapes --------------------------------------------------------------------------------------------------------
def make_shapes(args):
    """(group, b, h, sq, sk, d, causal) tuples."""
    shapes = []
    seqlens = [512, 2048, 8192] if args.quick else SEQLENS
    if args.seqlens:
        seqlens = args.seqlens
    for d in args.hdims:
        for causal in args.causal:
            for s in seqlens:
                shapes.append(("standard", TOKENS // s, HIDDEN // d, s, s, d, causal))
    if not args.no_decode:
        for d in [128] if args.quick else sorted({128} | set(x for x in args.hdims if x in (64, 128))):
            for sk in [4096, 65536] if args.quick else DECODE_SK:
                shapes.append(("decode", 8, HIDDEN // d, 1, sk, d, False))
    if not args.no_odd:
        for d in [96] if args.quick else ODD_HDIMS:
            for causal in (False, True):
                for s in [2048] if args.quick else [1024, 4096]:
                    shapes.append(("odd", TOKENS // s, max(1, HIDDEN // d), s, s, d, causal))
    return shapes


def flops(b, h, sq, sk, d, causal, backward):
    f = 4.0 * b * h * sq * sk * d
    if causal:
        f /= 2.0
    return f * 2.5 if backward else f


# ---- timing --------------------------------------------------------------------------------------------------------
def event_times(fn, warmup, iters):
    """Per-call CUDA-event times (ms) of `iters` calls after `warmup` calls, all enqueued back to back and
    synchronized once at the end, so the host runs ahead and host-side overhead (ctypes, dispatch) is hidden as it
    is in a real model; Python's cyclic garbage collector paused meanwhile."""
    for _ in range(warmup):
        fn()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
    # as timeit does: no cyclic collection inside the timed calls (a process holding torch.compile'd graphs spends
    # milliseconds on a full collection, on whichever contender it lands)
    gc.collect()
    was_on = gc.isenabled()
    gc.disable()
    try:
        for start, end in events:
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize()
    finally:
        if was_on:
            gc.enable()
    return [start.elapsed_time(end) for start, end in events]


def host_us(fn, iters=50):
    """Host time per call in microseconds (the launch path: argument checks, ctypes, dispatch), after one warm-up
    call: host_overhead.py's timer."""
    from host_overhead import host_us as loop_us

    fn()
    return loop_us(fn, iters)


# ---- contenders ----------------------------------------------------------------------------------------------------
class Flex:
    def __init__(self):
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        import torch._dynamo

        try:  # the timed backward re-runs autograd.grad on one graph (retain_graph), which donated buffers forbid
            import torch._functorch.config as functorch_config

            functorch_config.donated_buffer = False
        except (ImportError, AttributeError):
            pass
        for name in ("recompile_limit", "cache_size_limit"):
            if hasattr(torch._dynamo.config, name):
                setattr(torch._dynamo.config, name, 1024)
        # dynamic=True: one compile serves every sequence length of the sweep (a recompile per shape would
        # dominate the run); block masks are still built per shape.
        self.fn = torch.compile(flex_attention, dynamic=True)
        self.create_block_mask = create_block_mask
        self.masks = {}

    def __call__(self, q, k, v, causal):
        b, h, sq, d = q.shape
        sk = k.shape[2]
        block_mask = None
        if causal:
            key = (sq, sk)
            if key not in self.masks:

                def causal_fn(b_, h_, qi, kj):
                    return qi + (sk - sq) >= kj

                self.masks[key] = self.create_block_mask(causal_fn, None, None, sq, sk, device=q.device)
            block_mask = self.masks[key]
        return self.fn(q, k, v, block_mask=block_mask)


def make_call(name, q, k, v, causal, flex, gqa=False):
    """A function running the contender's forward on the shared BSHD tensors, returning o in BSHD. gqa: SDPA gets
    enable_gqa=True (k / v with fewer heads than q; bench_train.py's GQA cells)."""
    if name == "fa":
        return lambda: fa.attention(q, k, v, causal=causal)
    qh, kh, vh = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    if name in SDPA_BACKENDS:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        backend = getattr(SDPBackend, SDPA_BACKENDS[name])
        kw = {"enable_gqa": True} if gqa else {}

        def call():
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(qh, kh, vh, is_causal=causal, **kw).transpose(1, 2)

        return call
    if name == "flex":
        if flex is None:
            raise RuntimeError("flex_attention unavailable")
        return lambda: flex(qh, kh, vh, causal).transpose(1, 2)
    raise ValueError(name)


def short(exc):
    text = f"{type(exc).__name__}: {exc}".replace("\n", " ")
    return text[:160]


def prepare_one(name, q, k, v, causal, flex, args, do):
    """Runs the contender once (fa: its first-use tuning and compiles happen here, outside the timed rounds).
    {'fwd', 'bwd' (callables or None), 'out', 'grads', 'fwd_err', 'bwd_err'}."""
    return prepare_call(lambda q_, k_, v_: make_call(name, q_, k_, v_, causal, flex), q, k, v, do, args)


def prepare_call(make, q, k, v, do, args, mode=None):
    """Runs make(q, k, v)'s forward once, then its backward against `do` once (gradients of q, k, v; skipped under
    args.fwd_only), and returns the timed callables of both: make(q, k, v) returns a function running the forward
    and returning o. mode: None, or a context manager factory entered around every forward and backward call
    (bench_train.py's deterministic mode). {'fwd', 'bwd' (callables or None), 'out', 'grads', 'fwd_err',
    'bwd_err'}."""
    res = {"fwd": None, "bwd": None, "out": None, "grads": None, "fwd_err": None, "bwd_err": None}
    mode = mode or contextlib.nullcontext
    try:
        call = make(q, k, v)
        with mode(), torch.no_grad():
            res["out"] = call()
            torch.cuda.synchronize()

        def fwd():
            with mode(), torch.no_grad():
                call()

        res["fwd"] = fwd
    except Exception as exc:  # noqa: BLE001 - a contender that fails shows n/a
        res["fwd_err"] = short(exc)
        if args.verbose:
            traceback.print_exc()
        return res
    if getattr(args, "fwd_only", False):
        return res
    try:
        qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))
        with mode():
            out = make(qg, kg, vg)()
            res["grads"] = torch.autograd.grad(out, (qg, kg, vg), do, retain_graph=True)
        torch.cuda.synchronize()

        def bwd():
            with mode():
                torch.autograd.grad(out, (qg, kg, vg), do, retain_graph=True)

        res["bwd"] = bwd
    except Exception as exc:  # noqa: BLE001
        res["bwd_err"] = short(exc)
        if args.verbose:
            traceback.print_exc()
    return res


def round_orders(names, how="balanced"):
    """The contender orders of successive rounds: every permutation for up to 3 contenders, else the rotations of
    the list and of its reverse. A contender runs hot on the heels of its predecessor (clocks and power lag behind
    the load by milliseconds), so a plain rotation, where each contender always follows the same one (on H100 fa
    followed cuDNN, the heaviest, in every round), is not enough: here each follows each other equally often."""
    if how == "rotate":  # the plain rotation (kept to measure what it costs)
        return [names[i:] + names[:i] for i in range(len(names))]
    if len(names) <= 3:
        return [list(p) for p in itertools.permutations(names)]
    rev = names[::-1]
    return [names[i:] + names[:i] for i in range(len(names))] + [rev[i:] + rev[:i] for i in range(len(rev))]


def time_interleaved(calls, args):
    """Median per-call time of each contender, measured in args.rounds rounds that visit every contender in turn
    (in the orders of round_orders), so clock and thermal drift over the cell reaches all of them alike. A
    contender whose call raises gets None and its error. Also each round's median, from which the report derives
    the spread of a ratio over the rounds. {name: (ms or None, error or None, [per-round ms])}."""
    names = [n for n, fn in calls.items() if fn is not None]
    orders = round_orders(names, getattr(args, "order", "balanced")) if names else [[]]
    times = {n: [] for n in names}
    rounds_ms = {n: [] for n in names}
    errors = {}
    rounds = max(1, args.rounds)
    per_round = max(1, math.ceil(args.iters / rounds))
    for r in range(rounds):
        order = orders[r % len(orders)]
        for n in order:
            if n in errors:
                continue
            try:
                got = event_times(calls[n], args.warmup if r == 0 else 1, per_round)
                times[n] += got
                rounds_ms[n].append(statistics.median(got))
            except Exception as exc:  # noqa: BLE001
                errors[n] = short(exc)
                if args.verbose:
                    traceback.print_exc()
    return {
        n: (None, errors[n], []) if n in errors else (statistics.median(times[n]), None, rounds_ms[n]) for n in names
    }


def round_ratio_range(fa_rounds, peer_rounds):
    """[min, max] over the rounds of fa's speed over the peer's (peer time / fa time), or None."""
    pairs = [(p / f) for f, p in zip(fa_rounds or [], peer_rounds or []) if f and p]
    return [min(pairs), max(pairs)] if pairs else None


def max_diff(a, b):
    if a is None or b is None:
        return None
    return (a.float() - b.float()).abs().max().item()


# ---- report --------------------------------------------------------------------------------------------------------
def header_lines():
    lines = []
    props = torch.cuda.get_device_properties(0)
    lines.append(
        f"device: {props.name} (sm_{props.major}{props.minor}, {props.multi_processor_count} SMs, "
        f"{props.total_memory / 2**30:.0f} GiB)"
    )
    try:
        driver = (
            subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=20,
            )
            .stdout.strip()
            .splitlines()[0]
        )
    except Exception:  # noqa: BLE001
        driver = "unknown"
    lines.append(f"driver: {driver}; CUDA (torch): {torch.version.cuda}; cuDNN: {torch.backends.cudnn.version()}")
    try:
        import triton

        triton_version = triton.__version__
    except Exception:  # noqa: BLE001
        triton_version = "absent"
    try:
        fa_version = f"{fa.library_version()} ({fa.library_path()})"
    except fa.LibraryNotFoundError:
        fa_version = "library not found"
    lines.append(
        f"torch: {torch.__version__}; triton: {triton_version}; python: {platform.python_version()}; fa: {fa_version}"
    )
    lines.append(
        f"FA_TUNE_POLICY={os.environ.get('FA_TUNE_POLICY', '(unset)')} "
        f"FA_CACHE_PATH={os.environ.get('FA_CACHE_PATH', '(unset)')}"
    )
    return lines


def fmt(x, digits=1):
    return "n/a" if x is None else f"{x:.{digits}f}"


def tflops(ms, f):
    return None if ms is None or ms <= 0 else f / (ms * 1e-3) / 1e12


def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


def spread(rng):
    return "n/a" if not rng else f"{rng[0]:.2f}-{rng[1]:.2f}"


def print_table(rows, directions):
    cols = (
        ["group", "dtype", "d", "causal", "b", "h", "sq", "sk", "dir"]
        + [f"{c} TF/s" for c in CONTENDERS]
        + ["fa/FA2", "fa/FA2 over rounds", "fa/cuDNN", "fa vs FA2 max|diff|"]
    )
    print("| " + " | ".join(cols) + " |")
    print("|" + "|".join("---" for _ in cols) + "|")
    for r in rows:
        for direction in directions:
            tf = {c: r["tflops"][direction].get(c) for c in CONTENDERS}
            diff = r["max_diff"].get(direction)
            cells = (
                [
                    r["group"],
                    r["dtype"],
                    str(r["d"]),
                    "Y" if r["causal"] else "N",
                    str(r["b"]),
                    str(r["h"]),
                    str(r["sq"]),
                    str(r["sk"]),
                    direction,
                ]
                + [fmt(tf[c]) for c in CONTENDERS]
                + [
                    fmt(ratio(tf["fa"], tf["FA2"]), 2),
                    spread(r.get("fa_fa2_rounds", {}).get(direction)),
                    fmt(ratio(tf["fa"], tf["cuDNN"]), 2),
                    "n/a" if diff is None else f"{diff:.2e}",
                ]
            )
            print("| " + " | ".join(cells) + " |")


def plots(rows, out_dir, directions):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception:  # noqa: BLE001
        print(f"(matplotlib not available: no PNG written to {out_dir})")
        return []
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    std = [r for r in rows if r["group"] == "standard"]
    for d in sorted({r["d"] for r in std}):
        dtypes = sorted({r["dtype"] for r in std if r["d"] == d})
        panels = [(dt, c, dr) for dt in dtypes for c in (False, True) for dr in directions]
        ncol = 2 * len(directions)
        nrow = math.ceil(len(panels) / ncol)
        fig, axes = plt.subplots(nrow, ncol, figsize=(5 * ncol, 3.8 * nrow), squeeze=False)
        for ax, (dt, causal, direction) in zip(axes.flat, panels):
            sel = sorted(
                (r for r in std if r["d"] == d and r["dtype"] == dt and r["causal"] == causal), key=lambda r: r["sq"]
            )
            for c in CONTENDERS:
                xs = [r["sq"] for r in sel if r["tflops"][direction].get(c) is not None]
                ys = [r["tflops"][direction][c] for r in sel if r["tflops"][direction].get(c) is not None]
                if xs:
                    ax.plot(xs, ys, marker="o", label=c)
            ax.set_xscale("log", base=2)
            ax.set_title(f"d={d} {dt} {'causal' if causal else 'full'} {direction}")
            ax.set_xlabel("seqlen (batch*seqlen=16k)")
            ax.set_ylabel("TFLOP/s")
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=7)
        for ax in list(axes.flat)[len(panels) :]:
            ax.axis("off")
        fig.tight_layout()
        path = out_dir / f"bench_peers_d{d}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(str(path))
    return written


# ---- main ----------------------------------------------------------------------------------------------------------
def add_timing_args(ap):
    """The options of the timing and of fa's tuning (bench_train.py takes them too): --iters, --warmup, --rounds,
    --order, --fa-tune, --verbose."""
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument(
        "--rounds",
        type=int,
        default=6,
        help="timing rounds per cell; each visits every contender in turn (--iters split over them); "
        "a multiple of 6 gives every order of 3 contenders equally often",
    )
    ap.add_argument(
        "--order",
        default="balanced",
        choices=["balanced", "rotate"],
        help="contender order over the rounds (round_orders); rotate: the plain rotation",
    )
    ap.add_argument(
        "--fa-tune",
        default=None,
        choices=["first_use", "first_use_sync", "defaults", "require"],
        help="fa's tune policy (default: the library's, i.e. $FA_TUNE_POLICY or first_use). first_use "
        "tunes on a background thread while the timed rounds run: they time the default kernel and share "
        "the GPU with the tuner's own timing; first_use_sync tunes in the untimed first call, so the "
        "rounds time the tuned kernel, as a user's later calls run it",
    )
    ap.add_argument("--verbose", action="store_true", help="print tracebacks of failing contenders")


def start_run(args, want_flex):
    """The run's header printed, fa's default context at --fa-tune's policy (when given), and a Flex when wanted
    (None, said on stdout, when flex_attention is unavailable)."""
    for line in header_lines():
        print(line)
    if args.fa_tune is not None and fa.available():
        fa.set_default_context(fa.Context(torch.cuda.current_device(), tune_policy=args.fa_tune))
    if not want_flex:
        return None
    try:
        return Flex()
    except Exception as exc:  # noqa: BLE001
        print(f"(flex_attention unavailable: {short(exc)})")
        return None


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a small subset of the sweep")
    ap.add_argument("--fwd-only", action="store_true")
    ap.add_argument("--dtypes", default="bf16,fp16", help="comma list of bf16, fp16")
    ap.add_argument("--hdims", default="64,128,256", help="head dims of the standard sweep")
    ap.add_argument("--contenders", default=",".join(CONTENDERS), help="comma list of " + ",".join(CONTENDERS))
    ap.add_argument("--no-decode", action="store_true", help="skip the decode-like shapes")
    ap.add_argument("--no-odd", action="store_true", help="skip the odd head dims")
    ap.add_argument("--seqlens", default=None, help="comma list: only these lengths of the standard sweep")
    ap.add_argument("--causal", default="0,1", help="comma list of 0 (full), 1 (causal) for the standard sweep")
    ap.add_argument("--json", default=None, help="write every measurement to this file")
    ap.add_argument("--out", default="bench_out", help="folder for the PNGs")
    add_timing_args(ap)
    args = ap.parse_args(argv)
    args.dtypes = [x.strip() for x in args.dtypes.split(",") if x.strip()]
    args.hdims = [int(x) for x in args.hdims.split(",") if x.strip()]
    args.contenders = [x.strip() for x in args.contenders.split(",") if x.strip()]
    args.seqlens = [int(x) for x in args.seqlens.split(",") if x.strip()] if args.seqlens else None
    args.causal = [bool(int(x)) for x in args.causal.split(",") if x.strip()]
    for c in args.contenders:
        if c not in CONTENDERS:
            ap.error(f"unknown contender {c}")
    for dt in args.dtypes:
        if dt not in ("bf16", "fp16"):
            ap.error(f"unknown dtype {dt}")
    return args


def main(argv=None):
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_peers: no CUDA device", file=sys.stderr)
        return 2
    flex = start_run(args, "flex" in args.contenders)
    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16}
    directions = ["fwd"] if args.fwd_only else ["fwd", "bwd"]
    shapes = make_shapes(args)
    print(
        f"{len(shapes)} shapes x {len(args.dtypes)} dtypes; contenders: {', '.join(args.contenders)}; "
        f"median of {args.iters} after {args.warmup} warm-up\n"
    )
    rows, failures = [], {}
    t_start = time.time()
    for dt_name in args.dtypes:
        dtype = dtypes[dt_name]
        for group, b, h, sq, sk, d, causal in shapes:
            torch.manual_seed(0)
            q = torch.randn(b, sq, h, d, device="cuda", dtype=dtype)
            k = torch.randn(b, sk, h, d, device="cuda", dtype=dtype)
            v = torch.randn(b, sk, h, d, device="cuda", dtype=dtype)
            do = torch.randn(b, sq, h, d, device="cuda", dtype=dtype)
            row = {
                "group": group,
                "dtype": dt_name,
                "d": d,
                "causal": causal,
                "b": b,
                "h": h,
                "sq": sq,
                "sk": sk,
                "ms": {"fwd": {}, "bwd": {}},
                "tflops": {"fwd": {}, "bwd": {}},
                "errors": {},
                "max_diff": {},
                "fa_fa2_rounds": {},
            }
            results = {c: prepare_one(c, q, k, v, causal, flex, args, do) for c in args.contenders}
            for direction in directions:
                timed = time_interleaved({c: res[direction] for c, res in results.items()}, args)
                for c, (ms, err, per_round) in timed.items():
                    results[c][f"{direction}_ms"] = ms
                    results[c][f"{direction}_rounds"] = per_round
                    if err:
                        results[c][f"{direction}_err"] = err
            for c, res in results.items():
                for direction in directions:
                    ms = res.get(f"{direction}_ms")
                    row["ms"][direction][c] = ms
                    row["tflops"][direction][c] = tflops(ms, flops(b, h, sq, sk, d, causal, direction == "bwd"))
                    err = res[f"{direction}_err"]
                    if err:
                        row["errors"][f"{c}.{direction}"] = err
                        failures.setdefault(f"{c}.{direction}: {err}", 0)
                        failures[f"{c}.{direction}: {err}"] += 1
            if "fa" in results and "FA2" in results:
                for direction in directions:
                    row["fa_fa2_rounds"][direction] = round_ratio_range(
                        results["fa"].get(f"{direction}_rounds"), results["FA2"].get(f"{direction}_rounds")
                    )
            ref_name = next(
                (c for c in ("FA2", "cuDNN", "efficient") if c in results and results[c]["out"] is not None), None
            )
            if "fa" in results and ref_name is not None:
                row["max_diff"]["fwd"] = max_diff(results["fa"]["out"], results[ref_name]["out"])
                if results["fa"]["grads"] is not None and results[ref_name]["grads"] is not None:
                    row["max_diff"]["bwd"] = max(
                        max_diff(a, b_) for a, b_ in zip(results["fa"]["grads"], results[ref_name]["grads"])
                    )
                row["diff_ref"] = ref_name
            for res in results.values():
                res["out"] = res["grads"] = None
            rows.append(row)
            fa_fwd = row["tflops"]["fwd"].get("fa")
            fa2_fwd = row["tflops"]["fwd"].get("FA2")
            print(
                f"[{time.time() - t_start:6.0f}s] {dt_name} {group} d={d} causal={int(causal)} b={b} h={h} "
                f"sq={sq} sk={sk}: fa {fmt(fa_fwd)} FA2 {fmt(fa2_fwd)} TF/s fwd, "
                f"max|fa-{ref_name}| {fmt(row['max_diff'].get('fwd'), 4)}",
                flush=True,
            )
            del q, k, v, do, results
            torch.cuda.empty_cache()
    print()
    for line in header_lines():
        print(line)
    print()
    print_table(rows, directions)
    if failures:
        print("\nn/a reasons (count):")
        for reason, count in sorted(failures.items()):
            print(f"  {count:3d} x {reason}")
    overhead = {}
    q = torch.randn(1, 128, 4, 64, device="cuda", dtype=torch.bfloat16)
    for c in ("fa", "FA2"):
        if c in args.contenders:
            try:
                overhead[c] = host_us(make_call(c, q, q, q, False, flex))
            except Exception as exc:  # noqa: BLE001
                overhead[c] = None
                if args.verbose:
                    print(f"host overhead of {c}: {short(exc)}")
    print(
        "\nhost time per forward call, [1, 128, 4, 64] bf16 (launch path only): "
        + ", ".join(f"{c} {fmt(us)} us" for c, us in overhead.items())
    )
    written = plots(rows, Path(args.out), directions)
    for path in written:
        print(f"wrote {path}")
    if args.json:  # bench/results/SCHEMA.md
        doc = result_schema.document("bench_peers", rows, args=vars(args), extra={"host_us": overhead})
        result_schema.write(args.json, doc)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
