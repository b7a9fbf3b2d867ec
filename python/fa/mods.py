"""User code for fa.attention: any mask (mask_mod) and any score function (score_mod), as CUDA C source.

A Mods holds the BODIES of device functions that fa compiles into its kernels with NVRTC (include/fa/fa.h,
"user code"):
    bool  mask_mod (int b, int h, int i, int j, const FaUser& u)                 -> may query i see key j?
    float score_mod(float s, int b, int h, int i, int j, const FaUser& u)        -> the new score
    float score_mod_grad(float s, int b, int h, int i, int j, const FaUser& u)   -> d score_mod / d s at s
plus up to 4 tensors the code reads (u.buf[n], typed as fa_buf<n>_t; u.shape[n][d], u.stride[n][d] in elements)
and up to 8 float scalars (u.scalar[n]) and 8 int scalars (u.iscalar[n]). The kernel key holds a hash of the code
and the tensors' dtypes and ranks: new tensor contents, shapes or scalars never recompile. The backward (autograd)
runs them too: a score_mod then needs score_mod_grad, its derivative at the same raw s the forward's score_mod
receives; a mask_mod needs nothing more. No gradient flows into the buffers or scalars.

The ready mods below (document, prefix_lm, sinks_window, chunked, relative_bias, softcap) each carry a PyTorch
restatement (`reference_mask` / `reference_score`) that the tests compare against, and their derivative where they
have a score_mod.

Block classification cache: fa keeps the block classification of a mask_mod across calls (fa.h, fa_mods.mask_epoch)
and reuses it while the code, shapes, scalars, buffers and their contents are unchanged. The contents are tracked
through each tensor's identity and PyTorch's version counter (every in-place op bumps it): a new tensor, or any
in-place write to a buffer (ids.copy_(...), ids[3] = 1, an out= op), makes the next call classify afresh. Writes that
bypass the version counter (through .data, DLPack, a raw pointer, another process) need `mods.changed()`. Inference
tensors (torch.inference_mode) have no version counter: their mods are classified on every call.
"""

from __future__ import annotations

import ctypes
import itertools
import weakref
from typing import Callable, Optional, Sequence

from . import _structs as S

# ---- the contents' epoch (fa_mods.mask_epoch) ------------------------------------------------------------------------
# Each buffer incarnation (the tensor object at its address, at its version) gets a number from one process-wide
# counter the first time it is seen; a call's epoch is the largest number among its buffers. A changed buffer (a new
# tensor at the address, or a new version) takes a number never used before, so the epoch of a call differs from
# every earlier call's with the same pointers unless every buffer is the incarnation it was then; the library keys
# its cache on the pointers and the epoch. 1: no buffer (nothing but the key's own values to depend on).
_EPOCH_COUNTER = itertools.count(2)
_EPOCHS: dict = {}  # data_ptr -> (weakref to the tensor, its _version, its number)
_EPOCHS_MAX = 4096


def contents_epoch(tensors) -> int:
    """fa_mods.mask_epoch for buffers `tensors` (None entries skipped; cu_seqlens in varlen mode too): nonzero, the
    same while every tensor is the same object at the same version, else new; 0 (classify every call) when a
    tensor has no version counter (an inference tensor)."""
    epoch = 1
    for t in tensors:
        if t is None:
            continue
        ptr = t.data_ptr()
        try:
            version = t._version
        except RuntimeError:  # inference tensors track no version
            return 0
        ent = _EPOCHS.get(ptr)
        if ent is None or ent[1] != version or ent[0]() is not t:
            if len(_EPOCHS) >= _EPOCHS_MAX:
                _EPOCHS.clear()
            ent = (weakref.ref(t), version, next(_EPOCH_COUNTER))
            _EPOCHS[ptr] = ent
        if ent[2] > epoch:
            epoch = ent[2]
    return epoch


def forget_contents(tensors) -> None:
    """The next call reading any of `tensors` classifies afresh (their contents changed behind the version counter)."""
    for t in tensors:
        if t is not None:
            _EPOCHS.pop(t.data_ptr(), None)


