"""Resuming with another number of ranks or another micro-batch: the data continues after the same samples.

DDP's checkpoint (the replicated state, one file) was refused at another world size, and a resumed run skipped
the checkpoint's count of micro-batches in its own micro-batches: after a change, it skipped other samples.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from autoshard import Checkpointing
from autoshard.errors import UsageError
from autoshard.runtime import fit
from autoshard.runtime.checkpoint import CheckpointMeta, Position, rescaled


def _meta(batch_in_epoch: int, world_size: int, micro: int | None) -> CheckpointMeta:
    return CheckpointMeta(position=Position(step=5, epoch=1, batch_in_epoch=batch_in_epoch), strategy="ddp",
                          family="ddp", world_size=world_size, layout_hash="x", micro_batch_size=micro)


@pytest.mark.parametrize(("meta", "world", "micro", "expected"), [
    (_meta(6, 2, 4), 2, 4, 6),  # the same run
    (_meta(6, 2, 4), 1, 8, 6),  # 48 samples: 6 batches of 8 on one rank
    (_meta(6, 2, 4), 4, 4, 3),
    (_meta(6, 2, 4), 1, 16, 3),
    (_meta(0, 2, 4), 3, 5, 0),  # at an epoch's start nothing needs dividing
    (_meta(6, 2, None), 1, 4, 12),  # written before micro_batch_size was kept: the same micro-batch assumed
])
def test_a_position_is_the_same_samples_in_this_runs_micro_batches(meta, world, micro, expected) -> None:
    assert rescaled(meta, world, micro, Path("ck")) == Position(step=5, epoch=1, batch_in_epoch=expected)


def test_a_position_this_run_cannot_reach_is_refused() -> None:
    with pytest.raises(UsageError, match=r"stands 48 samples into epoch 1 \(6 micro-batches of 4 on each of 2 "
                                         r"ranks\), which this run's micro-batches of 5 on 2 ranks do not reach"):
        rescaled(_meta(6, 2, 4), 2, 5, Path("ck"))


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))


def test_resumed_at_another_micro_batch_the_run_continues_as_the_uninterrupted_one(tmp_path: Path) -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 8, generator=g)
    data = torch.utils.data.TensorDataset(x, x @ torch.randn(8, 1, generator=g))
    kwargs = {"loss_fn": nn.functional.mse_loss, "optimizer": lambda p: torch.optim.SGD(p, lr=0.05),
              "progress": False}
    whole = fit(_model(), data, batch_size=8, max_steps=4, **kwargs)
    # Steps 1-2 as 2 micro-batches of 4 each (the same 8 samples per step), then on in batches of 8.
    fit(_model(), data, batch_size=4, global_batch_size=8, max_steps=2, checkpointing=Checkpointing(dir=tmp_path),
        **kwargs)
    resumed = fit(_model(), data, batch_size=8, max_steps=4, checkpointing=Checkpointing(dir=tmp_path, resume=True),
                  **kwargs)
    assert [s.step for s in resumed.steps] == [3, 4]
    assert resumed.losses == pytest.approx(whole.losses[2:], rel=1e-5)


def test_one_process_resumed_inside_an_epoch_of_a_shuffling_loader_sees_the_uninterrupted_runs_data(
        tmp_path: Path) -> None:
    """One rank keeps the user's DataLoader, whose shuffled order comes from torch's generator when the epoch's
    iterator starts: resumed, it was made under the checkpoint's RNG state, another order, and some samples were
    seen twice in the epoch and others never."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(256, 8, generator=g)
    data = torch.utils.data.TensorDataset(x, torch.sin(x @ torch.randn(8, 1, generator=g)))

    def run(steps: int, resume: bool) -> list[float]:
        torch.manual_seed(1)  # the loader's order and the model's weights
        loader = torch.utils.data.DataLoader(data, batch_size=16, shuffle=True)
        return fit(_model(), loader, loss_fn=nn.functional.mse_loss, optimizer="sgd", max_steps=steps,
                   processes=1, progress=False,
                   checkpointing=Checkpointing(dir=tmp_path / ("whole" if steps == 12 and not resume else "part"),
                                               every=3, resume=resume)).losses

    whole = run(12, resume=False)  # 16 batches per epoch: the checkpoint at step 6 is inside the first
    run(6, resume=False)
    resumed = run(12, resume=True)
    assert resumed == pytest.approx(whole[6:], rel=1e-6)
