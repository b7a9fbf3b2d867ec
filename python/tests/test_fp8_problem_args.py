"""fa.prepare / fa.is_supported / fa.problem_key over fp8 without a GPU: they take the arguments of the fp8 forward
(descale_q / descale_k / descale_v, out_dtype) and of the fp8-cache decode (k_scale / v_scale, cache_seqlens,
block_table), and refuse bad ones with fa.InvalidArgument naming the argument, the expected and the actual value,
before any device check (CPU tensors). With the library, the fa_params they build (the devices check bypassed: CPU
addresses are never dereferenced by validation) carry the dtypes, the descales' and scales' pointers and strides,
and reach fp8 kernel keys (the context compiles for $FA_ARCH, sm_90 by default, without a GPU)."""

import pytest

from conftest import HAS_TORCH, LIB_REASON

pytestmark = pytest.mark.skipif(not HAS_TORCH, reason="PyTorch is not installed")
if HAS_TORCH:
    import torch

    import fa
    from fa import _structs as S

    FP8 = getattr(torch, "float8_e4m3fn", None)


def tensors(dtype, b=1, s=8, h=2, d=64):
    return torch.zeros(b, s, h, d, dtype=dtype)


@pytest.fixture
def x8():
    if FP8 is None:
        pytest.skip("this torch has no float8_e4m3fn")
    return tensors(FP8)


def expect_invalid(fn, *needles):
    with pytest.raises(fa.InvalidArgument) as info:
        fn()
    msg = str(info.value)
    for needle in needles:
        assert needle in msg, msg
    return msg


def test_fp8_inputs_bad_arguments(x8):
    msg = expect_invalid(
        lambda: fa.problem_key(x8, x8, x8, out_dtype=torch.float32),
        "out_dtype: torch.float32",
        "expected torch.bfloat16",
    )
    assert "torch.float16" in msg
    expect_invalid(lambda: fa.prepare(x8, x8, x8, backward=True), "backward: True", "expected None or False")
    expect_invalid(lambda: fa.problem_key(x8, x8, x8, k_scale=1.0), "k_scale: given with fp8 q", "expected None")
    expect_invalid(lambda: fa.problem_key(x8, x8, x8.to(torch.float8_e5m2)), "dtype")
    no = fa.is_supported(x8, x8, x8, sinks=torch.zeros(2))
    assert not no and "sinks: given with fp8 q" in no.reason and "expected None" in no.reason
    no = fa.is_supported(x8, x8, x8, bias=torch.zeros(1, 2, 8, 8))
    assert not no and "no bias" in no.reason
    with pytest.raises(TypeError, match="unexpected keyword arguments \\['bogus'\\]"):
        fa.problem_key(x8, x8, x8, bogus=1)


def test_fp8_cache_bad_arguments(x8):
    xb = tensors(torch.bfloat16)
    expect_invalid(
        lambda: fa.problem_key(xb, x8, x8, descale_q=1.0), "descale_q: given, but q is torch.bfloat16", "expected None"
    )
    expect_invalid(
        lambda: fa.problem_key(xb, x8, x8, out_dtype=torch.float16),
        "out_dtype: torch.float16 with q of torch.bfloat16",
    )
    expect_invalid(
        lambda: fa.problem_key(xb, xb, xb, k_scale=1.0),
        "k_scale: given, but k_cache is torch.bfloat16",
        "expected None",
    )
    expect_invalid(
        lambda: fa.prepare(tensors(torch.float32), x8, x8, k_scale=1.0), "q: dtype torch.float32 over an fp8 cache"
    )
    expect_invalid(lambda: fa.problem_key(xb, x8, x8, k_scale=torch.ones(3)), "k_scale")
    expect_invalid(lambda: fa.prepare(xb, x8, x8, backward=True), "backward: True", "fp8 attention is inference only")
    with pytest.raises(TypeError, match="layout"):
        fa.problem_key(xb, x8, x8, layout="bhsd")  # the cache takes attention_with_kvcache's arguments


