"""fa.sdpa_rules without torch or a GPU: the mask fa runs for torch's top-left causal equals torch's, pair by pair,
over every small (L, S); each reason to run torch's SDPA is given for exactly the calls it covers (a valid call with
one field changed); GQA, head dims, scales and leading dims over exhaustive small grids; the bias' layout."""

import itertools
import math

import pytest

from fa import sdpa_rules as R

Q, K, V = (2, 4, 5, 64), (2, 4, 7, 64), (2, 4, 7, 32)
F16 = ("float16",) * 3


def fa_visible(sq: int, sk: int, causal: bool, window, i: int, j: int) -> bool:
    """fa.h's masks (bottom-right aligned) over sq queries and sk keys, as fa.attention's causal / window say."""
    if j >= sk:
        return False
    left, right = window
    if causal and (left, right) in ((-1, -1), (-1, 0)):
        return j <= i + sk - sq
    if causal:
        right = 0
    lo = -math.inf if left == -1 else i + sk - sq - left
    hi = math.inf if right == -1 else i + sk - sq + right
    return lo <= j <= hi


@pytest.mark.parametrize("seqlen_q", range(1, 9))
def test_causal_is_top_left(seqlen_q):
    for seqlen_k in range(1, 9):
        p = R.plan((1, 2, seqlen_q, 8), (1, 2, seqlen_k, 8), (1, 2, seqlen_k, 8), is_causal=True)
        assert p.fallback is None and p.keys <= seqlen_k
        for w in p.window:
            assert w >= -1  # fa's convention: >= 0 or -1 (unbounded)
        for i, j in itertools.product(range(seqlen_q), range(seqlen_k)):
            got = j < p.keys and fa_visible(seqlen_q, p.keys, p.causal, p.window, i, j)
            assert got == (j <= i), (seqlen_q, seqlen_k, i, j, p)


def test_causal_mapping_by_case():
    assert R.causal_mapping(5, 5) == (5, True, (-1, -1))
    assert R.causal_mapping(3, 7) == (3, True, (-1, -1))  # keys past L are seen by no query: cut
    assert R.causal_mapping(7, 3) == (3, False, (-1, 4))  # a window whose right edge is L - S
    p = R.plan(Q, K, V)
    assert (p.keys, p.causal, p.window) == (7, False, (-1, -1))  # not causal: every key, no mask


def valid():
    return dict(
        q=Q,
        k=K,
        v=V,
        dtypes=F16,
        device="cuda",
        mask=(2, 1, 5, 7),
        mask_strides=(56, 56, 8, 1),
        mask_dtype="bool",
        mask_requires_grad=False,
        dropout_p=0.0,
        is_causal=False,
        scale=None,
        enable_gqa=False,
    )


def plan_of(**kw):
    args = valid()
    args.update(kw)
    return R.plan(args.pop("q"), args.pop("k"), args.pop("v"), **args)