# ---- fa_mods structs, filled once per signature ----------------------------------------------------------------------
_STRUCTS: dict = {}
_STRUCTS_MAX = 256


def filled_struct(mask_mod, score_mod, score_mod_grad, buffers, scalars, iscalars, depends, device):
    """The filled fa_mods of a signature (the code, depends, scalars, device and each buffer's address, dtype, shape
    and strides) as (its bytes, the code's bytes it points at): built the first time through Mods.to_struct with
    every check, then kept."""
    sig = (
        mask_mod,
        score_mod,
        score_mod_grad,
        depends,
        tuple(scalars),
        tuple(iscalars),
        device,
        tuple((t.data_ptr(), t.dtype, t.shape, t.stride()) for t in buffers),
    )
    ent = _STRUCTS.get(sig)
    if ent is None:
        m, keep = Mods(
            mask_mod, score_mod, buffers, scalars, iscalars, depends=depends, score_mod_grad=score_mod_grad
        ).to_struct(device)
        if len(_STRUCTS) >= _STRUCTS_MAX:
            _STRUCTS.clear()
        ent = (bytes(m), [x for x in keep if isinstance(x, bytes)])  # the code's bytes; buffers live in the call
        _STRUCTS[sig] = ent
    return ent


def copy_struct(filled, epoch: int):
    """A fresh fa_mods from filled_struct's entry with mask_epoch `epoch`."""
    m = S.Mods.from_buffer_copy(filled[0])
    m.mask_epoch = epoch
    return m


def mods_struct(mask_mod, score_mod, score_mod_grad, buffers, scalars, iscalars, depends, device, contents=()):
    """A fresh fa_mods for these op arguments (its mask_epoch from the buffers and `contents`, e.g. varlen offsets)
    and what it keeps alive: filled_struct's entry copied (copy_struct)."""
    filled = filled_struct(mask_mod, score_mod, score_mod_grad, buffers, scalars, iscalars, depends, device)
    epoch = contents_epoch(itertools.chain(buffers, contents)) if mask_mod is not None else 0
    return copy_struct(filled, epoch), filled[1]


_DTYPES = None


def _dtype_code(t) -> int:
    global _DTYPES
    import torch

    if _DTYPES is None:
        _DTYPES = {
            torch.int32: S.FA_USER_I32,
            torch.int64: S.FA_USER_I64,
            torch.float32: S.FA_USER_F32,
            torch.float16: S.FA_USER_F16,
            torch.bfloat16: S.FA_USER_BF16,
            torch.uint8: S.FA_USER_U8,
            torch.bool: S.FA_USER_U8,
        }
    try:
        return _DTYPES[t.dtype]
    except KeyError:
        raise TypeError(
            f"fa: a mods buffer must be int32, int64, float32, float16, bfloat16, uint8 or bool, got {t.dtype}"
        ) from None


