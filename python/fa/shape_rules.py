"""The shape rules: every relation between the extents of a call's tensors, checked before anything is allocated
or launched.

The C library receives pointers and strides, never sizes: it checks each tensor's strides against the dims it is
told (include/fa/fa.h, "Extents"), but whether k really holds q's batch, or v as many keys as k, only the caller can
know. These rules are that caller's half, in plain Python over shapes (tuples of ints: a torch.Size is one), with no
torch and no GPU, so that CI tests them exhaustively (python/tests/test_shape_rules.py); the torch layer calls them
for every entry point. Each failure raises fa.InvalidArgument naming both tensors and both values, e.g.
"k: batch 1 does not match q's batch 4".

Shapes are the op-level views: fixed length q [B, Sq, Hq, D], k [B, Sk, Hkv, D], v [B, Sk, Hkv, Dv] (fa.attention
with layout="bhsd" transposes first); varlen q [Tq, Hq, D], k [Tk, Hkv, D], v [Tk, Hkv, Dv] with cu_seqlens [B + 1].
fa.prepare, fa.is_supported and fa.problem_key take fa.attention's arguments and its rule.
"""

from __future__ import annotations

from ._structs import FA_ERROR_INVALID_ARGUMENT, STATUS_NAMES
from .errors import InvalidArgument

BSHD = ("batch", "seqlen", "heads", "head dim")
THD = ("tokens", "heads", "head dim")
PAGED = ("pages", "page size", "heads", "head dim")


def fail(message: str):
    """Raises fa.InvalidArgument(FA_ERROR_INVALID_ARGUMENT) with `message`."""
    raise InvalidArgument(FA_ERROR_INVALID_ARGUMENT, STATUS_NAMES[FA_ERROR_INVALID_ARGUMENT], message)


def rank(name: str, shape, dims) -> None:
    """`shape` has len(dims) dims, named `dims`."""
    if len(shape) != len(dims):
        fail(f"{name}: expected {len(dims)} dims [{', '.join(dims)}], got shape {tuple(shape)}")


def match(name: str, what: str, value, other: str, other_what: str, other_value) -> None:
    """`name`'s `what` equals `other`'s `other_what`."""
    if value != other_value:
        fail(f"{name}: {what} {value} does not match {other}'s {other_what} {other_value}")


def match_dims(name: str, shape, other: str, other_shape, dims, at) -> None:
    """shape[i] == other_shape[i] for every i of `at` (named dims[i])."""
    for i in at:
        match(name, dims[i], shape[i], other, dims[i], other_shape[i])


def same_dtype(first, *others) -> None:
    """Every (name, dtype) of `others` has the dtype of `first` (name, dtype)."""
    for name, dtype in others:
        match(name, "dtype", dtype, first[0], "dtype", first[1])


def _heads(q: str, hq: int, k: str, hk: int) -> None:
    if hk < 1 or hq % hk != 0:
        fail(f"{q}: heads {hq} is not a multiple of {k}'s heads {hk}")


def _qkv(q, k, v, dims, names=("q", "k", "v")) -> None:
    """The relations of q, k, v laid out as `dims` (BSHD or THD): batch, keys, heads, head dims."""
    nq, nk, nv = names
    h, d = len(dims) - 2, len(dims) - 1
    if len(dims) == 4:
        match(nk, "batch", k[0], nq, "batch", q[0])
        match(nv, "batch", v[0], nq, "batch", q[0])
    match(nv, dims[h - 1], v[h - 1], nk, dims[h - 1], k[h - 1])
    _heads(nq, q[h], nk, k[h])
    match(nv, "heads", v[h], nk, "heads", k[h])
    match(nk, "head dim", k[d], nq, "head dim", q[d])


def alibi(slopes, heads_q: int) -> None:
    """alibi_slopes holds one float per query head."""
    n = 1
    for e in slopes:
        n *= e
    if n != heads_q:
        fail(f"alibi_slopes: size {n} (shape {tuple(slopes)}) does not match q's heads {heads_q}")


def sink_logits(shape, heads_q: int, name: str = "sinks", owner: str = "q") -> None:
    """`name` (attention sinks) holds one logit per query head of `owner`: shape (Hq,)."""
    if len(shape) != 1 or shape[0] != heads_q:
        fail(f"{name}: shape {tuple(shape)} does not match {owner}'s heads {heads_q} (expected ({heads_q},))")


