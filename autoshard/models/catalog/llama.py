"""Llama 2 / Llama 3 (Touvron et al. 2023, arXiv:2307.09288; Meta 2024) and Mistral 7B (Jiang et al. 2023,
arXiv:2310.06825) as causal language models.

Architecture: token embedding, pre-RMSNorm decoder layers with rotary position embeddings (RoPE),
grouped-query attention (``num_kv_heads`` ≤ ``num_heads``) and a SwiGLU MLP, no biases, a final RMSNorm and an
untied LM head. Mistral is the same network plus sliding-window attention. Parameter counts equal
``LlamaForCausalLM`` / ``MistralForCausalLM`` in Hugging Face transformers.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from autoshard.models.catalog import register
from autoshard.models.catalog._common import (
    RMSNorm,
    entry_metadata,
    init_normal_,
    layered_source,
    merge_heads,
    random_state_restored,
    reset_parameters_,
    split_heads,
    token_batch,
    token_loss,
)
from autoshard.models.source import ModelSource


@dataclass(frozen=True, kw_only=True, slots=True)
class LlamaConfig:
    """Llama/Mistral hyperparameters; defaults are ``llama-2-7b``.

    Source: https://huggingface.co/meta-llama/Llama-2-7b-hf/blob/main/config.json
    """

    vocab_size: int = 32000
    """``vocab_size``."""
    hidden_size: int = 4096
    """``hidden_size``."""
    intermediate_size: int = 11008
    """``intermediate_size`` (SwiGLU width)."""
    num_layers: int = 32
    """``num_hidden_layers``."""
    num_heads: int = 32
    """``num_attention_heads``."""
    num_kv_heads: int = 32
    """``num_key_value_heads``; fewer than ``num_heads`` means grouped-query attention."""
    rope_theta: float = 10000.0
    """``rope_theta``: the RoPE base."""
    rms_norm_eps: float = 1e-5
    """``rms_norm_eps``."""
    sliding_window: int | None = None
    """``sliding_window``: each token attends to at most this many (itself included); ``None`` for Llama."""
    initializer_range: float = 0.02
    """``initializer_range``."""

    @property
    def head_dim(self) -> int:
        """Per-head size, ``hidden_size / num_heads``."""
        return self.hidden_size // self.num_heads


def rope_cos_sin(seq_len: int, head_dim: int, theta: float, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """RoPE tables ``cos, sin`` of shape ``(seq_len, head_dim)`` in float32 (Su et al. 2021, arXiv:2104.09864).

    Frequencies ``theta^(-2i/head_dim)`` for ``i < head_dim/2``, laid out twice (first half, second half) to
    match :func:`apply_rope`'s half rotation, the layout of the Hugging Face Llama checkpoints.
    """
    inv_freq = theta ** (-torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(seq_len, device=device, dtype=torch.float32), inv_freq)
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``(batch, heads, seq, head_dim)`` queries or keys by position; pairs are ``(j, j + head_dim/2)``."""
    first, second = x.chunk(2, dim=-1)
    rotated = torch.cat((-second, first), dim=-1)
    return x * cos.to(x.dtype) + rotated * sin.to(x.dtype)


def sliding_window_mask(seq_len: int, window: int, device: torch.device) -> torch.Tensor:
    """Boolean ``(seq, seq)`` mask, ``True`` where query ``i`` may attend key ``j``: ``i - window < j ≤ i``."""
    positions = torch.arange(seq_len, device=device)
    offset = positions[:, None] - positions[None, :]
    return (offset >= 0) & (offset < window)


