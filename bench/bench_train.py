#!/usr/bin/env python3
"""Issue 45's training cells beyond bench_peers' standard sweep, forward and backward, fa against cuDNN and
FlashAttention-2 through torch SDPA in the same run (FlexAttention where it is the only peer that can state a cell):
DeepSeek's 192 / 128 causal at 8k, GQA 32 / 8 at d 128 causal (4k, 16k), Gemma 2's d 256 with softcap 50 (causal 4k,
8k; sliding window 4096 at 8k), a varlen batch of random lengths, and the deterministic backward at d 128 / 16k (full,
causal), each beside the plain cell it is compared to. Cells, heads and FLOP counts: bench/train_cells.py.

Contenders: fa; FA2 and cuDNN through torch SDPA (GQA with enable_gqa=True, else K / V repeated to the query heads);
where SDPA cannot state a cell, FA2 through the flash_attn package if it imports (softcap / window:
flash_attn_func; varlen: flash_attn_varlen_func) and otherwise n/a (softcap) or SDPA on the batch padded to its
longest sequence (varlen; cuDNN always so), with FlexAttention (torch.compile'd flex_attention, a softcap score_mod,
causal / window block masks) in the softcap cells; in the deterministic cells each of fa, FA2 and cuDNN also as
"-det", its forward and backward under torch.use_deterministic_algorithms(True) (fa reads it in its backward; torch
refuses cuDNN there: n/a). A contender that cannot run a cell shows n/a with the reason.

Timing is bench_peers.py's (imported, not restated): every contender runs once first (fa's first-use tuning starts
there; --fa-tune first_use_sync finishes it there), then --rounds interleaved rounds visit every contender in
balanced orders (time_interleaved / round_orders), medians of per-call CUDA-event times (event_times), --warmup calls
in the first round. TFLOP/s over the real tokens (train_cells.cell_flops: causal halves, backward 2.5x forward).
Per cell: fa/cuDNN and fa/FA2 (TFLOP/s ratios, above 1: fa faster), fa's TFLOP/s over its plain cell's ("vs
plain", issue 45's goal >= 0.90 for softcap / varlen / GQA) or, in the deterministic cells, fa-det over fa (goal
>= 0.90) and whether fa-det's gradients repeat bit for bit, and max |diff| of fa's output and gradients against a
reference contender (FA2, else cuDNN, else FlexAttention).

  FA_LIBRARY=build-dev/lib/libfa.so PYTHONPATH=python python3 bench/bench_train.py --json out.json \\
      [--quick] [--cells gqa_4k,varlen] [--iters 30] [--rounds 6] [--warmup 5] [--fa-tune first_use_sync]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import math
import re
import sys
import time
from pathlib import Path
from typing import Callable, Optional

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python"))

import torch  # noqa: E402

import fa  # noqa: E402

try:
    import torch.utils.deterministic as torch_det
except ImportError:  # torch < 2.1: no fill_uninitialized_memory
    torch_det = None

sys.path.insert(0, str(REPO / "bench"))
from bench_peers import (  # noqa: E402  (the timing conventions: one definition, bench_peers.py's)
    add_timing_args,
    flops,
    fmt,
    make_call,
    max_diff,
    prepare_call,
    round_ratio_range,
    short,
    start_run,
    time_interleaved,
    tflops,
)
import result_schema  # noqa: E402
import train_cells as tc  # noqa: E402

DIRECTIONS = ("fwd", "bwd")
GOAL = 0.90  # issue 45: softcap / varlen / GQA within 10% of the plain cell; deterministic >= 0.90 of the default
RATIOS = (("fa", "cuDNN"), ("fa", "FA2"), ("fa", "flex"), ("fa-det", "fa"), ("fa-det", "cuDNN"), ("FA2-det", "FA2"))


class NotAvailable(Exception):
    """A contender that cannot state a cell (the reason is the message)."""


@contextlib.contextmanager
def deterministic():
    """torch.use_deterministic_algorithms(True) (not warn-only: torch's FA2 backward then runs its deterministic
    form), the previous setting restored on exit. torch.utils.deterministic.fill_uninitialized_memory is off
    meanwhile, so that the NaN fill torch gives every new tensor in that mode (memsets of o, dq, dk, dv) is not
    timed as the kernels' cost."""
    was, warn = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    fill = getattr(torch_det, "fill_uninitialized_memory", None)
    torch.use_deterministic_algorithms(True)
    if fill is not None:
        torch_det.fill_uninitialized_memory = False
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(was, warn_only=warn)
        if fill is not None:
            torch_det.fill_uninitialized_memory = fill


