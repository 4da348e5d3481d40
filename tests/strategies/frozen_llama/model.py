"""The catalog's tiny Llama (transformers' LlamaForCausalLM) fine-tuned as adapters are: everything frozen but the
attention projections and the LM head, so FSDP2 shards and gathers every parameter and reduces and steps a few."""

from __future__ import annotations

from typing import Any

from torch import nn

from autoshard.models import load_source

_LLAMA = load_source("tiny-llama")


def model() -> nn.Module:
    net = _LLAMA.build()
    for name, p in net.named_parameters():
        p.requires_grad = ".self_attn." in name or name.startswith("lm_head.")
    return net


def batch(batch_size: int, seq_len: int = 32) -> Any:
    return _LLAMA.batch(batch_size, seq_len=seq_len)
