#!/usr/bin/env python3
"""bench_mods.py -- user code (issue 22): each ready mod of fa.mods at bf16, d128, 16 heads, batch 1, 8k and 2k
tokens, fa's forward (block skipping: [mask_blocks, forward], the forward fwd_wgmma on sm_90, fwd_mma elsewhere)
against FlexAttention (torch.compile'd flex_attention with its create_block_mask, built once per shape outside the
timing) and against fa's built-in where one exists (causal, sliding window) and the dense problem; the cost of fa's
classification pass and of its forward kernel alone (torch.profiler: the first and the second of the two fa kernels
of a call); fa's first call of a new mod (NVRTC compiles) against Flex's first call (compile);
fa's first calls over 20 new sequence lengths and the cache's rows before / after (no compile on new lengths).
--bwd: forward + backward instead (autograd of the same calls with one dO: fa's forward and its [bwd_pre,
mask_blocks, bwd_mma, bwd_post] against Flex's compiled forward and backward, and fa's built-in / dense; the
backward alone as the difference to the forward's time), no first-call figures; --only NAMES limits the mods.
Each contender of a row (fa, Flex, fa's built-in) is timed in three interleaved rounds (interleaved_ms: the median of
the rounds' event-timed medians); a restated built-in is also compared with its built-in on device time per call
(device_ms, torch.profiler), since the 2k calls are host-bound, and on the median ratio of --pairs back-to-back
pairs (paired_ratio: the host's drift between rounds cancels).
--json PATH writes every figure; the table goes to stdout."""

import argparse
import concurrent.futures
import os
import random
import sqlite3
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))
os.environ.setdefault("FA_TUNE_POLICY", "defaults")
import torch  # noqa: E402

import fa  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_peers import event_times  # noqa: E402
import result_schema  # noqa: E402

H, D, DT = 16, 128, torch.bfloat16


def event_ms(fn, warmup_s=0.15, iters=30):
    """Median per-call time (ms) of bench_peers' event timer, after calling fn for warmup_s seconds of wall time: a
    few calls of a 2k problem after an idle stretch (a Flex compile) were timed at the GPU's idle clocks."""
    t0 = time.perf_counter()
    while True:
        fn()
        torch.cuda.synchronize()
        if time.perf_counter() - t0 >= warmup_s:
            break
    return statistics.median(event_times(fn, 0, iters))


def interleaved_ms(fns, rounds=3):
    """name -> the median over `rounds` rounds of event_ms(fn), the contenders side by side in each round (the
    order reversed every other round): the host-bound rows (2k) swing by up to 2x between runs with the host's state,
    and contenders timed in the same rounds see the same state."""
    got = {n: [] for n in fns}
    names = list(fns)
    for r in range(rounds):
        for n in names if r % 2 == 0 else names[::-1]:
            got[n].append(event_ms(fns[n]))
    return {n: statistics.median(x) for n, x in got.items()}


def paired_ratio(fa_fn, builtin_fn, pairs=15, iters=30):
    """Median over `pairs` of t(fa_fn) / t(builtin_fn), each t the median event time of `iters` calls after 3
    warm-up calls, the two timed back to back (the order alternating between pairs): a host-bound row's time moves
    by 30% between runs with the host's state, and a ratio of neighbours cancels the drift that separate medians
    keep."""
    ratios = []
    for i in range(pairs):
        order = (fa_fn, builtin_fn) if i % 2 == 0 else (builtin_fn, fa_fn)
        t = {fn: statistics.median(event_times(fn, 3, iters)) for fn in order}
        ratios.append(t[fa_fn] / t[builtin_fn])
    return statistics.median(ratios)


