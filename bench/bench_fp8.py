#!/usr/bin/env python3
"""FP8 forward (issue 41): fa over e4m3 q / k / v (the Hopper fp8 forward, o bf16) against fa's own bf16 forward and
cuDNN's fp8 SDPA (the cudnn-frontend Python package, `import cudnn`; where it does not import or build, that contender
is n/a and the row says why), with each one's error against float64 on the same inputs.

Cells: head dims 64 / 128 / 256 x causal and not x seqlen 512 .. 16k, batch x seqlen = 16k tokens, hidden 2048
(heads = 2048 / d), as bench_peers.py's standard cells. Inputs: N(0, 1) in bf16 (fa bf16's inputs), quantized per
tensor to e4m3 with descale = amax / 448 (FlashAttention 3's convention): fa fp8 and cuDNN fp8 read the same codes and
descales. Times: median of per-call CUDA-event times, calls back to back (bench_peers.event_times). TFLOP/s counts
4 B H Sq Sk D (half of it causal). Errors: max |o - o_ref| / max |o_ref| over the last 128 query rows of batch 0, two
heads, o_ref the float64 result over the dequantized fp8 inputs (fa bf16: over its bf16 inputs). cuDNN's Hopper fp8
SDPA writes an fp8 o (scale_o 1): its error includes that rounding. fa fp8 runs at its default tunables (the tuner
does not time fp8 yet) unless FA_PIN_TUNABLES pins fwd_wgmma.

  FA_LIBRARY=build-dev/lib/libfa.so PYTHONPATH=python python3 bench/bench_fp8.py --json out.json
"""

import argparse
import math
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python"))
sys.path.insert(0, str(REPO / "bench"))

import torch  # noqa: E402

import fa  # noqa: E402
import result_schema  # noqa: E402
from bench_peers import event_times  # noqa: E402

HIDDEN, TOKENS = 2048, 16384
E4M3 = torch.float8_e4m3fn


def quantize(x):
    """(e4m3 codes, descale float32 (1,)) of x, per tensor: descale = amax / 448."""
    descale = (x.abs().amax().float() / 448.0).clamp(min=1e-12).reshape(1)
    return (x.float() / descale).clamp(-448, 448).to(E4M3), descale