def test_sixteen_bit_calls_refuse_fp8_arguments():
    xb = tensors(torch.bfloat16)
    expect_invalid(lambda: fa.problem_key(xb, xb, xb, descale_v=torch.ones(1)), "descale_v: given, but q is")
    no = fa.is_supported(xb, xb, xb, out_dtype=torch.float16)
    assert not no and "out_dtype: torch.float16 with q of torch.bfloat16" in no.reason


@pytest.fixture
def on_cpu(monkeypatch):
    """The devices check bypassed and device 0's context used, so CPU tensors' params reach the library."""
    if LIB_REASON is not None:
        pytest.skip(LIB_REASON)
    import fa._fp8
    import fa._kvcache
    import fa._tensor_params
    import fa._torch_ops

    for module in (fa._fp8, fa._kvcache, fa._tensor_params):
        monkeypatch.setattr(module, "check_devices", lambda *a, **k: None)
    monkeypatch.setattr(fa._torch_ops, "device_index", lambda device: 0)
    return fa._torch_ops


def test_fp8_inputs_params_and_keys(x8, on_cpu):
    dk = torch.ones(1, 2)
    p, keep, _ = on_cpu._any_problem(x8, x8, x8, {"descale_q": 0.5, "descale_k": dk, "out_dtype": torch.float16})
    assert p.dtype == S.FA_DTYPE_E4M3 and p.o_dtype == S.FA_DTYPE_FP16
    assert p.descale_q and p.descale_q_stride_batch == 0 and p.descale_q_stride_head == 0
    assert p.descale_k == dk.data_ptr() and (p.descale_k_stride_batch, p.descale_k_stride_head) == (2, 1)
    assert not p.descale_v
    del keep
    e4 = fa.problem_key(x8, x8, x8, causal=True)
    e5 = fa.problem_key(x8.to(torch.float8_e5m2), x8.to(torch.float8_e5m2), x8.to(torch.float8_e5m2), causal=True)
    fp16_out = fa.problem_key(x8, x8, x8, causal=True, out_dtype=torch.float16)
    assert "e4m3" in e4 and "e5m2" in e5 and "o_bf16" in e4 and "o_fp16" in fp16_out, (e4, e5, fp16_out)
    assert "fwd_wgmma" in e4, e4
    assert fa.is_supported(x8, x8, x8, descale_q=torch.ones(1, 2), causal=True)


def test_fp8_cache_params_and_keys(x8, on_cpu):
    q = tensors(torch.bfloat16, s=1, h=4)
    k = tensors(FP8, s=64, h=2)
    ks, vs = torch.ones(2), torch.full((1,), 0.5)
    p, keep, _ = on_cpu._any_problem(q, k, k, {"k_scale": ks, "v_scale": vs, "cache_seqlens": 40})
    assert p.dtype == S.FA_DTYPE_BF16 and p.kv_dtype == S.FA_DTYPE_E4M3 and p.o_dtype == 0
    assert p.k_scale == ks.data_ptr() and p.k_scale_stride_head == 1
    assert p.v_scale == vs.data_ptr() and p.v_scale_stride_head == 0
    assert p.seqused_k
    del keep
    key = fa.problem_key(q, k, k, k_scale=ks, v_scale=vs)
    assert "kv_e4m3" in key and "fwd_split" in key, key
    assert key != fa.problem_key(q, k.to(torch.bfloat16), k.to(torch.bfloat16))
    pages = tensors(FP8, b=6, s=16, h=2)  # 6 pages of 16 rows
    table = torch.arange(4, dtype=torch.int32).reshape(1, 4)
    paged = fa.problem_key(q, pages, pages, k_scale=1.0, block_table=table, cache_seqlens=50)
    assert "kv_e4m3" in paged, paged
    assert fa.is_supported(q, pages, pages, v_scale=ks, block_table=table, cache_seqlens=50)
