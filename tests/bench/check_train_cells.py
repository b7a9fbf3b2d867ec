#!/usr/bin/env python3
"""check_train_cells.py -- bench/bench_train.py's cells, FLOP counts and options, checked without a GPU.

train_cells.py is plain Python; bench_train.py is imported too (its argument parsing, its FLOP convention check
against bench_peers.flops, the per-cell comparisons it derives, summarize.py's table row for its results): where
torch is not installed (the CPU CI), an empty stand-in module takes its name, which is enough because neither script
calls torch at import time. Also checks that scripts/gpu_suite.sh hands bench_train.py the --json it requires.
Exit 1 with one line per failed check.

  python3 tests/bench/check_train_cells.py
"""

import contextlib
import importlib.util
import io
import os
import re
import sys
import types
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
import train_cells as tc  # noqa: E402

FAILS = []


def check(ok, what):
    if not ok:
        FAILS.append(what)


def import_bench_train():
    if importlib.util.find_spec("torch") is None:
        os.environ["FA_NO_TORCH"] = "1"  # fa's own import must not look for the stand-in
        for name in ("torch", "torch.nn", "torch.nn.functional"):
            sys.modules[name] = types.ModuleType(name)
        sys.modules["torch"].nn = sys.modules["torch.nn"]
        sys.modules["torch.nn"].functional = sys.modules["torch.nn.functional"]
    import bench_train

    return bench_train


def check_lengths():
    lengths = tc.varlen_lengths()
    check(sum(lengths) == tc.TOKENS, f"varlen lengths sum to {sum(lengths)}, expected {tc.TOKENS}")
    check(all(tc.VARLEN_MIN <= n <= tc.VARLEN_MAX for n in lengths), f"varlen lengths {lengths} outside 256..8192")
    check(len(set(lengths)) >= 4, f"varlen lengths {lengths}: expected at least 4 different lengths")
    check(tc.varlen_lengths() == lengths, "varlen_lengths is not repeatable for one seed")
    check(tc.varlen_lengths(tc.VARLEN_SEED + 1) != lengths, "varlen_lengths ignores its seed")
    for seed in range(200):
        got = tc.varlen_lengths(seed, total=5000, lo=100, hi=900)
        check(sum(got) == 5000 and all(100 <= n <= 900 for n in got), f"seed {seed}: lengths {got} break 100..900")
    for bad in ({"lo": 0}, {"lo": 300, "hi": 500}, {"total": 10}):
        try:
            tc.varlen_lengths(**bad)
            check(False, f"varlen_lengths({bad}) raised nothing")
        except ValueError as exc:
            check("expected" in str(exc), f"varlen_lengths({bad}): message {exc} names no expectation")


def check_flops():
    for s in range(1, 40):
        for w in (-1, 0, 1, 3, 7, s - 2, s - 1, s, s + 5):
            brute = sum(1 for i in range(s) for j in range(s) if j <= i and (w < 0 or i - j <= w))
            check(tc.visible_pairs(s, True, w) == brute, f"visible_pairs({s}, causal, {w}) != {brute}")
        check(tc.visible_pairs(s, False) == s * s, f"visible_pairs({s}, full) != {s * s}")
    cell = tc.Cell("x", "plain", "", 2, 16, 16, 8192, 128, 128, False)
    full = 4.0 * 2 * 16 * 8192 * 8192 * 128
    check(tc.cell_flops(cell, False) == full, "full cell: not 4 b h s^2 d")
    check(tc.cell_flops(cell, True) == 2.5 * full, "backward: not 2.5x the forward")
    causal = tc.Cell("x", "plain", "", 2, 16, 16, 8192, 128, 128, True)
    check(tc.cell_flops(causal, False) == full / 2, "causal cell: not half the full one")
    mla = tc.Cell("x", "mla", "", 2, 16, 16, 8192, 192, 128, True)
    check(tc.cell_flops(mla, False) == 2.0 * 2 * 16 * 8192 * 8192 * (192 + 128) / 2, "192 / 128: not 2 b h s^2 (d+dv)")
    win = dict(b=2, hq=8, hkv=8, d=256, dv=256, causal=True, window=4096)
    at4k = tc.Cell("x", "softcap", "", s=4096, **win)
    check(tc.cell_flops(at4k, False) == 4.0 * 2 * 8 * 4096**2 * 256 / 2, "a window covering the sequence != causal")
    at8k = tc.Cell("x", "softcap", "", s=8192, **win)
    share = tc.visible_pairs(8192, True, 4096) / tc.visible_pairs(8192, True)
    want = 4.0 * 2 * 8 * 8192**2 * 256 / 2 * share
    check(abs(tc.cell_flops(at8k, False) / want - 1) < 1e-12, "window at 8k: not the causal count x its pair share")
    lengths = (300, 1000, 5000)
    var = tc.Cell("x", "varlen", "", 3, 16, 16, 5000, 128, 128, True, lengths=lengths)
    one = sum(tc.cell_flops(tc.Cell("x", "plain", "", 1, 16, 16, n, 128, 128, True), True) for n in lengths)
    check(tc.cell_flops(var, True) == one, "varlen: not the sum of its sequences")


