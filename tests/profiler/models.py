"""Small real models for the profiler's ground-truth tests (CPU-sized)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from autoshard.models.source import ModelSource


class MLP(nn.Module):
    def __init__(self, width: int = 256, depth: int = 3) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for _ in range(depth):
            layers += [nn.Linear(width, width), nn.ReLU()]
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(width, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


class GPTLayer(nn.Module):
    """A GPT-2 layer as in Korthikanti et al. 2022 (pre-LN, GeLU MLP 4h, dropout after attention and MLP)."""

    def __init__(self, hidden: int, heads: int, dropout: float = 0.1, flash: bool = True) -> None:
        super().__init__()
        self.heads, self.flash, self.p = heads, flash, dropout
        self.ln1 = nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.ln2 = nn.LayerNorm(hidden)
        self.fc1 = nn.Linear(hidden, 4 * hidden)
        self.fc2 = nn.Linear(4 * hidden, hidden)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(h, dim=-1)
        q, k, v = (t.view(b, s, self.heads, h // self.heads).transpose(1, 2) for t in (q, k, v))
        if self.flash:
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=self.p if self.training else 0.0)
        else:
            scores = q @ k.transpose(-2, -1) / math.sqrt(h // self.heads)
            mask = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()
            scores = scores.masked_fill(~mask, float("-inf"))
            a = self.drop(scores.softmax(dim=-1)) @ v
        a = a.transpose(1, 2).contiguous().view(b, s, h)
        x = x + self.drop(self.proj(a))
        return x + self.drop(self.fc2(F.gelu(self.fc1(self.ln2(x)))))


class TinyGPT(nn.Module):
    def __init__(self, vocab: int = 512, hidden: int = 128, heads: int = 4, layers: int = 4, seq: int = 128,
                 flash: bool = True, dropout: float = 0.1) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, hidden)
        self.pos = nn.Embedding(seq, hidden)
        self.drop = nn.Dropout(dropout)
        self.layers = nn.ModuleList(GPTLayer(hidden, heads, dropout, flash) for _ in range(layers))
        self.ln = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, vocab, bias=False)
        self.head.weight = self.tok.weight  # tied, as in GPT-2

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.drop(self.tok(input_ids) + self.pos(pos))
        for layer in self.layers:
            x = layer(x)
        logits = self.head(self.ln(x))
        return F.cross_entropy(logits.flatten(0, 1), labels.flatten())


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1, stride=2), nn.BatchNorm2d(32), nn.ReLU(),
        )
        self.head = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).mean(dim=(2, 3)))


def mlp_source() -> ModelSource:
    return ModelSource(name="mlp", kind="file", origin="tests", build_fn=MLP,
                       batch_fn=lambda b: torch.randn(b, 256))


def cnn_source() -> ModelSource:
    return ModelSource(
        name="cnn", kind="file", origin="tests", build_fn=SmallCNN,
        batch_fn=lambda b: (torch.randn(b, 3, 32, 32),),
        loss_fn=lambda out, batch: out.logsumexp(dim=-1).mean(),
    )


def gpt_source(layers: int = 4, *, flash: bool = True, dropout: float = 0.1, hidden: int = 128, heads: int = 4,
               vocab: int = 512, seq: int = 128) -> ModelSource:
    def batch(b: int, seq_len: int = seq) -> dict[str, torch.Tensor]:
        ids = torch.randint(0, vocab, (b, seq_len))
        return {"input_ids": ids, "labels": ids}

    return ModelSource(
        name=f"tiny-gpt-{layers}", kind="file", origin="tests",
        build_fn=lambda: TinyGPT(vocab, hidden, heads, layers, seq, flash, dropout),
        batch_fn=batch, accepts_seq_len=True, default_seq_len=seq, max_seq_len=seq,
        num_layers=layers,
        with_num_layers=lambda n: gpt_source(n, flash=flash, dropout=dropout, hidden=hidden, heads=heads,
                                             vocab=vocab, seq=seq),
    )
