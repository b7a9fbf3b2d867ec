"""Finding, loading and declaring libfa.so.

Search order (the first that loads wins):
  1. $FA_LIBRARY (a full path; when set, nothing else is tried)
  2. libfa.so next to the package (fa/libfa.so, and the folder holding fa/)
  3. $FA_PREFIX/lib, $FA_PREFIX/lib64, $FA_PREFIX/lib/<multiarch>; and <prefix>/lib when the package sits in
     <prefix>/lib/pythonX.Y/site-packages
  4. the build tree, when the package is the checkout's python/fa (<repo>/include/fa/fa.h beside it):
     <repo>/build/runtime/libfa.so, <repo>/build/libfa.so, <repo>/build/lib/libfa.so (an installed package has no
     build tree: nothing is listed relative to site-packages)
  5. ctypes.util.find_library("fa")
Loading is lazy (first use) and thread-safe; failure raises LibraryNotFoundError listing every place tried and is
retried on the next call (so FA_LIBRARY can be set after import).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sysconfig
import threading
from ctypes import POINTER, c_char_p, c_int, c_size_t, c_void_p
from pathlib import Path

from . import _structs as S
from .errors import LibraryNotFoundError, MissingFunctionError, make_error

_LIB_NAME = "libfa.so"
_lock = threading.Lock()
_lib: ctypes.CDLL | None = None
_lib_path: str | None = None
_missing: set[str] = set()


def candidate_paths() -> list[Path]:
    """Every file path that would be tried, in order (without $FA_LIBRARY and find_library)."""
    pkg = Path(__file__).resolve().parent
    out = [pkg / _LIB_NAME, pkg.parent / _LIB_NAME]
    prefix = os.environ.get("FA_PREFIX")
    if prefix:
        p = Path(prefix)
        out += [p / "lib" / _LIB_NAME, p / "lib64" / _LIB_NAME]
        multiarch = sysconfig.get_config_var("MULTIARCH")
        if multiarch:
            out.append(p / "lib" / multiarch / _LIB_NAME)
    # <prefix>/lib/pythonX.Y/site-packages/fa  ->  <prefix>/lib/libfa.so
    if len(pkg.parents) >= 3 and pkg.parents[1].name.startswith("python"):
        out.append(pkg.parents[2] / _LIB_NAME)
    repo = pkg.parent.parent  # python/fa -> repo root, when this is the checkout
    if (repo / "include" / "fa" / "fa.h").is_file():
        out += [repo / "build" / "runtime" / _LIB_NAME, repo / "build" / _LIB_NAME, repo / "build" / "lib" / _LIB_NAME]
    seen, unique = set(), []
    for path in out:
        if path not in seen:
            seen.add(path)
            unique.append(path)
    return unique


def _try_load(target: str, tried: list[str]) -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(target)
    except OSError as exc:
        tried.append(f"{target} (load failed: {exc})")
        return None


def _find_and_load() -> tuple[ctypes.CDLL, str]:
    tried: list[str] = []
    explicit = os.environ.get("FA_LIBRARY")
    if explicit:
        if not Path(explicit).is_file():
            tried.append(f"$FA_LIBRARY={explicit} (no such file)")
            raise LibraryNotFoundError(tried)
        lib = _try_load(explicit, tried)
        if lib is None:
            raise LibraryNotFoundError(tried)
        return lib, explicit
    for path in candidate_paths():
        if not path.is_file():
            tried.append(f"{path} (no such file)")
            continue
        lib = _try_load(str(path), tried)
        if lib is not None:
            return lib, str(path)
    name = ctypes.util.find_library("fa")
    if name is None:
        tried.append('ctypes.util.find_library("fa") (not found)')
    else:
        lib = _try_load(name, tried)
        if lib is not None:
            return lib, name
    raise LibraryNotFoundError(tried)


def _declare(lib: ctypes.CDLL) -> None:
    """argtypes/restype of every exported function of fa.h."""
    status = c_int
    ctx = c_void_p
    decl = {
        "fa_status_string": (c_char_p, [c_int]),
        "fa_last_error": (c_char_p, []),
        "fa_version_string": (c_char_p, []),
        "fa_context_options_init": (status, [POINTER(S.ContextOptions)]),
        "fa_context_create": (status, [POINTER(S.ContextOptions), POINTER(c_void_p)]),
        "fa_context_destroy": (None, [ctx]),
        "fa_context_has_device": (c_int, [ctx]),
        "fa_params_init": (status, [POINTER(S.Params)]),
        "fa_mods_init": (status, [POINTER(S.Mods)]),
        "fa_run": (status, [ctx, POINTER(S.Params), c_void_p]),
        "fa_prepare": (status, [ctx, POINTER(S.Params)]),
        "fa_is_supported": (c_int, [ctx, POINTER(S.Params)]),
        "fa_problem_key": (status, [ctx, POINTER(S.Params), c_char_p, c_size_t]),
        "fa_forward_workspace_size": (status, [ctx, POINTER(S.Params), POINTER(c_size_t)]),
        "fa_bwd_params_init": (status, [POINTER(S.BwdParams)]),
        "fa_backward_workspace_size": (status, [ctx, POINTER(S.BwdParams), POINTER(c_size_t)]),
        "fa_run_backward": (status, [ctx, POINTER(S.BwdParams), c_void_p]),
        "fa_prepare_backward": (status, [ctx, POINTER(S.BwdParams)]),
        "fa_merge_params_init": (status, [POINTER(S.MergeParams)]),
        "fa_merge_partials": (status, [ctx, POINTER(S.MergeParams), c_void_p]),
    }
    for name, (restype, argtypes) in decl.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            # An older or partial build: keep the rest usable; calling this one raises a clear error.
            _missing.add(name)
            setattr(lib, name, _missing_stub(name))
            continue
        fn.restype = restype
        fn.argtypes = argtypes


def _missing_stub(name: str):
    def stub(*_args):
        raise MissingFunctionError(_lib_path or "libfa.so", name)

    return stub


def missing_functions() -> list[str]:
    """fa_* functions of fa.h that the loaded library does not export (empty for a complete build)."""
    lib()
    return sorted(_missing)


def lib() -> ctypes.CDLL:
    """The loaded, declared libfa (raises LibraryNotFoundError)."""
    global _lib, _lib_path
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is None:
            loaded, path = _find_and_load()
            _lib_path = path
            _declare(loaded)
            _lib = loaded
    return _lib


def library_path() -> str:
    """Where libfa was loaded from (loads it if needed)."""
    lib()
    assert _lib_path is not None
    return _lib_path


def available() -> bool:
    try:
        lib()
        return True
    except LibraryNotFoundError:
        return False


def _text(raw: bytes | None) -> str:
    return raw.decode("utf-8", "replace") if raw else ""


def status_string(status: int) -> str:
    if "fa_status_string" in _missing:
        return S.STATUS_NAMES.get(int(status), f"fa_status {int(status)}")
    return _text(lib().fa_status_string(int(status)))


def last_error() -> str:
    if "fa_last_error" in _missing:
        return ""
    return _text(lib().fa_last_error())


def version() -> str:
    return _text(lib().fa_version_string())


def check(status: int) -> None:
    """Raise the FaError subclass for a non-OK status, with its name and this thread's fa_last_error()."""
    if status != S.FA_OK:
        message = last_error()  # read first: the next fa_* call replaces it
        raise make_error(status, status_string(status), message)


def new_context_options() -> S.ContextOptions:
    opts = S.ContextOptions()
    check(lib().fa_context_options_init(ctypes.byref(opts)))
    return opts


def new_params() -> S.Params:
    params = S.Params()
    check(lib().fa_params_init(ctypes.byref(params)))
    return params


def new_bwd_params() -> S.BwdParams:
    params = S.BwdParams()
    check(lib().fa_bwd_params_init(ctypes.byref(params)))
    return params


def new_merge_params() -> S.MergeParams:
    params = S.MergeParams()
    check(lib().fa_merge_params_init(ctypes.byref(params)))
    return params
