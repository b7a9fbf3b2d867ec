"""fa.attention_with_kvcache against the float32 reference: contiguous and paged caches (every page size checked
bit for bit against the contiguous result), used lengths including 0 and 1, GQA, masks; split vs unsplit; a CUDA
graph that replays with new cache lengths and block tables; torch.compile without graph breaks; fp8 caches (e4m3 / e5m2
with per-tensor and per-head k_scale / v_scale) against the reference over the dequantized cache, and their rules."""

import os

import pytest

from conftest import cuda_reason

REASON = cuda_reason()
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")
if REASON is None:
    os.environ.setdefault("FA_TUNE_POLICY", "defaults")
    import torch

    import fa
    from attention_ref import attention_ref


def reference(q, k_cache, v_cache, seqlens, causal=False, window=(-1, -1), softcap=0.0):
    """Per sequence: the reference over the used keys of a contiguous cache."""
    outs, lses = [], []
    for b in range(q.shape[0]):
        n = int(seqlens[b])
        o, lse = attention_ref(
            q[b : b + 1], k_cache[b : b + 1, :n], v_cache[b : b + 1, :n], causal=causal, window=window, softcap=softcap
        )
        outs.append(o)
        lses.append(lse)
    return torch.cat(outs), torch.cat(lses)


def to_pages(k_cache, page_size, generator):
    """A pool of pages holding the contiguous cache in a random page order (plus NaN-filled spare pages that no
    table entry names), and the block table."""
    b, cap, h, d = k_cache.shape
    per_seq = cap // page_size
    n = b * per_seq
    spare = 3
    perm = torch.randperm(n + spare, generator=generator)[:n]
    pool = torch.full((n + spare, page_size, h, d), float("nan"), dtype=k_cache.dtype, device=k_cache.device)
    pool[perm.to(k_cache.device)] = k_cache.reshape(n, page_size, h, d)
    table = perm.reshape(b, per_seq).to(torch.int32).to(k_cache.device)
    return pool, table


def check_close(o, ref_o, lse, ref_lse, tol):
    assert not torch.isnan(o).any(), "NaN in o"
    err = (o.float() - ref_o).abs().max().item()
    assert err <= tol, f"max |o - ref| = {err} > {tol}"
    fin = torch.isfinite(ref_lse)
    assert torch.equal(fin, torch.isfinite(lse)), "lse -inf pattern differs"
    if fin.any():
        assert (lse[fin] - ref_lse[fin]).abs().max().item() <= 1e-3


@pytest.mark.parametrize("dtype_name", ["float16", "bfloat16"])
@pytest.mark.parametrize("causal", [False, True])
def test_decode_contiguous_and_paged(dtype_name, causal):
    dtype = getattr(torch, dtype_name)
    torch.manual_seed(7)
    g = torch.Generator().manual_seed(7)
    B, Sq, Hq, Hkv, D, cap = 3, 2, 8, 2, 128, 512
    q = torch.randn(B, Sq, Hq, D, device="cuda", dtype=dtype)
    k = torch.randn(B, cap, Hkv, D, device="cuda", dtype=dtype)
    v = torch.randn(B, cap, Hkv, D, device="cuda", dtype=dtype)
    seqlens = torch.tensor([0, 1, 389], dtype=torch.int32, device="cuda")
    ref_o, ref_lse = reference(q, k, v, seqlens.tolist(), causal=causal)
    o, lse = fa.attention_with_kvcache(q, k, v, cache_seqlens=seqlens, causal=causal, return_lse=True, num_splits=1)
    check_close(o, ref_o, lse, ref_lse, 2e-2)
    assert torch.equal(o[0], torch.zeros_like(o[0])), "no used keys: o = 0"
    assert torch.isneginf(lse[0]).all(), "no used keys: lse = -inf"
    for page_size in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512):
        pk, table = to_pages(k, page_size, g)
        pv = torch.empty_like(pk)
        pv[table.flatten().long()] = v.reshape(-1, page_size, Hkv, D)
        op, lsep = fa.attention_with_kvcache(
            q, pk, pv, cache_seqlens=seqlens, block_table=table, causal=causal, return_lse=True, num_splits=1
        )
        assert torch.equal(op, o), f"paged (page {page_size}) differs from contiguous"
        assert torch.equal(lsep.nan_to_num(), lse.nan_to_num()), f"paged lse (page {page_size}) differs"


