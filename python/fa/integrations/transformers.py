"""fa as a Hugging Face transformers attention backend (issue 42):

    import fa.integrations.transformers as fa_hf
    fa_hf.register()                                   # name "fa"
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="fa")

register() installs attention_forward under the name in transformers' AttentionInterface and padding_mask, a mask
function of flash-attention's kind (the 2-D padding mask, or None; never a dense mask), in its
AttentionMaskInterface. Every decision is fa.integrations.transformers_rules' (plan for the attention, mask_plan for
the mask function; their docstring holds the rules); this module only does what they say. Needs torch and
transformers (imported here, never by `import fa`).

Attention sinks (gpt-oss's s_aux): SINKS says whether fa.attention takes `sinks` (a float32 [heads_q] of sink
logits); it does since the sinks landed, and s_aux runs as fa's sinks. An fa without them raises fa.NotSupported
for a call with s_aux (transformers_rules.plan).
"""

import inspect
import weakref
from typing import Optional

import torch

from .._torch_ops import attention
from ..mods import Mods
from . import transformers_rules as rules

SINKS = "sinks" in inspect.signature(attention).parameters  # the hook: fa.attention(..., sinks=float32 [heads_q])

KEY_PADDING = (
    "return static_cast<const fa_buf0_t*>(u.buf[0])[b * u.stride[0][0] + j * u.stride[0][1]] != 0;"  # mask[b, j]
)
SAME_DOCUMENT = (  # doc[b, i] == doc[b, j]: query i and key j belong to one packed sequence
    "const fa_buf0_t* d = static_cast<const fa_buf0_t*>(u.buf[0]) + b * u.stride[0][0];\n"
    "return d[i * u.stride[0][1]] == d[j * u.stride[0][1]];"
)


def key_padding_mods(mask: torch.Tensor) -> Mods:
    """The mask_mod of a 2-D padding mask [B, Lm] over the first Lm keys (its PyTorch restatement for the tests)."""
    return Mods(
        mask_mod=KEY_PADDING, buffers=[mask], depends="b", reference_mask=lambda b, h, i, j: mask[b][j] & (i >= 0)
    )


def document_mods(docs: torch.Tensor) -> Mods:
    """The mask_mod of packed sequences' document ids [1, S] (its PyTorch restatement for the tests)."""
    return Mods(
        mask_mod=SAME_DOCUMENT, buffers=[docs], depends="b", reference_mask=lambda b, h, i, j: docs[b][i] == docs[b][j]
    )


def _broadcast_true(batch: int, length: int, device) -> torch.Tensor:
    """A [batch, length] True of strides (0, 0): the used keys of a mask that hides nothing (only cut to)."""
    return torch.ones((), dtype=torch.bool, device=device).expand(batch, length)


def is_broadcast_true(mask: torch.Tensor) -> bool:
    """Whether `mask` is what _broadcast_true makes (a 2-D mask of strides (0, 0); the mask function makes those of
    True only)."""
    return mask.dim() == 2 and mask.stride() == (0, 0)


def padding_mask(
    batch_size: int,
    q_length: int,
    kv_length: int,
    q_offset=0,
    kv_offset: int = 0,
    mask_function=None,
    attention_mask: Optional[torch.Tensor] = None,
    device=None,
    **kwargs,
) -> Optional[torch.Tensor]:
    """The mask function (transformers' AttentionMaskInterface): the 2-D mask [batch, Lm] of the layer's used keys,
    or None (transformers_rules.mask_plan)."""
    offset_on_device = isinstance(q_offset, torch.Tensor)
    mp = rules.mask_plan(
        q_length,
        kv_length,
        None if offset_on_device else q_offset,
        kv_offset,
        None if attention_mask is None else attention_mask.shape[-1],
        torch.compiler.is_compiling(),
        overlay=bool(kwargs.get("use_vmap", False)),
    )
    if device is None:
        device = attention_mask.device if attention_mask is not None else getattr(q_offset, "device", "cpu")
    if mp.source == "none":
        return None
    if mp.source == "used":
        used = mp.length if mp.length is not None else int(q_offset) + q_length - kv_offset
        return None if used >= kv_length else _broadcast_true(batch_size, used, device)
    if mp.device_used:
        used = q_offset + q_length - kv_offset
        return (torch.arange(kv_length, device=device) < used)[None].expand(batch_size, kv_length)
    m = attention_mask[:, -kv_length:]
    if mp.check_all and bool(m.all()):
        return None if mp.length == kv_length else _broadcast_true(m.shape[0], mp.length, m.device)
    if mp.pad_to is not None:
        m = torch.cat([m, m.new_zeros((m.shape[0], mp.pad_to - mp.length))], dim=1)
    return m.contiguous() if is_broadcast_true(m) else m  # a caller's broadcast mask is no broadcast True of ours


