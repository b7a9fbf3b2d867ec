"""fa.shape_rules without torch or a GPU: for each entry point a valid call passes, and every single-field
perturbation of each relation (batch, keys, heads, head dims, bias, ALiBi, cu_seqlens, o / dout / lse, the KV cache's
batch, pages, block table and used lengths, the merge's parts) raises fa.InvalidArgument whose message names both
tensors and both values; random shapes over fixed seeds, and the cases of issue 40 word for word."""

import os
import random
import re
import subprocess
import sys

import pytest

import fa
from conftest import PYTHON_DIR
from fa import shape_rules as R

SEEDS = range(60)


def raises(call) -> fa.InvalidArgument:
    with pytest.raises(fa.InvalidArgument) as info:
        call()
    err = info.value
    assert err.status == 100 and err.name == "FA_ERROR_INVALID_ARGUMENT" and isinstance(err, ValueError)
    assert str(err).startswith("FA_ERROR_INVALID_ARGUMENT: ") and err.message in str(err)
    return err


def mentions(message: str, word) -> bool:
    """`word` (a name or a value) stands alone in `message` (not inside another name or number)."""
    return re.search(rf"(?<![\w.]){re.escape(str(word))}(?![\w])", message) is not None


def expect(call, name, value, other, other_value) -> str:
    """call raises InvalidArgument starting with `name: `, naming `other` and both values."""
    msg = raises(call).message
    assert msg.startswith(f"{name}: "), msg
    for word in (other, value, other_value):
        assert mentions(msg, word), f"{word!r} not in {msg!r}"
    return msg


def other_than(rng, *avoid, lo=1, hi=None) -> int:
    hi = hi or max(8, *avoid) + 8
    return rng.choice([x for x in range(lo, hi) if x not in avoid])


def put(shape, dim, value) -> tuple:
    s = list(shape)
    s[dim] = value
    return tuple(s)


def broadcast_of(rng, target) -> tuple:
    """A shape that broadcasts to `target` (rank 0..4, each extent 1 or the target's)."""
    r = rng.randint(0, 4)
    return tuple(rng.choice((1, t)) for t in target[4 - r :])


# ---- the forward, fixed length ---------------------------------------------------------------------------------------
def fixed_case(rng):
    B, Sq, Sk = rng.randint(1, 6), rng.randint(1, 300), rng.randint(0, 300)
    hk = rng.choice((1, 2, 3, 4, 8))
    hq = hk * rng.randint(1, 4)
    d, dv = rng.choice((32, 64, 128, 256)), rng.choice((32, 64, 128, 512))
    case = {"q": (B, Sq, hq, d), "k": (B, Sk, hk, d), "v": (B, Sk, hk, dv)}
    case["bias"] = broadcast_of(rng, (B, hq, Sq, Sk)) if rng.random() < 0.5 else None
    case["alibi_slopes"] = (hq,) if rng.random() < 0.5 else None
    case["sinks"] = (hq,) if rng.random() < 0.5 else None
    return case


def run_fixed(c):
    R.attention(c["q"], c["k"], c["v"], bias=c["bias"], alibi_slopes=c["alibi_slopes"], sinks=c.get("sinks"))


def fixed_perturbations(rng, c):
    """(changed case, name, value, other, other value) for each relation of a fixed-length forward."""
    q, k, v = c["q"], c["k"], c["v"]
    B, Sq, hq, d = q
    Sk, hk = k[1], k[2]
    out = []
    nb = other_than(rng, B)
    out += [(dict(c, k=put(k, 0, nb)), "k", nb, "q", B), (dict(c, v=put(v, 0, nb)), "v", nb, "q", B)]
    if c["bias"] is None or len(c["bias"]) < 4 or c["bias"][0] == 1:  # q's batch moves k's and v's too
        out.append((dict(c, q=put(q, 0, nb)), "k", B, "q", nb))
    nk = other_than(rng, Sk, lo=0)
    out.append((dict(c, v=put(v, 1, nk)), "v", nk, "k", Sk))
    if hk > 1:
        nh = rng.choice([x for x in range(1, 80) if x % hk])
        out.append((dict(c, q=put(q, 2, nh), alibi_slopes=None, bias=None, sinks=None), "q", nh, "k", hk))
    nh = hq + rng.randint(1, 5)  # never a divisor of hq
    out.append((dict(c, k=put(k, 2, nh)), "q", hq, "k", nh))
    nh = other_than(rng, hk)
    out.append((dict(c, v=put(v, 2, nh)), "v", nh, "k", hk))
    nd = other_than(rng, d, hi=600)
    out += [(dict(c, k=put(k, 3, nd)), "k", nd, "q", d), (dict(c, q=put(q, 3, nd)), "k", d, "q", nd)]
    if c["alibi_slopes"] is not None:
        n = other_than(rng, hq)
        out.append((dict(c, alibi_slopes=(n,)), "alibi_slopes", n, "q", hq))
    if c["sinks"] is not None:
        n = other_than(rng, hq)
        out.append((dict(c, sinks=(n,)), "sinks", n, "q", hq))
        out.append((dict(c, sinks=(hq, 1)), "sinks", (hq, 1), "q", hq))
    if c["bias"]:
        out.append(bias_perturbation(rng, c, (B, hq, Sq, Sk), ("q", "q", "q", "k")))
    return out