CHANGES = [
    (R.DROPOUT, dict(dropout_p=0.1)),
    (R.CAUSAL_AND_MASK, dict(is_causal=True)),
    (R.DEVICE, dict(device="cpu")),
    (R.DEVICE, dict(device="mixed")),
    (R.DTYPE, dict(dtypes=("float32",) * 3)),
    (R.DTYPE, dict(dtypes=("float16", "bfloat16", "float16"))),
    (R.DTYPE, dict(dtypes=("float16", "float16", "float64"))),
    (R.RANK, dict(q=(5, 64), k=(7, 64), v=(7, 32), mask=None)),
    (R.LEADING, dict(k=(1, 4, 7, 64), v=(1, 4, 7, 32))),
    (R.LEADING, dict(q=(1, 2, 4, 5, 64))),
    (R.HEADS, dict(k=(2, 2, 7, 64), v=(2, 2, 7, 32))),
    (R.HEADS, dict(k=(2, 1, 7, 64), v=(2, 1, 7, 32))),
    (R.SHAPES, dict(k=(2, 4, 7, 32))),
    (R.SHAPES, dict(v=(2, 4, 6, 32))),
    (R.EMPTY, dict(q=(2, 4, 0, 64), mask=None)),
    (R.EMPTY, dict(k=(2, 4, 0, 64), v=(2, 4, 0, 32), mask=None)),
    (R.HEAD_DIM, dict(q=(2, 4, 5, 60), k=(2, 4, 7, 60))),
    (R.HEAD_DIM, dict(v=(2, 4, 7, 264))),
    (R.SCALE, dict(scale=0.0)),
    (R.SCALE, dict(scale=-0.5)),
    (R.SCALE, dict(scale=float("nan"))),
    (R.SCALE, dict(scale=float("inf"))),
    (R.MASK_DTYPE, dict(mask_dtype="int64")),
    (R.MASK_DTYPE, dict(mask_dtype="bfloat16")),
    (R.MASK_SHAPE, dict(mask=(3, 1, 5, 7))),
    (R.MASK_SHAPE, dict(mask=(5, 6))),
    (R.MASK_SHAPE, dict(mask=(1, 2, 1, 5, 7))),
    (R.MASK_SHAPE, dict(mask=(7,))),
    (R.MASK_SHAPE, dict(mask=(1,))),
    (R.MASK_SHAPE, dict(mask=())),
    (R.MASK_GRAD, dict(mask_dtype="float16", mask_requires_grad=True)),
]


def test_valid_call_runs_in_fa():
    p = plan_of()
    assert p.fallback is None and p.bias == "bool" and p.batch == 2 and p.keys == 7 and not p.causal


@pytest.mark.parametrize("reason,change", CHANGES, ids=[f"{i}" for i in range(len(CHANGES))])
def test_each_reason_to_fall_back(reason, change):
    p = plan_of(**change)
    assert p.fallback == reason, (change, p)


def test_reasons_are_distinct_and_said():
    reasons = {r for r, _ in CHANGES}
    assert len(reasons) == 14 and all(isinstance(r, str) and r for r in reasons)


def test_a_bool_mask_needs_no_grad_rule():
    assert plan_of(mask_requires_grad=True).fallback is None  # a boolean mask never has a gradient to give


@pytest.mark.parametrize("enable_gqa", [False, True])
def test_heads_exhaustive(enable_gqa):
    for hq, hk, hv in itertools.product(range(1, 7), repeat=3):
        p = R.plan((1, hq, 3, 16), (1, hk, 4, 16), (1, hv, 4, 16), enable_gqa=enable_gqa)
        want = hq == hk == hv or (enable_gqa and hk == hv and hq % hk == 0)
        assert (p.fallback is None) == want, (hq, hk, hv, enable_gqa, p)
        if not want:
            assert p.fallback == R.HEADS


def test_head_dims_exhaustive():
    for d in range(1, 300):
        p = R.plan((1, 1, 3, d), (1, 1, 4, d), (1, 1, 4, 64))
        assert (p.fallback is None) == (d % 8 == 0 and d <= 256), d
        pv = R.plan((1, 1, 3, 64), (1, 1, 4, 64), (1, 1, 4, d))
        assert (pv.fallback is None) == (d % 8 == 0 and d <= 256), d


def test_scales():
    for s in (None, 1e-3, 0.125, 1.0, 30.0):
        p = R.plan(Q, K, V, scale=s)
        assert p.fallback is None and p.scale == s


@pytest.mark.parametrize("lead", [(), (3,), (2, 3), (2, 1, 3)])
def test_leading_dims_flatten_into_the_batch(lead):
    q, k, v = lead + (4, 5, 64), lead + (4, 7, 64), lead + (4, 7, 64)
    p = R.plan(q, k, v, is_causal=True)
    assert p.fallback is None and p.batch == math.prod(lead) and p.keys == 5 and p.causal


