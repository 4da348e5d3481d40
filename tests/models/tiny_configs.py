"""The tiny decoder shape the Hugging Face source tests share (a few thousand parameters, two blocks)."""

from __future__ import annotations

from typing import Any

TINY_DECODER: dict[str, Any] = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 128,
    "max_position_embeddings": 64,
}
"""Sizes valid for Llama-style configs (Llama, Mistral, Qwen2, Gemma, Phi-3, ...)."""

TINY_LLAMA: dict[str, Any] = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], **TINY_DECODER}
"""A complete tiny Llama config.json."""
