#!/usr/bin/env python3
"""Decode (issue 21): fa's KV-cache forward (fwd_split: split-KV, GQA packing, paged KV) against torch SDPA's
FLASH_ATTENTION (FlashAttention-2) and CUDNN_ATTENTION backends, with the device's copy bandwidth measured in the
same run.

Cells: batch 1 / 8 / 64 x keys 4k / 32k / 128k, 32 query heads over 8 KV heads, head dim 128, bf16, one query token,
no mask; fa contiguous and paged (page 16 and 64; pages in a random order, the same values as the contiguous cache,
so paged and contiguous outputs must agree bit for bit). SDPA gets q [B, 32, 1, 128] and k / v [B, 8, S, 128] with
enable_gqa=True, is_causal=False (where a backend refuses enable_gqa, k / v repeated to 32 heads beforehand when
that fits in memory; else n/a). Times: median of per-call CUDA-event times, calls enqueued back to back (~25 ms
of calls and a warmup first;
fa's first call compiles, outside the timing); with --graph, the median of 7 replays of a CUDA graph of --iters calls
(device time per call: at batch 1 / 4k a kernel runs for less than a Python call's host time, which back-to-back
calls then measure instead). KV read rate = bytes of K and V read (B * S * 8 * 128 * 2 * 2) / time.
Copy bandwidth: a 2 GiB device-to-device copy, (read + write bytes) / time, median of 20.
Equal tunables (--equal, on by default): contiguous and paged again through a second context at
FA_TUNE_POLICY=defaults with its own in-memory cache (so no tuned entry of the shared cache is served), so that both
run the family's default point (the same split count and tile): the
`paged{16,64}_over_contiguous_eq` columns are the paged code's cost alone, while `paged{16,64}_over_contiguous`
(under the process's tune policy) also holds which point each key's tuning picked. At equal tunables paged and
contiguous must agree bit for bit (`paged{16,64}_bit_exact_eq`).
FP8 cache (--fp8, on by default; fp8_cell): each GQA cell again from an e4m3 cache (k / v quantized with one float32
scale per KV head, amax / 448), contiguous and paged: fp8_kv_tbps = half the bf16 bytes / time, fp8_copy_share its
share of the copy bandwidth, fp8_over_bf16 the bf16 cache's time over the fp8 one's (tokens per second ratio), and
the error against a float32 reference over the dequantized cache where the cell is small enough.
MLA cells (mla_cell): batch 1 / 32 / 128 x keys 4k / 32k, d 576 / dv 512, 128 query heads over one latent KV head
(--mla-heads: also 16, DeepSeek's heads per GPU under 8-way tensor parallelism), paged (page 64), v = k[..., :512]; fa
only (SDPA's backends do not take these head dims). Each row gives the share of the copy bandwidth and the
arithmetic intensity (FLOP per latent byte: heads x (576 + 512) x 2 / (576 x 2), 242 at 128 heads, 30 at 16): where
it is above the bf16 GEMM rate over the copy bandwidth (~185 on an H200) the cell is compute-bound, and its ceiling is
that rate over the intensity, not the copy.

  FA_LIBRARY=build-dev/lib/libfa.so PYTHONPATH=python python3 bench/bench_decode.py --json out.json
"""

import argparse
import ctypes
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import fa  # noqa: E402

S = fa.structs

sys.path.insert(0, str(REPO / "bench"))
from bench_peers import event_times  # noqa: E402  (per-call CUDA-event times, calls back to back)
import result_schema  # noqa: E402

HQ, HKV, D = 32, 8, 128


