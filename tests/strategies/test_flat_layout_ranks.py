"""ZeRO-1/2's flat partitioning (``flat_layout``) finds the rank holding the most whole tensors from the ranks where a
tensor starts, not by walking every rank: a plan for 100,000 nodes ran for minutes in that walk (a probe killed it at
300 s). Checked against the walk, written here as DeepSpeed's partitioning reads: every rank's range of the
padded flat buffer, and the tensors it overlaps."""

from __future__ import annotations

import math
import random

import pytest

from autoshard.strategies.deepspeed.layout import NCCL_START_ALIGNMENT, flat_layout


def _every_rank(numels: list[int], world: int) -> int:
    aligned = math.ceil(sum(numels) / (NCCL_START_ALIGNMENT * world)) * NCCL_START_ALIGNMENT * world
    size = aligned // world
    starts = [sum(numels[:t]) for t in range(len(numels))]
    return max((sum(n for a, n in zip(starts, numels, strict=True) if a < (r + 1) * size and a + n > r * size)
                for r in range(world)), default=0)


@pytest.mark.parametrize("seed", range(4))
def test_the_fullest_rank_is_the_one_every_rank_walked_finds(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(1500):
        numels = [rng.choice([0, 1, 3, rng.randint(1, 64), rng.randint(1, 4096)]) for _ in range(rng.randint(0, 10))]
        world = rng.randint(1, 48)
        assert flat_layout(numels, world).gradient_partition_numel == _every_rank(numels, world), (numels, world)


def test_a_world_of_800_000_ranks_is_laid_out_from_its_tensors() -> None:
    numels = [4096 * 4096] * 7 * 32 + [128256 * 4096] * 2  # Llama-3-8B-sized
    layout = flat_layout(numels, 800_000)
    # 6,012 elements a rank: the rank holding the boundary between the two embeddings overlaps both, whole
    assert layout.partition_numel == 6012 and (7 * 32 * 4096 * 4096 + 128256 * 4096) % 6012 != 0
    assert layout.gradient_partition_numel == 2 * 128256 * 4096
