"""Small Hugging Face architectures built from transformers' own config classes: models this project did not
write, for the memory checks (``benchmarks/memory_accuracy.py --grid hf``, ``tests/strategies/test_fsdp_hf.py``).

Each is a few blocks of width 128 with a 4,096-word vocabulary (large beside the width, as in published models,
so that the loss's and the head's tensors count), in transformers' own classes: grouped-query attention (Llama),
tied heads (Qwen2, Gemma-2), a mixture of experts (Mixtral), GPT-2's ``Conv1D`` and OPT's learned positions. A
model is named ``hf:NAME`` in the grid; :func:`config_path` writes its ``config.json``.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

_DECODER: dict[str, Any] = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=3, num_attention_heads=4,
                                num_key_value_heads=2, vocab_size=4096, max_position_embeddings=256,
                                pad_token_id=None)

ARCHITECTURES: dict[str, tuple[str, str, dict[str, Any]]] = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", dict(_DECODER, tie_word_embeddings=False)),
    "qwen2-tied": ("Qwen2Config", "Qwen2ForCausalLM", dict(_DECODER, tie_word_embeddings=True)),
    "gemma2-tied": ("Gemma2Config", "Gemma2ForCausalLM", dict(_DECODER, head_dim=32, tie_word_embeddings=True)),
    "mixtral": ("MixtralConfig", "MixtralForCausalLM", dict(_DECODER, num_local_experts=4, num_experts_per_tok=2)),
    "gpt2": ("GPT2Config", "GPT2LMHeadModel", dict(n_embd=128, n_layer=3, n_head=4, vocab_size=4096,
                                                    n_positions=256)),
    "opt": ("OPTConfig", "OPTForCausalLM", dict(hidden_size=128, ffn_dim=256, num_hidden_layers=3,
                                                 num_attention_heads=4, vocab_size=4096, max_position_embeddings=256,
                                                 word_embed_proj_dim=128)),
}
"""Name -> (transformers config class, architecture, the class's arguments)."""

PREFIX = "hf:"


def config_path(name: str, root: Path | None = None) -> Path:
    """``root/NAME/config.json`` (default root: a folder in the temporary directory), written from the config
    class with the architecture named, as a Hub ``config.json`` names it."""
    import transformers

    cls, architecture, kwargs = ARCHITECTURES[name]
    path = (root or Path(tempfile.gettempdir()) / "autoshard-hf-architectures") / name / "config.json"
    config = getattr(transformers, cls)(**kwargs).to_dict()
    config["architectures"] = [architecture]
    path.parent.mkdir(parents=True, exist_ok=True)
    # Whole or not at all: another process may be reading the file it replaces (the grid's workers read it).
    with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False, encoding="utf-8") as tmp:
        tmp.write(json.dumps(config, indent=1, sort_keys=True))
    os.replace(tmp.name, path)
    return path


def resolve(model: str) -> str:
    """``hf:NAME`` as the path of its written ``config.json``; any other model as it is."""
    return str(config_path(model[len(PREFIX):])) if model.startswith(PREFIX) else model