def graph_times(fn, calls, reps):
    """Per-call device times (ms) of `calls` calls captured in one CUDA graph, one figure per replay: no host time
    between the calls (a decode step of a server replays its graph the same way)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()  # outside the capture: whatever a first call brings in (kernels, plans) is there before it
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    g.replay()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        g.replay()
        end.record()
        torch.cuda.synchronize()
        out.append(start.elapsed_time(end) / calls)
    del g
    return out


def timed(fn, args):
    """Median per-call time (ms): calls for ~25 ms first (clocks up, caches and TLBs warm, the same for every
    backend), then event_times' warmup and timed calls (--graph: replays of a graph of --iters calls instead, so
    that a cell whose kernels are shorter than a Python call's host time is timed on the device, not the host)."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 0.025:
        fn()
        torch.cuda.synchronize()
    if args.graph:
        return statistics.median(graph_times(fn, args.iters, 7))
    return statistics.median(event_times(fn, args.warmup, args.iters))


def copy_bandwidth():
    n = 1 << 30  # 2 GiB of bf16
    x = torch.empty(n, dtype=torch.bfloat16, device="cuda")
    y = torch.empty_like(x)
    t = statistics.median(event_times(lambda: y.copy_(x), 3, 20))
    del x, y
    torch.cuda.empty_cache()
    return 2 * n * 2 / (t * 1e-3) / 1e12  # TB/s


def new_params():
    """An fa_params set to its defaults by the C API's fa_params_init (called through ctypes)."""
    p = S.Params()
    status = ctypes.CDLL(fa.library_path()).fa_params_init(ctypes.byref(p))
    if status != 0:
        raise fa.error_class(status)(status, "fa_params_init", fa.status_string(status))
    return p


class FaDecode:
    """fa_run through ctypes on a [B, 1, 32, 128] q and a contiguous or paged cache."""

    def __init__(self, ctx, q, k, v, o, lse=None, block_table=None, page_size=0, seqused=None, kv_scales=None):
        self.ctx = ctx
        p = new_params()
        p.dtype = S.FA_DTYPE_BF16
        if kv_scales is not None:  # an e4m3 cache read as k * k_scale[g], v * v_scale[g] (one factor per KV head)
            p.kv_dtype = S.FA_DTYPE_E4M3
            p.k_scale, p.k_scale_stride_head = kv_scales[0].data_ptr(), 1
            p.v_scale, p.v_scale_stride_head = kv_scales[1].data_ptr(), 1
        b, sq, hq, d = q.shape
        p.batch, p.seqlen_q, p.heads_q, p.heads_kv, p.head_dim, p.head_dim_v = b, sq, hq, k.shape[2], d, v.shape[-1]
        p.q = q.data_ptr()
        p.q_stride_batch, p.q_stride_seq, p.q_stride_head = q.stride()[:3]
        p.o = o.data_ptr()
        p.o_stride_batch, p.o_stride_seq, p.o_stride_head = o.stride()[:3]
        p.k, p.v = k.data_ptr(), v.data_ptr()
        p.k_stride_batch, p.k_stride_seq, p.k_stride_head = k.stride()[:3]
        p.v_stride_batch, p.v_stride_seq, p.v_stride_head = v.stride()[:3]
        if block_table is not None:
            p.block_table = block_table.data_ptr()
            p.block_table_stride = block_table.stride(0)
            p.page_size = page_size
            p.num_pages = k.shape[0]
            p.seqlen_k = block_table.shape[1] * page_size
        else:
            p.seqlen_k = k.shape[1]
        if seqused is not None:
            p.seqused_k = seqused.data_ptr()
        if lse is not None:
            p.lse = lse.data_ptr()
        self.p = p
        size = ctx.forward_workspace_size(p)
        self.ws = torch.empty(max(size, 256), dtype=torch.uint8, device="cuda")
        if size:
            p.workspace = self.ws.data_ptr()
            p.workspace_size = size
        self.key = ctx.problem_key(p)
        ctx.prepare(p)

    def __call__(self):
        self.ctx.run(self.p, torch.cuda.current_stream().cuda_stream)


