"""Shared fixtures: import fa from this checkout, and skip markers for the library, torch and CUDA."""

import importlib.util
import sys
from pathlib import Path

import pytest

PYTHON_DIR = Path(__file__).resolve().parents[1]
REPO = PYTHON_DIR.parent
HEADER = REPO / "include" / "fa" / "fa.h"
if str(PYTHON_DIR) not in sys.path:
    sys.path.insert(0, str(PYTHON_DIR))

import fa  # noqa: E402


def _library_reason():
    try:
        fa.library_path()
        return None
    except fa.LibraryNotFoundError as exc:
        return f"libfa.so not found (set FA_LIBRARY): {exc.tried[:3]}"


LIB_REASON = _library_reason()
requires_lib = pytest.mark.skipif(LIB_REASON is not None, reason=LIB_REASON or "")

HAS_TORCH = importlib.util.find_spec("torch") is not None
requires_torch = pytest.mark.skipif(not HAS_TORCH, reason="PyTorch is not installed")


def cuda_reason():
    if not HAS_TORCH:
        return "PyTorch is not installed"
    import torch

    if not torch.cuda.is_available():
        return "no CUDA device"
    if LIB_REASON is not None:
        return LIB_REASON
    if not fa.HAS_TORCH:
        return "fa could not import its torch operators"
    return None