def check_cells():
    cells = tc.all_cells()
    by_name = {c.name: c for c in cells}
    check(len(by_name) == len(cells), "cell names repeat")
    kinds = {c.kind for c in cells}
    check(kinds == {"plain", "mla", "gqa", "softcap", "varlen", "deterministic"}, f"cell kinds {sorted(kinds)}")
    check({c.kind for c in tc.select(quick=True)} == kinds, "--quick leaves a kind out")
    for c in cells:
        near = c.name == "plain_varlen" and abs(c.b * c.s - tc.TOKENS) <= c.s / 2  # whole sequences near 16k
        check(c.lengths or near or c.b * c.s == tc.TOKENS, f"{c.name}: {c.b} x {c.s} tokens, expected {tc.TOKENS}")
        check(c.hq % c.hkv == 0, f"{c.name}: {c.hq} heads over {c.hkv}")
        check((c.plain is None) == (c.kind in ("plain", "deterministic")), f"{c.name}: plain {c.plain}")
        p = by_name.get(c.plain)
        if c.plain:
            check(p is not None and p.kind == "plain", f"{c.name}: its plain cell {c.plain} is not a plain cell")
            check(cells.index(p) < cells.index(c), f"{c.name}: runs before its plain cell")
            check(p.hq == c.hq and p.causal == c.causal and p.dv == c.dv, f"{c.name}: heads / mask / dv != plain")
            check(p.window < 0 and p.softcap == 0 and p.hkv == p.hq, f"{c.name}: its plain cell has a feature")
            check(c.kind == "varlen" or p.s == c.s, f"{c.name}: length {c.s}, its plain cell {p.s}")
        base = set(tc.contenders(c))
        check({"fa"} <= base <= set(tc.CONTENDERS), f"{c.name}: contenders {sorted(base)}")
    gqa = [c for c in cells if c.kind == "gqa"]
    check(sorted(c.s for c in gqa) == [4096, 16384], "GQA cells: not 4k and 16k")
    check(all((c.hq, c.hkv, c.d, c.causal) == (32, 8, 128, True) for c in gqa), "GQA cells: not 32 / 8, d 128 causal")
    soft = [c for c in cells if c.kind == "softcap"]
    check(all(c.d == 256 and c.softcap == 50.0 and c.causal for c in soft), "softcap cells: not d 256, 50, causal")
    check(sorted((c.s, c.window) for c in soft) == [(4096, -1), (8192, -1), (8192, 4096)], "softcap cells' lengths")
    check(all("flex" in tc.contenders(c) and "cuDNN" not in tc.contenders(c) for c in soft), "softcap contenders")
    lengths = by_name["varlen"].lengths
    mean = sum(n * n for n in lengths) / sum(lengths)
    check(by_name["plain_varlen"].s == round(mean / 256) * 256, "plain_varlen: not the flop-weighted mean length")
    mla = by_name["d192_128_8k"]
    check((mla.d, mla.dv, mla.s, mla.causal, mla.b * mla.s) == (192, 128, 8192, True, 16384), "192 / 128 cell")
    det = [c for c in cells if c.kind == "deterministic"]
    check(sorted(c.causal for c in det) == [False, True], "deterministic cells: not full and causal")
    check(all((c.s, c.d) == (16384, 128) for c in det), "deterministic cells: not d 128 at 16k")
    check(all({"fa-det", "cuDNN"} <= set(tc.contenders(c)) for c in det), "deterministic contenders")
    picked = [c.name for c in tc.select(["gqa_16k", "varlen"])]
    check(picked == ["plain_mha32_16k", "gqa_16k", "plain_varlen", "varlen"], f"select brought {picked}")
    try:
        tc.select(["nope"])
        check(False, "select(['nope']) raised nothing")
    except ValueError as exc:
        check("nope" in str(exc) and "gqa_4k" in str(exc), f"select's message {exc}")


def parse_exit(bt, argv):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            bt.parse_args(argv)
        except SystemExit as exc:
            return exc.code, err.getvalue()
    return None, err.getvalue()