def sdpa_call(backend_name, q, k, v):
    """A callable running SDPA on [B, H, S, D] views, or raises."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = getattr(SDPBackend, backend_name)
    qh, kh, vh = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)

    def gqa():
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(qh, kh, vh, is_causal=False, enable_gqa=True)

    try:
        out = gqa()
        torch.cuda.synchronize()
        return gqa, out.transpose(1, 2), "enable_gqa"
    except Exception:  # noqa: BLE001 - fall back to repeated heads
        pass
    if kh.numel() * 2 * 4 * 2 > 24 * (1 << 30):
        raise RuntimeError("repeated K/V would not fit")
    kr = kh.repeat_interleave(HQ // HKV, dim=1)
    vr = vh.repeat_interleave(HQ // HKV, dim=1)

    def rep():
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(qh, kr, vr, is_causal=False)

    out = rep()
    torch.cuda.synchronize()
    return rep, out.transpose(1, 2), "repeat"


MLA_D, MLA_DV, MLA_PAGE = 576, 512, 64


def quantize_e4m3(x):
    """x [B, S, Hkv, D] as e4m3 codes and a float32 factor per KV head (amax / 448, vLLM's per-head scale)."""
    scale = (x.abs().amax(dim=(0, 1, 3)).float() / 448.0).clamp_min(1e-12)
    return (x.float() / scale[None, None, :, None]).to(torch.float8_e4m3fn), scale.contiguous()


def fp8_cell(ctx, row, q, k, v, t_bf16, kv_bytes, bw, args):
    """The same cell from an e4m3 cache (issue 41): contiguous and paged (the same pages as the bf16 cells), the KV
    read rate over half the bytes, its share of the copy bandwidth, the speed-up over the bf16 cache, and the error
    against a float32 reference over the dequantized cache (cells up to 2^20 keys a batch)."""
    b, sk = k.shape[0], k.shape[1]
    k8, ks = quantize_e4m3(k)
    v8, vs = quantize_e4m3(v)
    o8 = torch.empty_like(q)
    call = FaDecode(ctx, q, k8, v8, o8, kv_scales=(ks, vs))
    row["fp8_key"] = call.key
    t8 = timed(call, args)
    call()
    torch.cuda.synchronize()
    row["fp8_ms"] = t8
    row["fp8_kv_tbps"] = kv_bytes / 2 / (t8 * 1e-3) / 1e12
    row["fp8_copy_share"] = row["fp8_kv_tbps"] / bw  # bytes read against the copy's read + write rate
    row["fp8_over_bf16"] = t_bf16 / t8
    if b * sk <= 1 << 20:
        kd = (k8.float() * ks[None, None, :, None]).repeat_interleave(HQ // HKV, dim=2).transpose(1, 2)
        vd = (v8.float() * vs[None, None, :, None]).repeat_interleave(HQ // HKV, dim=2).transpose(1, 2)
        ref = F.scaled_dot_product_attention(q.float().transpose(1, 2), kd, vd).transpose(1, 2)
        row["fp8_max_abs_err_vs_dequantized_fp32"] = (o8.float() - ref).abs().max().item()
        del kd, vd, ref
    for ps in [int(x) for x in args.pages.split(",") if x]:
        npages = b * sk // ps
        perm = torch.randperm(npages, device="cuda")
        kp = torch.empty(npages, ps, HKV, D, dtype=k8.dtype, device="cuda")
        kp[perm] = k8.view(npages, ps, HKV, D)
        vp = torch.empty_like(kp)
        vp[perm] = v8.view(npages, ps, HKV, D)
        table = perm.view(b, sk // ps).to(torch.int32).contiguous()
        op = torch.empty_like(o8)
        pc = FaDecode(ctx, q, kp, vp, op, block_table=table, page_size=ps, kv_scales=(ks, vs))
        tp = timed(pc, args)
        pc()
        torch.cuda.synchronize()
        row[f"fp8_paged{ps}_ms"] = tp
        row[f"fp8_paged{ps}_kv_tbps"] = kv_bytes / 2 / (tp * 1e-3) / 1e12
        row[f"fp8_paged{ps}_over_bf16"] = t_bf16 / tp
        del kp, vp, pc
    del k8, v8, call


def mla_cell(ctx, b, sk, hq, args):
    """MLA decode: q [B, 1, hq, 576] over one latent head, paged (page 64, random page order); v is the first 512
    columns of k (the latent cache, as DeepSeek's layout stores it). Rate = latent cache bytes (B * S * 576 * 2) /
    time; TFLOP/s = B * 128 * S * (576 + 512) * 2 / time. Checked against torch (float32) at the smaller cells."""
    q = torch.randn(b, 1, hq, MLA_D, dtype=torch.bfloat16, device="cuda")
    npages = b * sk // MLA_PAGE
    perm = torch.randperm(npages, device="cuda")
    kp = torch.randn(npages, MLA_PAGE, 1, MLA_D, dtype=torch.bfloat16, device="cuda")
    vp = kp[..., :MLA_DV]
    table = perm.view(b, sk // MLA_PAGE).to(torch.int32).contiguous()
    o = torch.empty(b, 1, hq, MLA_DV, dtype=torch.bfloat16, device="cuda")
    call = FaDecode(ctx, q, kp, vp, o, block_table=table, page_size=MLA_PAGE)
    t = timed(call, args)
    row = {
        "kind": "mla",
        "batch": b,
        "seqlen_k": sk,
        "heads_q": hq,
        "heads_kv": 1,
        "head_dim": MLA_D,
        "head_dim_v": MLA_DV,
        "page_size": MLA_PAGE,
        "dtype": "bf16",
        "fa_key": call.key,
        "fa_ms": t,
        "fa_cache_tbps": b * sk * MLA_D * 2 / (t * 1e-3) / 1e12,
        "fa_tflops": b * hq * sk * (MLA_D + MLA_DV) * 2 / (t * 1e-3) / 1e12,
        "flop_per_byte": hq * (MLA_D + MLA_DV) * 2 / (MLA_D * 2),
    }
    if b * sk <= 32 * 4096:
        call()
        torch.cuda.synchronize()
        kc = kp[table.long()].reshape(b, sk, MLA_D).float()
        s = torch.einsum("bhd,bkd->bhk", q[:, 0].float(), kc) / MLA_D**0.5
        ref = torch.einsum("bhk,bkd->bhd", torch.softmax(s, -1), kc[..., :MLA_DV])
        row["max_abs_diff_vs_torch"] = (o[:, 0].float() - ref).abs().max().item()
    del q, kp, vp, o, call
    torch.cuda.empty_cache()
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", required=True)
    ap.add_argument("--batches", default="1,8,64")
    ap.add_argument("--keys", default="4096,32768,131072")
    ap.add_argument("--pages", default="16,64")
    ap.add_argument("--mla-batches", default="1,32,128")
    ap.add_argument("--mla-keys", default="4096,32768")
    ap.add_argument("--mla-heads", default="128,16", help="query heads of the MLA cells (one latent KV head)")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument(
        "--equal",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also time contiguous and paged at the default point (a FA_TUNE_POLICY=defaults context)",
    )
    ap.add_argument(
        "--fp8",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also time each GQA cell from an e4m3 cache with per-head scales (fp8_* columns)",
    )
    ap.add_argument(
        "--graph",
        action="store_true",
        help="time every contender by replaying a CUDA graph of --iters calls (device time, no host gaps)",
    )
    args = ap.parse_args()
    torch.manual_seed(0)
    dev = torch.cuda.get_device_name()
    ctx = fa.Context()
    # its own in-memory cache: "defaults" still serves tuned entries a shared cache holds
    ctx_eq = fa.Context(tune_policy="defaults", cache_path=":memory:") if args.equal else None
    bw0 = copy_bandwidth()
    print(
        f"device {dev}; copy bandwidth {bw0:.3f} TB/s; fa {fa.library_path()}; timing: "
        f"{'CUDA graph replays' if args.graph else 'calls back to back'}",
        flush=True,
    )
    rows = []
    for b in [int(x) for x in args.batches.split(",") if x]:
        for sk in [int(x) for x in args.keys.split(",") if x]:
            q = torch.randn(b, 1, HQ, D, dtype=torch.bfloat16, device="cuda")
            k = torch.randn(b, sk, HKV, D, dtype=torch.bfloat16, device="cuda")
            v = torch.randn(b, sk, HKV, D, dtype=torch.bfloat16, device="cuda")
            kv_bytes = 2 * b * sk * HKV * D * 2
            row = {
                "kind": "gqa",
                "batch": b,
                "seqlen_k": sk,
                "heads_q": HQ,
                "heads_kv": HKV,
                "head_dim": D,
                "dtype": "bf16",
            }
            o = torch.empty(b, 1, HQ, D, dtype=torch.bfloat16, device="cuda")
            call = FaDecode(ctx, q, k, v, o)
            row["fa_key"] = call.key
            row["fa_splits_workspace_bytes"] = call.p.workspace_size
            t = timed(call, args)
            row["fa_ms"] = t
            row["fa_kv_tbps"] = kv_bytes / (t * 1e-3) / 1e12
            o_ref = None
            for name, backend in (("FA2", "FLASH_ATTENTION"), ("cuDNN", "CUDNN_ATTENTION")):
                try:
                    fn, out, how = sdpa_call(backend, q, k, v)
                    row[f"{name}_ms"] = timed(fn, args)
                    row[f"{name}_how"] = how
                    if o_ref is None:
                        o_ref = out
                except Exception as exc:  # noqa: BLE001
                    row[f"{name}_ms"] = None
                    row[f"{name}_err"] = f"{type(exc).__name__}: {exc}"[:160]
            call()
            torch.cuda.synchronize()
            if o_ref is not None:
                row["fa_max_abs_diff_vs_sdpa"] = (o.float() - o_ref.float()).abs().max().item()
            best = min([row[x] for x in ("FA2_ms", "cuDNN_ms") if row.get(x)] or [float("nan")])
            row["fa_over_best"] = best / t if best == best else None
            o_contig = o.clone()
            if ctx_eq is not None:  # equal tunables: the contiguous cache at the default point
                o_eq = torch.empty_like(o)
                call_eq = FaDecode(ctx_eq, q, k, v, o_eq)
                row["fa_eq_key"] = call_eq.key
                t_eq = timed(call_eq, args)
                call_eq()
                torch.cuda.synchronize()
                row["fa_eq_ms"] = t_eq
                o_contig_eq = o_eq.clone()
                del call_eq
            for ps in [int(x) for x in args.pages.split(",") if x]:
                npages = b * sk // ps
                perm = torch.randperm(npages, device="cuda")
                kp = torch.empty(npages, ps, HKV, D, dtype=torch.bfloat16, device="cuda")
                kp[perm] = k.view(npages, ps, HKV, D)
                vp = torch.empty_like(kp)
                vp[perm] = v.view(npages, ps, HKV, D)
                table = perm.view(b, sk // ps).to(torch.int32).contiguous()
                op = torch.empty_like(o)
                pc = FaDecode(ctx, q, kp, vp, op, block_table=table, page_size=ps)
                tp = timed(pc, args)
                pc()
                torch.cuda.synchronize()
                row[f"paged{ps}_ms"] = tp
                row[f"paged{ps}_kv_tbps"] = kv_bytes / (tp * 1e-3) / 1e12
                row[f"paged{ps}_over_contiguous"] = t / tp
                row[f"paged{ps}_bit_exact"] = bool(torch.equal(op, o_contig))
                if ctx_eq is not None:  # the same pages at the default point, against the contiguous default run
                    pe = FaDecode(ctx_eq, q, kp, vp, op, block_table=table, page_size=ps)
                    tpe = timed(pe, args)
                    pe()
                    torch.cuda.synchronize()
                    row[f"paged{ps}_eq_ms"] = tpe
                    row[f"paged{ps}_over_contiguous_eq"] = t_eq / tpe
                    row[f"paged{ps}_bit_exact_eq"] = bool(torch.equal(op, o_contig_eq))
                    del pe
                del kp, vp, pc
            row["fa_ms_again"] = timed(call, args)  # the contiguous run once more, after the other backends
            if args.fp8:
                fp8_cell(ctx, row, q, k, v, t, kv_bytes, bw0, args)
            rows.append(row)
            del q, k, v, o, call
            torch.cuda.empty_cache()
            print(json.dumps(row), flush=True)
    mla_rows = []
    for hq in [int(x) for x in args.mla_heads.split(",") if x]:
        for b in [int(x) for x in args.mla_batches.split(",") if x]:
            for sk in [int(x) for x in args.mla_keys.split(",") if x]:
                mla_rows.append(mla_cell(ctx, b, sk, hq, args))
                print(json.dumps(mla_rows[-1]), flush=True)
    bw1 = copy_bandwidth()
    timing = "CUDA-graph replays (device time)" if args.graph else "calls back to back"
    doc = result_schema.document(
        "bench_decode", rows + mla_rows, args=vars(args), extra={"timing": timing, "copy_bandwidth_tbps": [bw0, bw1]}
    )
    result_schema.write(args.json, doc)
    print(f"copy bandwidth {bw0:.3f} / {bw1:.3f} TB/s (before / after)")
    print(
        f"{'batch':>5} {'keys':>7} {'fa ms':>8} {'FA2 ms':>8} {'cuDNN ms':>8} {'fa/best':>7} {'fa TB/s':>7} "
        f"{'p16 ms':>8} {'p64 ms':>8} {'eq ms':>8} {'p16 eq':>7} {'p64 eq':>7}"
    )
    for r in rows:
        f = lambda x: "n/a" if x is None else f"{x:.3f}"  # noqa: E731
        print(
            f"{r['batch']:>5} {r['seqlen_k']:>7} {f(r['fa_ms']):>8} {f(r.get('FA2_ms')):>8} {f(r.get('cuDNN_ms')):>8} "
            f"{f(r.get('fa_over_best')):>7} {r['fa_kv_tbps']:7.2f} "
            f"{f(r.get('paged16_ms')):>8} {f(r.get('paged64_ms')):>8} "
            f"{f(r.get('fa_eq_ms')):>8} {f(r.get('paged16_over_contiguous_eq')):>7} "
            f"{f(r.get('paged64_over_contiguous_eq')):>7}"
        )
    if ctx_eq is not None:
        print(
            "eq: the default point through a FA_TUNE_POLICY=defaults context (paged x contiguous at equal tunables; "
            "bit-exact: "
            + ", ".join(
                f"{r['batch']}/{r['seqlen_k']} p{ps} {r.get(f'paged{ps}_bit_exact_eq')}"
                for r in rows
                for ps in [int(x) for x in args.pages.split(",") if x]
            )
            + ")"
        )
    if mla_rows:
        bw = max(bw0, bw1)
        print(
            f"MLA (d {MLA_D} / dv {MLA_DV}, q heads over 1 latent head, paged {MLA_PAGE}, v = k[..., :{MLA_DV}]); "
            f"'of copy': cache TB/s over the copy's {bw:.3f} TB/s"
        )
        print(
            f"{'heads':>5} {'batch':>5} {'keys':>7} {'fa ms':>8} {'cache TB/s':>10} {'of copy':>7} {'FLOP/B':>6} "
            f"{'TFLOP/s':>8} {'max err':>8}"
        )
        for r in mla_rows:
            print(
                f"{r['heads_q']:>5} {r['batch']:>5} {r['seqlen_k']:>7} {r['fa_ms']:8.3f} {r['fa_cache_tbps']:10.2f} "
                f"{r['fa_cache_tbps'] / bw:7.2f} {r['flop_per_byte']:6.0f} {r['fa_tflops']:8.1f} "
                f"{r.get('max_abs_diff_vs_torch', float('nan')):8.4f}"
            )


if __name__ == "__main__":
    main()
