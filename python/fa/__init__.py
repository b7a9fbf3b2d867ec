"""fa: FlashAttention kernels written at run time -- Python bindings (ctypes over libfa.so) and PyTorch operators.

Importing fa needs neither the library nor torch. The C library is loaded on first use (see fa._lib for the search
order; set FA_LIBRARY to its full path); when it cannot be found every call raises fa.LibraryNotFoundError. When
torch is installed, fa.attention / fa.prepare / fa.is_supported / fa.problem_key and the operators
fa.attention_with_kvcache / fa.prepare_kvcache (decode against a contiguous or paged KV cache), fa.merge_attention
(partial results over disjoint key sets merged), fa.scaled_dot_product_attention (torch's SDPA, run by fa where
it has a kernel: fa.sdpa_rules), fa.ring_attention (context parallelism over a torch.distributed
group, module fa.ring) and the operators
torch.ops.fa.attention_fwd / attention_bwd / attention_kvcache are available (set FA_NO_TORCH=1 to skip importing
torch).
Tensors that disagree raise fa.InvalidArgument naming both before anything runs: the rules, plain Python over shapes,
are fa.shape_rules.
"""

from __future__ import annotations

import importlib.util as _ilu
import os as _os

from . import _structs as structs
from ._lib import available, candidate_paths, last_error, library_path, missing_functions, status_string
from ._lib import version as library_version
from .context import Context, default_context, set_default_context
from .support import Support
from .mods import Mods
from . import mods
from .errors import (
    CacheError,
    CompileError,
    DriverError,
    EnvironmentFailure,
    FaError,
    InternalError,
    InvalidArgument,
    InvalidVersion,
    LaunchError,
    LibraryNotFoundError,
    MissingFunctionError,
    NoDevice,
    NotSupported,
    NotTuned,
    NvrtcUnavailable,
    OutOfMemory,
    StreamCapturing,
    error_class,
)

__version__ = "0.1.0"

HAS_TORCH = False
_TORCH_IMPORT_ERROR: BaseException | None = None

if _os.environ.get("FA_NO_TORCH") != "1" and _ilu.find_spec("torch") is not None:
    try:
        from ._torch_ops import attention, is_supported, prepare, problem_key
        from ._kvcache import attention_with_kvcache, prepare_kvcache
        from ._merge import merge_attention
        from ._sdpa import scaled_dot_product_attention, sdpa_plan
        from .ring import ring_attention, zigzag_shard, zigzag_unshard

        HAS_TORCH = True
    except Exception as _exc:  # a broken torch install must not break `import fa`
        _TORCH_IMPORT_ERROR = _exc

if not HAS_TORCH:

    def _no_torch(*_args, **_kwargs):
        raise ImportError(
            "fa: this function needs PyTorch, which could not be imported"
            + (f" ({_TORCH_IMPORT_ERROR!r})" if _TORCH_IMPORT_ERROR else "")
        )

    attention = prepare = is_supported = problem_key = attention_with_kvcache = prepare_kvcache = _no_torch
    merge_attention = ring_attention = zigzag_shard = zigzag_unshard = _no_torch
    scaled_dot_product_attention = sdpa_plan = _no_torch

__all__ = [
    "attention",
    "prepare",
    "is_supported",
    "problem_key",
    "attention_with_kvcache",
    "prepare_kvcache",
    "merge_attention",
    "scaled_dot_product_attention",
    "sdpa_plan",
    "ring_attention",
    "zigzag_shard",
    "zigzag_unshard",
    "Mods",
    "mods",
    "Support",
    "Context",
    "default_context",
    "set_default_context",
    "available",
    "library_path",
    "library_version",
    "candidate_paths",
    "status_string",
    "last_error",
    "structs",
    "FaError",
    "InvalidArgument",
    "InvalidVersion",
    "NotSupported",
    "NotTuned",
    "EnvironmentFailure",
    "NoDevice",
    "DriverError",
    "OutOfMemory",
    "CompileError",
    "NvrtcUnavailable",
    "LaunchError",
    "StreamCapturing",
    "CacheError",
    "InternalError",
    "LibraryNotFoundError",
    "MissingFunctionError",
    "missing_functions",
    "error_class",
    "HAS_TORCH",
    "__version__",
]
