#!/usr/bin/env python3
"""Probe: fa decode time per forced split count (default tunables), contiguous bf16 d128 32/8 heads."""

import statistics
import sys
import torch
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/
import bench_decode as bd
import fa

ctx = fa.Context()
for b, sk, splits in (
    (64, 4096, (1, 2, 3, 4)),
    (1, 131072, (16, 24, 32, 33, 48, 64, 96, 128)),
    (8, 32768, (1, 2, 3, 4, 6, 8)),
    (8, 131072, (1, 2, 4, 8, 16)),
    (64, 32768, (1, 2)),
):
    q = torch.randn(b, 1, 32, 128, dtype=torch.bfloat16, device="cuda")
    k = torch.randn(b, sk, 8, 128, dtype=torch.bfloat16, device="cuda")
    v = torch.randn_like(k)
    o = torch.empty_like(q)
    kvb = 2 * k.numel() * 2
    out = []
    for n in splits:
        c = bd.FaDecode(ctx, q, k, v, o)
        c.p.num_splits = n
        size = ctx.forward_workspace_size(c.p)  # re-sized for the forced count
        c.ws = torch.empty(max(size, 256), dtype=torch.uint8, device="cuda")
        c.p.workspace = c.ws.data_ptr() if size else 0
        c.p.workspace_size = size
        ctx.prepare(c.p)
        t = statistics.median(bd.event_times(c, 3, 20))
        out.append(f"n{n}:{t:.4f}ms/{kvb / (t * 1e-3) / 1e12:.2f}TB/s")
    print(f"b{b} sk{sk}: " + " ".join(out), flush=True)
    del q, k, v, o
    torch.cuda.empty_cache()