@functools.lru_cache(maxsize=None)
def flash_attn():
    """(the flash_attn module or None, why not)."""
    try:
        import flash_attn as module

        return module, None
    except Exception as exc:  # noqa: BLE001 - not installed, or built for another torch
        return None, f"flash_attn not importable ({short(exc)})"


# ---- inputs --------------------------------------------------------------------------------------------------------
@dataclasses.dataclass
class Inputs:
    q: torch.Tensor  # [b, s, hq, d], or varlen [tokens, hq, d]
    k: torch.Tensor
    v: torch.Tensor
    do: torch.Tensor
    cu: Optional[torch.Tensor] = None  # varlen: int32 [b + 1]
    max_len: int = 0


def make_inputs(cell):
    """The cell's q, k, v and dO (bf16, seeded), BSHD or varlen-packed, with cu_seqlens for varlen."""
    dtype = torch.bfloat16
    torch.manual_seed(0)
    lead = (cell.tokens,) if cell.lengths else (cell.b, cell.s)

    def rand(h, d):
        return torch.randn(*lead, h, d, device="cuda", dtype=dtype)

    inp = Inputs(rand(cell.hq, cell.d), rand(cell.hkv, cell.d), rand(cell.hkv, cell.dv), rand(cell.hq, cell.dv))
    if cell.lengths:
        offsets = [0]
        for n in cell.lengths:
            offsets.append(offsets[-1] + n)
        inp.cu = torch.tensor(offsets, dtype=torch.int32, device="cuda")
        inp.max_len = max(cell.lengths)
    return inp


# ---- contenders ----------------------------------------------------------------------------------------------------
@dataclasses.dataclass
class Spec:
    """How a contender runs a cell: make(q, k, v) -> a forward returning o (bench_peers.prepare_call's), on its own
    inputs (q, k, v, do); `back` maps its o / dq and `back_kv` its dk / dv to fa's layout for the diffs."""

    make: Callable
    inputs: tuple
    how: str = ""
    back: Callable = lambda t: t
    back_kv: Callable = lambda t: t


def fa_spec(cell, inp):
    kw = {"causal": cell.causal}
    if cell.window >= 0:
        kw["window"] = (cell.window, 0)
    if cell.softcap:
        kw["softcap"] = cell.softcap
    if cell.lengths:
        kw.update(cu_seqlens_q=inp.cu, cu_seqlens_k=inp.cu, max_seqlen_q=inp.max_len, max_seqlen_k=inp.max_len)
    return Spec(lambda q, k, v: lambda: fa.attention(q, k, v, **kw), (inp.q, inp.k, inp.v, inp.do))


def sdpa_spec(name, cell, inp, repeat_kv=False):
    """SDPA's backend `name` on the cell's BSHD tensors; GQA with enable_gqa, or (repeat_kv) on K / V repeated to
    the query heads, the repeated tensors the leaves (their gradients summed over each group for the diffs)."""
    gqa = cell.hq != cell.hkv
    if not (gqa and repeat_kv):
        make = lambda q, k, v: make_call(name, q, k, v, cell.causal, None, gqa=gqa)  # noqa: E731
        return Spec(make, (inp.q, inp.k, inp.v, inp.do), "SDPA, enable_gqa=True" if gqa else "SDPA")
    g = cell.hq // cell.hkv
    k, v = (t.repeat_interleave(g, dim=2) for t in (inp.k, inp.v))

    def group_sum(t):
        return t.unflatten(2, (cell.hkv, g)).sum(3)

    make = lambda q, k_, v_: make_call(name, q, k_, v_, cell.causal, None)  # noqa: E731
    return Spec(make, (inp.q, k, v, inp.do), f"SDPA, K / V repeated to {cell.hq} heads", back_kv=group_sum)


