"""T5 v1.0 (Raffel et al. 2020, arXiv:1910.10683) as an encoder-decoder LM with tied embeddings.

Architecture: one shared token embedding for encoder, decoder and LM head; pre-RMSNorm blocks without biases;
unscaled dot-product attention (the scaling is folded into the initialisation); a bucketed relative position
bias computed once per stack and added to every layer's self-attention; a ReLU MLP. The training module is
``T5ForConditionalGeneration`` in Hugging Face transformers, whose parameter count this one equals (the LM head
shares the embedding matrix). The position-bias table lives on each stack rather than in its first block, so
every block of a stack is identical; the count is the same.
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
    RMSNorm,
    entry_metadata,
    layered_source,
    merge_heads,
    random_state_restored,
    reset_parameters_,
    seq2seq_batch,
    split_heads,
    token_loss,
    whole_parameters,
)
from autoshard.models.source import ModelSource


@dataclass(frozen=True, kw_only=True, slots=True)
class T5Config:
    """T5 hyperparameters; defaults are ``t5-small``.

    Source: https://huggingface.co/google-t5/t5-small/blob/main/config.json (relative-attention bucket
    settings are transformers' ``T5Config`` defaults, absent from the original config files).
    """

    vocab_size: int = 32128
    """``vocab_size`` (32,000 SentencePiece pieces padded to a multiple of 128)."""
    d_model: int = 512
    """``d_model``."""
    d_kv: int = 64
    """``d_kv``: per-head size (``num_heads · d_kv`` need not equal ``d_model``, e.g. t5-3b)."""
    d_ff: int = 2048
    """``d_ff``."""
    num_layers: int = 6
    """``num_layers``: blocks in the encoder, and in the decoder (``num_decoder_layers`` is the same)."""
    num_heads: int = 8
    """``num_heads``."""
    relative_attention_num_buckets: int = 32
    """``relative_attention_num_buckets``."""
    relative_attention_max_distance: int = 128
    """``relative_attention_max_distance``."""
    dropout: float = 0.1
    """``dropout_rate``, used for embeddings, residual branches, the MLP and attention weights."""
    layer_norm_eps: float = 1e-6
    """``layer_norm_epsilon``."""
    initializer_factor: float = 1.0
    """``initializer_factor``."""


def relative_position_bucket(
    relative_position: torch.Tensor, *, bidirectional: bool, num_buckets: int, max_distance: int
) -> torch.Tensor:
    """Map key-minus-query offsets to T5's bucket ids (Raffel et al. 2020, §2.1).

    Half the buckets hold exact small distances; the rest cover distances up to ``max_distance``
    logarithmically, larger ones sharing the last bucket. Bidirectional (encoder) buckets split again by
    sign; unidirectional (decoder) ones only see the past.

    Args:
        relative_position: integer offsets ``key_position - query_position``.
        bidirectional: whether keys after the query get their own buckets.
        num_buckets: total number of buckets.
        max_distance: distance at and beyond which offsets share the last bucket.

    Returns:
        Bucket ids in ``[0, num_buckets)``, shaped like ``relative_position``.
    """
    bucket = torch.zeros_like(relative_position)
    if bidirectional:
        num_buckets //= 2
        bucket = bucket + (relative_position > 0).long() * num_buckets
        distance = relative_position.abs()
    else:
        distance = (-relative_position).clamp(min=0)
    exact = num_buckets // 2
    # Clamping keeps log() finite for small distances, whose bucket comes from the exact branch anyway.
    scale = torch.log(distance.clamp(min=exact).float() / exact) / math.log(max_distance / exact)
    far = (exact + (scale * (num_buckets - exact)).long()).clamp(max=num_buckets - 1)
    return bucket + torch.where(distance < exact, distance, far)


class T5Attention(nn.Module):
    """Multi-head attention without biases or ``1/sqrt(d)`` scaling; self- or cross-attention."""

    def __init__(self, config: T5Config) -> None:
        super().__init__()
        inner = config.num_heads * config.d_kv
        self.num_heads = config.num_heads
        self.dropout_p = config.dropout
        self.q = nn.Linear(config.d_model, inner, bias=False)
        self.k = nn.Linear(config.d_model, inner, bias=False)
        self.v = nn.Linear(config.d_model, inner, bias=False)
        self.o = nn.Linear(inner, config.d_model, bias=False)

    def forward(
        self, x: torch.Tensor, context: torch.Tensor | None = None, bias: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Attend from ``x`` to ``context`` (``x`` itself when ``None``), adding the float ``bias`` to scores."""
        context = x if context is None else context
        q = split_heads(self.q(x), self.num_heads)
        k = split_heads(self.k(context), self.num_heads)
        v = split_heads(self.v(context), self.num_heads)
        if bias is not None and bias.dtype != q.dtype:
            bias = bias.to(q.dtype)
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=bias, dropout_p=self.dropout_p if self.training else 0.0, scale=1.0
        )
        return self.o(merge_heads(out))