def check_script(bt):
    args = bt.parse_args(["--json", "out.json", "--quick"])
    check([c.name for c in args.cells] == [c.name for c in tc.select(quick=True)], "--quick: other cells")
    check((args.iters, args.rounds, args.warmup) == (30, 6, 5), "--iters / --rounds / --warmup: not bench_peers'")
    code, _ = parse_exit(bt, ["--quick"])
    check(code == 2, "--json is not required")
    code, text = parse_exit(bt, ["--json", "x", "--cells", "gqa_4k,nope"])
    check(code == 2 and "nope" in text and "softcap_4k" in text, "--cells nope: no error naming the known cells")
    try:
        bt.check_flop_convention(tc.all_cells())
    except RuntimeError as exc:
        check(False, f"train_cells.cell_flops and bench_peers.flops disagree: {exc}")
    text = "ImportError: /root/.local/lib/python3.11/site-packages/flash_attn_2_cuda.so: undefined symbol: x"
    got = bt.without_paths({"errors": {"FA2.fwd": text}, "lengths": [1, 2]})
    want = {"errors": {"FA2.fwd": "ImportError: flash_attn_2_cuda.so: undefined symbol: x"}, "lengths": [1, 2]}
    check(got == want, f"without_paths gave {got}")
    real = tc.cell_flops
    try:
        tc.cell_flops = lambda cell, backward: real(cell, backward) * 1.01
        bt.check_flop_convention(tc.all_cells())
        check(False, "check_flop_convention misses a 1% disagreement")
    except RuntimeError:
        pass
    finally:
        tc.cell_flops = real


def synthetic_rows(bt):
    """Rows as bench_train makes them, with times: fa's backward 1.25x its plain cell's time in gqa_4k, fa-det 2x
    fa in det_causal_16k, cuDNN 1.1x fa everywhere."""
    rows = []
    for cell in tc.select(["gqa_4k", "det_causal_16k"]):
        row = bt.new_row(cell)
        for dr in bt.DIRECTIONS:
            fa_ms = 1.25 if cell.name == "gqa_4k" else 1.0
            times = {"fa": fa_ms, "cuDNN": 1.1 * fa_ms, "fa-det": 2.0 * fa_ms}
            for who, ms in times.items():
                row["ms"][dr][who] = ms
                row["tflops"][dr][who] = row["flops"][dr] / (ms * 1e-3) / 1e12
            row["ratios"][dr]["fa-det/fa"] = row["tflops"][dr]["fa-det"] / row["tflops"][dr]["fa"]
        rows.append(row)
    return rows


def check_derived(bt):
    rows = synthetic_rows(bt)
    bt.compare_to_plain(rows)
    gqa = next(r for r in rows if r["cell"] == "gqa_4k")
    check(abs(gqa["over_plain"]["bwd"] - 0.8) < 1e-12, f"gqa over plain {gqa['over_plain']['bwd']}, expected 0.8")
    check(gqa["goal"] == {"fwd": False, "bwd": False}, f"gqa goal {gqa['goal']}")
    det = next(r for r in rows if r["cell"] == "det_causal_16k")
    check(det["goal"] == {"bwd": False}, f"deterministic goal {det['goal']}")
    import summarize

    peers, own = summarize.peers_bench_train({"rows": rows})
    labels = [label for label, _ in peers]
    check(len(peers) == 2 and labels[1].startswith("backward"), f"summary rows {labels}")
    ratios = peers[1][1].get("cuDNN", [])
    check(len(ratios) == len(rows) and all(abs(x - 1.1) < 1e-12 for x in ratios), f"summary cuDNN ratios {ratios}")
    texts = dict(own)
    check("GQA 0.80" in " ".join(texts.values()), f"summary's over-plain figure: {texts}")
    check(any("det_causal_16k 0.50" in t for t in texts.values()), f"summary's deterministic figure: {texts}")


def check_suite():
    """gpu_suite.sh gives a benchmark --json when its source declares it (grep); bench_train.py must match."""
    suite = (REPO / "scripts" / "gpu_suite.sh").read_text()
    m = re.search(r"grep -q '([^']+)' \"\$b\" && args=\"\$args --json", suite)
    check(m is not None, "gpu_suite.sh: no --json detection found")
    if m:
        check(m.group(1) in (REPO / "bench" / "bench_train.py").read_text(), "gpu_suite.sh would not pass --json")
    check("bench/bench_*.py" in suite or '"$ROOT"/bench/bench_*.py' in suite, "gpu_suite.sh: no bench_*.py glob")


def main():
    check_lengths()
    check_flops()
    check_cells()
    bt = import_bench_train()
    check_script(bt)
    check_derived(bt)
    check_suite()
    for f in FAILS:
        print(f"check_train_cells: {f}", file=sys.stderr)
    if FAILS:
        return 1
    print(
        f"check_train_cells: {len(tc.all_cells())} cells, their FLOP counts, bench_train.py's options: all checks pass"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
