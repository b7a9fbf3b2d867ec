"""attn_implementation="fa" in real transformers models on a GPU (skipped without a GPU, the library or
transformers): tiny random configs (2 layers, hidden 256, GQA 8 / 2 heads of 64, sliding windows of 24 where the
family has them, Gemma 2's softcap) of each decoder family the installed transformers has, built once on the CPU
(same weights for every implementation):
  - prefill logits in bfloat16 against eager in float32 (the reference), with and without left / right padding: fa's
    max-abs and relative errors at most 1.5 times those of the peer at the same precision (sdpa; eager where the
    family needs softcap or sinks, which sdpa refuses), plus a small slack;
  - greedy generation (2 sequences, 6 tokens) with a dynamic cache (float32, bfloat16) and a static one
    (bfloat16), with and without left padding, token for token as eager at the same precision (the LM head in
    float32), on a seed whose eager top-2 margin stays above MARGIN at every step (asserted);
  - static-cache decode steps under torch.compile(fullgraph=True) (Llama; Gemma 2: sliding layers, softcap), float32:
    no graph break, eager fa's logits;
  - five AdamW steps under bfloat16 autocast, losses within 1 % (+ 0.01) of the peer's at every step.
gpt-oss (sinks): until fa.attention takes sinks (fa.integrations.transformers.SINKS), a forward raises
fa.NotSupported naming the alternatives; with sinks it runs the checks above against eager.
The SDPA drop-in's GPU tests are test_gpu_sdpa.py."""

import inspect
import os

import pytest

from conftest import cuda_reason
from transformers_support import FAMILIES, HAS_TRANSFORMERS, family_classes

REASON = cuda_reason() or (None if HAS_TRANSFORMERS else "transformers is not installed")
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")
if REASON is None:
    os.environ.setdefault("FA_TUNE_POLICY", "defaults")
    import torch

    import fa
    from fa.integrations import transformers as backend
    from transformers_support import tiny_model

    backend.register()

NAMES = [n for n in FAMILIES if REASON is None and family_classes(n) is not None]
SHAPE = dict(hidden=256, heads=8, kv_heads=2, head_dim=64, vocab=512)
WINDOW = 24  # the sliding window of the families that have one (a config of another family must not carry one:
# transformers' static cache would make its layers sliding while the model's masks stay full)
# eager's top-2 logit gap below which greedy decoding is a coin toss: float32 runs differ by ~1e-6, bfloat16 ones
# (their LM head in float32, so that logits are not rounded to bf16's 0.03 steps) by up to ~0.09 (sdpa's against
# eager's as much as fa's); about a fifth of the seeds keep 12 draws above 0.25
MARGIN = {"float32": 1e-3, "bfloat16": 0.25}
RUNS_SINKS = {"gpt_oss"}


def needs(name):
    if name in RUNS_SINKS and not backend.SINKS:
        pytest.skip("fa has no sinks yet: test_gpt_oss_without_sinks_fails_clearly")


def peer(name) -> str:
    """The implementation fa is held to: sdpa, or eager where sdpa refuses the family (softcap, sinks)."""
    return "eager" if name in ("gemma2", "gpt_oss") else "sdpa"


def model(name, attn, dtype, seed=0, float_head=False):
    """The family's test model (built on the CPU: the same weights for every implementation) on the GPU in `dtype`;
    float_head: the LM head in float32 (logits not rounded to `dtype`)."""
    extra = dict(SHAPE)
    if "sliding_window" in FAMILIES[name][3]:
        extra["sliding_window"] = WINDOW
    if name == "gemma2":
        extra["query_pre_attn_scalar"] = 64
    m = tiny_model(name, attn, dtype=torch.float32, seed=seed, **extra)
    with torch.no_grad():  # logits of std ~4: greedy decoding has margins to keep
        m.lm_head.weight.normal_(0.0, 0.25)
    m = m.to(device="cuda", dtype=dtype)
    if float_head:
        m.lm_head.float().register_forward_pre_hook(lambda _mod, args: (args[0].float(),))
    return m


PADS = {"left": (0, 37, 90), "right": (0, 29, 101)}


def batch(pad: str, length: int, b: int = 3, seed: int = 11):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, SHAPE["vocab"], (b, length), generator=g)
    mask = torch.ones(b, length, dtype=torch.long)
    for row, n in enumerate(PADS.get(pad, (0,) * b)[:b]):
        if n:
            if pad == "left":
                mask[row, :n] = 0
            else:
                mask[row, -n:] = 0
    return ids.masked_fill(mask == 0, 0).cuda(), mask.cuda()


def errors(x, ref):
    d = (x.double() - ref.double()).abs()
    return d.max().item(), (d.norm() / ref.double().norm()).item()