class T5Block(nn.Module):
    """One pre-norm block: self-attention, cross-attention (decoder only), ReLU MLP.

    The same class serves both stacks; each repeats it ``num_layers`` times.
    """

    def __init__(self, config: T5Config, *, is_decoder: bool) -> None:
        super().__init__()
        self.self_attention_norm = RMSNorm(config.d_model, config.layer_norm_eps)
        self.self_attention = T5Attention(config)
        self.cross_attention_norm = RMSNorm(config.d_model, config.layer_norm_eps) if is_decoder else None
        self.cross_attention = T5Attention(config) if is_decoder else None
        self.ff_norm = RMSNorm(config.d_model, config.layer_norm_eps)
        self.wi = nn.Linear(config.d_model, config.d_ff, bias=False)
        self.wo = nn.Linear(config.d_ff, config.d_model, bias=False)
        self.dropout = nn.Dropout(config.dropout)

    def forward(
        self, x: torch.Tensor, position_bias: torch.Tensor, encoder_states: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Apply the block; ``encoder_states`` is required in the decoder."""
        x = x + self.dropout(self.self_attention(self.self_attention_norm(x), bias=position_bias))
        if self.cross_attention is not None and self.cross_attention_norm is not None:
            x = x + self.dropout(self.cross_attention(self.cross_attention_norm(x), context=encoder_states))
        hidden = self.dropout(F.relu(self.wi(self.ff_norm(x))))
        return x + self.dropout(self.wo(hidden))


class T5Stack(nn.Module):
    """The encoder or the decoder: embedding dropout, blocks sharing one position bias, final norm."""

    def __init__(self, config: T5Config, *, is_decoder: bool) -> None:
        super().__init__()
        self.config = config
        self.is_decoder = is_decoder
        self.relative_attention_bias = nn.Embedding(config.relative_attention_num_buckets, config.num_heads)
        self.blocks = nn.ModuleList(T5Block(config, is_decoder=is_decoder) for _ in range(config.num_layers))
        self.final_norm = RMSNorm(config.d_model, config.layer_norm_eps)
        self.dropout = nn.Dropout(config.dropout)

    def position_bias(self, seq_len: int, device: torch.device) -> torch.Tensor:
        """The ``(1, heads, seq, seq)`` additive score bias; the decoder's also masks future keys."""
        positions = torch.arange(seq_len, device=device)
        buckets = relative_position_bucket(
            positions[None, :] - positions[:, None],
            bidirectional=not self.is_decoder,
            num_buckets=self.config.relative_attention_num_buckets,
            max_distance=self.config.relative_attention_max_distance,
        )
        bias = self.relative_attention_bias(buckets).permute(2, 0, 1).unsqueeze(0)
        if self.is_decoder:
            future = torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).triu(diagonal=1)
            bias = bias.masked_fill(future, float("-inf"))
        return bias

    def forward(self, embeddings: torch.Tensor, encoder_states: torch.Tensor | None = None) -> torch.Tensor:
        """Run the stack on ``(batch, seq, d_model)`` embeddings."""
        bias = self.position_bias(embeddings.size(1), embeddings.device)
        x = self.dropout(embeddings)
        for block in self.blocks:
            x = block(x, bias, encoder_states)
        return self.dropout(self.final_norm(x))


