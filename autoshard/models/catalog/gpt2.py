"""GPT-2 (Radford et al. 2019) as a causal language model with its LM head tied to the token embedding.

Architecture: learned absolute positions, pre-LayerNorm blocks, fused QKV projection with biases, a 4x MLP
with tanh-approximated GELU, a final LayerNorm. Parameter counts equal ``GPT2LMHeadModel`` in Hugging Face
transformers (the head shares the token-embedding matrix, so it adds nothing).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from autoshard.models.catalog import register
from autoshard.models.catalog._common import (
    entry_metadata,
    init_normal_,
    layered_source,
    merge_heads,
    random_state_restored,
    reset_parameters_,
    split_heads,
    token_batch,
    token_loss,
    whole_parameters,
)
from autoshard.models.source import ModelSource


@dataclass(frozen=True, kw_only=True, slots=True)
class GPT2Config:
    """GPT-2 hyperparameters; defaults are ``gpt2`` (124M).

    Source: https://huggingface.co/openai-community/gpt2/blob/main/config.json
    """

    vocab_size: int = 50257
    """``vocab_size``."""
    max_positions: int = 1024
    """``n_positions``: the learned position table, hence the longest sequence."""
    hidden_size: int = 768
    """``n_embd``."""
    num_layers: int = 12
    """``n_layer``."""
    num_heads: int = 12
    """``n_head``."""
    dropout: float = 0.1
    """``embd_pdrop`` = ``attn_pdrop`` = ``resid_pdrop``."""
    layer_norm_eps: float = 1e-5
    """``layer_norm_epsilon``."""
    initializer_range: float = 0.02
    """``initializer_range``."""


class GPT2Attention(nn.Module):
    """Causal multi-head self-attention with a fused QKV projection."""

    def __init__(self, config: GPT2Config) -> None:
        super().__init__()
        self.num_heads = config.num_heads
        self.dropout_p = config.dropout
        self.c_attn = nn.Linear(config.hidden_size, 3 * config.hidden_size)
        self.c_proj = nn.Linear(config.hidden_size, config.hidden_size)
        self.resid_dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Attend over ``x`` of shape ``(batch, seq, hidden)``."""
        q, k, v = (split_heads(t, self.num_heads) for t in self.c_attn(x).chunk(3, dim=-1))
        out = F.scaled_dot_product_attention(
            q, k, v, dropout_p=self.dropout_p if self.training else 0.0, is_causal=True
        )
        return self.resid_dropout(self.c_proj(merge_heads(out)))