_DOCS: dict = {}  # one entry: id(position_ids) -> (weakref, version, document ids or None)


def _document_ids(position_ids: torch.Tensor) -> torch.Tensor:
    """int32 [1, S]: the packed sequence of each position of position_ids [1, S] (a new one where a position does
    not follow the one before), 0 for the first."""
    pos = position_ids.reshape(1, -1)
    step = torch.diff(pos, dim=-1, prepend=pos[:, :1] - 1)
    return (step != 1).cumsum(-1).to(torch.int32)


def packed_documents(position_ids: Optional[torch.Tensor], batch: int, seqlen: int) -> Optional[torch.Tensor]:
    """The document ids of packed sequences (transformers' padding-free training: batch 1, position_ids restarting
    inside the row), or None: one sequence, or nothing to tell. Reads the ids on the host once per position_ids
    tensor (as transformers' flash path does); every layer of a forward shares the answer (and so fa's mask
    classification)."""
    if position_ids is None or batch != 1 or seqlen < 2 or position_ids.numel() != seqlen:
        return None
    if torch.compiler.is_compiling():
        docs = _document_ids(position_ids)
        return docs if bool(docs[0, -1] != 0) else None
    ent = _DOCS.get(id(position_ids))
    if ent is not None and ent[0]() is position_ids and ent[1] == position_ids._version:
        return ent[2]
    docs = _document_ids(position_ids)
    docs = docs if bool(docs[0, -1] != 0) else None
    _DOCS.clear()
    _DOCS[id(position_ids)] = (weakref.ref(position_ids), position_ids._version, docs)
    return docs


def _varlen_shapes(kwargs) -> Optional[tuple]:
    names = ("cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k")
    if any(kwargs.get(n) is None for n in names):
        return None
    return tuple(kwargs["cu_seq_lens_q"].shape), tuple(kwargs["cu_seq_lens_k"].shape)


def _run(call: rules.Call, query, key, value, attention_mask, docs, s_aux, kwargs):
    """fa.attention as `call` says: [B, Sq, Hq, Dv]."""
    q = query.transpose(1, 2)
    k = key[:, :, : call.keys].transpose(1, 2)
    v = value[:, :, : call.keys].transpose(1, 2)
    extra = {"sinks": s_aux.float()} if call.sinks else {}
    if call.key_padding:
        extra["mods"] = key_padding_mods(attention_mask)
    elif call.documents:
        extra["mods"] = document_mods(docs)
    if call.varlen:
        max_q, max_k = kwargs["max_length_q"], kwargs["max_length_k"]
        extra.update(
            cu_seqlens_q=kwargs["cu_seq_lens_q"].to(torch.int32),
            cu_seqlens_k=kwargs["cu_seq_lens_k"].to(torch.int32),
            max_seqlen_q=int(max_q),
            max_seqlen_k=int(max_k),
        )
        q, k, v = q[0], k[0], v[0]
    o = attention(
        q, k, v, causal=call.causal, window=call.window, softcap=call.softcap, scale=call.scale, **extra
    )  # [B, Sq, Hq, Dv] ([Sq, Hq, Dv] varlen)
    return o[None] if call.varlen else o


def attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: Optional[torch.Tensor],
    dropout: float = 0.0,
    scaling: Optional[float] = None,
    sliding_window: Optional[int] = None,
    softcap: Optional[float] = None,
    **kwargs,
):
    """transformers' attention interface: query [B, Hq, Sq, D], key / value [B, Hkv, Skv, D] -> ([B, Sq, Hq, Dv],
    None)."""
    is_causal = kwargs.get("is_causal")
    if is_causal is None:
        is_causal = getattr(module, "is_causal", True)
    s_aux = kwargs.get("s_aux")
    varlen = _varlen_shapes(kwargs)
    docs = None
    if attention_mask is None and varlen is None:
        docs = packed_documents(kwargs.get("position_ids"), query.shape[0], query.shape[2])
    call = rules.plan(
        query.shape,
        key.shape,
        value.shape,
        attention_mask=None if attention_mask is None else tuple(attention_mask.shape),
        mask_all_true=attention_mask is not None and is_broadcast_true(attention_mask),
        is_causal=bool(is_causal),
        dropout=dropout,
        scaling=scaling,
        sliding_window=sliding_window,
        softcap=softcap,
        s_aux=None if s_aux is None else tuple(s_aux.shape),
        sinks_supported=SINKS,
        packed=docs is not None,
        varlen=varlen,
    )
    return _run(call, query, key, value, attention_mask, docs, s_aux, kwargs), None


def register(name: str = "fa") -> None:
    """attn_implementation=name runs attention_forward, its masks made by padding_mask."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(name, attention_forward)
    AttentionMaskInterface.register(name, padding_mask)
