"""fit() given an optimizer as a class, an instance or a factory, as an optimizer probe found it wanting: torch's
SGD class planned, labelled and exported as AdamW (and refused under ZeRO-Offload only by the workers), Adafactor
crashing FSDP2's workers and silently changed by ZeRO, an instance's state dropped without a word, and
transformers' Adafactor with ``lr=None`` stopping the run after its first step."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import autoshard
from autoshard.errors import UsageError
from autoshard.runtime import fit


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))


def _data() -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    return [(x, x[:, :1]) for x in (torch.randn(4, 8, generator=g) for _ in range(4))]


def test_an_optimizer_that_sets_its_own_step_size_trains_with_no_learning_rate() -> None:
    from transformers.optimization import Adafactor

    result = fit(_model(), _data(), loss_fn=F.mse_loss, processes=1, strategy="ddp", max_steps=2, progress=False,
                 optimizer=lambda p: Adafactor(p, lr=None, relative_step=True, scale_parameter=True,
                                               warmup_init=True))
    assert [s.lr for s in result.steps] == [None, None]
    assert all(math.isfinite(s.loss) for s in result.steps)


@pytest.mark.parametrize(("optimizer", "planned", "note"), [
    (torch.optim.SGD, "sgd", None),
    (torch.optim.Adafactor, "adafactor", None),
    (torch.optim.Adagrad, "adamw", "optimizer Adagrad is planned with AdamW's memory"),
])
def test_an_optimizer_class_is_planned_by_its_name_or_said_to_be_planned_as_adamw(optimizer, planned, note) -> None:
    result = fit(_model(), _data(), loss_fn=F.mse_loss, processes=1, strategy="ddp", max_steps=1, progress=False,
                 optimizer=optimizer)
    assert result.plan.optimizer == planned
    said = [n for n in result.notes if n.startswith("optimizer ")]
    assert (said[0].startswith(note) if note else not said), result.notes


@pytest.mark.parametrize(("optimizer", "strategy", "says"), [
    (torch.optim.Adafactor, "fsdp", "Adafactor cannot step FSDP2's sharded (DTensor) parameters"),
    (torch.optim.SGD, "deepspeed_stage_2_offload", "ZeRO-Offload steps the optimizer on the host"),
    (torch.optim.Adagrad, "deepspeed_stage_2_offload", "refuses Adagrad"),
])
def test_an_optimizer_the_strategy_cannot_step_is_refused_before_any_process_starts(optimizer, strategy, says,
                                                                                     no_tracing) -> None:
    with pytest.raises(UsageError) as info:
        fit(_model(), _data(), loss_fn=F.mse_loss, processes=2, strategy=strategy, max_steps=1, progress=False,
            optimizer=optimizer)
    assert says in str(info.value)


def test_an_instance_holding_state_is_told_its_state_is_not_carried_over() -> None:
    model = _model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    F.mse_loss(model(_data()[0][0]), _data()[0][1]).backward()
    optimizer.step()
    result = fit(model, _data(), loss_fn=F.mse_loss, processes=1, strategy="ddp", max_steps=1, progress=False,
                 optimizer=optimizer)
    assert any(n.startswith("optimizer: the AdamW instance given holds state (4 parameters' worth") and
               "not carried over" in n for n in result.notes), result.notes
    other = _model()
    fresh = torch.optim.AdamW(other.parameters())
    again = fit(other, _data(), loss_fn=F.mse_loss, processes=1, strategy="ddp", max_steps=1, progress=False,
                optimizer=fresh)
    assert not any("holds state" in n for n in again.notes)


def test_adafactor_under_zero_is_said_to_train_otherwise() -> None:
    plan = autoshard.recommend("tiny-gpt2", hardware="dgx-h100", seq_len=16, optimizer="adafactor",
                               strategies=["deepspeed_stage_2"])
    assert any(x.startswith("Adafactor under ZeRO: DeepSpeed hands the optimizer flat 1-D partitions")
               for x in plan.explanation)
    ddp = autoshard.recommend("tiny-gpt2", hardware="dgx-h100", seq_len=16, optimizer="adafactor", strategies=["ddp"])
    assert not any(x.startswith("Adafactor under ZeRO") for x in ddp.explanation)
    result = fit(_model(), _data(), loss_fn=F.mse_loss, processes=1, strategy="deepspeed_stage_2", max_steps=1,
                 progress=False, optimizer="adafactor")
    assert any(n.startswith("Adafactor under ZeRO") for n in result.notes), result.notes
