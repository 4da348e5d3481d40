"""A small GPT (about 14M parameters) in plain PyTorch, following autoshard's model-file convention.

It shows every part of the convention:

* ``model()`` builds the module;
* ``batch(batch_size, seq_len=256)`` returns one step's token ids as a single tensor, so autoshard calls
  ``model(tokens)``; because ``batch`` takes ``seq_len``, ``--seq-len`` is passed through to it;
* ``MAX_SEQ_LEN`` tells autoshard the longest sequence the learned position table allows;
* ``loss(output, batch)`` computes next-token cross-entropy from the logits and the batch;
* ``optimizer(params)`` returns AdamW with weight decay on matrices only.

Attention uses ``torch.nn.functional.scaled_dot_product_attention`` (fused kernels where available).

Try it::

    autoshard profile examples/gpt/model.py --seq-len 128
    python examples/gpt/model.py            # a few plain training steps on CPU
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class GPTConfig:
    """Hyperparameters; the defaults give 13.9M parameters (embeddings tied with the output head)."""

    vocab_size: int = 8192
    max_seq_len: int = 256
    num_layers: int = 6
    dim: int = 384
    num_heads: int = 6
    dropout: float = 0.0


CONFIG = GPTConfig()
MAX_SEQ_LEN = CONFIG.max_seq_len


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention through SDPA."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        if config.dim % config.num_heads:
            raise ValueError(f"dim must be divisible by num_heads, but got {config.dim=} and {config.num_heads=}.")
        self.num_heads = config.num_heads
        self.dropout = config.dropout
        self.qkv = nn.Linear(config.dim, 3 * config.dim)
        self.proj = nn.Linear(config.dim, config.dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.num_heads, d // self.num_heads).permute(2, 0, 3, 1, 4)
        dropout = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, s, d))


class Block(nn.Module):
    """Pre-norm transformer block: attention then a 4x GELU MLP, each with a residual."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(config.dim)
        self.attn = CausalSelfAttention(config)
        self.norm2 = nn.LayerNorm(config.dim)
        self.mlp = nn.Sequential(
            nn.Linear(config.dim, 4 * config.dim),
            nn.GELU(),
            nn.Linear(4 * config.dim, config.dim),
            nn.Dropout(config.dropout),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class GPT(nn.Module):
    """Token and learned position embeddings, ``num_layers`` blocks, a final norm and a tied output head."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.tok_emb = nn.Embedding(config.vocab_size, config.dim)
        self.pos_emb = nn.Embedding(config.max_seq_len, config.dim)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.num_layers))
        self.norm = nn.LayerNorm(config.dim)
        self.head = nn.Linear(config.dim, config.vocab_size, bias=False)
        self.head.weight = self.tok_emb.weight
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits of shape ``(batch, seq, vocab)`` for token ids of shape ``(batch, seq)``."""
        seq_len = tokens.shape[1]
        if seq_len > self.config.max_seq_len:
            raise ValueError(f"sequence of {seq_len} tokens exceeds max_seq_len={self.config.max_seq_len}.")
        positions = torch.arange(seq_len, device=tokens.device)
        x = self.tok_emb(tokens) + self.pos_emb(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def model() -> nn.Module:
    """Build the GPT (autoshard decides the device: real, meta or fake tensors)."""
    return GPT(CONFIG)


def batch(batch_size: int, seq_len: int = 256) -> torch.Tensor:
    """Random token ids of shape ``(batch_size, seq_len)`` on the current default device."""
    return torch.randint(0, CONFIG.vocab_size, (batch_size, seq_len))


def loss(output: torch.Tensor, batch: torch.Tensor) -> torch.Tensor:
    """Next-token cross-entropy: position ``t`` predicts token ``t + 1``."""
    logits = output[:, :-1].reshape(-1, output.shape[-1])
    return F.cross_entropy(logits, batch[:, 1:].reshape(-1))


def optimizer(params: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
    """AdamW with weight decay on weight matrices and embeddings, none on biases and norms."""
    params = [p for p in params if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.ndim >= 2], "weight_decay": 0.1},
        {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=3e-4, betas=(0.9, 0.95))


if __name__ == "__main__":
    net = model()
    print(f"{sum(p.numel() for p in net.parameters()) / 1e6:.1f}M parameters")
    opt = optimizer(net.parameters())
    for step in range(3):
        tokens = batch(4, seq_len=64)
        step_loss = loss(net(tokens), tokens)
        step_loss.backward()
        opt.step()
        opt.zero_grad()
        print(f"step {step}: loss {step_loss.item():.4f}")
