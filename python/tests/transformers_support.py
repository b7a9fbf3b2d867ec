"""What the transformers backend's tests share: fa.attention restated in PyTorch (attention_ref: fa's bottom-right
masks, softcap, the backend's mask_mods through their reference masks, varlen one sequence at a time), so that the
backend's plumbing runs on the CPU; tiny random configs of the decoder models the backend serves, those the installed
transformers has."""

import importlib
import importlib.util

# torch and transformers only inside the functions: CI collects the tests that import this module without either
HAS_TRANSFORMERS = importlib.util.find_spec("transformers") is not None


def fake_attention(q, k, v, *, causal=False, window=(-1, -1), softcap=0.0, scale=None, mods=None, **varlen):
    """fa.attention's result for the arguments the backend passes, in q's precision (bshd, or varlen [T, H, D])."""
    import torch

    from attention_ref import attention_ref

    kw = dict(causal=causal, window=window, softcap=softcap, scale=scale, mods=mods, upcast=False)
    cu_q, cu_k = varlen.get("cu_seqlens_q"), varlen.get("cu_seqlens_k")
    if cu_q is None:
        return attention_ref(q, k, v, **kw)[0]
    assert cu_q.dtype == torch.int32 and cu_k.dtype == torch.int32 and mods is None
    outs = []
    for s in range(cu_q.numel() - 1):
        a, b, c, d = int(cu_q[s]), int(cu_q[s + 1]), int(cu_k[s]), int(cu_k[s + 1])
        assert b - a <= varlen["max_seqlen_q"] and d - c <= varlen["max_seqlen_k"]
        outs.append(attention_ref(q[None, a:b], k[None, c:d], v[None, c:d], **kw)[0][0])
    return torch.cat(outs)


# model name -> (module, config class, causal LM class, config overrides): 2 layers, hidden 64 to 256, GQA, the
# features each family adds (sliding windows, softcap, query_pre_attn_scalar, q/k norms, sinks)
FAMILIES = {
    "llama": ("llama", "LlamaConfig", "LlamaForCausalLM", {}),
    "mistral": ("mistral", "MistralConfig", "MistralForCausalLM", {"sliding_window": 5}),
    "qwen2": (
        "qwen2",
        "Qwen2Config",
        "Qwen2ForCausalLM",
        {"use_sliding_window": True, "sliding_window": 5, "max_window_layers": 1},
    ),
    "qwen3": ("qwen3", "Qwen3Config", "Qwen3ForCausalLM", {}),
    "gemma2": (
        "gemma2",
        "Gemma2Config",
        "Gemma2ForCausalLM",
        {
            "sliding_window": 5,
            "attn_logit_softcapping": 20.0,
            "final_logit_softcapping": None,
            "query_pre_attn_scalar": 48,
        },
    ),  # fmt: skip
    "gemma3": (
        "gemma3",
        "Gemma3TextConfig",
        "Gemma3ForCausalLM",
        {"sliding_window": 5, "sliding_window_pattern": 2, "query_pre_attn_scalar": 48},
    ),
    "gpt_oss": (
        "gpt_oss",
        "GptOssConfig",
        "GptOssForCausalLM",
        {"sliding_window": 5, "num_local_experts": 4, "num_experts_per_tok": 2, "max_position_embeddings": 131072},
    ),
}


def family_classes(name: str):
    """(config class, model class, overrides) of a family, or None where the installed transformers lacks it."""
    module, cfg_name, model_name, overrides = FAMILIES[name]
    try:
        mod = importlib.import_module(f"transformers.models.{module}")
        return getattr(mod, cfg_name), getattr(mod, model_name), overrides
    except (ImportError, AttributeError):
        return None


def tiny_config(name: str, hidden: int = 64, heads: int = 4, kv_heads: int = 2, head_dim: int = 16, vocab: int = 128,
                layers: int = 2, **extra):  # fmt: skip
    """A tiny random config of family `name` (2 layers, GQA heads / kv_heads, attention dropout 0)."""
    cfg_cls, _, overrides = family_classes(name)
    kw = dict(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        attention_dropout=0.0,
        pad_token_id=0,
        tie_word_embeddings=False,
    )
    kw.update(overrides)
    kw.update(extra)
    cfg = cfg_cls(**kw)
    if name == "gemma3" and hasattr(cfg, "layer_types"):  # alternate sliding / full whatever the pattern's name
        cfg.layer_types = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(layers)]
    return cfg


def tiny_model(name: str, attn: str, dtype=None, seed: int = 0, device="cpu", **extra):
    """The tiny model of family `name` with random weights (seeded), attention implementation `attn`, in `dtype`
    (None: float64)."""
    import torch

    dtype = torch.float64 if dtype is None else dtype
    _, model_cls, _ = family_classes(name)
    torch.manual_seed(seed)
    model = model_cls._from_config(tiny_config(name, **extra), attn_implementation=attn)
    return model.to(dtype=dtype, device=device).eval()