# Seen on the H200 (2026-11-29, transformers 5.17): gpt-oss's bf16 prefill with left padding, fa's relative logit
# error 4.7e-2 against eager-bf16's 2.7e-2 (both against eager in float32; no padding and right padding pass). Not
# yet explained (sinks with left-padded sliding-window layers is the suspect): expected to fail until it is.
GPT_OSS_LEFT = pytest.mark.xfail(reason="gpt-oss + left padding: 1.76x eager's logit error on the H200, open")


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("pad", ["none", pytest.param("left", id="left"), "right"])
def test_prefill_logits_against_eager(name, pad, request):
    if name == "gpt_oss" and pad == "left":
        request.applymarker(GPT_OSS_LEFT)
    needs(name)
    ids, mask = batch(pad, 160)
    real = mask.bool()
    with torch.no_grad():
        ref = model(name, "eager", torch.float32)(input_ids=ids, attention_mask=mask).logits[real]
        got = model(name, "fa", torch.bfloat16)(input_ids=ids, attention_mask=mask).logits[real]
        for other in (peer(name), "eager"):  # eager where the peer's padded rows gave NaN (SDPA's fully hidden rows)
            low = model(name, other, torch.bfloat16)(input_ids=ids, attention_mask=mask).logits[real]
            if torch.isfinite(low).all():
                break
    (fa_abs, fa_rel), (pe_abs, pe_rel) = errors(got, ref), errors(low, ref)
    slack = 1e-3 * ref.abs().max().item()
    assert fa_abs <= 1.5 * pe_abs + slack, f"max-abs: fa {fa_abs:.3e} vs {other} {pe_abs:.3e}"
    assert fa_rel <= 1.5 * pe_rel + 1e-4, f"relative: fa {fa_rel:.3e} vs {other} {pe_rel:.3e}"


GEN = dict(max_new_tokens=6, do_sample=False, output_scores=True, return_dict_in_generate=True, pad_token_id=0)
GEN["disable_compile"] = True  # the static cache runs eagerly here; test_compiled_static_decode compiles it
SEEDS: dict = {}


def min_margin(scores) -> float:
    top = torch.stack([s.float().topk(2, dim=-1).values for s in scores])  # [steps, B, 2]
    return (top[..., 0] - top[..., 1]).min().item()


def eager_run(name, dtype, ids, mask, extra):
    """(seed, eager's output): the first of 32 seeds (the last one found first) whose eager greedy run keeps its
    top-2 margin above MARGIN[dtype] at every step of every sequence."""
    found = SEEDS.get((name, dtype))
    best = (-1.0, None)
    for seed in ([found] if found is not None else []) + [s for s in range(32) if s != found]:
        m = model(name, "eager", getattr(torch, dtype), seed, float_head=True)
        out = m.generate(input_ids=ids, attention_mask=mask, **GEN, **extra)
        margin = min_margin(out.scores)
        if margin > MARGIN[dtype]:
            SEEDS[(name, dtype)] = seed
            return seed, out
        best = max(best, (margin, seed))
    raise AssertionError(f"eager's top-2 margin falls to {best[0]:.3g} (seed {best[1]}), under {MARGIN[dtype]}")


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("pad", ["none", "left"])
@pytest.mark.parametrize("case", ["float32-dynamic", "bfloat16-dynamic", "bfloat16-static"])
def test_greedy_generation_as_eager(name, pad, case):
    needs(name)
    dtype, cache = case.split("-")
    ids, mask = batch(pad, 120, b=2)
    extra = {"cache_implementation": "static"} if cache == "static" else {}
    seed, want = eager_run(name, dtype, ids, mask, extra)
    m = model(name, "fa", getattr(torch, dtype), seed, float_head=True)
    got = m.generate(input_ids=ids, attention_mask=mask, **GEN, **extra)
    assert torch.equal(got.sequences, want.sequences), f"seed {seed}: fa's tokens differ from eager's"


@pytest.mark.parametrize("name", [n for n in ("llama", "gemma2") if n in NAMES])
def test_compiled_static_decode(name):
    from transformers import StaticCache

    torch._dynamo.reset()
    m = model(name, "fa", torch.float32)  # float32: inductor's own rounding stays far below the tolerance
    ids = batch("none", 64, b=2)[0]
    key = "cache" if "cache" in inspect.signature(m.forward).parameters else "past_key_values"
    step = torch.compile(m.forward, fullgraph=True)
    outs = []
    for run in (m.forward, step):
        cache = StaticCache(config=m.config, max_cache_len=96)
        with torch.no_grad():
            token = m(input_ids=ids, use_cache=True, **{key: cache}).logits[:, -1:].argmax(-1)
            logits = []
            for _ in range(4):
                out = run(input_ids=token, use_cache=True, **{key: cache}).logits
                logits.append(out)
                token = out[:, -1:].argmax(-1)
        outs.append(torch.cat(logits, 1))
    torch.testing.assert_close(outs[1], outs[0], atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize("name", NAMES)
def test_training_losses_as_peer(name):
    needs(name)
    ids, mask = batch("right", 128, b=4)
    labels = ids.masked_fill(mask == 0, -100)
    curves = {}
    for attn in ("fa", peer(name)):
        m = model(name, attn, torch.float32).train()
        opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
        curves[attn] = []
        for _ in range(5):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = m(input_ids=ids, attention_mask=mask, labels=labels).loss
            loss.backward()
            opt.step()
            opt.zero_grad()
            curves[attn].append(loss.item())
    a, b = curves["fa"], curves[peer(name)]
    assert all(abs(x - y) <= 0.01 * abs(y) + 0.01 for x, y in zip(a, b)), f"fa {a} vs {peer(name)} {b}"
    assert a[-1] < a[0], f"fa's loss did not fall: {a}"


@pytest.mark.skipif(REASON is not None or family_classes("gpt_oss") is None, reason="no gpt-oss in transformers")
def test_gpt_oss_without_sinks_fails_clearly():
    if backend.SINKS:
        pytest.skip("fa has sinks: the other tests run gpt-oss")
    ids, mask = batch("none", 32)
    with pytest.raises(fa.NotSupported, match="s_aux: attention sinks .* not supported by this fa yet"):
        model("gpt_oss", "fa", torch.bfloat16)(input_ids=ids, attention_mask=mask)
