#!/usr/bin/env python3
"""Model-level benchmark (issue 42): transformers models with random weights at Llama-3-8B and gpt-oss-20B layer
shapes (a few layers), attn_implementation "fa" (fa.integrations.transformers) against "sdpa" and "flex_attention"
in the same run, bf16:
  - prefill: batch 1 x 8192 tokens, no cache, logits of the last position only;
  - train: a training step (forward + backward of the loss) at batch 4 x 4096 tokens;
  - decode: one token for each of 8 sequences over a dynamic KV cache of 8192 keys (the step's new key cropped
    after each call, so every call sees the same cache).
Each (model, step) also runs with attention replaced by a no-op of the same output shape (its query, transposed:
no attention kernel, the projections and cache updates unchanged; in the training step the key / value projections'
backward is skipped too, which overstates the share a little): attn_share = 1 - noop time / time, the part of the
step that attention takes under each implementation. Times: the median of per-call CUDA-event times, calls back to
back after a warmup (bench_peers.event_times); each implementation's first calls (fa's kernels, FlexAttention's
compile) run before the timing. fa's prefill logits are checked against sdpa's (or flex's) in `max_diff`.

Models: llama3-8b (hidden 4096, 32 heads / 8 KV heads of 128, MLP 14336), gpt-oss-20b (hidden 2880, 64 / 8 heads of
64, sliding window 128 on every other layer, attention sinks, 32 experts of 2880, top 4); --layers of each (default
2), vocabulary 32768 (the real ones' 128k / 201k would make the LM head most of a two-layer model). gpt-oss has no
sdpa in transformers (sinks), and fa runs it once fa.attention takes sinks (fa.integrations.transformers.SINKS);
until then its fa cells are null with the reason in `errors`.

  FA_LIBRARY=build-dev/lib/libfa.so PYTHONPATH=python python3 bench/bench_models.py [--quick] [--layers 2] \
      [--models llama3-8b,gpt-oss-20b] [--impls fa,sdpa,flex_attention] [--json out.json]
--quick: 2k-token prefill, train at 2 x 1024, decode over 1024 keys, fewer iterations. The full run is sized to
finish in under 4 minutes on an H200.
"""

import argparse
import inspect
import re
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python"))
sys.path.insert(0, str(REPO / "bench"))

import torch  # noqa: E402

import fa.integrations.transformers as fa_hf  # noqa: E402
import result_schema  # noqa: E402
from bench_peers import event_times  # noqa: E402

IMPLS = ("fa", "sdpa", "flex_attention")
VOCAB = 32768
FULL = dict(prefill=8192, train_batch=4, train_len=4096, decode_batch=8, decode_ctx=8192, warmup=3, iters=10)
QUICK = dict(prefill=2048, train_batch=2, train_len=1024, decode_batch=8, decode_ctx=1024, warmup=2, iters=5)


# model -> (transformers config class, its layer shapes); every model: --layers layers, vocabulary VOCAB, no tying
SHAPES = {
    "llama3-8b": (
        "LlamaConfig",
        dict(
            hidden_size=4096,
            intermediate_size=14336,
            num_attention_heads=32,
            num_key_value_heads=8,
            head_dim=128,
            rope_theta=500000.0,
        ),
    ),
    "gpt-oss-20b": (
        "GptOssConfig",
        dict(
            hidden_size=2880,
            intermediate_size=2880,
            num_attention_heads=64,
            num_key_value_heads=8,
            head_dim=64,
            sliding_window=128,
            num_local_experts=32,
            num_experts_per_tok=4,
        ),
    ),
}
MODELS = tuple(SHAPES)


def config(name, layers):
    """The transformers config of model `name` with `layers` layers (gpt-oss: sliding and full layers alternate)."""
    import transformers

    cls, shape = SHAPES[name]
    cfg = getattr(transformers, cls)(
        vocab_size=VOCAB, num_hidden_layers=layers, max_position_embeddings=131072, tie_word_embeddings=False, **shape
    )
    if "sliding_window" in shape:
        cfg.layer_types = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(layers)]
    return cfg