def bias_perturbation(rng, c, target, owners):
    """One dim of c's bias made to broadcast to neither 1 nor target's extent (owners[i] names target[i]'s
    tensor or argument)."""
    bias = c["bias"]
    i = rng.randrange(len(bias))
    j = 4 - len(bias) + i
    n = other_than(rng, 1, target[j], lo=0)
    return dict(c, bias=put(bias, i, n)), "bias", n, owners[j], target[j]


@pytest.mark.parametrize("seed", SEEDS)
def test_attention_fixed(seed):
    rng = random.Random(seed)
    c = fixed_case(rng)
    run_fixed(c)
    R.attention(c["q"], c["k"], put(c["v"], 3, other_than(rng, c["v"][3])))  # v's head dim is its own
    for changed, *want in fixed_perturbations(rng, c):
        expect(lambda: run_fixed(changed), *want)


@pytest.mark.parametrize("seed", SEEDS[:20])
def test_attention_every_single_field(seed):
    """Every field of q, k, v changed alone: q's seqlen, v's head dim and q's heads over one KV head are free; any
    other change raises an error naming the changed tensor and its new value."""
    rng = random.Random(seed)
    c = dict(fixed_case(rng), bias=None, alibi_slopes=None, sinks=None)
    hk = c["k"][2]
    free = {("q", 1), ("v", 3)} | ({("q", 2)} if hk == 1 else set())
    for name in ("q", "k", "v"):
        for dim in range(4):
            if (name, dim) == ("q", 2) and hk > 1:
                new = rng.choice([x for x in range(1, 80) if x % hk])
            else:
                new = other_than(rng, c[name][dim])
            changed = dict(c, **{name: put(c[name], dim, new)})
            if (name, dim) in free:
                run_fixed(changed)
                continue
            msg = raises(lambda: run_fixed(changed)).message
            assert mentions(msg, name) and mentions(msg, new), msg


def test_ranks_name_the_tensor():
    for name, shape in (("q", (2, 16, 64)), ("k", (2, 16, 4, 64, 1)), ("v", ())):
        shapes = {"q": (2, 16, 4, 64), "k": (2, 16, 4, 64), "v": (2, 16, 4, 64), name: shape}
        msg = raises(lambda: R.attention(shapes["q"], shapes["k"], shapes["v"])).message
        assert msg.startswith(f"{name}: expected 4 dims [batch, seqlen, heads, head dim]") and str(shape) in msg
    msg = raises(lambda: R.attention((2, 4, 4, 8), (2, 4, 4, 8), (2, 4, 4, 8), bias=(1, 1, 1, 4, 4))).message
    assert msg.startswith("bias: expected at most 4 dims")


# ---- the forward, varlen -------------------------------------------------------------------------------------------
def varlen_case(rng):
    B = rng.randint(1, 6)
    tq, tk = rng.randint(1, 900), rng.randint(0, 900)
    hk = rng.choice((1, 2, 4))
    hq = hk * rng.randint(1, 3)
    d, dv = rng.choice((64, 128)), rng.choice((64, 128))
    mq, mk = rng.randint(1, tq), rng.randint(0, tk)
    return {
        "q": (tq, hq, d),
        "k": (tk, hk, d),
        "v": (tk, hk, dv),
        "cu_seqlens_q": (B + 1,),
        "cu_seqlens_k": (B + 1,),
        "max_seqlen_q": mq,
        "max_seqlen_k": mk,
        "bias": broadcast_of(rng, (B, hq, mq, mk)) if rng.random() < 0.5 else None,
        "alibi_slopes": (hq,) if rng.random() < 0.5 else None,
    }