class LlamaAttention(nn.Module):
    """Causal grouped-query attention with RoPE and no biases."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.num_heads = config.num_heads
        self.num_kv_heads = config.num_kv_heads
        kv_size = config.num_kv_heads * config.head_dim
        self.q_proj = nn.Linear(config.hidden_size, config.num_heads * config.head_dim, bias=False)
        self.k_proj = nn.Linear(config.hidden_size, kv_size, bias=False)
        self.v_proj = nn.Linear(config.hidden_size, kv_size, bias=False)
        self.o_proj = nn.Linear(config.num_heads * config.head_dim, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """Attend over ``(batch, seq, hidden)``; a boolean ``mask`` replaces the plain causal mask."""
        q = apply_rope(split_heads(self.q_proj(x), self.num_heads), cos, sin)
        k = apply_rope(split_heads(self.k_proj(x), self.num_kv_heads), cos, sin)
        v = split_heads(self.v_proj(x), self.num_kv_heads)
        # Attention dropout is 0 in every published Llama/Mistral config; SDPA shares K/V heads across groups.
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=mask is None, enable_gqa=self.num_kv_heads != self.num_heads
        )
        return self.o_proj(merge_heads(out))


class LlamaMLP(nn.Module):
    """SwiGLU feed-forward: ``down(silu(gate(x)) * up(x))`` (Shazeer 2020, arXiv:2002.05202)."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the MLP position-wise."""
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(nn.Module):
    """One pre-RMSNorm decoder layer; the model repeats it ``num_layers`` times."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = LlamaAttention(config)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = LlamaMLP(config)

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Apply the layer to ``(batch, seq, hidden)`` with the model's RoPE tables and optional mask."""
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class MistralDecoderLayer(LlamaDecoderLayer):
    """Mistral's decoder layer: Llama's, with the sliding window carried by the mask the model passes in."""


class LlamaForCausalLM(nn.Module):
    """Llama returning next-token logits ``(batch, seq, vocab)``; the LM head is a separate matrix."""

    layer_class: type[LlamaDecoderLayer] = LlamaDecoderLayer

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.config = config
        with random_state_restored():  # init_weights() redraws these layers' default initialisation
            self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
            self.layers = nn.ModuleList(self.layer_class(config) for _ in range(config.num_layers))
            self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
            self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.init_weights()

    def init_weights(self) -> None:
        """(Re)initialise every parameter in place, as the constructor does.

        Works on plain tensors, on DTensor shards (e.g. after ``to_empty`` on a model built on ``meta``) and on
        ZeRO-3 partitions made by ``deepspeed.zero.Init`` (see :func:`whole_parameters`).
        torch's default initialisation is redrawn first (and then overwritten) so that the random stream, and
        with it a seeded build, is the same as when each layer initialised itself at construction. The model
        has no buffers: the RoPE tables and the sliding-window mask are computed in :meth:`forward`.
        """
        reset_parameters_(self)
        init_normal_(self, self.config.initializer_range)

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        """Logits for ``input_ids`` ``(batch, seq)``; ``labels`` is ignored (the entry's loss uses it)."""
        seq_len = input_ids.size(1)
        # RoPE tables and the mask are built once per step and shared by every layer.
        cos, sin = rope_cos_sin(seq_len, self.config.head_dim, self.config.rope_theta, input_ids.device)
        window = self.config.sliding_window
        mask = None if window is None or seq_len <= window else sliding_window_mask(seq_len, window, input_ids.device)
        x = self.embed_tokens(input_ids)
        for layer in self.layers:
            x = layer(x, cos, sin, mask)
        return self.lm_head(self.norm(x))


class MistralForCausalLM(LlamaForCausalLM):
    """Mistral: Llama with sliding-window attention (``config.sliding_window``)."""

    layer_class = MistralDecoderLayer


def _entry(
    name: str,
    config: LlamaConfig,
    *,
    default_seq_len: int,
    reference: str,
    published_parameters: int | None,
    build: type[LlamaForCausalLM] = LlamaForCausalLM,
) -> ModelSource:
    metadata = {**entry_metadata(reference, published_parameters, f"{build.__name__} (transformers), untied lm_head"),
                "trained_positions": default_seq_len}  # its context: rotary positions run past it unbounded
    return layered_source(
        name,
        config,
        build=build,
        batch_fn=functools.partial(token_batch, vocab_size=config.vocab_size, seq_len=default_seq_len),
        loss_fn=token_loss,
        default_seq_len=default_seq_len,
        metadata=metadata,
    )


# Hyperparameters from each model's Hugging Face config.json, linked in `reference`; parameter counts are those
# of transformers' LlamaForCausalLM / MistralForCausalLM for the same configs.
# Llama 2 was pretrained with a 4k-token context (Touvron et al. 2023, Table 1).
_LLAMA2_SEQ_LEN = 4096
# Llama 3 was trained on sequences of 8,192 tokens ("Introducing Meta Llama 3", ai.meta.com, 2024-04-18).
_LLAMA3_SEQ_LEN = 8192
# Mistral 7B: context_len 8192 (Jiang et al. 2023, Table 1).
_MISTRAL_SEQ_LEN = 8192