def noop_attention(module, query, key, value, attention_mask, **kwargs):
    """No attention: the query as [B, Sq, Hq, D] (the output's shape where Dv == D)."""
    return query.transpose(1, 2), None


def register_noop():
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register("noop", noop_attention)
    AttentionMaskInterface.register("noop", lambda *args, **kwargs: None)


def steps(model, sizes):
    """name -> (fn, batch, tokens) of the three timed steps over `model` (inputs made once)."""
    from transformers import DynamicCache

    dev = "cuda"
    gen = torch.Generator(device=dev).manual_seed(0)
    ids_prefill = torch.randint(0, VOCAB, (1, sizes["prefill"]), device=dev, generator=gen)
    ids_train = torch.randint(0, VOCAB, (sizes["train_batch"], sizes["train_len"]), device=dev, generator=gen)
    ctx = torch.randint(0, VOCAB, (sizes["decode_batch"], sizes["decode_ctx"]), device=dev, generator=gen)
    token = torch.randint(0, VOCAB, (sizes["decode_batch"], 1), device=dev, generator=gen)
    state = {}
    # transformers 5.17 names the cache past_key_values, later ones cache
    cache_kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"

    def prefill():
        with torch.no_grad():
            return model(input_ids=ids_prefill, use_cache=False, logits_to_keep=1).logits

    def train():
        model.zero_grad(set_to_none=True)
        model(input_ids=ids_train, labels=ids_train, use_cache=False).loss.backward()

    def decode():
        if "cache" not in state:  # the context once per implementation (cache_for resets it)
            state["cache"] = DynamicCache(config=model.config)
            with torch.no_grad():
                model(input_ids=ctx, use_cache=True, logits_to_keep=1, **{cache_kw: state["cache"]})
        with torch.no_grad():
            model(input_ids=token, use_cache=True, logits_to_keep=1, **{cache_kw: state["cache"]})
        state["cache"].crop(-1)

    return (
        {
            "prefill": (prefill, 1, sizes["prefill"]),
            "train": (train, sizes["train_batch"], sizes["train_len"]),
            "decode": (decode, sizes["decode_batch"], sizes["decode_ctx"]),
        },
        state,
    )


def reason(exc: BaseException) -> str:
    """An exception as a row's error: its type and message, local paths left out (result files hold none)."""
    return re.sub(r"/(work|root|home|tmp)/\S*", "(path)", f"{type(exc).__name__}: {exc}")[:300]


def time_impl(model, impl, sizes):
    """{step: ms or an error string}, and fa's / the peer's prefill logits."""
    try:
        model.set_attn_implementation(impl)
    except Exception as exc:  # noqa: BLE001 -- e.g. gpt-oss has no sdpa in transformers
        return {s: reason(exc) for s in ("prefill", "train", "decode")}, None
    fns, state = steps(model, sizes)
    out, logits = {}, None
    for name, (fn, _b, _s) in fns.items():
        model.train(name == "train")
        state.clear()
        try:
            fn()  # first use: fa's kernels, FlexAttention's compile
            if name == "prefill":
                logits = fn().float()
            out[name] = statistics.median(event_times(fn, sizes["warmup"], sizes["iters"]))
        except Exception as exc:  # noqa: BLE001 -- a contender that cannot run this step: its reason, not a crash
            out[name] = reason(exc)
        state.clear()
        torch.cuda.empty_cache()
    return out, logits


