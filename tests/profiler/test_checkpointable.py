"""Checkpointing asked for on a model where it would recompute nothing is refused before any trace."""

from __future__ import annotations

import textwrap

import pytest

import autoshard
from autoshard.errors import UsageError

SEQUENTIAL_BLOCKS = textwrap.dedent("""
    import torch
    from torch import nn

    class Net(nn.Module):
        def __init__(self, d=32, n=4):
            super().__init__()
            self.emb = nn.Embedding(100, d)
            self.blocks = nn.ModuleList([nn.Sequential(nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.GELU(),
                                                       nn.Linear(4 * d, d)) for _ in range(n)])
            self.head = nn.Linear(d, 100)

        def forward(self, x):
            h = self.emb(x)
            for b in self.blocks:
                h = h + b(h)
            return self.head(h)

    def model():
        return Net()

    def batch(batch_size, seq_len=16):
        return torch.randint(0, 100, (batch_size, seq_len))
""")


@pytest.fixture
def sequential_blocks(tmp_path):
    path = tmp_path / "model.py"
    path.write_text(SEQUENTIAL_BLOCKS, encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("mode", ["full", "op", "every-2"])
def test_a_model_without_repeated_blocks_is_told_so_not_profiled_as_checkpointed(sequential_blocks, mode):
    # A ModuleList of nn.Sequential: the header said "activation checkpointing" and the figures were the plain step's
    with pytest.raises(UsageError, match="has no repeated blocks to checkpoint") as info:
        autoshard.profile(sequential_blocks, batch_size=2, activation_checkpointing=mode)
    assert info.value.message.startswith(f'activation_checkpointing="{mode}": ')  # the Python argument's name
    with pytest.raises(UsageError, match="has no repeated blocks to checkpoint"):
        autoshard.recommend(sequential_blocks, hardware="a10g", activation_checkpointing=mode, cache=False)
    assert autoshard.profile(sequential_blocks, batch_size=2).peak_bytes > 0  # without checkpointing it profiles
    plan = autoshard.recommend(sequential_blocks, hardware="a10g", cache=False)  # and weighing it picks none
    assert not plan.recommended.candidate.activation_checkpointing


SHARED_BLOCK = textwrap.dedent("""
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self, d=32):
            super().__init__()
            self.fc = nn.Linear(d, d)

        def forward(self, h):
            return h + torch.relu(self.fc(h))

    class Net(nn.Module):
        def __init__(self, d=32, n=4):
            super().__init__()
            self.emb = nn.Embedding(100, d)
            self.blocks = nn.ModuleList([Block(d)] * n)  # one block, its weights shared n times (ALBERT)
            self.head = nn.Linear(d, 100)

        def forward(self, x):
            h = self.emb(x)
            for b in self.blocks:
                h = b(h)
            return self.head(h)

    def model():
        return Net()

    def batch(batch_size, seq_len=16):
        return torch.randint(0, 100, (batch_size, seq_len))
""")


def test_one_block_held_several_times_is_told_it_is_shared(tmp_path):
    # a probe's nn.ModuleList([block] * 6) was told it held no repeated blocks, and to write exactly that
    path = tmp_path / "model.py"
    path.write_text(SHARED_BLOCK, encoding="utf-8")
    with pytest.raises(UsageError, match=r"blocks holds one Block instance 4 times \(its weights shared") as info:
        autoshard.profile(str(path), batch_size=2, activation_checkpointing="full")
    assert "torch.utils.checkpoint.checkpoint around the shared Block" in (info.value.hint or "")


def test_every_n_wider_than_the_model_is_refused():
    with pytest.raises(UsageError, match="every-3\" checkpoints none of tiny-gpt2's 2 blocks") as info:
        autoshard.profile("tiny-gpt2", batch_size=1, seq_len=16, activation_checkpointing="every-3")
    assert info.value.hint == "Use every-N with N at most 2, or full."
    assert autoshard.profile("tiny-gpt2", batch_size=1, seq_len=16,
                             activation_checkpointing="every-2").checkpointed_blocks == 1
