"""The C library through ctypes: status names, version, struct sizes, and argument validation surfaced as
exceptions naming the bad field. Runs on a CPU-only machine; skipped when libfa.so is not found."""

import ctypes
import os
import re
import subprocess
import sys

import pytest

import fa
from conftest import HEADER, PYTHON_DIR, requires_lib
from fa import _lib
from fa import structs as S


def test_import_without_library_and_clear_error(tmp_path):
    """A fresh interpreter with FA_LIBRARY pointing nowhere imports fa, and a call raises LibraryNotFoundError
    naming the path it tried."""
    missing = tmp_path / "nope" / "libfa.so"
    code = (
        "import fa\n"
        "try:\n    fa.library_version()\nexcept fa.LibraryNotFoundError as e:\n"
        "    print('TRIED', e.tried)\nelse:\n    print('LOADED')\n"
    )
    env = dict(os.environ, FA_LIBRARY=str(missing), FA_NO_TORCH="1", PYTHONPATH=str(PYTHON_DIR))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "TRIED" in out.stdout and str(missing) in out.stdout


def test_candidate_paths_include_build_tree_and_prefix(monkeypatch, tmp_path):
    monkeypatch.setenv("FA_PREFIX", str(tmp_path))
    paths = [str(p) for p in _lib.candidate_paths()]
    assert str(tmp_path / "lib" / "libfa.so") in paths
    assert str(PYTHON_DIR.parent / "build" / "runtime" / "libfa.so") in paths
    assert paths.index(str(tmp_path / "lib" / "libfa.so")) < paths.index(
        str(PYTHON_DIR.parent / "build" / "runtime" / "libfa.so")
    )


@requires_lib
@pytest.mark.parametrize("status,name", sorted(S.STATUS_NAMES.items()))
def test_status_string_names(status, name):
    text = fa.status_string(status)
    assert text == name or text.startswith(name + ":") or text.startswith(name + " "), text


@requires_lib
def test_status_string_unknown_is_not_empty():
    text = fa.status_string(12345)
    assert text and not any(text.startswith(n + ":") for n in S.STATUS_NAMES.values() if n != "FA_ERROR_INTERNAL")


@requires_lib
def test_version_string_matches_header():
    version = fa.library_version()
    assert re.fullmatch(r"\d+\.\d+\.\d+", version), version
    if HEADER.is_file():
        text = HEADER.read_text()
        parts = [re.search(rf"#define FA_VERSION_{p}\s+(\d+)", text).group(1) for p in ("MAJOR", "MINOR", "PATCH")]
        assert version == ".".join(parts)
    assert version.split(".")[:2] == fa.__version__.split(".")[:2]


@requires_lib
@pytest.mark.parametrize(
    "init,ctype,version",
    [
        ("fa_context_options_init", S.ContextOptions, 1),
        ("fa_params_init", S.Params, 3),
        ("fa_bwd_params_init", S.BwdParams, 2),
    ],
)
def test_struct_size_matches_library(init, ctype, version):
    """*_init on an oversized zeroed buffer writes the library's sizeof: it must equal the ctypes size, and the
    bytes past it stay untouched."""
    buf = (ctypes.c_ubyte * 4096)(*([0xAB] * 4096))
    status = getattr(_lib.lib(), init)(ctypes.cast(buf, ctypes.POINTER(ctype)))
    assert status == S.FA_OK
    struct_size = ctypes.c_uint32.from_buffer(buf, 0).value
    assert struct_size == ctypes.sizeof(ctype)
    assert ctypes.c_uint32.from_buffer(buf, 4).value == version
    assert all(b == 0xAB for b in bytes(buf)[struct_size:])


@requires_lib
def test_params_init_defaults():
    p = _lib.new_params()
    assert (p.window_left, p.window_right) == (-1, -1)
    assert p.mask == S.FA_MASK_NONE
    assert p.q is None and p.bias is None and p.lse is None and p.cu_seqlens_q is None
    assert p.softcap == 0.0 and p.softmax_scale == 0.0
    b = _lib.new_bwd_params()
    assert not b.fwd and b.workspace is None and b.deterministic == 0


# ---- validation ----------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ctx():
    if _LIB_MISSING():
        pytest.skip("libfa.so not found")
    c = fa.Context(0)
    yield c
    c.close()


def _LIB_MISSING():
    return not fa.available()


B, SQ, SK, HQ, HKV, D = 2, 128, 96, 8, 2, 64
BASE = 0x7F0000000000  # plausible, 256-byte aligned device addresses; nothing is ever dereferenced


def valid_params() -> S.Params:
    p = _lib.new_params()
    p.dtype = S.FA_DTYPE_FP16
    p.batch, p.seqlen_q, p.seqlen_k, p.heads_q, p.heads_kv, p.head_dim, p.head_dim_v = B, SQ, SK, HQ, HKV, D, D
    for i, (name, s, h) in enumerate((("q", SQ, HQ), ("k", SK, HKV), ("v", SK, HKV), ("o", SQ, HQ))):
        setattr(p, name, BASE + i * 0x10000000)
        setattr(p, f"{name}_stride_batch", s * h * D)
        setattr(p, f"{name}_stride_seq", h * D)
        setattr(p, f"{name}_stride_head", D)
    p.lse = BASE + 5 * 0x10000000
    return p


