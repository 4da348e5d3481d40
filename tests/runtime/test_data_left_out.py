"""Batches of a list that an epoch never reaches at several ranks are counted, so that fit() can say so (the
held-out loss of a list of 5 batches at 2 ranks was the loss of 4, without a word)."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from autoshard.runtime.data import DataFeed
from autoshard.runtime.distributed import RunContext


def _ctx(world_size: int) -> RunContext:
    return RunContext(rank=0, world_size=world_size, local_rank=0, local_world_size=world_size,
                      device=torch.device("cpu"), backend="gloo", owns_group=False)


BATCHES = [(torch.zeros(4, 2), torch.zeros(4, 1)) for _ in range(5)]


@pytest.mark.parametrize(("data", "world_size", "left_out"), [
    (BATCHES, 2, 1), (BATCHES, 3, 2), (BATCHES, 1, 0), (BATCHES[:4], 2, 0),
    (TensorDataset(torch.zeros(20, 2), torch.zeros(20, 1)), 2, 0),  # sharded whole by a DistributedSampler
])
def test_an_incomplete_last_round_of_batches_is_counted(data, world_size, left_out):
    feed = DataFeed(data, micro_batch_size=4, ctx=_ctx(world_size), seed=0, scoring=True)
    assert feed.left_out == left_out
    if isinstance(data, list):  # each rank's share, and what no rank reaches, are the list
        assert len(list(feed.epoch(0))) * world_size + left_out == len(data)


def test_a_loader_at_one_rank_is_never_short():
    loader = DataLoader(TensorDataset(torch.zeros(10, 2)), batch_size=4)
    assert DataFeed(loader, micro_batch_size=4, ctx=_ctx(1), seed=0, scoring=True).left_out == 0


def test_scoring_a_loader_with_persistent_workers_leaves_its_training_iterator_alone():
    """One rank keeps the user's loader; one with persistent workers serves one iterator at a time, so scoring
    the training loader mid-epoch restarted the training iteration (the probe's losses changed after an eval)."""
    data = TensorDataset(torch.arange(8.0).unsqueeze(1))
    loader = DataLoader(data, batch_size=2, num_workers=1, persistent_workers=True)
    training = iter(loader)
    assert next(training)[0].flatten().tolist() == [0.0, 1.0]
    scored = DataFeed(loader, micro_batch_size=2, ctx=_ctx(1), seed=0, scoring=True)
    assert len(list(scored.epoch(0))) == 4
    assert next(training)[0].flatten().tolist() == [2.0, 3.0]  # [0, 1] again before
