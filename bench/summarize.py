#!/usr/bin/env python3
"""summarize.py -- turns a bench_peers.py --json file into compact markdown tables: per group (standard, decode,
odd), direction and (dtype, head dim, mask), one cell per sequence length with every contender's TFLOP/s and the
ratios fa / FA2 and fa / cuDNN.

    python3 bench/summarize.py bench/results/h200_bench_peers_bf16.json
"""
import json
import sys
from collections import defaultdict


def tflops(row, direction, who):
    ms = row["ms"].get(direction, {}).get(who)
    if not ms:
        return None
    flops = 4.0 * row["b"] * row["h"] * row["sq"] * row["sk"] * row["d"]
    if row["causal"]:
        flops /= 2
    if direction == "bwd":
        flops *= 2.5
    return flops / (ms * 1e-3) / 1e12


def fmt(x):
    return "n/a" if x is None else f"{x:.0f}" if x >= 10 else f"{x:.1f}"


def main(path):
    data = json.load(open(path))
    contenders = data["args"]["contenders"]
    print("\n".join("> " + h for h in data["header"]))
    print()
    groups = defaultdict(dict)
    for r in data["rows"]:
        for direction in ("fwd", "bwd"):
            if direction in r["ms"] and r["ms"][direction]:
                col = r["sk"] if r["group"] == "decode" else r["sq"]
                groups[(r["group"], direction, r["dtype"], r["d"], r["causal"])][col] = r
    for group in ("standard", "decode", "odd"):
        for direction in ("fwd", "bwd"):
            keys = sorted(k for k in groups if k[0] == group and k[1] == direction)
            if not keys:
                continue
            cols = sorted({c for k in keys for c in groups[k]})
            label = "seqlen_k (seqlen_q = 1)" if group == "decode" else "seqlen"
            print(f"**{group} {direction}** — TFLOP/s {' / '.join(contenders)}; **fa÷FA2** (fa÷cuDNN); columns: {label}\n")
            print("| dtype | d | causal | " + " | ".join(str(c) for c in cols) + " |")
            print("|---|---|---|" + "---|" * len(cols))
            for k in keys:
                cells = []
                for c in cols:
                    r = groups[k].get(c)
                    if r is None:
                        cells.append("")
                        continue
                    t = {w: tflops(r, direction, w) for w in contenders}
                    cell = "/".join(fmt(t[w]) for w in contenders)
                    if t.get("fa") and t.get("FA2"):
                        cell += f" **{t['fa'] / t['FA2']:.2f}**"
                    if t.get("fa") and t.get("cuDNN"):
                        cell += f" ({t['fa'] / t['cuDNN']:.2f})"
                    cells.append(cell)
                print(f"| {k[2]} | {k[3]} | {'Y' if k[4] else 'N'} | " + " | ".join(cells) + " |")
            print()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "bench/results/h200_bench_peers_bf16.json")
