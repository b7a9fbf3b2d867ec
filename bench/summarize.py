#!/usr/bin/env python3
"""summarize.py -- turns a bench_peers.py --json file into compact markdown tables (one row per dtype, head dim,
mask and direction; one column pair per sequence length), with the ratios fa / FA2 and fa / cuDNN.

    python3 bench/summarize.py bench/results/h200_fwd_bwd_defaults.json
"""
import json
import sys
from collections import defaultdict


def tflops(row, direction, who):
    t = row.get("tflops", {}).get(direction, {}).get(who)
    if t is not None:
        return t
    ms = row["ms"].get(direction, {}).get(who)
    if not ms:
        return None
    flops = 4.0 * row["b"] * row["h"] * row["sq"] * row["sk"] * row["d"]
    if row["causal"]:
        flops /= 2
    if direction == "bwd":
        flops *= 2.5
    return flops / (ms * 1e-3) / 1e12


def main(path):
    data = json.load(open(path))
    print("\n".join("> " + h for h in data["header"]))
    print()
    groups = defaultdict(dict)
    seqs = set()
    for r in data["rows"]:
        if r.get("group") != "standard":
            continue
        for direction in ("fwd", "bwd"):
            if direction not in r["ms"]:
                continue
            key = (direction, r["dtype"], r["d"], r["causal"])
            groups[key][r["sq"]] = r
            seqs.add(r["sq"])
    seqs = sorted(seqs)
    for direction in ("fwd", "bwd"):
        print(f"**{direction}** — TFLOP/s fa / FA2 / cuDNN and the ratio fa÷FA2 (fa÷cuDNN)\n")
        print("| dtype | d | causal | " + " | ".join(f"{s}" for s in seqs) + " |")
        print("|---|---|---|" + "---|" * len(seqs))
        for key in sorted(k for k in groups if k[0] == direction):
            _, dtype, d, causal = key
            cells = []
            for s in seqs:
                r = groups[key].get(s)
                if r is None:
                    cells.append("")
                    continue
                fa, fa2, cd = (tflops(r, direction, w) for w in ("fa", "FA2", "cuDNN"))
                if fa is None or fa2 is None:
                    cells.append("n/a")
                    continue
                cell = f"{fa:.0f}/{fa2:.0f}/{cd:.0f} **{fa / fa2:.2f}**" if cd else f"{fa:.0f}/{fa2:.0f} **{fa / fa2:.2f}**"
                if cd:
                    cell += f" ({fa / cd:.2f})"
                cells.append(cell)
            print(f"| {dtype} | {d} | {'Y' if causal else 'N'} | " + " | ".join(cells) + " |")
        print()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "bench/results/h200_fwd_bwd_defaults.json")