def reference(q, k, v, causal, rows=128, heads=2):
    """float64 attention of the last `rows` query rows of batch 0, heads 0..heads-1 (bshd inputs, float tensors)."""
    sq, sk, d = q.shape[1], k.shape[1], q.shape[3]
    group = q.shape[2] // k.shape[2]
    out = []
    for h in range(heads):
        qh = q[0, sq - rows :, h].double()
        kh, vh = k[0, :, h // group].double(), v[0, :, h // group].double()
        s = qh @ kh.T / math.sqrt(d)
        if causal:
            i = torch.arange(sq - rows, sq, device=q.device)[:, None] + (sk - sq)
            s = s.masked_fill(torch.arange(sk, device=q.device)[None, :] > i, float("-inf"))
        out.append(torch.softmax(s, dim=-1) @ vh)
    return torch.stack(out, dim=1)  # [rows, heads, dv]


def rel_error(o, ref, rows=128, heads=2):
    got = o[0, o.shape[1] - rows :, :heads].float().double()
    return float((got - ref).abs().max() / ref.abs().max().clamp(min=1e-30))


def cudnn_fp8(q8, k8, v8, dq, dk, dv, causal):
    """A callable running cuDNN's fp8 SDPA on the codes (o e4m3), or (None, why)."""
    try:
        import cudnn
    except Exception as exc:  # noqa: BLE001 (any import failure means: no contender)
        return None, f"cudnn-frontend does not import ({type(exc).__name__}: {exc})"
    try:
        b, s, h, d = q8.shape
        shape, stride = (b, h, s, d), (s * h * d, d, h * d, 1)  # bshd memory as bhsd dims
        f8, f32 = cudnn.data_type.FP8_E4M3, cudnn.data_type.FLOAT
        g = cudnn.pygraph(io_data_type=f8, intermediate_data_type=f32, compute_data_type=f32)
        tq, tk, tv = (g.tensor(name=n, dim=shape, stride=stride, data_type=f8) for n in ("q", "k", "v"))
        one = dict(dim=(1, 1, 1, 1), stride=(1, 1, 1, 1), data_type=f32)
        names = ("dq", "dk", "dv", "ds", "ss", "so")
        sc = {n: g.tensor(name=n, **one) for n in names}
        o, _, amax_s, amax_o = g.sdpa_fp8(
            q=tq, k=tk, v=tv, descale_q=sc["dq"], descale_k=sc["dk"], descale_v=sc["dv"], descale_s=sc["ds"],
            scale_s=sc["ss"], scale_o=sc["so"], is_inference=True, attn_scale=1.0 / math.sqrt(d),
            use_causal_mask=causal,
        )  # fmt: skip
        o.set_output(True).set_dim(shape).set_stride(stride).set_data_type(f8)
        for a in (amax_s, amax_o):
            a.set_output(True).set_dim((1, 1, 1, 1)).set_stride((1, 1, 1, 1)).set_data_type(f32)
        g.validate()
        g.build_operation_graph()
        g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        g.check_support()
        g.build_plans()
        out = torch.empty_like(q8)
        ones = torch.ones(1, device=q8.device)
        amaxes = [torch.empty(1, device=q8.device) for _ in range(2)]
        pack = {tq: q8, tk: k8, tv: v8, o: out, amax_s: amaxes[0], amax_o: amaxes[1]}
        pack.update({sc["dq"]: dq, sc["dk"]: dk, sc["dv"]: dv, sc["ds"]: ones, sc["ss"]: ones, sc["so"]: ones})
        ws = torch.empty(max(1, g.get_workspace_size()), dtype=torch.uint8, device=q8.device)

        def run():
            g.execute(pack, ws)
            return out

        return run, None
    except Exception as exc:  # noqa: BLE001 (a graph cuDNN refuses: n/a with its message)
        return None, f"cuDNN fp8 SDPA: {type(exc).__name__}: {exc}"[:300]


def cell(d, causal, seqlen, warmup, iters):
    torch.manual_seed(0)
    heads, batch = HIDDEN // d, max(1, TOKENS // seqlen)
    q, k, v = (torch.randn(batch, seqlen, heads, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    (q8, dq), (k8, dk), (v8, dv) = quantize(q), quantize(k), quantize(v)
    flops = 4.0 * batch * heads * seqlen * seqlen * d * (0.5 if causal else 1.0)
    row = {"head_dim": d, "causal": causal, "seqlen": seqlen, "batch": batch, "heads": heads}
    ref8 = reference(q8.float() * dq, k8.float() * dk, v8.float() * dv, causal)
    ref16 = reference(q.float(), k.float(), v.float(), causal)
    contenders = {
        "fa_fp8": (lambda: fa.attention(q8, k8, v8, causal=causal, descale_q=dq, descale_k=dk, descale_v=dv), ref8),
        "fa_bf16": (lambda: fa.attention(q, k, v, causal=causal), ref16),
    }
    run_cudnn, why = cudnn_fp8(q8, k8, v8, dq, dk, dv, causal)
    if run_cudnn is not None:  # its o: e4m3 codes in q's bshd layout, read as values (scale_o 1)
        contenders["cudnn_fp8"] = (run_cudnn, ref8)
    else:
        row["cudnn_fp8_note"] = why
    for name, (fn, ref) in contenders.items():
        try:
            row[f"{name}_err"] = rel_error(fn(), ref)
            row[f"{name}_ms"] = statistics.median(event_times(fn, warmup, iters))
            row[f"{name}_tflops"] = flops / row[f"{name}_ms"] / 1e9
        except Exception as exc:  # noqa: BLE001 (a contender that fails: n/a with its message)
            row[f"{name}_note"] = f"{type(exc).__name__}: {exc}"[:300]
    if "fa_fp8_ms" in row:
        for other in ("fa_bf16", "cudnn_fp8"):
            if f"{other}_ms" in row:
                row[f"fa_fp8_over_{other}"] = row[f"{other}_ms"] / row["fa_fp8_ms"]
    return row


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default="bench/results/bench_fp8.json")
    ap.add_argument("--head-dims", default="64,128,256")
    ap.add_argument("--seqlens", default="512,1024,2048,4096,8192,16384")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    args = ap.parse_args(argv)
    rows = []
    for d in (int(x) for x in args.head_dims.split(",")):
        for causal in (False, True):
            for s in (int(x) for x in args.seqlens.split(",")):
                rows.append(cell(d, causal, s, args.warmup, args.iters))
                print(rows[-1], flush=True)
    doc = result_schema.document("bench_fp8", rows, args=vars(args), extra={"timing": "calls back to back"})
    result_schema.write(args.json, doc)
    f = lambda r, k: "n/a" if k not in r else f"{r[k]:.1f}"  # noqa: E731
    print(f"{'d':>4} {'causal':>6} {'seqlen':>6} {'fp8 TF/s':>9} {'bf16 TF/s':>9} {'cuDNN8 TF/s':>11} {'fp8 err':>8}")
    for r in rows:
        err = "n/a" if "fa_fp8_err" not in r else f"{r['fa_fp8_err']:.2e}"
        print(
            f"{r['head_dim']:>4} {str(r['causal']):>6} {r['seqlen']:>6} {f(r, 'fa_fp8_tflops'):>9} "
            f"{f(r, 'fa_bf16_tflops'):>9} {f(r, 'cudnn_fp8_tflops'):>11} {err:>8}"
        )


if __name__ == "__main__":
    main()