@register("llama-2-7b")
def llama_2_7b() -> ModelSource:
    """Llama 2 7B."""
    return _entry(
        "llama-2-7b",
        LlamaConfig(),
        default_seq_len=_LLAMA2_SEQ_LEN,
        reference="https://huggingface.co/meta-llama/Llama-2-7b-hf/blob/main/config.json",
        published_parameters=6_738_415_616,
    )


@register("llama-2-13b")
def llama_2_13b() -> ModelSource:
    """Llama 2 13B."""
    return _entry(
        "llama-2-13b",
        LlamaConfig(hidden_size=5120, intermediate_size=13824, num_layers=40, num_heads=40, num_kv_heads=40),
        default_seq_len=_LLAMA2_SEQ_LEN,
        reference="https://huggingface.co/meta-llama/Llama-2-13b-hf/blob/main/config.json",
        published_parameters=13_015_864_320,
    )


@register("llama-2-70b")
def llama_2_70b() -> ModelSource:
    """Llama 2 70B (grouped-query attention, 8 KV heads)."""
    return _entry(
        "llama-2-70b",
        LlamaConfig(hidden_size=8192, intermediate_size=28672, num_layers=80, num_heads=64, num_kv_heads=8),
        default_seq_len=_LLAMA2_SEQ_LEN,
        reference="https://huggingface.co/meta-llama/Llama-2-70b-hf/blob/main/config.json",
        published_parameters=68_976_648_192,
    )


@register("llama-3-8b")
def llama_3_8b() -> ModelSource:
    """Llama 3 8B (128K vocabulary, grouped-query attention)."""
    return _entry(
        "llama-3-8b",
        LlamaConfig(vocab_size=128256, intermediate_size=14336, num_kv_heads=8, rope_theta=500000.0),
        default_seq_len=_LLAMA3_SEQ_LEN,
        reference="https://huggingface.co/meta-llama/Meta-Llama-3-8B/blob/main/config.json",
        published_parameters=8_030_261_248,
    )


@register("llama-3-70b")
def llama_3_70b() -> ModelSource:
    """Llama 3 70B."""
    return _entry(
        "llama-3-70b",
        LlamaConfig(
            vocab_size=128256,
            hidden_size=8192,
            intermediate_size=28672,
            num_layers=80,
            num_heads=64,
            num_kv_heads=8,
            rope_theta=500000.0,
        ),
        default_seq_len=_LLAMA3_SEQ_LEN,
        reference="https://huggingface.co/meta-llama/Meta-Llama-3-70B/blob/main/config.json",
        published_parameters=70_553_706_496,
    )


@register("mistral-7b")
def mistral_7b() -> ModelSource:
    """Mistral 7B v0.1 (grouped-query attention, 4096-token sliding window)."""
    return _entry(
        "mistral-7b",
        LlamaConfig(intermediate_size=14336, num_kv_heads=8, sliding_window=4096),
        default_seq_len=_MISTRAL_SEQ_LEN,
        reference="https://huggingface.co/mistralai/Mistral-7B-v0.1/blob/main/config.json",
        published_parameters=7_241_732_096,
        build=MistralForCausalLM,
    )


@register("tiny-llama")
def tiny_llama() -> ModelSource:
    """A Llama-shaped model of 0.2M parameters with grouped-query attention (4 heads, 2 KV heads)."""
    return _entry(
        "tiny-llama",
        LlamaConfig(vocab_size=1024, hidden_size=64, intermediate_size=176, num_layers=2, num_heads=4, num_kv_heads=2),
        default_seq_len=128,
        reference="autoshard test model: Llama architecture, tiny dimensions",
        published_parameters=None,
    )


@register("tiny-mistral")
def tiny_mistral() -> ModelSource:
    """A Mistral-shaped model whose 32-token sliding window is shorter than its default 128-token sequences."""
    return _entry(
        "tiny-mistral",
        LlamaConfig(
            vocab_size=1024,
            hidden_size=64,
            intermediate_size=176,
            num_layers=2,
            num_heads=4,
            num_kv_heads=2,
            sliding_window=32,
        ),
        default_seq_len=128,
        reference="autoshard test model: Mistral architecture, tiny dimensions",
        published_parameters=None,
        build=MistralForCausalLM,
    )
