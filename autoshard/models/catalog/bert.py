"""BERT (Devlin et al. 2019, arXiv:1810.04805) with its masked-language-modelling pretraining head.

The training module is the encoder plus the MLM head (dense → GELU → LayerNorm → decoder tied to the word
embeddings, with its own bias), i.e. ``BertForMaskedLM`` in Hugging Face transformers: no pooler and no
next-sentence head, as in RoBERTa-style MLM-only pretraining and transformers' ``run_mlm.py``. Its parameter
count is the bare ``BertModel`` count (109,482,240 for bert-base-uncased, which includes a pooler) minus the
pooler (H² + H) plus the MLM head (H² + H dense, 2H LayerNorm, vocab-size decoder bias).
"""

from __future__ import annotations

import functools
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
)
from autoshard.models.source import ModelSource


@dataclass(frozen=True, kw_only=True, slots=True)
class BertConfig:
    """BERT hyperparameters; defaults are ``bert-base-uncased``.

    Source: https://huggingface.co/google-bert/bert-base-uncased/blob/main/config.json
    """

    vocab_size: int = 30522
    """``vocab_size`` (uncased WordPiece)."""
    hidden_size: int = 768
    """``hidden_size``."""
    num_layers: int = 12
    """``num_hidden_layers``."""
    num_heads: int = 12
    """``num_attention_heads``."""
    intermediate_size: int = 3072
    """``intermediate_size``."""
    max_positions: int = 512
    """``max_position_embeddings``: the learned position table, hence the longest sequence."""
    type_vocab_size: int = 2
    """``type_vocab_size`` (segment A/B)."""
    dropout: float = 0.1
    """``hidden_dropout_prob``."""
    attention_dropout: float = 0.1
    """``attention_probs_dropout_prob``."""
    layer_norm_eps: float = 1e-12
    """``layer_norm_eps``."""
    initializer_range: float = 0.02
    """``initializer_range``."""


class BertEmbeddings(nn.Module):
    """Word + learned position + token-type embeddings, then LayerNorm and dropout."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        self.position_embeddings = nn.Embedding(config.max_positions, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None) -> torch.Tensor:
        """Embed ``(batch, seq)`` ids; missing ``token_type_ids`` mean segment 0 throughout."""
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        positions = torch.arange(input_ids.size(1), device=input_ids.device)
        x = self.word_embeddings(input_ids) + self.position_embeddings(positions)
        return self.dropout(self.layer_norm(x + self.token_type_embeddings(token_type_ids)))


class BertLayer(nn.Module):
    """One post-LayerNorm encoder layer (bidirectional attention, GELU MLP); repeated ``num_layers`` times."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        h = config.hidden_size
        self.num_heads = config.num_heads
        self.attention_dropout = config.attention_dropout
        self.query = nn.Linear(h, h)
        self.key = nn.Linear(h, h)
        self.value = nn.Linear(h, h)
        self.attention_output = nn.Linear(h, h)
        self.attention_norm = nn.LayerNorm(h, eps=config.layer_norm_eps)
        self.intermediate = nn.Linear(h, config.intermediate_size)
        self.output = nn.Linear(config.intermediate_size, h)
        self.output_norm = nn.LayerNorm(h, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the layer to ``(batch, seq, hidden)`` (no padding mask: every token attends everywhere)."""
        q, k, v = (split_heads(proj(x), self.num_heads) for proj in (self.query, self.key, self.value))
        attn = F.scaled_dot_product_attention(q, k, v, dropout_p=self.attention_dropout if self.training else 0.0)
        x = self.attention_norm(x + self.dropout(self.attention_output(merge_heads(attn))))
        return self.output_norm(x + self.dropout(self.output(F.gelu(self.intermediate(x)))))


class BertForMaskedLM(nn.Module):
    """BERT encoder + MLM head returning token logits ``(batch, seq, vocab)``; the decoder is tied."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.config = config
        with random_state_restored():  # init_weights() redraws these layers' default initialisation
            self.embeddings = BertEmbeddings(config)
            self.layers = nn.ModuleList(BertLayer(config) for _ in range(config.num_layers))
            self.head_transform = nn.Linear(config.hidden_size, config.hidden_size)
            self.head_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
            self.decoder = nn.Linear(config.hidden_size, config.vocab_size)
            self.decoder.weight = self.embeddings.word_embeddings.weight
        self.init_weights()

    def init_weights(self) -> None:
        """(Re)initialise every parameter in place, as the constructor does.

        Works on plain tensors, on DTensor shards (e.g. after ``to_empty`` on a model built on ``meta``) and on
        ZeRO-3 partitions made by ``deepspeed.zero.Init`` (see :func:`whole_parameters`).
        torch's default initialisation is redrawn first (and then overwritten) so that the random stream, and
        with it a seeded build, is the same as when each layer initialised itself at construction.
        """
        reset_parameters_(self)
        init_normal_(self, self.config.initializer_range)

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Logits for ``input_ids`` ``(batch, seq)``; ``labels`` is ignored (the entry's loss uses it)."""
        x = self.embeddings(input_ids, token_type_ids)
        for layer in self.layers:
            x = layer(x)
        return self.decoder(self.head_norm(F.gelu(self.head_transform(x))))


def _entry(name: str, config: BertConfig, *, reference: str, published_parameters: int | None) -> ModelSource:
    metadata = entry_metadata(
        reference, published_parameters,
        "BertForMaskedLM (transformers): encoder without pooler + MLM head, tied decoder",
    )
    return layered_source(
        name,
        config,
        build=BertForMaskedLM,
        batch_fn=functools.partial(token_batch, vocab_size=config.vocab_size, seq_len=config.max_positions),
        # Every position gets a label: the logits and loss are computed over all tokens either way.
        loss_fn=token_loss,
        # BERT's last pretraining phase uses 512-token sequences (Devlin et al. 2019, §A.2), its position table.
        default_seq_len=config.max_positions,
        max_seq_len=config.max_positions,
        metadata=metadata,
    )


# Hyperparameters from each model's Hugging Face config.json, linked in `reference`; parameter counts are those
# of transformers' BertForMaskedLM for the same configs (bert-base-uncased BertModel with pooler: 109,482,240;
# bert-large-uncased BertModel with pooler: 335,141,888).
@register("bert-base-uncased")
def bert_base_uncased() -> ModelSource:
    """BERT base (uncased) with the masked-LM head, 110M parameters."""
    return _entry(
        "bert-base-uncased",
        BertConfig(),
        reference="https://huggingface.co/google-bert/bert-base-uncased/blob/main/config.json",
        published_parameters=109_514_298,
    )


@register("bert-large-uncased")
def bert_large_uncased() -> ModelSource:
    """BERT large (uncased) with the masked-LM head, 335M parameters."""
    return _entry(
        "bert-large-uncased",
        BertConfig(hidden_size=1024, num_layers=24, num_heads=16, intermediate_size=4096),
        reference="https://huggingface.co/google-bert/bert-large-uncased/blob/main/config.json",
        published_parameters=335_174_458,
    )


@register("tiny-bert")
def tiny_bert() -> ModelSource:
    """A BERT-shaped masked LM of 0.2M parameters for fast tests."""
    return _entry(
        "tiny-bert",
        BertConfig(
            vocab_size=1024, hidden_size=64, num_layers=2, num_heads=4, intermediate_size=256, max_positions=128
        ),
        reference="autoshard test model: BERT architecture, tiny dimensions",
        published_parameters=None,
    )