def broadcasts_by_indexing(mask, target) -> bool:
    """An independent statement of torch's broadcasting: every target index maps onto a mask index by taking 0
    where the mask's extent is 1, and the mask's extents are all reached."""
    if len(mask) > len(target):
        return False
    full = (1,) * (len(target) - len(mask)) + tuple(mask)
    reached = [set() for _ in full]
    for idx in itertools.product(*(range(t) for t in target)):
        for d, (m, i) in enumerate(zip(full, idx)):
            if m != 1 and i >= m:
                return False
            reached[d].add(0 if m == 1 else i)
    return all(len(r) == m for r, m in zip(reached, full))


def test_mask_broadcast_exhaustive():
    target = (2, 3, 2, 4)
    extents = (1, 2, 3, 4)
    for rank in range(0, 5):
        for mask in itertools.product(extents, repeat=rank):
            assert R.mask_broadcasts(mask, target) == broadcasts_by_indexing(mask, target), mask
    assert not R.mask_broadcasts((1, 1, 2, 3, 2, 4), target)


def test_mask_dtypes():
    assert plan_of(mask_dtype="float16").bias == "additive"
    assert plan_of(mask_dtype="float32").bias == "additive"
    assert plan_of(dtypes=("bfloat16",) * 3, mask_dtype="bfloat16").bias == "additive"
    assert plan_of(dtypes=("bfloat16",) * 3, mask_dtype="float16").fallback == R.MASK_DTYPE


@pytest.mark.parametrize("seqlen_k", range(1, 20))
def test_bias_storage(seqlen_k):
    for lead in ((), (3,), (2, 3)):
        target = lead + (4, 5, seqlen_k)
        batch = math.prod(lead)
        for mask in ((1, seqlen_k), (5, 1), (4, 1, 1), (4, 5, seqlen_k), target, (1,) * len(target)):
            if not R.mask_broadcasts(mask, target):
                continue
            b, h, lq, row = R.bias_storage(mask, target, batch)
            full = (1,) * (len(target) - len(mask)) + mask
            assert b == (batch if any(e != 1 for e in full[:-3]) else 1)
            assert (h, lq) == full[-3:-1]
            assert row % R.BIAS_ROW_ALIGN == 0 and seqlen_k <= row < seqlen_k + R.BIAS_ROW_ALIGN


def test_bias_direct():
    t = (2, 4, 5, 16)
    assert R.bias_direct((2, 4, 5, 16), (320, 80, 16, 1), t, "float16", "float16")
    assert R.bias_direct((5, 16), (16, 1), t, "float16", "float16")
    assert R.bias_direct((1, 16), (3, 1), t, "float16", "float16")  # the extent-1 dim's stride is never read
    assert not R.bias_direct((5, 16), (16, 1), t, "float32", "float16")  # dtype
    assert not R.bias_direct((5, 1), (1, 1), t, "float16", "float16")  # keys broadcast
    assert not R.bias_direct((5, 16), (32, 2), t, "float16", "float16")  # keys not contiguous
    assert not R.bias_direct((5, 16), (20, 1), t, "float16", "float16")  # rows not 16-byte multiples
    assert not R.bias_direct((1, 2, 4, 5, 16), (0, 320, 80, 16, 1), (1,) + t, "float16", "float16")  # rank 5
    p = plan_of(mask=(2, 4, 5, 7), mask_strides=(280, 70, 14, 1), mask_dtype="float16")
    assert not p.bias_direct and p.bias_shape == (2, 4, 5, 8)
    p = plan_of(mask=(2, 4, 5, 8), mask_strides=(160, 40, 8, 1), mask_dtype="float16", k=(2, 4, 8, 64), v=(2, 4, 8, 32))
    assert p.bias_direct and p.bias_shape is None
    p = plan_of(mask=(2, 4, 5, 8), mask_strides=(160, 40, 8, 1), k=(2, 4, 8, 64), v=(2, 4, 8, 32))
    assert p.bias == "bool" and not p.bias_direct and p.bias_shape == (2, 4, 5, 8)  # bool: always 0 / -inf
