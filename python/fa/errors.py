"""Exceptions raised by the fa package.

Every fa_* C call returns an fa_status; a non-zero status becomes an FaError subclass chosen by the status's numeric
range (see include/fa/fa.h): 100..199 the caller passed something invalid, 200..299 not supported, 300..399 the
environment, 400..499 run-time compilation, 500..599 launching, 600..699 the persistent cache, 900..999 internal.
The exception carries the numeric status, its fa_status_string() name and the thread's fa_last_error() message.
"""

from __future__ import annotations


class LibraryNotFoundError(OSError):
    """libfa.so could not be found or loaded. `tried` lists every place that was looked at (and why it failed)."""

    def __init__(self, tried: list[str]):
        self.tried = list(tried)
        lines = "\n  ".join(self.tried) if self.tried else "(nowhere)"
        super().__init__(
            "fa: cannot load the shared library libfa.so. Set FA_LIBRARY to its full path or FA_PREFIX to the "
            "install prefix. Tried:\n  " + lines
        )


class MissingFunctionError(LibraryNotFoundError):
    """libfa.so was loaded but does not export a function of fa.h (an older or partial build)."""

    def __init__(self, path: str, name: str):
        self.tried = [path]
        self.function = name
        OSError.__init__(self, f"fa: {path} does not export {name} (an older or partial build of libfa?)")


class FaError(RuntimeError):
    """A non-OK fa_status. Attributes: status (int), name (fa_status_string), message (fa_last_error)."""

    def __init__(self, status: int, name: str = "", message: str = ""):
        self.status = int(status)
        self.name = name
        self.message = message
        text = name or f"fa_status {self.status}"
        if message:
            # fa_last_error() already starts with the status name ("FA_ERROR_X: ...: detail"): do not repeat it.
            head = text.split(":", 1)[0]
            text = message if head and message.startswith(head) else f"{text}: {message}"
        super().__init__(text)

    def __reduce__(self):
        return (type(self), (self.status, self.name, self.message))


# ---- 100..199: invalid input -----------------------------------------------------------------------------------------
class InvalidArgument(FaError, ValueError):
    """FA_ERROR_INVALID_ARGUMENT (100) and the rest of 100..199."""


class InvalidVersion(InvalidArgument):
    """FA_ERROR_INVALID_VERSION (101): struct_size/version not recognised."""


# ---- 200..299: not supported -----------------------------------------------------------------------------------------
class NotSupported(FaError, NotImplementedError):
    """FA_ERROR_NOT_SUPPORTED (200) and the rest of 200..299."""


class NotTuned(NotSupported):
    """FA_ERROR_NOT_TUNED (201): FA_TUNE_REQUIRE_TUNED and no tuned entry."""


# ---- 300..399: environment -------------------------------------------------------------------------------------------
class EnvironmentFailure(FaError):
    """300..399: the CUDA driver or device."""


class NoDevice(EnvironmentFailure):
    """FA_ERROR_NO_DEVICE (300)."""


class DriverError(EnvironmentFailure):
    """FA_ERROR_DRIVER (301)."""


class OutOfMemory(EnvironmentFailure, MemoryError):
    """FA_ERROR_OUT_OF_MEMORY (302)."""


# ---- 400..499: compilation -------------------------------------------------------------------------------------------
class CompileError(FaError):
    """FA_ERROR_COMPILE (400) and the rest of 400..499; the message holds the kernel key and the NVRTC log."""


class NvrtcUnavailable(CompileError):
    """FA_ERROR_NVRTC_UNAVAILABLE (401)."""


# ---- 500..599: launching ---------------------------------------------------------------------------------------------
class LaunchError(FaError):
    """FA_ERROR_LAUNCH (500) and the rest of 500..599."""


class StreamCapturing(LaunchError):
    """FA_ERROR_STREAM_CAPTURING (501): call fa.prepare() before capturing a CUDA graph."""


# ---- 600..699, 900..999 ----------------------------------------------------------------------------------------------
class CacheError(FaError):
    """FA_ERROR_CACHE (600..699)."""


class InternalError(FaError):
    """FA_ERROR_INTERNAL (900) and any status outside the documented ranges."""


_EXACT = {
    101: InvalidVersion,
    201: NotTuned,
    300: NoDevice,
    301: DriverError,
    302: OutOfMemory,
    401: NvrtcUnavailable,
    501: StreamCapturing,
}

_RANGES = (
    (100, 199, InvalidArgument),
    (200, 299, NotSupported),
    (300, 399, EnvironmentFailure),
    (400, 499, CompileError),
    (500, 599, LaunchError),
    (600, 699, CacheError),
)


def error_class(status: int) -> type[FaError]:
    """The exception class for a non-OK status: the exact class if the code has one, else its range's class."""
    status = int(status)
    if status in _EXACT:
        return _EXACT[status]
    for lo, hi, cls in _RANGES:
        if lo <= status <= hi:
            return cls
    return InternalError


def make_error(status: int, name: str = "", message: str = "") -> FaError:
    return error_class(status)(status, name, message)