def run_varlen(c):
    R.attention(
        c["q"],
        c["k"],
        c["v"],
        **{n: c[n] for n in ("bias", "alibi_slopes", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k")},
    )


def varlen_perturbations(rng, c):
    """(changed case, name, value, other, other value) for each relation of a varlen forward."""
    q, k, v = c["q"], c["k"], c["v"]
    tk, hk = k[0], k[1]
    n1 = c["cu_seqlens_q"][0]
    n = other_than(rng, n1, lo=2)
    out = [(dict(c, cu_seqlens_k=(n,)), "cu_seqlens_k", n, "cu_seqlens_q", n1)]
    if c["bias"] is None or len(c["bias"]) < 4 or c["bias"][0] == 1:
        out.append((dict(c, cu_seqlens_q=(n,)), "cu_seqlens_k", n1, "cu_seqlens_q", n))
    nt = other_than(rng, tk, lo=0)
    out.append((dict(c, v=put(v, 0, nt)), "v", nt, "k", tk))
    nh = other_than(rng, hk)
    out.append((dict(c, v=put(v, 1, nh)), "v", nh, "k", hk))
    nd = other_than(rng, q[2], hi=300)
    out.append((dict(c, k=put(k, 2, nd)), "k", nd, "q", q[2]))
    nh = q[1] + rng.randint(1, 4)
    out.append((dict(c, k=put(k, 1, nh), v=put(v, 1, nh)), "q", q[1], "k", nh))
    m = q[0] + rng.randint(1, 50)
    out.append((dict(c, max_seqlen_q=m), "max_seqlen_q", m, "q", q[0]))
    m = k[0] + rng.randint(1, 50)
    out.append((dict(c, max_seqlen_k=m), "max_seqlen_k", m, "k", k[0]))
    if c["alibi_slopes"] is not None:
        m = other_than(rng, q[1])
        out.append((dict(c, alibi_slopes=(m,)), "alibi_slopes", m, "q", q[1]))
    if c["bias"]:
        out.append(
            bias_perturbation(
                rng,
                c,
                (n1 - 1, q[1], c["max_seqlen_q"], c["max_seqlen_k"]),
                ("cu_seqlens_q", "q", "max_seqlen_q", "max_seqlen_k"),
            )
        )
    return out


@pytest.mark.parametrize("seed", SEEDS)
def test_attention_varlen(seed):
    rng = random.Random(seed)
    c = varlen_case(rng)
    run_varlen(c)
    run_varlen(dict(c, max_seqlen_q=None, max_seqlen_k=None))  # maxima not known yet: the rest is checked
    for changed, *want in varlen_perturbations(rng, c):
        expect(lambda: run_varlen(changed), *want)


def test_varlen_offsets():
    q, k = (10, 4, 64), (12, 4, 64)
    msg = raises(lambda: R.attention(q, k, k, cu_seqlens_q=(3,))).message
    assert msg.startswith("cu_seqlens_k: missing") and mentions(msg, "cu_seqlens_q")
    msg = raises(lambda: R.attention(q, k, k, cu_seqlens_k=(3,))).message
    assert msg.startswith("cu_seqlens_q: missing") and mentions(msg, "cu_seqlens_k")
    msg = raises(lambda: R.attention(q, k, k, cu_seqlens_q=(1,), cu_seqlens_k=(1,))).message
    assert msg.startswith("cu_seqlens_q: length 1; expected batch + 1 >= 2")
    msg = raises(lambda: R.attention(q, k, k, cu_seqlens_q=(3, 1), cu_seqlens_k=(3,))).message
    assert msg.startswith("cu_seqlens_q: expected 1 dims")
    msg = raises(lambda: R.attention((2, 5, 4, 64), k, k, cu_seqlens_q=(3,), cu_seqlens_k=(3,))).message
    assert msg.startswith("q: expected 3 dims [tokens, heads, head dim]")


# ---- the backward --------------------------------------------------------------------------------------------------
FORWARD_ARGS = ("bias", "alibi_slopes", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k")


def backward_case(rng, varlen):
    """A forward case with the backward's dout, o and lse."""
    c = varlen_case(rng) if varlen else fixed_case(rng)
    q, v = c["q"], c["v"]
    c["o"] = c["dout"] = q[:-1] + (v[-1],)
    c["lse"] = (q[1], q[0]) if varlen else (q[0], q[2], q[1])
    return c


def run_backward(c):
    R.attention_backward(
        c["dout"], c["q"], c["k"], c["v"], c["o"], c["lse"], **{n: c[n] for n in FORWARD_ARGS if n in c}
    )


def backward_perturbations(rng, c):
    """(changed case, name, value, other, other value) for each relation of the backward's own tensors."""
    q, v, o, lse = c["q"], c["v"], c["o"], c["lse"]
    out = []
    for i in range(len(o)):
        n = other_than(rng, o[i], hi=600)
        other, other_value = ("v", v[-1]) if i == len(o) - 1 else ("q", q[i])
        out.append((dict(c, o=put(o, i, n), dout=put(o, i, n)), "o", n, other, other_value))
        out.append((dict(c, dout=put(o, i, n)), "dout", n, "o", o[i]))
    for i in range(len(lse)):
        n = other_than(rng, lse[i])
        out.append((dict(c, lse=put(lse, i, n)), "lse", n, "q", lse[i]))
    return out


@pytest.mark.parametrize("seed", SEEDS[:30])
def test_attention_backward(seed):
    rng = random.Random(seed)
    c = backward_case(rng, varlen=seed % 2 == 1)
    run_backward(c)
    dims = R.THD if len(c["q"]) == 3 else R.BSHD
    for changed, *want in backward_perturbations(rng, c):
        msg = expect(lambda: run_backward(changed), *want)
        if want[0] == "dout":
            assert any(d in msg for d in dims), msg
    raises(lambda: run_backward(dict(c, lse=c["lse"] + (1,))))


def test_grad_output():
    R.grad_output((2, 3, 4, 8), (2, 3, 4, 8))
    assert "seqlen 5" in expect(lambda: R.grad_output((2, 5, 4, 8), (2, 3, 4, 8)), "dout", 5, "o", 3)
    raises(lambda: R.grad_output((2, 3, 4), (2, 3, 4, 8)))


# ---- the KV cache --------------------------------------------------------------------------------------------------
def kv_case(rng, paged):
    B, Sq = rng.randint(1, 8), rng.randint(1, 16)
    hk = rng.choice((1, 2, 4, 8))
    hq = hk * rng.randint(1, 8)
    d, dv = rng.choice((64, 128, 576)), rng.choice((64, 128, 512))
    c = {
        "q": (B, Sq, hq, d),
        "cache_seqlens": (B,) if rng.random() < 0.7 else None,
        "alibi_slopes": (hq,) if rng.random() < 0.3 else None,
        "sinks": (hq,) if rng.random() < 0.3 else None,
    }
    if paged:
        pages, page = rng.randint(1, 64), rng.choice((1, 16, 64, 256))
        c.update(k_cache=(pages, page, hk, d), v_cache=(pages, page, hk, dv), block_table=(B, rng.randint(1, 9)))
    else:
        cap = rng.randint(1, 4096)
        c.update(k_cache=(B, cap, hk, d), v_cache=(B, cap, hk, dv), block_table=None)
    return c


def run_kv(c):
    R.kvcache(
        c["q"],
        c["k_cache"],
        c["v_cache"],
        cache_seqlens=c["cache_seqlens"],
        block_table=c["block_table"],
        alibi_slopes=c["alibi_slopes"],
        sinks=c.get("sinks"),
    )


def kv_perturbations(rng, c):
    """(changed case, name, value, other, other value) for each relation of a KV-cache call."""
    q, kc, vc = c["q"], c["k_cache"], c["v_cache"]
    B, hq, d = q[0], q[2], q[3]
    nb = other_than(rng, B)
    if c["block_table"] is not None:
        bt = c["block_table"]
        out = [
            (dict(c, block_table=put(bt, 0, nb)), "block_table", nb, "q", B),
            (dict(c, q=put(q, 0, nb), cache_seqlens=None), "block_table", B, "q", nb),
        ]
    else:
        out = [
            (dict(c, k_cache=put(kc, 0, nb), v_cache=put(vc, 0, nb)), "k_cache", nb, "q", B),
            (dict(c, q=put(q, 0, nb), cache_seqlens=None), "k_cache", B, "q", nb),
        ]
    for i in range(3):
        n = other_than(rng, vc[i])
        out.append((dict(c, v_cache=put(vc, i, n)), "v_cache", n, "k_cache", kc[i]))
    nd = other_than(rng, d, hi=600)
    out += [(dict(c, k_cache=put(kc, 3, nd)), "k_cache", nd, "q", d), (dict(c, q=put(q, 3, nd)), "k_cache", d, "q", nd)]
    nh = hq + rng.randint(1, 5)
    out.append((dict(c, k_cache=put(kc, 2, nh), v_cache=put(vc, 2, nh)), "q", hq, "k_cache", nh))
    if c["cache_seqlens"] is not None:
        out.append((dict(c, cache_seqlens=(nb,)), "cache_seqlens", nb, "q", B))
    if c["alibi_slopes"] is not None:
        n = other_than(rng, hq)
        out.append((dict(c, alibi_slopes=(n,)), "alibi_slopes", n, "q", hq))
    if c["sinks"] is not None:
        n = other_than(rng, hq)
        out.append((dict(c, sinks=(n,)), "sinks", n, "q", hq))
    return out


@pytest.mark.parametrize("paged", [False, True])
@pytest.mark.parametrize("seed", SEEDS[:40])
def test_kvcache(seed, paged):
    rng = random.Random(seed)
    c = kv_case(rng, paged)
    run_kv(c)
    run_kv(dict(c, v_cache=put(c["v_cache"], 3, other_than(rng, c["v_cache"][3]))))  # v's head dim is its own
    for changed, *want in kv_perturbations(rng, c):
        expect(lambda: run_kv(changed), *want)
    msg = raises(lambda: run_kv(dict(c, k_cache=c["k_cache"][:3]))).message
    assert msg.startswith("k_cache: expected 4 dims")


@pytest.mark.parametrize("heads_kv", [1, 2, 8])
def test_kv_scales(heads_kv):
    """An fp8 cache's k_scale / v_scale: None, one factor, or one per KV head; anything else names the scale."""
    for shape in (None, (), (1,), (heads_kv,)):
        R.kv_scales(shape, shape, heads_kv)
    bad = heads_kv + 3
    m = raises(lambda: R.kv_scales((bad,), None, heads_kv)).message
    assert m == f"k_scale: {bad} factors do not match k_cache's heads {heads_kv} (expected 1 or {heads_kv})", m
    m = raises(lambda: R.kv_scales(None, (2, heads_kv), heads_kv)).message
    assert m.startswith("v_scale: expected shape (), (1,) or") and "got (2," in m, m
    m = raises(lambda: R.kv_scales((1,), (bad,), heads_kv)).message
    assert m.startswith("v_scale:"), m


@pytest.mark.parametrize("batch,heads_kv", [(1, 1), (3, 2), (8, 8)])
def test_descales(batch, heads_kv):
    """fp8 inputs' descale_q / k / v: None, one factor, or one per (batch, KV head); anything else names the
    descale and the dim it breaks."""
    for shape in (None, (), (1,), (batch, heads_kv)):
        R.descales(shape, shape, shape, batch, heads_kv)
    m = raises(lambda: R.descales((batch + 1, heads_kv), None, None, batch, heads_kv)).message
    assert m == f"descale_q: batch {batch + 1} does not match q's batch {batch}", m
    m = raises(lambda: R.descales(None, (batch, heads_kv + 2), None, batch, heads_kv)).message
    assert m == f"descale_k: heads {heads_kv + 2} does not match k's heads {heads_kv}", m
    m = raises(lambda: R.descales(None, None, (heads_kv,) if heads_kv > 1 else (2,), batch, heads_kv)).message
    assert m.startswith("descale_v: expected shape (), (1,) or") and "got (" in m, m


# ---- merge and ring ------------------------------------------------------------------------------------------------
def merge_case(rng):
    n = rng.randint(2, 5)
    B, S, H, D = rng.randint(1, 4), rng.randint(1, 300), rng.randint(1, 16), rng.choice((64, 128))
    return {"outs": [(B, S, H, D)] * n, "lses": [(B, H, S)] * n}


def run_merge(c):
    R.merge(c["outs"], c["lses"])


def merge_perturbations(rng, c):
    """(changed case, name, value, other, other value) for each relation of fa.merge_attention."""
    outs, lses = c["outs"], c["lses"]
    n = len(outs)
    i = rng.randrange(1, n)
    out = []
    for j in range(4):
        x = other_than(rng, outs[i][j])
        out.append(
            (dict(c, outs=outs[:i] + [put(outs[i], j, x)] + outs[i + 1 :]), f"outs[{i}]", x, "outs[0]", outs[0][j])
        )
    i = rng.randrange(n)
    for j in range(3):
        x = other_than(rng, lses[i][j])
        out.append(
            (dict(c, lses=lses[:i] + [put(lses[i], j, x)] + lses[i + 1 :]), f"lses[{i}]", x, "outs[0]", lses[i][j])
        )
    out.append((dict(c, lses=lses + lses[:1]), "lses", n + 1, "outs", n))
    return out


@pytest.mark.parametrize("seed", SEEDS[:30])
def test_merge(seed):
    rng = random.Random(seed)
    c = merge_case(rng)
    run_merge(c)
    R.merge(c["outs"][:1], c["lses"][:1])
    for changed, *want in merge_perturbations(rng, c):
        msg = expect(lambda: run_merge(changed), *want)
        if want[0] != "lses":
            assert any(d in msg for d in R.BSHD), msg
    assert raises(lambda: R.merge([], [])).message.startswith("outs: no tensors")


@pytest.mark.parametrize("seed", SEEDS[:20])
def test_merge_parts(seed):
    rng = random.Random(seed)
    n, B, H, S, D = rng.randint(1, 4), rng.randint(1, 4), rng.randint(1, 8), rng.randint(1, 100), 64
    po, pl, out, lo = (n, B, H, S, D), (n, B, H, S), (B, S, H, D), (B, H, S)
    R.merge_parts(po, pl, out, lo)
    R.merge_parts(po, pl, out, None)
    for j in range(4):
        x = other_than(rng, pl[j])
        expect(lambda: R.merge_parts(po, put(pl, j, x), out, lo), "part_lse", x, "part_o", po[j])
    for j, pj in enumerate((1, 3, 2, 4)):
        x = other_than(rng, out[j], hi=200)
        expect(lambda: R.merge_parts(po, pl, put(out, j, x), lo), "out", x, "part_o", po[pj])
    for j in range(3):
        x = other_than(rng, lo[j])
        expect(lambda: R.merge_parts(po, pl, out, put(lo, j, x)), "lse_out", x, "part_lse", pl[j + 1])


def test_ring():
    q = (2, 64, 8, 64)
    R.ring(q, (2, 64, 2, 64), (2, 64, 2, 32), True)
    R.ring((2, 63, 8, 64), (2, 63, 8, 64), (2, 63, 8, 64), False)
    expect(lambda: R.ring(q, (2, 32, 8, 64), (2, 32, 8, 64), False), "k", 32, "q", 64)
    expect(lambda: R.ring(q, (1, 64, 8, 64), (1, 64, 8, 64), False), "k", 1, "q", 2)
    msg = raises(lambda: R.ring((2, 63, 8, 64), (2, 63, 8, 64), (2, 63, 8, 64), True)).message
    assert msg.startswith("q: seqlen 63 is odd")


def test_same_dtype():
    R.same_dtype(("q", "float16"), ("k", "float16"), ("v", "float16"))
    expect(lambda: R.same_dtype(("q", "float16"), ("k", "float16"), ("v", "float32")), "v", "float32", "q", "float16")


# ---- issue 40's cases, word for word ---------------------------------------------------------------------------------
def test_issue_40_cases():
    def msg(call):
        return raises(call).message

    q = (4, 128, 8, 128)
    kv1 = (1, 128, 8, 128)
    assert msg(lambda: R.attention(q, kv1, kv1)) == "k: batch 1 does not match q's batch 4"

    def back():
        return R.attention_backward(q, q, kv1, kv1, q, (4, 8, 128))

    assert msg(back) == "k: batch 1 does not match q's batch 4"
    q1 = (1, 128, 8, 128)
    assert (
        msg(lambda: R.attention(q1, (1, 4096, 8, 128), (1, 16, 8, 128)))
        == "v: seqlen 16 does not match k's seqlen 4096"
    )
    assert msg(lambda: R.attention(q1, (1, 128, 8, 128), (1, 128, 1, 128))) == "v: heads 1 does not match k's heads 8"
    assert (
        msg(lambda: R.attention(q1, (1, 128, 8, 64), (1, 128, 8, 64)))
        == "k: head dim 64 does not match q's head dim 128"
    )
    assert (
        msg(lambda: R.kvcache((2, 1, 8, 128), (2, 4096, 8, 64), (2, 4096, 8, 64)))
        == "k_cache: head dim 64 does not match q's head dim 128"
    )


def test_rules_import_no_torch():
    """The rules are plain Python: importing them pulls in neither torch nor the library."""
    code = "import sys, fa.shape_rules\nprint('torch' in sys.modules, fa._lib._lib is not None)"
    env = dict(os.environ, FA_NO_TORCH="1", PYTHONPATH=str(PYTHON_DIR))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False"]