class T5ForConditionalGeneration(nn.Module):
    """T5 returning decoder logits ``(batch, decoder_seq, vocab)``; the LM head is tied to ``shared``."""

    def __init__(self, config: T5Config) -> None:
        super().__init__()
        self.config = config
        with random_state_restored():  # init_weights() redraws these layers' default initialisation
            self.shared = nn.Embedding(config.vocab_size, config.d_model)
            self.encoder = T5Stack(config, is_decoder=False)
            self.decoder = T5Stack(config, is_decoder=True)
            self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
            self.lm_head.weight = self.shared.weight
        self.init_weights()

    def init_weights(self) -> None:
        """(Re)initialise every parameter in place, as the constructor does.

        Works on plain tensors, on DTensor shards (e.g. after ``to_empty`` on a model built on ``meta``) and on
        ZeRO-3 partitions made by ``deepspeed.zero.Init`` (see :func:`whole_parameters`).
        torch's default initialisation is redrawn first (and then overwritten) so that the random stream, and
        with it a seeded build, is the same as when each layer initialised itself at construction. The model
        has no buffers: the relative position buckets are computed in :meth:`T5Stack.position_bias`.
        """
        c = self.config
        reset_parameters_(self)
        # Per-matrix standard deviations of transformers' T5PreTrainedModel._init_weights (Mesh TensorFlow's).
        factor = c.initializer_factor
        with whole_parameters(self.shared):
            nn.init.normal_(self.shared.weight, std=factor)
        for module in self.modules():
            if isinstance(module, T5Stack):
                with whole_parameters(module.relative_attention_bias):
                    nn.init.normal_(module.relative_attention_bias.weight, std=factor * c.d_model**-0.5)
            elif isinstance(module, T5Block):
                with whole_parameters(module.wi, module.wo):
                    nn.init.normal_(module.wi.weight, std=factor * c.d_model**-0.5)
                    nn.init.normal_(module.wo.weight, std=factor * c.d_ff**-0.5)
            elif isinstance(module, T5Attention):
                with whole_parameters(module.q, module.k, module.v, module.o):
                    nn.init.normal_(module.q.weight, std=factor * (c.d_model * c.d_kv) ** -0.5)
                    nn.init.normal_(module.k.weight, std=factor * c.d_model**-0.5)
                    nn.init.normal_(module.v.weight, std=factor * c.d_model**-0.5)
                    nn.init.normal_(module.o.weight, std=factor * (c.num_heads * c.d_kv) ** -0.5)

    def forward(
        self, input_ids: torch.Tensor, decoder_input_ids: torch.Tensor, labels: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Logits for ``decoder_input_ids`` given ``input_ids``; ``labels`` is ignored (the loss uses it)."""
        encoder_states = self.encoder(self.shared(input_ids))
        decoder_states = self.decoder(self.shared(decoder_input_ids), encoder_states)
        # With tied embeddings the decoder output is rescaled by d_model^-0.5 before the head (Mesh TensorFlow).
        return self.lm_head(decoder_states * self.config.d_model**-0.5)


def _entry(
    name: str,
    config: T5Config,
    *,
    reference: str,
    published_parameters: int | None,
    default_seq_len: int = 512,  # T5 pretrains on sequences of 512 tokens (Raffel et al. 2020, §3.1.2)
) -> ModelSource:
    metadata = entry_metadata(
        reference, published_parameters, "T5ForConditionalGeneration (transformers), lm_head tied to shared"
    )
    return layered_source(
        name,
        config,
        build=T5ForConditionalGeneration,
        batch_fn=functools.partial(seq2seq_batch, vocab_size=config.vocab_size, seq_len=default_seq_len),
        loss_fn=token_loss,
        # Positions are relative, so there is no hard maximum sequence length.
        default_seq_len=default_seq_len,
        metadata=metadata,
    )


# Hyperparameters from each model's Hugging Face config.json, linked in `reference`; parameter counts are those
# of transformers' T5ForConditionalGeneration for the same configs.
@register("t5-small")
def t5_small() -> ModelSource:
    """T5 small, 60M parameters."""
    return _entry(
        "t5-small",
        T5Config(),
        reference="https://huggingface.co/google-t5/t5-small/blob/main/config.json",
        published_parameters=60_506_624,
    )


@register("t5-base")
def t5_base() -> ModelSource:
    """T5 base, 223M parameters."""
    return _entry(
        "t5-base",
        T5Config(d_model=768, d_ff=3072, num_layers=12, num_heads=12),
        reference="https://huggingface.co/google-t5/t5-base/blob/main/config.json",
        published_parameters=222_903_552,
    )


@register("t5-large")
def t5_large() -> ModelSource:
    """T5 large, 738M parameters."""
    return _entry(
        "t5-large",
        T5Config(d_model=1024, d_ff=4096, num_layers=24, num_heads=16),
        reference="https://huggingface.co/google-t5/t5-large/blob/main/config.json",
        published_parameters=737_668_096,
    )


@register("t5-3b")
def t5_3b() -> ModelSource:
    """T5 3B, 2.85B parameters."""
    return _entry(
        "t5-3b",
        T5Config(d_model=1024, d_kv=128, d_ff=16384, num_layers=24, num_heads=32),
        reference="https://huggingface.co/google-t5/t5-3b/blob/main/config.json",
        published_parameters=2_851_598_336,
    )


@register("tiny-t5")
def tiny_t5() -> ModelSource:
    """A T5-shaped encoder-decoder of 0.3M parameters for fast tests."""
    return _entry(
        "tiny-t5",
        T5Config(vocab_size=1024, d_model=64, d_kv=16, d_ff=256, num_layers=2, num_heads=4),
        reference="autoshard test model: T5 architecture, tiny dimensions",
        published_parameters=None,
        default_seq_len=128,
    )
