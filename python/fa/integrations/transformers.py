"""fa as a Hugging Face transformers attention backend (a first cut, not yet run on a GPU: issue 42):

    import fa.integrations.transformers as fa_hf
    fa_hf.register()                                   # name "fa"
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="fa")

register() installs attention_forward under the name in transformers' AttentionInterface and a mask function of
flash-attention's kind in its AttentionMaskInterface (the 2-D padding mask, or None). Every decision is
fa.integrations.transformers_rules.plan's (its docstring holds the rules); this module only does what the Call says.
Needs torch and transformers (imported here, never by `import fa`)."""

from typing import Optional

import torch

from .._torch_ops import attention
from ..mods import Mods
from . import transformers_rules as rules

KEY_PADDING = (
    "return static_cast<const fa_buf0_t*>(u.buf[0])[b * u.stride[0][0] + j * u.stride[0][1]] != 0;"  # mask[b, j]
)


def padding_mask(
    batch_size: int,
    cache_position: torch.Tensor,
    kv_length: int,
    kv_offset: int = 0,
    mask_function=None,
    attention_mask: Optional[torch.Tensor] = None,
    **kwargs,
) -> Optional[torch.Tensor]:
    """The mask function: the 2-D padding mask over the last kv_length positions, None when nothing is padded and
    the mask covers the keys (kept when it is shorter: a static cache's used length)."""
    if attention_mask is None:
        return None
    m = attention_mask[:, -kv_length:]
    if m.shape[1] == kv_length and bool(m.all()):
        return None
    return m


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
    call = rules.plan(
        query.shape,
        key.shape,
        value.shape,
        attention_mask=None if attention_mask is None else tuple(attention_mask.shape),
        is_causal=bool(is_causal),
        dropout=dropout,
        scaling=scaling,
        sliding_window=sliding_window,
        softcap=softcap,
        s_aux=None if s_aux is None else tuple(s_aux.shape),
    )
    q = query.transpose(1, 2)
    k = key[:, :, : call.keys].transpose(1, 2)
    v = value[:, :, : call.keys].transpose(1, 2)
    mods = None
    if call.key_padding:
        mods = Mods(mask_mod=KEY_PADDING, buffers=[attention_mask[:, : call.keys]], depends="b")
    o = attention(
        q,
        k,
        v,
        causal=call.causal,
        window=call.window,
        softcap=call.softcap,
        scale=call.scale,
        mods=mods,
        sinks=s_aux if call.sinks else None,
    )  # [B, Sq, Hq, Dv]
    return o, None


def register(name: str = "fa") -> None:
    """attn_implementation=name runs attention_forward, its masks made by padding_mask."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(name, attention_forward)
    AttentionMaskInterface.register(name, padding_mask)
