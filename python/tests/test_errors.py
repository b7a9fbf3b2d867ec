"""The exception hierarchy: every documented status maps to its class, unknown codes to their range's class."""

import pickle

import pytest

import fa
from fa import structs as S

EXPECTED = {
    S.FA_ERROR_INVALID_ARGUMENT: fa.InvalidArgument,
    S.FA_ERROR_INVALID_VERSION: fa.InvalidVersion,
    S.FA_ERROR_NOT_SUPPORTED: fa.NotSupported,
    S.FA_ERROR_NOT_TUNED: fa.NotTuned,
    S.FA_ERROR_NO_DEVICE: fa.NoDevice,
    S.FA_ERROR_DRIVER: fa.DriverError,
    S.FA_ERROR_OUT_OF_MEMORY: fa.OutOfMemory,
    S.FA_ERROR_COMPILE: fa.CompileError,
    S.FA_ERROR_NVRTC_UNAVAILABLE: fa.NvrtcUnavailable,
    S.FA_ERROR_LAUNCH: fa.LaunchError,
    S.FA_ERROR_STREAM_CAPTURING: fa.StreamCapturing,
    S.FA_ERROR_CACHE: fa.CacheError,
    S.FA_ERROR_INTERNAL: fa.InternalError,
}


@pytest.mark.parametrize("status,cls", sorted(EXPECTED.items()), ids=lambda x: str(x))
def test_exact_class(status, cls):
    assert fa.error_class(status) is cls
    assert issubclass(cls, fa.FaError)


@pytest.mark.parametrize(
    "status,base",
    [
        (150, fa.InvalidArgument),
        (299, fa.NotSupported),
        (350, fa.EnvironmentFailure),
        (499, fa.CompileError),
        (550, fa.LaunchError),
        (601, fa.CacheError),
        (777, fa.InternalError),
        (-3, fa.InternalError),
    ],
)
def test_range_fallback(status, base):
    assert fa.error_class(status) is base


def test_subclass_relations():
    assert issubclass(fa.InvalidVersion, fa.InvalidArgument)
    assert issubclass(fa.InvalidArgument, ValueError)
    assert issubclass(fa.NotTuned, fa.NotSupported)
    assert issubclass(fa.NoDevice, fa.EnvironmentFailure)
    assert issubclass(fa.StreamCapturing, fa.LaunchError)
    assert issubclass(fa.NvrtcUnavailable, fa.CompileError)
    assert not issubclass(fa.LibraryNotFoundError, fa.FaError)


def test_error_carries_fields_and_pickles():
    err = fa.errors.make_error(100, "FA_ERROR_INVALID_ARGUMENT: x", "head_dim: expected a multiple of 8, got 12")
    assert isinstance(err, fa.InvalidArgument)
    assert (err.status, err.name) == (100, "FA_ERROR_INVALID_ARGUMENT: x")
    assert "head_dim" in str(err) and "FA_ERROR_INVALID_ARGUMENT" in str(err)
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is type(err) and back.status == 100 and back.message == err.message


def test_library_not_found_lists_places():
    err = fa.LibraryNotFoundError(["/a/libfa.so (no such file)", "/b/libfa.so (no such file)"])
    assert "/a/libfa.so" in str(err) and "/b/libfa.so" in str(err) and "FA_LIBRARY" in str(err)
