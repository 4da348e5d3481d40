"""A small GPT whose forward returns its loss, with a vocabulary large enough that backward's non-state bytes
peak at its start (the logits' gradient), before any parameter gradient exists, while the step's total peaks
later, once gradients exist."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from tests.profiler.models import TinyGPT

VOCAB, SEQ = 8192, 128


def model() -> nn.Module:
    return TinyGPT(vocab=VOCAB, hidden=256, heads=4, layers=4, seq=SEQ, dropout=0.0)


def batch(batch_size: int, seq_len: int = SEQ) -> Any:
    ids = torch.randint(0, VOCAB, (batch_size, seq_len))
    return {"input_ids": ids, "labels": ids}
