"""The GPT of ``gpt_logits.py`` with its loss computed outside forward: forward returns the logits, and the
cross-entropy is this file's ``loss``. FSDP2's root pre-backward hook, registered on forward's outputs, then fires
only once the logits' gradient is computed, after the loss's own backward."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from tests.profiler.models import TinyGPT
from tests.strategies.gpt_logits.gpt_logits import SEQ, VOCAB
from tests.strategies.gpt_logits.gpt_logits import batch as gpt_batch


class LogitsGPT(TinyGPT):
    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        pos = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.drop(self.tok(input_ids) + self.pos(pos))
        for layer in self.layers:
            x = layer(x)
        return self.head(self.ln(x))


def model() -> nn.Module:
    return LogitsGPT(vocab=VOCAB, hidden=256, heads=4, layers=4, seq=SEQ, dropout=0.0)


def batch(batch_size: int, seq_len: int = SEQ) -> Any:
    return gpt_batch(batch_size, seq_len)


def loss(output: torch.Tensor, batch: Any) -> torch.Tensor:
    return F.cross_entropy(output.flatten(0, 1), batch["labels"].flatten())