def test_split_matches_unsplit():
    torch.manual_seed(3)
    B, Hq, Hkv, D, cap = 2, 32, 8, 128, 8192
    q = torch.randn(B, 1, Hq, D, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(B, cap, Hkv, D, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(B, cap, Hkv, D, device="cuda", dtype=torch.bfloat16)
    seqlens = torch.tensor([8000, 777], dtype=torch.int32, device="cuda")
    ref_o, ref_lse = reference(q, k, v, seqlens.tolist())
    o1, l1 = fa.attention_with_kvcache(q, k, v, cache_seqlens=seqlens, num_splits=1, return_lse=True)
    for splits in (0, 2, 7, 16):
        o, lse = fa.attention_with_kvcache(q, k, v, cache_seqlens=seqlens, num_splits=splits, return_lse=True)
        check_close(o, ref_o, lse, ref_lse, 1e-2)
        assert (o.float() - o1.float()).abs().max().item() <= 1e-2


def test_graph_replays_with_new_lengths_and_tables():
    torch.manual_seed(11)
    g = torch.Generator().manual_seed(11)
    B, Hq, Hkv, D, page, pages_per_seq = 4, 16, 4, 128, 16, 64
    cap = page * pages_per_seq
    q = torch.randn(B, 1, Hq, D, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(B, cap, Hkv, D, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(B, cap, Hkv, D, device="cuda", dtype=torch.bfloat16)
    pk, table = to_pages(k, page, g)
    pv = torch.empty_like(pk)
    seqlens = torch.full((B,), cap, dtype=torch.int32, device="cuda")
    fa.prepare_kvcache(q, pk, pv, cache_seqlens=seqlens, block_table=table)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        with torch.cuda.graph(graph, stream=stream):
            out = fa.attention_with_kvcache(q, pk, pv, cache_seqlens=seqlens, block_table=table)
    torch.cuda.current_stream().wait_stream(stream)
    for step in range(4):
        lens = torch.randint(0, cap + 1, (B,), generator=g)
        lens[0] = step  # 0, 1, 2, 3 keys
        k.normal_()
        v.normal_()
        npk, ntable = to_pages(k, page, g)
        npv = torch.empty_like(npk)
        npv[ntable.flatten().long()] = v.reshape(-1, page, Hkv, D)
        pk.copy_(npk)
        pv.copy_(npv)
        table.copy_(ntable)
        seqlens.copy_(lens.to(torch.int32))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        ref_o, _ = reference(q, k, v, lens.tolist())
        assert not torch.isnan(out).any()
        assert (out.float() - ref_o).abs().max().item() <= 2e-2, f"replay {step}"


def test_compile_has_no_graph_breaks():
    torch.manual_seed(5)
    q = torch.randn(2, 1, 8, 64, device="cuda", dtype=torch.float16)
    k = torch.randn(2, 300, 2, 64, device="cuda", dtype=torch.float16)
    v = torch.randn(2, 300, 2, 64, device="cuda", dtype=torch.float16)
    lens = torch.tensor([300, 5], dtype=torch.int32, device="cuda")

    def step(q, k, v, lens):
        return fa.attention_with_kvcache(q, k, v, cache_seqlens=lens) * 2

    compiled = torch.compile(step, fullgraph=True, dynamic=True)
    ref_o, _ = reference(q, k, v, lens.tolist())
    assert (compiled(q, k, v, lens).float() - 2 * ref_o).abs().max().item() <= 4e-2


# ---- an fp8 cache (e4m3 / e5m2 with k_scale / v_scale, sm_89+) ----------------------------------------------------
FP8_NAMES = ["float8_e4m3fn", "float8_e5m2"]


def quantize(x, dtype, scale):
    """x / scale rounded to the fp8 dtype (clamped to its largest value first, as a quantizer does: torch's cast
    itself does not saturate), and its dequantized value code * scale in float32; scale [Hkv] or a float."""
    s = scale if isinstance(scale, float) else scale.view(1, 1, -1, 1)
    top = torch.finfo(dtype).max
    codes = (x.float() / s).clamp(-top, top).to(dtype)
    return codes, codes.float() * s


def fp8_pages(cache, page_size, generator):
    """to_pages for an fp8 cache, through its bytes (spare pages hold NaN codes 0x7F)."""
    b, cap, h, d = cache.shape
    per_seq = cap // page_size
    n = b * per_seq
    spare = 3
    perm = torch.randperm(n + spare, generator=generator)[:n]
    pool = torch.full((n + spare, page_size, h, d), 0x7F, dtype=torch.uint8, device=cache.device)
    pool[perm.to(cache.device)] = cache.view(torch.uint8).reshape(n, page_size, h, d)
    table = perm.reshape(b, per_seq).to(torch.int32).to(cache.device)
    return pool.view(cache.dtype), table


def fp8_capable():
    return torch.cuda.get_device_capability() >= (8, 9)


@pytest.mark.parametrize("kv_name", FP8_NAMES)
@pytest.mark.parametrize("dtype_name", ["float16", "bfloat16"])
@pytest.mark.parametrize("per_head", [False, True])
def test_fp8_cache_decode(kv_name, dtype_name, per_head):
    if not fp8_capable():
        pytest.skip("fp8 needs sm_89 or newer")
    kv_dtype, dtype = getattr(torch, kv_name), getattr(torch, dtype_name)
    torch.manual_seed(11)
    g = torch.Generator().manual_seed(11)
    B, Sq, Hq, Hkv, D, cap = 3, 1, 32, 8, 128, 1024
    q = torch.randn(B, Sq, Hq, D, device="cuda", dtype=dtype)
    if per_head:
        k_scale = torch.rand(Hkv, device="cuda") * 0.1 + 0.01
        v_scale = torch.rand(Hkv, device="cuda") * 0.1 + 0.01
    else:
        k_scale, v_scale = 0.05, 0.02
    k8, k_deq = quantize(torch.randn(B, cap, Hkv, D, device="cuda"), kv_dtype, k_scale)
    v8, v_deq = quantize(torch.randn(B, cap, Hkv, D, device="cuda"), kv_dtype, v_scale)
    seqlens = torch.tensor([0, 1, 1000], dtype=torch.int32, device="cuda")
    ref_o, ref_lse = reference(q.float(), k_deq, v_deq, seqlens.tolist())
    kw = dict(cache_seqlens=seqlens, k_scale=k_scale, v_scale=v_scale, return_lse=True)
    for splits in (1, 0, 3):
        o, lse = fa.attention_with_kvcache(q, k8, v8, num_splits=splits, **kw)
        assert o.dtype == dtype
        check_close(o, ref_o, lse, ref_lse, 2e-2)
        assert torch.equal(o[0], torch.zeros_like(o[0])), "no used keys: o = 0"
        for page_size in (16, 64):
            pk, table = fp8_pages(k8, page_size, g)
            pv = torch.empty_like(pk.view(torch.uint8))
            pv[table.flatten().long()] = v8.view(torch.uint8).reshape(-1, page_size, Hkv, D)
            op, lsep = fa.attention_with_kvcache(q, pk, pv.view(kv_dtype), block_table=table, num_splits=splits, **kw)
            assert torch.equal(op, o), f"paged {page_size} differs from contiguous at splits {splits}"
            assert torch.equal(lsep, lse)


def test_fp8_cache_argument_rules():
    q = torch.randn(2, 1, 8, 64, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(2, 32, 2, 64, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(fa.InvalidArgument, match="k_scale: given, but k_cache is torch.bfloat16"):
        fa.attention_with_kvcache(q, k, k, k_scale=0.5)
    k8 = k.to(torch.float8_e4m3fn)
    with pytest.raises(fa.InvalidArgument, match="v_scale: 3 factors do not match k_cache's heads 2"):
        fa.attention_with_kvcache(q, k8, k8, v_scale=torch.ones(3, device="cuda"))
    with pytest.raises(fa.InvalidArgument, match="q: dtype torch.float32 over an fp8 cache"):
        fa.attention_with_kvcache(q.float(), k8, k8)
    with pytest.raises(fa.InvalidArgument, match="v_cache: dtype"):
        fa.attention_with_kvcache(q, k8, k.to(torch.float8_e5m2))
    if not fp8_capable():
        with pytest.raises(fa.NotSupported, match="sm_"):
            fa.attention_with_kvcache(q, k8, k8)


def test_fp8_cache_prepare_is_supported_and_key():
    """fa.prepare / fa.is_supported / fa.problem_key take the fp8 cache's arguments (k_scale / v_scale, used lengths,
    a block table): the key names the fp8 cache, and a prepared call then gives the unprepared call's result."""
    if not fp8_capable():
        pytest.skip("fp8 needs sm_89 or newer")
    torch.manual_seed(5)
    B, Hq, Hkv, D, cap = 2, 16, 4, 128, 512
    q = torch.randn(B, 1, Hq, D, device="cuda", dtype=torch.bfloat16)
    k_scale = torch.rand(Hkv, device="cuda") * 0.1 + 0.01
    k8, _ = quantize(torch.randn(B, cap, Hkv, D, device="cuda"), torch.float8_e4m3fn, k_scale)
    v8, _ = quantize(torch.randn(B, cap, Hkv, D, device="cuda"), torch.float8_e4m3fn, 0.05)
    seqlens = torch.tensor([100, 500], dtype=torch.int32, device="cuda")
    kw = dict(cache_seqlens=seqlens, k_scale=k_scale, v_scale=0.05)
    key = fa.problem_key(q, k8, v8, **kw)
    assert "kv_e4m3" in key and key != fa.problem_key(q, q, q), key
    assert fa.is_supported(q, k8, v8, **kw)
    no = fa.is_supported(q, k8, v8, cache_seqlens=seqlens, v_scale=torch.ones(3, device="cuda"))
    assert not no and "v_scale: 3 factors do not match k_cache's heads 4" in no.reason
    want = fa.attention_with_kvcache(q, k8, v8, **kw)
    fa.prepare(q, k8, v8, **kw)
    assert torch.equal(fa.attention_with_kvcache(q, k8, v8, **kw), want)
    pk, table = fp8_pages(k8, 64, torch.Generator().manual_seed(3))
    paged = fa.problem_key(q, pk, pk, block_table=table, **kw)
    assert "kv_e4m3" in paged, paged
    fa.prepare(q, pk, pk, block_table=table, **kw)