def padded_spec(name, cell, inp):
    """SDPA's backend `name` on the varlen batch padded to [b, longest, h, d] (zero dO on the padding, so the
    real tokens' gradients are exact under the causal mask)."""
    b, longest = len(cell.lengths), inp.max_len
    idx = torch.cat([i * longest + torch.arange(n) for i, n in enumerate(cell.lengths)]).to("cuda")

    def pad(t):
        out = t.new_zeros(b * longest, *t.shape[1:])
        out[idx] = t
        return out.unflatten(0, (b, longest))

    def unpad(t):
        return t.flatten(0, 1)[idx]

    make = lambda q, k, v: make_call(name, q, k, v, cell.causal, None)  # noqa: E731
    how = f"SDPA on the batch padded to {b} x {longest} ({b * longest} tokens for {cell.tokens} real)"
    return Spec(make, tuple(pad(t) for t in (inp.q, inp.k, inp.v, inp.do)), how, unpad, unpad)


def flash_attn_spec(cell, inp):
    """FA2 through the flash_attn package: varlen, softcap and sliding window, which SDPA cannot state."""
    module, why = flash_attn()
    if module is None:
        what = "varlen" if cell.lengths else "softcap or a sliding window"
        raise NotAvailable(f"SDPA has no {what}, and {why}")
    if cell.lengths:
        cu, m = inp.cu, inp.max_len
        make = lambda q, k, v: lambda: module.flash_attn_varlen_func(q, k, v, cu, cu, m, m, causal=cell.causal)  # noqa: E731
        return Spec(make, (inp.q, inp.k, inp.v, inp.do), f"flash_attn {module.__version__} varlen")
    window = (cell.window, 0) if cell.window >= 0 else (-1, -1)

    def make(q, k, v):
        return lambda: module.flash_attn_func(q, k, v, causal=cell.causal, window_size=window, softcap=cell.softcap)

    return Spec(make, (inp.q, inp.k, inp.v, inp.do), f"flash_attn {module.__version__}")


@functools.lru_cache(maxsize=None)
def softcap_score(cap):
    """Flex's score_mod for a softcap (one function object per value: one compile)."""

    def score_mod(score, b, h, q_idx, kv_idx):
        return cap * torch.tanh(score / cap)

    return score_mod


@functools.lru_cache(maxsize=None)
def causal_mask(window):
    """Flex's mask_mod: causal, and keys at most `window` back when window >= 0."""
    if window < 0:
        return lambda b, h, q_idx, kv_idx: q_idx >= kv_idx
    return lambda b, h, q_idx, kv_idx: (q_idx >= kv_idx) & (q_idx - kv_idx <= window)


def flex_spec(cell, inp, flex):
    if flex is None:
        raise NotAvailable("flex_attention unavailable")
    mask = flex.create_block_mask(causal_mask(cell.window), None, None, cell.s, cell.s, device="cuda")
    score = softcap_score(cell.softcap) if cell.softcap else None

    def make(q, k, v):
        qh, kh, vh = (t.transpose(1, 2) for t in (q, k, v))
        return lambda: flex.fn(qh, kh, vh, score_mod=score, block_mask=mask).transpose(1, 2)

    return Spec(make, (inp.q, inp.k, inp.v, inp.do), "torch.compile'd flex_attention, softcap score_mod")


def spec_for(name, cell, inp, flex):
    base = name[: -len("-det")] if name.endswith("-det") else name
    if base == "fa":
        return fa_spec(cell, inp)
    if base == "flex":
        return flex_spec(cell, inp, flex)
    if cell.softcap or cell.window >= 0:
        if base != "FA2":
            raise NotAvailable("SDPA has no softcap or sliding window")
        return flash_attn_spec(cell, inp)
    if cell.lengths:
        if base == "FA2" and flash_attn()[0] is not None:
            return flash_attn_spec(cell, inp)
        return padded_spec(base, cell, inp)
    return sdpa_spec(base, cell, inp)


def failed(reason):
    return {"fwd": None, "bwd": None, "out": None, "grads": None, "fwd_err": reason, "bwd_err": reason}