class GPT2MLP(nn.Module):
    """``hidden → 4·hidden → hidden`` with tanh-approximated GELU (``gelu_new``)."""

    def __init__(self, config: GPT2Config) -> None:
        super().__init__()
        self.c_fc = nn.Linear(config.hidden_size, 4 * config.hidden_size)
        self.c_proj = nn.Linear(4 * config.hidden_size, config.hidden_size)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the MLP position-wise."""
        return self.dropout(self.c_proj(F.gelu(self.c_fc(x), approximate="tanh")))


class GPT2Block(nn.Module):
    """One pre-LayerNorm transformer block; the model repeats it ``num_layers`` times."""

    def __init__(self, config: GPT2Config) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.attn = GPT2Attention(config)
        self.ln_2 = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.mlp = GPT2MLP(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the block to ``(batch, seq, hidden)``."""
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2LMHeadModel(nn.Module):
    """GPT-2 returning next-token logits ``(batch, seq, vocab)``; the LM head is tied to ``wte``."""

    def __init__(self, config: GPT2Config) -> None:
        super().__init__()
        self.config = config
        with random_state_restored():  # init_weights() redraws these layers' default initialisation
            self.wte = nn.Embedding(config.vocab_size, config.hidden_size)
            self.wpe = nn.Embedding(config.max_positions, config.hidden_size)
            self.drop = nn.Dropout(config.dropout)
            self.h = nn.ModuleList(GPT2Block(config) for _ in range(config.num_layers))
            self.ln_f = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
            self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
            self.lm_head.weight = self.wte.weight
        self.init_weights()

    def init_weights(self) -> None:
        """(Re)initialise every parameter in place, as the constructor does.

        Works on plain tensors, on DTensor shards (e.g. after ``to_empty`` on a model built on ``meta``) and on
        ZeRO-3 partitions made by ``deepspeed.zero.Init`` (see :func:`whole_parameters`).
        torch's default initialisation is redrawn first (and then overwritten) so that the random stream, and
        with it a seeded build, is the same as when each layer initialised itself at construction.
        """
        c = self.config
        reset_parameters_(self)
        init_normal_(self, c.initializer_range)
        # GPT-2 scales the residual output projections by 1/sqrt(2·n_layer) (Radford et al. 2019, §2.3).
        for module in self.modules():
            if isinstance(module, (GPT2Attention, GPT2MLP)):
                with whole_parameters(module.c_proj.weight):
                    nn.init.normal_(module.c_proj.weight, std=c.initializer_range / math.sqrt(2 * c.num_layers))

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        """Logits for ``input_ids`` ``(batch, seq)``; ``labels`` is ignored (the entry's loss uses it)."""
        positions = torch.arange(input_ids.size(1), device=input_ids.device)
        x = self.drop(self.wte(input_ids) + self.wpe(positions))
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def _entry(name: str, config: GPT2Config, *, reference: str, published_parameters: int | None) -> ModelSource:
    metadata = entry_metadata(reference, published_parameters, "GPT2LMHeadModel (transformers), lm_head tied to wte")
    return layered_source(
        name,
        config,
        build=GPT2LMHeadModel,
        batch_fn=functools.partial(token_batch, vocab_size=config.vocab_size, seq_len=config.max_positions),
        loss_fn=token_loss,
        # GPT-2 was trained on 1024-token contexts (Radford et al. 2019, §2.3), the size of its position table.
        default_seq_len=config.max_positions,
        max_seq_len=config.max_positions,
        metadata=metadata,
    )


# Hyperparameters (n_embd, n_layer, n_head) from each model's Hugging Face config.json, linked in `reference`;
# parameter counts are those of transformers' GPT2LMHeadModel for the same configs (tied head counted once).
@register("gpt2")
def gpt2() -> ModelSource:
    """GPT-2 small, 124M parameters."""
    return _entry(
        "gpt2",
        GPT2Config(),
        reference="https://huggingface.co/openai-community/gpt2/blob/main/config.json",
        published_parameters=124_439_808,
    )


@register("gpt2-medium")
def gpt2_medium() -> ModelSource:
    """GPT-2 medium, 355M parameters."""
    return _entry(
        "gpt2-medium",
        GPT2Config(hidden_size=1024, num_layers=24, num_heads=16),
        reference="https://huggingface.co/openai-community/gpt2-medium/blob/main/config.json",
        published_parameters=354_823_168,
    )


@register("gpt2-large")
def gpt2_large() -> ModelSource:
    """GPT-2 large, 774M parameters."""
    return _entry(
        "gpt2-large",
        GPT2Config(hidden_size=1280, num_layers=36, num_heads=20),
        reference="https://huggingface.co/openai-community/gpt2-large/blob/main/config.json",
        published_parameters=774_030_080,
    )


@register("gpt2-xl")
def gpt2_xl() -> ModelSource:
    """GPT-2 XL, 1.5B parameters."""
    return _entry(
        "gpt2-xl",
        GPT2Config(hidden_size=1600, num_layers=48, num_heads=25),
        reference="https://huggingface.co/openai-community/gpt2-xl/blob/main/config.json",
        published_parameters=1_557_611_200,
    )


@register("tiny-gpt2")
def tiny_gpt2() -> ModelSource:
    """A GPT-2-shaped model of 0.2M parameters for fast tests."""
    return _entry(
        "tiny-gpt2",
        GPT2Config(vocab_size=1024, max_positions=128, hidden_size=64, num_layers=2, num_heads=4),
        reference="autoshard test model: GPT-2 architecture, tiny dimensions",
        published_parameters=None,
    )
