#!/usr/bin/env python3
"""ab_compare.py -- compares bench_peers.py JSON runs of two builds of fa made in one device call.

    python3 bench/ab_compare.py A1.json B1.json [A2.json B2.json ...]

Runs alternate A, B, A, B (scripts/device_ab.sh). For every cell (dtype, d, causal, seqlen, direction) it prints
fa/FA2 of each run and B/A of the mean ratios: FA2 runs in both, so the ratio cancels the GPU's drift between runs.
The last line gives the range of B/A over all cells and how many cells moved by more than 3%.
"""

import json
import sys


def ratios(path):
    out = {}
    for r in json.load(open(path))["rows"]:
        for direction in ("fwd", "bwd"):
            ms = (r.get("ms") or {}).get(direction) or {}
            fa, fa2 = ms.get("fa"), ms.get("FA2")
            if fa and fa2:
                out[(r["dtype"], r["d"], r["causal"], r["sq"], direction)] = fa2 / fa  # > 1: fa faster
    return out


def main(paths):
    runs = [ratios(p) for p in paths]
    a_runs, b_runs = runs[0::2], runs[1::2]
    cells = sorted(set.intersection(*(set(r) for r in runs)))
    print(
        "| cell | "
        + " | ".join(f"A{i + 1} fa/FA2" for i in range(len(a_runs)))
        + " | "
        + " | ".join(f"B{i + 1} fa/FA2" for i in range(len(b_runs)))
        + " | B/A |"
    )
    print("|---" * (2 + len(a_runs) + len(b_runs)) + "|")
    moved, worst = 0, []
    for c in cells:
        a = sum(r[c] for r in a_runs) / len(a_runs)
        b = sum(r[c] for r in b_runs) / len(b_runs)
        worst.append(b / a)
        moved += abs(b / a - 1) > 0.03
        label = f"{c[0]} d{c[1]} {'causal' if c[2] else 'full'} {c[3]} {c[4]}"
        print(
            f"| {label} | "
            + " | ".join(f"{r[c]:.3f}" for r in a_runs)
            + " | "
            + " | ".join(f"{r[c]:.3f}" for r in b_runs)
            + f" | {b / a:.3f} |"
        )
    if worst:
        print(
            f"AB SUMMARY: {len(cells)} cells, B/A {min(worst):.3f}..{max(worst):.3f}, "
            f"geomean {pow(__import__('math').prod(worst), 1 / len(worst)):.3f}, {moved} moved by more than 3%"
        )


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(sys.argv[1:])