def bias_broadcast(bias, target, owners) -> None:
    """bias broadcasts (torch rules: aligned right, each extent 1 or the target's) to `target` [B, Hq, Sq, Sk];
    owners[i] names where target[i] comes from ("q's batch", ...)."""
    if len(bias) > 4:
        fail(f"bias: expected at most 4 dims [batch, heads_q, seqlen_q, seqlen_k], got shape {tuple(bias)}")
    skip = 4 - len(bias)
    for i, e in enumerate(bias):
        t = target[skip + i]
        if e != 1 and e != t:
            fail(f"bias: extent {e} (dim {i} of shape {tuple(bias)}) does not broadcast to {owners[skip + i]} {t}")


def attention(
    q,
    k,
    v,
    *,
    bias=None,
    alibi_slopes=None,
    cu_seqlens_q=None,
    cu_seqlens_k=None,
    max_seqlen_q=None,
    max_seqlen_k=None,
    sinks=None,
) -> None:
    """fa.attention's forward (and fa.prepare / is_supported / problem_key): fixed length, or varlen when
    cu_seqlens are given (max_seqlen_q / max_seqlen_k: the host maxima, None when not known yet)."""
    if cu_seqlens_q is None and cu_seqlens_k is None:
        for name, t in (("q", q), ("k", k), ("v", v)):
            rank(name, t, BSHD)
        _qkv(q, k, v, BSHD)
        target, owners = (q[0], q[2], q[1], k[1]), ("q's batch", "q's heads", "q's seqlen", "k's seqlen")
    else:
        for name, t, other in (
            ("cu_seqlens_q", cu_seqlens_q, "cu_seqlens_k"),
            ("cu_seqlens_k", cu_seqlens_k, "cu_seqlens_q"),
        ):
            if t is None:
                fail(f"{name}: missing while {other} is given (varlen takes both)")
            rank(name, t, ("batch + 1",))
        for name, t in (("q", q), ("k", k), ("v", v)):
            rank(name, t, THD)
        if cu_seqlens_q[0] < 2:
            fail(f"cu_seqlens_q: length {cu_seqlens_q[0]}; expected batch + 1 >= 2 offsets")
        match("cu_seqlens_k", "length", cu_seqlens_k[0], "cu_seqlens_q", "length", cu_seqlens_q[0])
        _qkv(q, k, v, THD)
        for name, m, t, tn in (("max_seqlen_q", max_seqlen_q, q[0], "q"), ("max_seqlen_k", max_seqlen_k, k[0], "k")):
            if m is not None and m > t:
                fail(f"{name}: {m} exceeds {tn}'s tokens {t}")
        target = (cu_seqlens_q[0] - 1, q[1], max_seqlen_q, max_seqlen_k)
        owners = ("cu_seqlens_q's batch", "q's heads", "max_seqlen_q", "max_seqlen_k")
    if alibi_slopes is not None:
        alibi(alibi_slopes, target[1])
    if sinks is not None:
        sink_logits(sinks, target[1])
    if bias is not None and None not in target:
        bias_broadcast(bias, target, owners)


def attention_backward(dout, q, k, v, o, lse, **forward) -> None:
    """The backward of fa.attention: the forward's rule (its keyword arguments), o [.., Hq, Dv] as the forward
    writes it (q's batch / seqlen / heads, v's head dim), dout shaped as o, lse [B, Hq, Sq] (varlen [Hq, Tq])."""
    attention(q, k, v, **forward)
    varlen = forward.get("cu_seqlens_q") is not None
    dims = THD if varlen else BSHD
    rank("o", o, dims)
    match_dims("o", o, "q", q, dims, range(len(dims) - 1))
    match("o", "head dim", o[-1], "v", "head dim", v[-1])
    grad_output(dout, o, dims)
    lse_dims = ("heads", "tokens") if varlen else ("batch", "heads", "seqlen")
    rank("lse", lse, lse_dims)
    want = (q[1], q[0]) if varlen else (q[0], q[2], q[1])
    for i, what in enumerate(lse_dims):
        match("lse", what, lse[i], "q", what, want[i])


def grad_output(dout, o, dims=BSHD) -> None:
    """The gradient of o (dout) has o's shape."""
    if dout == o:  # the common case: one comparison (torch.Size against torch.Size)
        return
    rank("dout", dout, dims)
    match_dims("dout", dout, "o", o, dims, range(len(dims)))


