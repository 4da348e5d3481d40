"""The frozen tiny Llama of ``model.py`` as LoRA fine-tuning usually holds it: the frozen base in bf16 (loaded with
``torch_dtype=torch.bfloat16``), the trainable tensors in fp32 (peft's ``autocast_adapter_dtype``). FSDP2 keeps each
frozen shard in bf16; only the trainable ones need one dtype per unit (``FSDPParamGroup._init_mp_dtypes``)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from autoshard.models import load_source

_LLAMA = load_source("tiny-llama")


def model() -> nn.Module:
    net = _LLAMA.build()
    for name, p in net.named_parameters():
        p.requires_grad = ".self_attn." in name or name.startswith("lm_head.")
        if not p.requires_grad:
            p.data = p.data.to(torch.bfloat16)
    return net


def batch(batch_size: int, seq_len: int = 32) -> Any:
    return _LLAMA.batch(batch_size, seq_len=seq_len)