def run_contender(name, cell, inp, flex, args):
    """bench_peers.prepare_call's result for the contender (out and grads in fa's layout), and how it ran."""
    mode = deterministic if name.endswith("-det") else None
    try:
        spec = spec_for(name, cell, inp, flex)
    except NotAvailable as exc:
        return failed(str(exc)), ""
    res = prepare_call(spec.make, *spec.inputs, args, mode=mode)
    if res["fwd_err"] and cell.hq != cell.hkv and name.startswith(("FA2", "cuDNN")):
        first = res["fwd_err"]
        spec = sdpa_spec(name.split("-")[0], cell, inp, repeat_kv=True)
        res = prepare_call(spec.make, *spec.inputs, args, mode=mode)
        spec.how += f" (enable_gqa refused: {first})"
    if mode is not None:
        for key in ("fwd_err", "bwd_err"):
            if res[key]:
                res[key] = "under torch.use_deterministic_algorithms(True): " + res[key]
    if res["bwd"] is None and not res["bwd_err"]:
        res["bwd_err"] = res["fwd_err"]
    if res["out"] is not None:
        res["out"] = spec.back(res["out"])
    if res["grads"] is not None:
        dq, dk, dv = res["grads"]
        res["grads"] = (spec.back(dq), spec.back_kv(dk), spec.back_kv(dv))
    return res, spec.how


def repeats_bitwise(cell, inp):
    """Whether fa's deterministic backward gives the same gradients bit for bit in two forward + backward runs."""
    spec = fa_spec(cell, inp)
    runs = []
    for _ in range(2):
        q, k, v = (t.detach().requires_grad_() for t in spec.inputs[:3])
        with deterministic():
            out = spec.make(q, k, v)()
            runs.append(torch.autograd.grad(out, (q, k, v), inp.do))
    return all(torch.equal(a, b) for a, b in zip(*runs))


# ---- one cell ------------------------------------------------------------------------------------------------------
def new_row(cell):
    return {
        "cell": cell.name,
        "kind": cell.kind,
        "what": cell.what,
        "dtype": "bf16",
        "b": cell.b,
        "hq": cell.hq,
        "hkv": cell.hkv,
        "s": cell.s,
        "d": cell.d,
        "dv": cell.dv,
        "causal": cell.causal,
        "window": cell.window,
        "softcap": cell.softcap,
        "lengths": list(cell.lengths) or None,
        "tokens": cell.tokens,
        "plain": cell.plain,
        "flops": {dr: tc.cell_flops(cell, dr == "bwd") for dr in DIRECTIONS},
        "ms": {dr: {} for dr in DIRECTIONS},
        "tflops": {dr: {} for dr in DIRECTIONS},
        "ratios": {dr: {} for dr in DIRECTIONS},
        "rounds": {dr: {} for dr in DIRECTIONS},
        "errors": {},
        "how": {},
        "max_diff": {},
    }


def fill_times(row, results, args):
    """Times every contender in interleaved rounds (bench_peers.time_interleaved), direction by direction."""
    for dr in DIRECTIONS:
        timed = time_interleaved({c: res[dr] for c, res in results.items()}, args)
        per_round = {}
        for c, res in results.items():
            ms, err, rounds = timed.get(c, (None, res[f"{dr}_err"], []))
            row["ms"][dr][c] = ms
            row["tflops"][dr][c] = tflops(ms, row["flops"][dr])
            per_round[c] = rounds
            if err:
                row["errors"][f"{c}.{dr}"] = err
        for a, b in RATIOS:
            x, y = row["tflops"][dr].get(a), row["tflops"][dr].get(b)
            if x and y:
                row["ratios"][dr][f"{a}/{b}"] = x / y
                row["rounds"][dr][f"{a}/{b}"] = round_ratio_range(per_round.get(a), per_round.get(b))