def bench_model(name, impls, sizes, layers):
    torch.manual_seed(0)
    with torch.device("cuda"):
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_config(config(name, layers), dtype=torch.bfloat16)
    times, logits = {}, {}
    for impl in list(impls) + ["noop"]:
        t0 = time.time()
        times[impl], logits[impl] = time_impl(model, impl, sizes)
        print(f"  {name} {impl}: {time.time() - t0:.1f} s", file=sys.stderr, flush=True)
    ref = next((logits[i] for i in ("sdpa", "flex_attention") if logits.get(i) is not None), None)
    max_diff = None
    if ref is not None and logits.get("fa") is not None:
        max_diff = (logits["fa"] - ref).abs().max().item()
    rows = []
    for step, (b, s) in (
        ("prefill", (1, sizes["prefill"])),
        ("train", (sizes["train_batch"], sizes["train_len"])),
        ("decode", (sizes["decode_batch"], sizes["decode_ctx"])),
    ):
        row = dict(model=name, layers=layers, step=step, batch=b, seqlen=s, errors={})
        noop = times["noop"].get(step)
        row["noop_ms"] = noop if isinstance(noop, float) else None
        for impl in impls:
            t = times[impl].get(step)
            key = "flex" if impl == "flex_attention" else impl
            row[f"{key}_ms"] = t if isinstance(t, float) else None
            row[f"{key}_attn_share"] = 1.0 - noop / t if isinstance(t, float) and isinstance(noop, float) else None
            if isinstance(t, str):
                row["errors"][key] = t
        if step == "prefill":
            row["max_diff"] = max_diff
        rows.append(row)
    del model
    torch.cuda.empty_cache()
    return rows


def cell(v, fmt):
    return "n/a" if v is None else format(v, fmt)


def print_table(rows, impls):
    keys = ["flex" if i == "flex_attention" else i for i in impls]
    head = f"{'model':12} {'step':8} {'b x s':>10} " + " ".join(f"{k + ' ms':>9}" for k in keys)
    head += f" {'noop ms':>8} " + " ".join(f"{k + ' attn':>10}" for k in keys) + "  fa speedup vs best peer"
    print(head)
    for r in rows:
        peers = [r.get(f"{k}_ms") for k in keys if k != "fa" and r.get(f"{k}_ms") is not None]
        best = min(peers) if peers else None
        speed = f"{best / r['fa_ms']:.2f}x" if best and r.get("fa_ms") else "n/a"
        line = f"{r['model']:12} {r['step']:8} {str(r['batch']) + ' x ' + str(r['seqlen']):>10} "
        line += " ".join(f"{cell(r.get(f'{k}_ms'), '.2f'):>9}" for k in keys)
        line += f" {cell(r['noop_ms'], '.2f'):>8} "
        line += " ".join(f"{cell(r.get(f'{k}_attn_share'), '.0%'):>10}" for k in keys) + f"  {speed}"
        print(line)
    for r in rows:
        for k, msg in r["errors"].items():
            print(f"  {r['model']} {r['step']} {k}: {msg}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes and few iterations")
    ap.add_argument("--layers", type=int, default=2, help="decoder layers of each model (2-4)")
    ap.add_argument("--models", default=",".join(MODELS), help="comma list of " + ",".join(MODELS))
    ap.add_argument("--impls", default=",".join(IMPLS), help="comma list of " + ",".join(IMPLS))
    ap.add_argument("--json", default=None, help="write the rows to this file (bench/results/SCHEMA.md)")
    ap.add_argument("--out", default=None, help="a folder to write bench_models.json into")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("no GPU found: bench_models needs CUDA")
        return 0
    fa_hf.register()
    register_noop()
    sizes = QUICK if args.quick else FULL
    impls = [i for i in args.impls.split(",") if i]
    t0 = time.time()
    rows = []
    for name in args.models.split(","):
        rows += bench_model(name, impls, sizes, args.layers)
    print_table(rows, impls)
    print(f"wall time {time.time() - t0:.0f} s", file=sys.stderr)
    path = args.json or (str(Path(args.out) / "bench_models.json") if args.out else None)
    if path:
        notes = (
            f"bf16, random weights, {args.layers} layers, vocabulary {VOCAB}; attn_share = 1 - no-op time / time; "
            f"fa's sinks: {'yes' if fa_hf.SINKS else 'not yet (gpt-oss fa cells null)'}"
        )
        doc = result_schema.document("bench_models", rows, args=vars(args), notes=notes)
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        result_schema.write(path, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