def mods_for(s, only=None):
    """name -> (fa Mods, fa builtin kwargs, flex mask_mod or None, flex score_mod or None), the names starting with
    one of `only` (comma-separated) when given; and the built-in kwargs of the mods that restate one."""
    n_docs = 8
    ids = torch.sort(torch.randint(0, n_docs, (s,), device="cuda", dtype=torch.int32)).values
    ids[:n_docs] = torch.arange(n_docs, device="cuda", dtype=torch.int32)  # all 8 present
    ids = torch.sort(ids).values.contiguous()
    prefix, sinks, window, chunk, maxd = s // 4, 4, 1024, s // 8, 128
    table = torch.randn(H, 2 * maxd + 1, device="cuda", dtype=torch.float32)
    out = {
        "document(8)": (fa.mods.document(ids), {}, lambda b, h, i, j: (ids[i] == ids[j]) & (j <= i), None),
        "prefix_lm": (fa.mods.prefix_lm(prefix), {}, lambda b, h, i, j: (j <= i) | (j < prefix), None),
        "sinks_window": (
            fa.mods.sinks_window(sinks, window),
            {},
            lambda b, h, i, j: (j <= i) & ((j < sinks) | (i - j < window)),
            None,
        ),
        "chunked": (fa.mods.chunked(chunk), {}, lambda b, h, i, j: (j <= i) & (i // chunk == j // chunk), None),
        "relative_bias": (
            fa.mods.relative_bias(table, maxd),
            {"causal": True},
            lambda b, h, i, j: j <= i,
            lambda sc, b, h, i, j: sc + table[h, (i - j).clamp(-maxd, maxd) + maxd],
        ),
        "causal (mod)": (fa.Mods(mask_mod="return j <= i;", depends=""), {}, lambda b, h, i, j: j <= i, None),
        "window 1024 (mod)": (
            fa.Mods(mask_mod="return j <= i && i - j < 1024;", depends=""),
            {},
            lambda b, h, i, j: (j <= i) & (i - j < window),
            None,
        ),
    }
    builtin = {
        "causal (mod)": {"causal": True},
        "window 1024 (mod)": {"window": (window - 1, 0)},
        "sinks_window": {"window": (window - 1, 0)},
        "relative_bias": {"causal": True},
    }
    if only:
        out = {k: v for k, v in out.items() if any(k.startswith(p) for p in only.split(","))}
    return out, builtin


def profiled_events(fn, calls=10):
    """torch.profiler's events of `calls` calls of fn after one warm-up call (device activity only)."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    return prof.events()


def fa_kernel_times(fn, calls=10):
    """Device times (ms, torch.profiler) of the fa kernels of `calls` calls of fn after one warm-up, in launch order."""
    ks = sorted((e for e in profiled_events(fn, calls) if e.name == "fa_kernel"), key=lambda e: e.time_range.start)
    return [(e.time_range.end - e.time_range.start) / 1000.0 for e in ks]


def device_ms(fn, calls=10):
    """Device time per call (ms, torch.profiler): every kernel, memset and copy of `calls` calls of fn after one
    warm-up, summed, over `calls`. At 2k the calls are host-bound (the call time is the host's), so a restated
    built-in is compared with its built-in on this too."""
    evs = [e for e in profiled_events(fn, calls) if e.device_type.name == "CUDA"]
    return sum(e.time_range.end - e.time_range.start for e in evs) / 1000.0 / calls


def cls_pass_ms(fn, calls=10):
    """Median device time of the first fa kernel of each call (mask_blocks) and of the second (the forward), ms; a
    call of one kernel (the classification kept from an earlier call: fa_mods.mask_epoch) has a classification of
    0."""
    try:
        dur = fa_kernel_times(fn, calls)
        if len(dur) == calls:
            return 0.0, statistics.median(dur)
        if len(dur) != 2 * calls:
            return None, None
        return statistics.median(dur[0::2]), statistics.median(dur[1::2])
    except Exception as exc:  # noqa: BLE001
        print(f"# profiler: {exc}")
        return None, None


def cache_rows(path):
    try:
        con = sqlite3.connect(path)
        n = 0
        for (t,) in con.execute("select name from sqlite_master where type='table'"):
            n += con.execute(f'select count(*) from "{t}"').fetchone()[0]
        con.close()
        return n
    except Exception:  # noqa: BLE001
        return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--seqs", default="8192,2048")
    ap.add_argument("--skip-first-call", action="store_true", help="only the timings (e.g. a second, tuned run)")
    ap.add_argument("--bwd", action="store_true", help="time the backward (no first-call figures)")
    ap.add_argument("--only", help="comma-separated mod names (prefixes) to time, e.g. document,relative_bias")
    ap.add_argument("--no-flex", action="store_true", help="fa's figures only (no FlexAttention compile or timing)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds per row (median of the rounds)")
    ap.add_argument(
        "--pairs",
        type=int,
        default=15,
        help="back-to-back pairs of a restated built-in and its built-in (median of their ratios)",
    )
    args = ap.parse_args()
    torch.manual_seed(0)
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    import torch._dynamo as dynamo

    dynamo.config.cache_size_limit = 1024
    res = {"rows": [], "first_call": {}, "new_lengths": {}}
    flex = torch.compile(flex_attention, dynamic=True)
    if args.bwd:
        res["backward"] = True
        bwd_timings(res, args, flex, flex_attention, create_block_mask)
    else:
        if not args.skip_first_call:
            first_calls(res, flex_attention, create_block_mask)
        timings(res, args, flex, flex_attention, create_block_mask)
    if args.json:  # bench/results/SCHEMA.md
        extra = {k: v for k, v in res.items() if k != "rows" and v}
        doc = result_schema.document("bench_mods", res["rows"], args=vars(args), extra=extra)
        result_schema.write(args.json, doc)


def first_calls(res, flex_attention, create_block_mask):
    # ---- first call of a new mod: fa (NVRTC compiles of mask_blocks + the forward) vs Flex (torch.compile)
    s = 2048
    q, k, v = (torch.randn(1, s, H, D, device="cuda", dtype=DT) for _ in range(3))
    tag = random.randrange(1 << 30)
    m = fa.Mods(mask_mod=f"// {tag}\nreturn j <= i && (j < 4 || i - j < 777);", depends="")
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fa.attention(q, k, v, mods=m)
    torch.cuda.synchronize()
    res["first_call"]["fa_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    flex = torch.compile(flex_attention, dynamic=True)
    bm = create_block_mask(lambda b, h, i, j: (j <= i) & ((j < 4) | (i - j < 777)), None, None, s, s, device="cuda")
    flex(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), block_mask=bm)
    torch.cuda.synchronize()
    res["first_call"]["flex_s"] = time.perf_counter() - t0
    print(f"first call of a new mod: fa {res['first_call']['fa_s']:.2f} s, Flex {res['first_call']['flex_s']:.2f} s")
    # ---- 20 new sequence lengths: fa's first call each, cache rows before / after
    cpath = os.environ.get("FA_CACHE_PATH", "")
    before = cache_rows(cpath) if cpath else None
    firsts = []
    for s2 in random.Random(1).sample(range(300, 6000), 20):
        q2, k2, v2 = (torch.randn(1, s2, H, D, device="cuda", dtype=DT) for _ in range(3))
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fa.attention(q2, k2, v2, mods=m)
        torch.cuda.synchronize()
        firsts.append((s2, (time.perf_counter() - t0) * 1e3))
    after = cache_rows(cpath) if cpath else None
    res["new_lengths"] = {
        "first_call_ms": firsts,
        "cache_rows_before": before,
        "cache_rows_after": after,
        "max_first_call_ms": max(t for _, t in firsts),
    }
    print(
        f"20 new lengths: max first call {res['new_lengths']['max_first_call_ms']:.1f} ms, cache rows "
        f"{before} -> {after}"
    )


def timings(res, args, flex, flex_attention, create_block_mask):
    profiled = []
    dev = []  # (row, column, call): device time per call, after every timing too
    for s in [int(x) for x in args.seqs.split(",")]:
        q, k, v = (torch.randn(1, s, H, D, device="cuda", dtype=DT) for _ in range(3))
        qh, kh, vh = (t.transpose(1, 2) for t in (q, k, v))
        table, builtin = mods_for(s, args.only)
        # compile every fa kernel of this length first, in parallel (ctypes drops the GIL during fa's calls; each
        # worker thread makes the device's context current first)
        calls = [lambda: fa.attention(q, k, v)] + [
            lambda m=m, kw=kw: fa.attention(q, k, v, mods=m, **kw) for m, kw, _, _ in table.values()
        ]
        calls += [lambda kw=kw: fa.attention(q, k, v, **kw) for kw in builtin.values()]

        def warm(f):
            torch.cuda.set_device(q.device)
            f()

        with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(warm, calls))
        torch.cuda.synchronize()
        dense = event_ms(lambda: fa.attention(q, k, v))
        for name, (mods, kw, fmask, fscore) in table.items():
            # every name bound now: the device times below run after the loop (q, k, v then hold the last length)
            fa_call = lambda q=q, k=k, v=v, mods=mods, kw=kw: fa.attention(q, k, v, mods=mods, **kw)  # noqa: E731
            row = {"mod": name, "seq": s, "cls_ms": None, "fwd_ms": None, "dense_ms": dense}
            if mods.mask_mod:  # profiled after every timing (see below)
                profiled.append((row, lambda q=q, k=k, v=v, mods=mods, kw=kw: fa.attention(q, k, v, mods=mods, **kw)))
            contenders = {"fa_ms": fa_call}
            try:
                if args.no_flex:
                    raise RuntimeError("--no-flex")
                bmask = create_block_mask(fmask, None, None, s, s, device="cuda")
                fcall = lambda: flex(qh, kh, vh, block_mask=bmask, score_mod=fscore)  # noqa: E731
                try:
                    fcall()
                except Exception:  # noqa: BLE001  (dynamic shapes reject some captured-tensor score_mods)
                    static = torch.compile(flex_attention)
                    fcall = lambda: static(qh, kh, vh, block_mask=bmask, score_mod=fscore)  # noqa: E731
                    row["flex_static_compile"] = True
                o_f = fcall().transpose(1, 2)
                o = fa_call()
                row["max_abs_diff"] = (o.float() - o_f.float()).abs().max().item()
                contenders["flex_ms"] = fcall
            except Exception as exc:  # noqa: BLE001
                row["flex_error"] = str(exc)[:200]
            if name in builtin:
                contenders["builtin_ms"] = lambda q=q, k=k, v=v, kw=builtin[name]: fa.attention(q, k, v, **kw)
                dev.append((row, "builtin_dev_ms", contenders["builtin_ms"]))
                dev.append((row, "fa_dev_ms", fa_call))
            row.update(interleaved_ms(contenders, args.rounds))
            if "builtin_ms" in contenders:
                row["paired_ratio"] = paired_ratio(fa_call, contenders["builtin_ms"], args.pairs)
            fa_ms = row["fa_ms"]
            res["rows"].append(row)
            print(f"# {name} {s}: fa {fa_ms:.3f} ms, Flex {row.get('flex_ms', float('nan')):.3f} ms", flush=True)
    # the classification pass and the forward kernel alone (torch.profiler), after every event timing: a profiler
    # session leaves per-launch overhead behind that would slow the host-bound rows timed after it
    for row, fn in profiled:
        row["cls_ms"], row["fwd_ms"] = cls_pass_ms(fn)
    for row, col, fn in dev:
        row[col] = device_ms(fn)
    print(
        f"{'mod':<20}{'seq':>6}{'fa ms':>9}{'cls ms':>8}{'fwd ms':>8}{'flex ms':>9}{'flex/fa':>9}"
        f"{'builtin ms':>11}{'dense ms':>10}{'max|fa-flex|':>13}"
    )
    for row in res["rows"]:
        f, fa_ms, cls_ms, fwd_ms = row.get("flex_ms"), row["fa_ms"], row["cls_ms"], row["fwd_ms"]
        print(
            f"{row['mod']:<20}{row['seq']:>6}{fa_ms:>9.3f}{(float('nan') if cls_ms is None else cls_ms):>8.3f}"
            f"{(fwd_ms or float('nan')):>8.3f}{(f or float('nan')):>9.3f}{(f / fa_ms if f else float('nan')):>9.2f}"
            f"{row.get('builtin_ms', float('nan')):>11.3f}{row['dense_ms']:>10.3f}"
            f"{row.get('max_abs_diff', float('nan')):>13.4f}",
            flush=True,
        )
    # summary: fa's speed-up over Flex on the ready mods, a restated built-in against the built-in, document vs dense
    ready = ("document(8)", "prefix_lm", "sinks_window", "chunked", "relative_bias")
    for s in [int(x) for x in args.seqs.split(",")]:
        rows = {r["mod"]: r for r in res["rows"] if r["seq"] == s}
        sp = {m: rows[m]["flex_ms"] / rows[m]["fa_ms"] for m in ready if m in rows and rows[m].get("flex_ms")}
        c = rows.get("causal (mod)", {})
        w = rows.get("window 1024 (mod)", {})
        doc = rows.get("document(8)", {})
        print(
            f"SUMMARY seq {s}: Flex/fa "
            + ", ".join(f"{m} {x:.2f}" for m, x in sp.items())
            + (f"; min {min(sp.values()):.2f}" if sp else "")
            + "".join(
                f"; {m} / built-in {r['fa_ms'] / r['builtin_ms']:.3f} "
                f"(paired {r['paired_ratio']:.3f}, device {r['fa_dev_ms'] / r['builtin_dev_ms']:.3f})"
                for m, r in (("causal (mod)", c), ("window (mod)", w))
                if r.get("builtin_dev_ms")
            )
            + (f"; dense / document(8) {doc['dense_ms'] / doc['fa_ms']:.2f}" if doc else "")
        )


def fwd_bwd_calls(run, inputs, do):
    """(forward + autograd.grad with dO = do, the forward alone without grad) of o = run(*inputs), for
    interleaved_ms."""

    def fwd():
        with torch.no_grad():
            return run(*inputs)

    return (lambda: torch.autograd.grad(run(*inputs), inputs, do)), fwd


def bwd_timings(res, args, flex, flex_attention, create_block_mask):
    print(
        f"{'mod (fwd+bwd)':<20}{'seq':>6}{'fa ms':>9}{'flex ms':>9}{'flex/fa':>9}{'fa bwd':>8}{'flex bwd':>9}"
        f"{'bwd f/fa':>9}{'builtin ms':>11}{'dense ms':>10}{'max|dq fa-flex|':>16}"
    )
    dev = []  # (row, column, call): device time per call
    for s in [int(x) for x in args.seqs.split(",")]:
        q, k, v = (torch.randn(1, s, H, D, device="cuda", dtype=DT).requires_grad_() for _ in range(3))
        qh, kh, vh = (t.detach().transpose(1, 2).requires_grad_() for t in (q, k, v))
        do = torch.randn(1, s, H, D, device="cuda", dtype=DT)
        dense = event_ms(fwd_bwd_calls(lambda a, b, c: fa.attention(a, b, c), (q, k, v), do)[0])
        table, builtin = mods_for(s, args.only)
        for name, (mods, kw, fmask, fscore) in table.items():
            fa_step, fa_fwd = fwd_bwd_calls(
                lambda a, b, c, mods=mods, kw=kw: fa.attention(a, b, c, mods=mods, **kw), (q, k, v), do
            )  # names bound now: device times run after the loop
            g_fa = fa_step()
            row = {"mod": name, "seq": s, "dense_fwd_bwd_ms": dense}
            contenders = {"fa_fwd_bwd_ms": fa_step, "fa_fwd_ms": fa_fwd}
            try:
                bmask = create_block_mask(fmask, None, None, s, s, device="cuda")
                fn = lambda a, b, c: flex(a, b, c, block_mask=bmask, score_mod=fscore)  # noqa: E731
                try:
                    torch.autograd.grad(fn(qh, kh, vh), (qh, kh, vh), do.transpose(1, 2))
                except Exception:  # noqa: BLE001  (dynamic shapes reject some captured-tensor score_mods)
                    static = torch.compile(flex_attention)
                    fn = lambda a, b, c: static(a, b, c, block_mask=bmask, score_mod=fscore)  # noqa: E731
                    row["flex_static_compile"] = True
                f_step, f_fwd = fwd_bwd_calls(fn, (qh, kh, vh), do.transpose(1, 2))
                g_flex = f_step()
                row["max_abs_diff_dq"] = (g_fa[0].float() - g_flex[0].transpose(1, 2).float()).abs().max().item()
                contenders.update(flex_fwd_bwd_ms=f_step, flex_fwd_ms=f_fwd)
            except Exception as exc:  # noqa: BLE001
                row["flex_error"] = str(exc)[:200]
            if name in builtin:
                contenders["builtin_fwd_bwd_ms"] = fwd_bwd_calls(
                    lambda a, b, c, kw=builtin[name]: fa.attention(a, b, c, **kw), (q, k, v), do
                )[0]
            row.update(interleaved_ms(contenders, args.rounds))
            if "builtin_fwd_bwd_ms" in contenders:
                row["paired_ratio"] = paired_ratio(fa_step, contenders["builtin_fwd_bwd_ms"], args.pairs)
                # device times after every timing (a profiler session slows
                dev += [(row, "fa_dev_ms", fa_step), (row, "builtin_dev_ms", contenders["builtin_fwd_bwd_ms"])]
            fa_ms = row["fa_fwd_bwd_ms"]
            row["fa_bwd_ms"] = fa_ms - row["fa_fwd_ms"]
            if "flex_fwd_bwd_ms" in row:
                row["flex_bwd_ms"] = row["flex_fwd_bwd_ms"] - row["flex_fwd_ms"]
            res["rows"].append(row)
            f, fb, nan = row.get("flex_fwd_bwd_ms"), row.get("flex_bwd_ms"), float("nan")
            print(
                f"{name:<20}{s:>6}{fa_ms:>9.3f}{(f or nan):>9.3f}{(f / fa_ms if f else nan):>9.2f}"
                f"{row['fa_bwd_ms']:>8.3f}{(fb or nan):>9.3f}{(fb / row['fa_bwd_ms'] if fb else nan):>9.2f}"
                f"{row.get('builtin_fwd_bwd_ms', nan):>11.3f}{dense:>10.3f}{row.get('max_abs_diff_dq', nan):>16.4f}",
                flush=True,
            )
    for row, col, fn in dev:  # the host-bound rows timed after it: see timings)
        row[col] = device_ms(fn)
    ready = ("document(8)", "prefix_lm", "sinks_window", "chunked", "relative_bias")
    for s in [int(x) for x in args.seqs.split(",")]:
        rows = {r["mod"]: r for r in res["rows"] if r["seq"] == s}
        bw = {m: rows[m]["flex_bwd_ms"] / rows[m]["fa_bwd_ms"] for m in ready if rows.get(m, {}).get("flex_bwd_ms")}
        both = {m: rows[m]["flex_fwd_bwd_ms"] / rows[m]["fa_fwd_bwd_ms"] for m in bw}
        restated = {
            m: (
                rows[m]["fa_fwd_bwd_ms"] / rows[m]["builtin_fwd_bwd_ms"],
                rows[m]["paired_ratio"],
                rows[m]["fa_dev_ms"] / rows[m]["builtin_dev_ms"],
            )
            for m in ("causal (mod)", "window 1024 (mod)")
            if rows.get(m, {}).get("builtin_dev_ms")
        }
        print(
            f"SUMMARY seq {s} backward: Flex/fa bwd "
            + ", ".join(f"{m} {x:.2f}" for m, x in bw.items())
            + (f"; min bwd {min(bw.values()):.2f}, min fwd+bwd {min(both.values()):.2f}" if bw else "")
            + "".join(
                f"; {m} / built-in {x:.3f} (paired {pr:.3f}, device {d:.3f})" for m, (x, pr, d) in restated.items()
            )
        )


if __name__ == "__main__":
    main()