class Mods:
    """mask_mod / score_mod bodies (str or None), score_mod_grad (the body of d score_mod / d s, needed for the
    backward of a score_mod), buffers (tensors on the attention's device, up to 4, rank <= 4),
    scalars (up to 8 floats), iscalars (up to 8 ints). reference_mask(b, h, i, j) / reference_score(s, b, h, i, j)
    are optional PyTorch restatements over broadcast index tensors (tests, debugging). depends: which of "b", "h"
    mask_mod's result depends on (a string holding those letters; default "bh"): fa classifies key blocks for block
    skipping once per (b, h) that matters, so a mask that ignores h (or b) says so to share the work. A letter left
    out wrongly gives wrong results."""

    def __init__(
        self,
        mask_mod: Optional[str] = None,
        score_mod: Optional[str] = None,
        buffers: Sequence = (),
        scalars: Sequence[float] = (),
        iscalars: Sequence[int] = (),
        reference_mask: Optional[Callable] = None,
        reference_score: Optional[Callable] = None,
        depends: str = "bh",
        score_mod_grad: Optional[str] = None,
    ):
        if set(depends) - set("bh"):
            raise ValueError(f"fa: depends holds the letters 'b' and 'h' only, got {depends!r}")
        self.depends = depends
        if len(buffers) > S.FA_MAX_USER_BUFFERS:
            raise ValueError(f"fa: at most {S.FA_MAX_USER_BUFFERS} mods buffers, got {len(buffers)}")
        if len(scalars) > S.FA_MAX_USER_SCALARS or len(iscalars) > S.FA_MAX_USER_SCALARS:
            raise ValueError(f"fa: at most {S.FA_MAX_USER_SCALARS} scalars and iscalars each")
        for t in buffers:
            if t.dim() > 4:
                raise ValueError(f"fa: a mods buffer has at most 4 dims, got {tuple(t.shape)}")
        if score_mod_grad is not None and score_mod is None:
            raise ValueError("fa: score_mod_grad is the derivative of score_mod: give a score_mod too")
        self.mask_mod, self.score_mod, self.score_mod_grad = mask_mod, score_mod, score_mod_grad
        self.buffers = list(buffers)
        self.scalars = [float(x) for x in scalars]
        self.iscalars = [int(x) for x in iscalars]
        self.reference_mask, self.reference_score = reference_mask, reference_score

    def __repr__(self):
        return (
            f"fa.Mods(mask_mod={self.mask_mod!r}, score_mod={self.score_mod!r}, "
            f"score_mod_grad={self.score_mod_grad!r}, buffers={[tuple(t.shape) for t in self.buffers]}, "
            f"scalars={self.scalars}, iscalars={self.iscalars})"
        )

    def changed(self) -> None:
        """Say that a buffer's contents changed where PyTorch's version counter cannot see it (written through .data,
        DLPack or a raw pointer): the next call classifies afresh. In-place PyTorch ops need no call."""
        forget_contents(self.buffers)

    def depends_bits(self) -> int:
        return (S.FA_MOD_DEPENDS_BATCH if "b" in self.depends else 0) | (
            S.FA_MOD_DEPENDS_HEAD if "h" in self.depends else 0
        )

    def to_struct(self, device) -> tuple[S.Mods, list]:
        """The fa_mods struct and what it keeps alive (encoded strings, contiguous-or-strided buffers)."""
        from . import _lib

        m = S.Mods()
        _lib.check(_lib.lib().fa_mods_init(ctypes.byref(m)))
        keep = []
        for name in ("mask_mod", "score_mod", "score_mod_grad"):
            src = getattr(self, name)
            if src is not None:
                b = src.encode()
                keep.append(b)
                setattr(m, name, b)
        m.mask_mod_depends = self.depends_bits()
        m.num_buffers = len(self.buffers)
        for n, t in enumerate(self.buffers):
            if t.device != device:
                raise ValueError(f"fa: mods buffer {n} is on {t.device}, the attention on {device}")
            ub = m.buffers[n]
            ub.ptr = t.data_ptr() or None
            ub.dtype = _dtype_code(t)
            ub.rank = t.dim()
            for d in range(t.dim()):
                ub.shape[d] = t.shape[d]
                ub.stride[d] = t.stride(d)
            keep.append(t)
        for n, x in enumerate(self.scalars):
            m.scalars[n] = x
        for n, x in enumerate(self.iscalars):
            m.iscalars[n] = x
        return m, keep