# (description, mutation, words one of which the message must contain)
BAD = [
    ("head_dim not a multiple of 8", lambda p: setattr(p, "head_dim", 12), ["head_dim"]),
    ("head_dim above 576", lambda p: setattr(p, "head_dim", 584), ["head_dim"]),
    (
        "page_size not a power of two",
        lambda p: (
            setattr(p, "block_table", BASE + 0x70000000),
            setattr(p, "page_size", 24),
            setattr(p, "num_pages", 4),
            setattr(p, "block_table_stride", 64),
        ),
        ["page_size"],
    ),
    ("num_splits out of range", lambda p: setattr(p, "num_splits", 999), ["num_splits"]),
    ("head_dim_v not a multiple of 8", lambda p: setattr(p, "head_dim_v", 20), ["head_dim_v"]),
    ("heads_kv does not divide heads_q", lambda p: setattr(p, "heads_kv", 3), ["heads_kv", "heads_q"]),
    ("heads_q zero", lambda p: setattr(p, "heads_q", 0), ["heads_q"]),
    ("batch zero", lambda p: setattr(p, "batch", 0), ["batch"]),
    ("seqlen_q zero", lambda p: setattr(p, "seqlen_q", 0), ["seqlen_q"]),
    ("seqlen_k negative", lambda p: setattr(p, "seqlen_k", -1), ["seqlen_k"]),
    ("unknown dtype", lambda p: setattr(p, "dtype", 7), ["dtype"]),
    ("unknown mask", lambda p: setattr(p, "mask", 9), ["mask"]),
    ("window with a non-window mask", lambda p: setattr(p, "window_left", 16), ["window_left"]),
    ("null q", lambda p: setattr(p, "q", None), ["q"]),
    ("null o", lambda p: setattr(p, "o", None), ["o"]),
    ("misaligned k", lambda p: setattr(p, "k", BASE + 0x10000000 + 1), ["k"]),
    ("negative q stride", lambda p: setattr(p, "q_stride_seq", -1), ["q_stride_seq", "stride"]),
    (
        "only one cu_seqlens",
        lambda p: setattr(p, "cu_seqlens_q", BASE + 7 * 0x10000000),
        ["cu_seqlens_q", "cu_seqlens_k"],
    ),
]


@requires_lib
def test_valid_baseline_is_supported(ctx):
    answer = ctx.is_supported(valid_params())
    assert answer, answer.reason
    assert answer.supported is True and answer.reason == ""
    key = ctx.problem_key(valid_params())
    assert key and str(SQ) not in key.split("_") and str(SK) not in key.split("_")


@requires_lib
@pytest.mark.parametrize("desc,mutate,words", BAD, ids=[b[0] for b in BAD])
def test_invalid_argument_names_the_field(ctx, desc, mutate, words):
    p = valid_params()
    mutate(p)
    answer = ctx.is_supported(p)
    assert not answer, desc
    assert answer.supported is False
    reason = answer.reason
    assert any(re.search(rf"\b{w}\b", reason) for w in words), f"{desc}: {reason!r} names none of {words}"
    with pytest.raises(fa.InvalidArgument) as info:
        ctx.run(p, None)  # NULL stream; validation fails before anything could be launched
    err = info.value
    assert err.status == S.FA_ERROR_INVALID_ARGUMENT
    assert err.name.startswith("FA_ERROR_INVALID_ARGUMENT")
    assert any(re.search(rf"\b{w}\b", err.message) for w in words), err.message
    with pytest.raises(fa.InvalidArgument):
        ctx.problem_key(p)


@requires_lib
def test_bad_struct_size_is_invalid_version(ctx):
    p = valid_params()
    p.struct_size = 8
    with pytest.raises(fa.InvalidVersion) as info:
        ctx.run(p, None)
    assert info.value.status == S.FA_ERROR_INVALID_VERSION


@requires_lib
def test_backward_without_forward_params(ctx):
    b = _lib.new_bwd_params()
    with pytest.raises(fa.InvalidArgument) as info:
        ctx.backward_workspace_size(b)
    assert "fwd" in info.value.message


@requires_lib
def test_last_error_cleared_after_success(ctx):
    p = valid_params()
    p.head_dim = 12
    assert not ctx.is_supported(p)
    assert fa.last_error() != ""
    assert ctx.is_supported(valid_params())
    assert fa.last_error() == ""


@requires_lib
def test_run_without_device_is_no_device(ctx):
    if ctx.has_device():
        pytest.skip("this machine has a usable CUDA device")
    with pytest.raises(fa.NoDevice):
        ctx.run(valid_params(), None)
