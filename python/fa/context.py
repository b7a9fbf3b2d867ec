"""fa.Context: an owned fa_context, plus the lazily created default context of each CUDA device.

A context holds the kernel cache (in memory and in SQLite) and is safe to share between threads. The raw calls take
ctypes structs (fa._structs.Params / BwdParams) and raise FaError subclasses on failure.
"""

from __future__ import annotations

import atexit
import ctypes
import threading
import weakref

from . import _lib
from . import _structs as S
from .support import Support


class Context:
    """fa_context. Arguments mirror fa_context_options; None keeps the library default (environment variables)."""

    def __init__(
        self,
        device: int = 0,
        *,
        tune_policy: int | str | None = None,
        cache_path: str | None = None,
        verbose: bool | None = None,
    ):
        lib = _lib.lib()
        opts = _lib.new_context_options()
        opts.device_ordinal = int(device)
        if tune_policy is not None:
            opts.tune_policy = _tune_policy(tune_policy)
        if cache_path is not None:
            self._cache_path = cache_path.encode()
            opts.cache_path = self._cache_path
        if verbose is not None:
            opts.verbose = 1 if verbose else 0
        handle = ctypes.c_void_p()
        _lib.check(lib.fa_context_create(ctypes.byref(opts), ctypes.byref(handle)))
        self._handle = handle
        self._lib = lib
        self.device = int(device)
        _live.add(self)

    # -- lifetime ------------------------------------------------------------------------------------------------------
    @property
    def handle(self) -> ctypes.c_void_p:
        if self._handle is None:
            raise ValueError("fa.Context used after close()")
        return self._handle

    def close(self) -> None:
        handle, self._handle = getattr(self, "_handle", None), None
        if handle is not None and handle.value:
            self._lib.fa_context_destroy(handle)

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"fa.Context(device={self.device})"

    # -- raw calls -----------------------------------------------------------------------------------------------------
    def has_device(self) -> bool:
        return bool(self._lib.fa_context_has_device(self.handle))

    def run(self, params: S.Params, stream: int | None = None) -> None:
        _lib.check(self._lib.fa_run(self.handle, ctypes.byref(params), ctypes.c_void_p(stream or None)))

    def prepare(self, params: S.Params) -> None:
        _lib.check(self._lib.fa_prepare(self.handle, ctypes.byref(params)))

    def is_supported(self, params: S.Params) -> Support:
        """A Support: truthy when fa_run would accept params, else falsy with the library's reason in .reason."""
        ok = bool(self._lib.fa_is_supported(self.handle, ctypes.byref(params)))
        return Support(ok, "" if ok else _lib.last_error())

    def problem_key(self, params: S.Params) -> str:
        buf = ctypes.create_string_buffer(4096)
        _lib.check(self._lib.fa_problem_key(self.handle, ctypes.byref(params), buf, ctypes.sizeof(buf)))
        return buf.value.decode("utf-8", "replace")

    def forward_workspace_size(self, params: S.Params) -> int:
        out = ctypes.c_size_t()
        _lib.check(self._lib.fa_forward_workspace_size(self.handle, ctypes.byref(params), ctypes.byref(out)))
        return int(out.value)

    def run_backward(self, params: S.BwdParams, stream: int | None = None) -> None:
        _lib.check(self._lib.fa_run_backward(self.handle, ctypes.byref(params), ctypes.c_void_p(stream or None)))

    def prepare_backward(self, params: S.BwdParams) -> None:
        _lib.check(self._lib.fa_prepare_backward(self.handle, ctypes.byref(params)))

    def backward_workspace_size(self, params: S.BwdParams) -> int:
        out = ctypes.c_size_t()
        _lib.check(self._lib.fa_backward_workspace_size(self.handle, ctypes.byref(params), ctypes.byref(out)))
        return int(out.value)

    def merge_partials(self, params: S.MergeParams, stream: int | None = None) -> None:
        _lib.check(self._lib.fa_merge_partials(self.handle, ctypes.byref(params), ctypes.c_void_p(stream or None)))


_TUNE_NAMES = {
    "first_use": S.FA_TUNE_ON_FIRST_USE,
    "defaults": S.FA_TUNE_DEFAULTS_ONLY,
    "require": S.FA_TUNE_REQUIRE_TUNED,
    "first_use_sync": S.FA_TUNE_ON_FIRST_USE_SYNC,
}


def _tune_policy(value: int | str) -> int:
    if isinstance(value, str):
        try:
            return _TUNE_NAMES[value]
        except KeyError:
            raise ValueError(f"tune_policy must be one of {sorted(_TUNE_NAMES)}, got {value!r}") from None
    return int(value)


_defaults: dict[int, Context] = {}
_defaults_lock = threading.Lock()

# Every open context is closed at interpreter exit, before modules are torn down: fa_context_destroy stops the
# context's background tuning worker, which would otherwise still be compiling or timing on its own thread while
# the process unloads the driver and the library (a SIGSEGV at exit, seen after a run that tuned on first use).
# atexit runs its handlers last-registered first, so this runs before torch's own exit handlers (fa imports later).
_live: "weakref.WeakSet[Context]" = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for ctx in list(_live):
        try:
            ctx.close()
        except Exception:  # noqa: BLE001 -- exiting: nothing to report to
            pass


def default_context(device: int = 0) -> Context:
    """The process-wide context of a CUDA device ordinal, created on first use."""
    device = int(device)
    ctx = _defaults.get(device)
    if ctx is None:
        with _defaults_lock:
            ctx = _defaults.get(device)
            if ctx is None:
                ctx = Context(device)
                _defaults[device] = ctx
    return ctx


def set_default_context(ctx: Context) -> None:
    """Make `ctx` the default context of its device (e.g. one with a tune policy or cache path of your choice)."""
    with _defaults_lock:
        _defaults[ctx.device] = ctx