# ---- ready mods ------------------------------------------------------------------------------------------------------
def document(q_doc, k_doc=None, causal: bool = True) -> Mods:
    """Document masking over packed sequences: query i sees key j only inside the same document. q_doc / k_doc:
    int32 [S] or [B, S] document ids of the query and key positions (k_doc None: the same as q_doc). With causal,
    also j <= i (use with Sq == Sk)."""
    import torch

    k_doc = q_doc if k_doc is None else k_doc
    for t in (q_doc, k_doc):
        if t.dtype != torch.int32:
            raise TypeError(f"fa: document ids must be int32, got {t.dtype}")

    def at(buf: int, t) -> str:
        if t.dim() == 1:
            return f"d{buf}[idx{buf} * u.stride[{buf}][0]]"
        return f"d{buf}[b * u.stride[{buf}][0] + idx{buf} * u.stride[{buf}][1]]"

    body = (
        "const fa_buf0_t* d0 = static_cast<const fa_buf0_t*>(u.buf[0]);\n"
        "const fa_buf1_t* d1 = static_cast<const fa_buf1_t*>(u.buf[1]);\n"
        "const int idx0 = i, idx1 = j;\n"
        f"return {at(0, q_doc)} == {at(1, k_doc)}" + (" && j <= i;" if causal else ";")
    )

    def ref(b, h, i, j):
        qd = q_doc if q_doc.dim() == 1 else q_doc[b]
        kd = k_doc if k_doc.dim() == 1 else k_doc[b]
        vis = qd[i] == kd[j]
        return vis & (j <= i) if causal else vis

    per_batch = q_doc.dim() == 2 or k_doc.dim() == 2
    return Mods(mask_mod=body, buffers=[q_doc, k_doc], reference_mask=ref, depends="b" if per_batch else "")


def prefix_lm(prefix: int) -> Mods:
    """Prefix-LM: the first `prefix` keys are visible to every query, the rest causally (j <= i)."""
    return Mods(
        mask_mod="return j <= i || j < u.iscalar[0];",
        iscalars=[prefix],
        reference_mask=lambda b, h, i, j: (j <= i) | (j < prefix),
        depends="",
    )


def sinks_window(sinks: int, window: int) -> Mods:
    """StreamingLLM: the first `sinks` keys plus the last `window` keys up to the query (causal)."""
    return Mods(
        mask_mod="return j <= i && (j < u.iscalar[0] || i - j < u.iscalar[1]);",
        iscalars=[sinks, window],
        reference_mask=lambda b, h, i, j: (j <= i) & ((j < sinks) | (i - j < window)),
        depends="",
    )


def chunked(chunk: int) -> Mods:
    """Chunked local attention (Llama 4): causal inside chunks of `chunk` positions."""
    return Mods(
        mask_mod="return j <= i && i / u.iscalar[0] == j / u.iscalar[0];",
        iscalars=[chunk],
        reference_mask=lambda b, h, i, j: (j <= i) & (i // chunk == j // chunk),
        depends="",
    )


def relative_bias(table, max_distance: int) -> Mods:
    """A learned relative-position bias: s + table[h, clamp(i - j, -max_distance, max_distance) + max_distance];
    table float32 [Hq, 2 * max_distance + 1] (T5-style buckets precomputed into it). Derivative: 1 (the table gets
    no gradient)."""
    import torch

    if table.dtype != torch.float32 or table.dim() != 2 or table.shape[1] != 2 * max_distance + 1:
        raise ValueError(
            f"fa: relative_bias wants float32 [heads_q, {2 * max_distance + 1}], got {table.dtype} {tuple(table.shape)}"
        )
    body = (
        "const float* t = static_cast<const float*>(u.buf[0]);\n"
        "const int r = min(max(i - j, -u.iscalar[0]), u.iscalar[0]) + u.iscalar[0];\n"
        "return s + t[h * u.stride[0][0] + r * u.stride[0][1]];"
    )

    def ref(s, b, h, i, j):
        r = (i - j).clamp(-max_distance, max_distance) + max_distance
        return s + table[h][r]

    return Mods(
        score_mod=body, score_mod_grad="return 1.0f;", buffers=[table], iscalars=[max_distance], reference_score=ref
    )


def softcap(cap: float) -> Mods:
    """Logit soft-capping (Gemma 2, Grok): cap * tanh(s / cap), the built-in softcap restated as user code (compose
    it with other code by copying the bodies). Derivative: 1 - tanh^2(s / cap)."""
    import torch

    return Mods(
        score_mod="return u.scalar[0] * tanhf(s / u.scalar[0]);",
        score_mod_grad="const float t = tanhf(s / u.scalar[0]);\nreturn 1.0f - t * t;",
        scalars=[cap],
        reference_score=lambda s, b, h, i, j: cap * torch.tanh(s / cap),
    )