def fill_diffs(row, results):
    ref = next((c for c in ("FA2", "cuDNN", "flex") if c in results and results[c]["out"] is not None), None)
    if ref is None or results["fa"]["out"] is None:
        return
    row["diff_ref"] = ref
    row["max_diff"]["fwd"] = max_diff(results["fa"]["out"], results[ref]["out"])
    for who, key in (("fa", "bwd"), ("fa-det", "bwd_det")):
        mine, theirs = results.get(who, {}).get("grads"), results[ref]["grads"]
        if mine is not None and theirs is not None:
            row["max_diff"][key] = max(max_diff(a, b) for a, b in zip(mine, theirs))


def measure_cell(cell, flex, args):
    inp = make_inputs(cell)
    results = {}
    row = new_row(cell)
    for name in tc.contenders(cell):
        results[name], row["how"][name] = run_contender(name, cell, inp, flex, args)
    fill_times(row, results, args)
    fill_diffs(row, results)
    if cell.kind == "deterministic" and results["fa-det"]["bwd"] is not None:
        row["fa_det_bitwise"] = repeats_bitwise(cell, inp)
    for res in results.values():
        res["out"] = res["grads"] = res["fwd"] = res["bwd"] = None
    del inp, results
    torch.cuda.empty_cache()
    return row


def compare_to_plain(rows):
    """Each feature row's fa TFLOP/s over its plain row's (`over_plain`), and the goal's verdict; the deterministic
    rows' fa-det / fa likewise."""
    by_name = {r["cell"]: r for r in rows}
    for r in rows:
        plain = by_name.get(r["plain"]) if r["plain"] else None
        for dr in DIRECTIONS:
            if plain is not None:
                x, y = r["tflops"][dr].get("fa"), plain["tflops"][dr].get("fa")
                r.setdefault("over_plain", {})[dr] = x / y if x and y else None
        if r["kind"] in ("gqa", "softcap", "varlen") and r.get("over_plain"):
            r["goal"] = {dr: verdict(r["over_plain"][dr]) for dr in DIRECTIONS}
        if r["kind"] == "deterministic":
            r["goal"] = {"bwd": verdict(r["ratios"]["bwd"].get("fa-det/fa"))}


def verdict(x):
    return None if x is None else x >= GOAL