def kvcache(q, k_cache, v_cache, *, cache_seqlens=None, block_table=None, alibi_slopes=None, sinks=None) -> None:
    """fa.attention_with_kvcache / prepare_kvcache: q [B, Sq, Hq, D] against a contiguous cache [B, S_cap, Hkv, D]
    (v_cache [.., Dv]) or, with block_table [B, max_pages], page pools [num_pages, page_size, Hkv, D]."""
    cache = BSHD if block_table is None else PAGED
    rank("q", q, BSHD)
    rank("k_cache", k_cache, cache)
    rank("v_cache", v_cache, cache)
    if block_table is None:
        match("k_cache", "batch", k_cache[0], "q", "batch", q[0])
    else:
        rank("block_table", block_table, ("batch", "max_pages"))
        match("block_table", "rows", block_table[0], "q", "batch", q[0])
    match_dims("v_cache", v_cache, "k_cache", k_cache, cache, range(3))
    _heads("q", q[2], "k_cache", k_cache[2])
    match("k_cache", "head dim", k_cache[3], "q", "head dim", q[3])
    if cache_seqlens is not None:
        rank("cache_seqlens", cache_seqlens, ("batch",))
        match("cache_seqlens", "length", cache_seqlens[0], "q", "batch", q[0])
    if alibi_slopes is not None:
        alibi(alibi_slopes, q[2])
    if sinks is not None:
        sink_logits(sinks, q[2])


def kv_scales(k_scale, v_scale, heads_kv: int) -> None:
    """fa.attention_with_kvcache's k_scale / v_scale (an fp8 cache's factors): each None (1), one factor (shape ()
    or (1,): per tensor) or one per KV head (shape (Hkv,), vLLM's per-head scales)."""
    for name, shape in (("k_scale", k_scale), ("v_scale", v_scale)):
        if shape is None:
            continue
        if len(shape) > 1:
            fail(f"{name}: expected shape (), (1,) or ({heads_kv},) (per tensor or per KV head), got {tuple(shape)}")
        if len(shape) == 1 and shape[0] not in (1, heads_kv):
            fail(f"{name}: {shape[0]} factors do not match k_cache's heads {heads_kv} (expected 1 or {heads_kv})")


def descales(descale_q, descale_k, descale_v, batch: int, heads_kv: int) -> None:
    """fa.attention's descale_q / descale_k / descale_v (fp8 q / k / v: FlashAttention 3's factors): each None (1),
    one factor (shape () or (1,): per tensor) or one per (batch, KV head) (shape (B, Hkv))."""
    for name, shape in (("descale_q", descale_q), ("descale_k", descale_k), ("descale_v", descale_v)):
        if shape is None or len(shape) == 0 or tuple(shape) == (1,):
            continue
        if len(shape) != 2:
            fail(
                f"{name}: expected shape (), (1,) or ({batch}, {heads_kv}) (per tensor or per (batch, KV head)), "
                f"got {tuple(shape)}"
            )
        match(name, "batch", shape[0], "q", "batch", batch)
        match(name, "heads", shape[1], "k", "heads", heads_kv)


def merge(outs, lses) -> None:
    """fa.merge_attention: n outputs [B, S, H, D] and n LSEs [B, H, S] of the same queries."""
    if len(outs) < 1:
        fail("outs: no tensors; expected at least one partial output")
    match("lses", "count", len(lses), "outs", "count", len(outs))
    first = outs[0]
    for i, (o, lse) in enumerate(zip(outs, lses)):
        rank(f"outs[{i}]", o, BSHD)
        match_dims(f"outs[{i}]", o, "outs[0]", first, BSHD, range(4))
        rank(f"lses[{i}]", lse, ("batch", "heads", "seqlen"))
        for j, what in ((0, "batch"), (1, "heads"), (2, "seqlen")):
            match(f"lses[{i}]", what, lse[j], "outs[0]", what, first[BSHD.index(what)])


def merge_parts(part_o, part_lse, out, lse_out=None) -> None:
    """fa_merge_partials' layout: part_o [n, B, H, S, D], part_lse [n, B, H, S], out [B, S, H, D], lse_out
    [B, H, S] (or None)."""
    parts = ("parts", "batch", "heads", "seqlen", "head dim")
    rank("part_o", part_o, parts)
    rank("part_lse", part_lse, parts[:4])
    match_dims("part_lse", part_lse, "part_o", part_o, parts, range(4))
    rank("out", out, BSHD)
    for what, j in (("batch", 1), ("seqlen", 3), ("heads", 2), ("head dim", 4)):
        match("out", what, out[BSHD.index(what)], "part_o", what, part_o[j])
    if lse_out is not None:
        rank("lse_out", lse_out, ("batch", "heads", "seqlen"))
        match_dims("lse_out", lse_out, "part_lse", part_lse[1:], parts[1:], range(3))


def ring(q, k, v, causal: bool) -> None:
    """fa.ring_attention: shards [B, S, H, D] of the same tokens of q, k and v (causal: two zigzag chunks)."""
    attention(q, k, v)
    match("k", "seqlen", k[1], "q", "seqlen", q[1])
    if causal and q[1] % 2 != 0:
        fail(f"q: seqlen {q[1]} is odd; a causal zigzag shard holds two chunks of equal length")