# ---- report --------------------------------------------------------------------------------------------------------
def print_table(rows):
    used = [c for c in tc.CONTENDERS if any(c in r["ms"]["fwd"] for r in rows)]
    cols = ["cell", "dir"] + [f"{c} TF/s" for c in used]
    cols += ["fa/cuDNN", "fa/FA2", "vs plain (det: fa-det/fa)", f"goal >= {GOAL}", "max|diff| (ref)"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        for dr in DIRECTIONS:
            ratios = r["ratios"][dr]
            mine = ratios.get("fa-det/fa") if r["kind"] == "deterministic" else (r.get("over_plain") or {}).get(dr)
            goal = (r.get("goal") or {}).get(dr)
            diff = r["max_diff"].get(dr)
            cells = [r["cell"], dr] + [fmt(r["tflops"][dr].get(c)) if c in r["ms"][dr] else "" for c in used]
            cells += [fmt(ratios.get("fa/cuDNN"), 2), fmt(ratios.get("fa/FA2"), 2), fmt(mine, 2)]
            cells += ["" if goal is None else ("met" if goal else "NOT met")]
            cells += ["n/a" if diff is None else f"{diff:.2e} ({r.get('diff_ref')})"]
            print("| " + " | ".join(cells) + " |")


def print_notes(rows):
    print("\ncells:")
    for r in rows:
        extra = f"; lengths {r['lengths']}" if r["lengths"] else ""
        if "fa_det_bitwise" in r:
            extra += f"; fa-det gradients bit for bit over two runs: {r['fa_det_bitwise']}"
        if "bwd_det" in r["max_diff"]:
            extra += f"; fa-det max|diff| bwd {r['max_diff']['bwd_det']:.2e}"
        if r["ratios"]["bwd"].get("fa-det/cuDNN"):
            extra += f"; fa-det/cuDNN bwd {r['ratios']['bwd']['fa-det/cuDNN']:.2f}"
        print(f"  {r['cell']}: {r['what']} (b {r['b']}, {r['tokens']} tokens){extra}")
    hows = sorted({f"{c}: {h}" for r in rows for c, h in r["how"].items() if h and c != "fa"})
    if hows:
        print("\nhow the peers ran:")
        for h in hows:
            print(f"  {h}")
    reasons = {}
    for r in rows:
        for key, err in r["errors"].items():
            reasons.setdefault(f"{key.split('.')[0]}: {err}", []).append(f"{r['cell']}.{key.split('.')[1]}")
    if reasons:
        print("\nn/a reasons:")
        for reason, where in sorted(reasons.items()):
            print(f"  {reason}  [{', '.join(where)}]")


def without_paths(obj):
    """obj with every absolute path in its strings cut to the last component (an import error of flash_attn names
    its site-packages; a result file holds no local path: result_schema.validate)."""
    if isinstance(obj, str):
        return re.sub(r"(?:/[\w.+-]+)+/([\w.+-]+)", r"\1", obj)
    if isinstance(obj, dict):
        return {k: without_paths(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [without_paths(v) for v in obj]
    return obj


def check_flop_convention(cells):
    """train_cells.cell_flops agrees with bench_peers.flops on every cell bench_peers could state."""
    for c in cells:
        if c.d == c.dv and c.window < 0 and not c.lengths:
            for bwd in (False, True):
                want = flops(c.b, c.hq, c.s, c.s, c.d, c.causal, bwd)
                if not math.isclose(tc.cell_flops(c, bwd), want, rel_tol=1e-12):
                    raise RuntimeError(f"{c.name}: cell_flops {tc.cell_flops(c, bwd)} != bench_peers.flops {want}")


# ---- main ----------------------------------------------------------------------------------------------------------
def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", required=True, help="write every measurement to this file (bench/results/SCHEMA.md)")
    ap.add_argument("--quick", action="store_true", help="one cell of each kind with its plain cell")
    names = ",".join(c.name for c in tc.all_cells())
    ap.add_argument("--cells", default=None, help=f"comma list of cells (each brings its plain cell): {names}")
    add_timing_args(ap)  # bench_peers': --iters, --warmup, --rounds, --order, --fa-tune, --verbose
    args = ap.parse_args(argv)
    try:
        args.cells = tc.select(
            [x.strip() for x in args.cells.split(",") if x.strip()] if args.cells else None, args.quick
        )
    except ValueError as exc:
        ap.error(str(exc))
    return args


def main(argv=None):
    args = parse_args(argv)
    check_flop_convention(args.cells)
    if not torch.cuda.is_available():
        print("bench_train: no CUDA device", file=sys.stderr)
        return 2
    flex = start_run(args, any("flex" in tc.contenders(c) for c in args.cells))
    print(f"flash_attn: {getattr(flash_attn()[0], '__version__', None) or flash_attn()[1]}")
    print(
        f"{len(args.cells)} cells; median of {args.iters} calls over {args.rounds} rounds after {args.warmup} warm-up\n"
    )
    rows, t0 = [], time.time()
    for cell in args.cells:
        rows.append(measure_cell(cell, flex, args))
        tf = rows[-1]["tflops"]
        print(
            f"[{time.time() - t0:5.0f}s] {cell.name}: fa {fmt(tf['fwd'].get('fa'))} / {fmt(tf['bwd'].get('fa'))} "
            f"TF/s fwd / bwd, cuDNN {fmt(tf['fwd'].get('cuDNN'))} / {fmt(tf['bwd'].get('cuDNN'))}",
            flush=True,
        )
    compare_to_plain(rows)
    print()
    print_table(rows)
    print_notes(rows)
    notes = (
        "bf16, 16k tokens a batch (varlen: 16k real tokens); cells in bench/train_cells.py; TFLOP/s over the real "
        "tokens (a padded peer's time holds its padding); -det: under torch.use_deterministic_algorithms(True)."
    )
    extra = {"elapsed_s": time.time() - t0, "flash_attn": getattr(flash_attn()[0], "__version__", flash_attn()[1])}
    args_doc = dict(vars(args), cells=[c.name for c in args.cells])
    doc = result_schema.document(
        "bench_train", without_paths(rows), args=args_doc, notes=notes, extra=without_paths(extra)
    )
    result_schema.write(args.json, doc)
    print(f"\nwrote {args.json} ({time.time() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
