"""Resuming with another optimizer than the checkpoint's: another algorithm is refused, another implementation of
the same one continues, and settings the checkpoint replaced are said.

torch's ``Optimizer.load_state_dict`` replaces each parameter group with the saved one: an AdamW checkpoint resumed
with SGD failed at its first step (``KeyError: 'momentum'``), one resumed with ZeRO-2 offload failed in DeepSpeed's
CPU Adam (``KeyError: 'bias_correction'``), and a learning rate passed on resume was silently the checkpoint's.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from autoshard import Checkpointing
from autoshard.errors import UsageError
from autoshard.runtime import fit
from autoshard.runtime.resumed_optimizer import algorithm, fill_missing, hyperparameters, replaced


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))


def _data() -> torch.utils.data.TensorDataset:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 8, generator=g)
    return torch.utils.data.TensorDataset(x, x @ torch.randn(8, 1, generator=g))


def _fit(steps: int, optimizer, checkpointing: Checkpointing | None = None, batch_size: int = 8):  # type: ignore[no-untyped-def]
    return fit(_model(), _data(), batch_size=batch_size, max_steps=steps, loss_fn=nn.functional.mse_loss,
               optimizer=optimizer, progress=False, checkpointing=checkpointing)


def test_a_learning_rate_passed_on_resume_is_the_checkpoints_and_a_note_says_so(tmp_path: Path) -> None:
    whole = _fit(4, lambda p: torch.optim.AdamW(p, lr=0.05))
    _fit(2, lambda p: torch.optim.AdamW(p, lr=0.05), Checkpointing(dir=tmp_path))
    resumed = _fit(4, lambda p: torch.optim.AdamW(p, lr=1e-4, weight_decay=0.01),
                   Checkpointing(dir=tmp_path, resume=True))
    assert resumed.losses == pytest.approx(whole.losses[2:], rel=1e-6)  # as torch's load_state_dict does
    said = [n for n in resumed.notes if n.startswith("The optimizer's settings are the checkpoint's")]
    assert len(said) == 1 and "lr 0.0001 -> 0.05" in said[0] and "weight_decay 0.01 -> 0.01" not in said[0]
    again = _fit(6, lambda p: torch.optim.AdamW(p, lr=0.05), Checkpointing(dir=tmp_path, resume=True))
    assert not [n for n in again.notes if "settings are the checkpoint's" in n]  # the same settings: nothing to say


def test_another_optimizer_algorithm_is_refused_before_its_first_step(tmp_path: Path) -> None:
    _fit(2, lambda p: torch.optim.AdamW(p, lr=0.05), Checkpointing(dir=tmp_path))
    with pytest.raises(UsageError, match=r"holds AdamW's optimizer state, and this run's optimizer is SGD") as e:
        _fit(4, lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9), Checkpointing(dir=tmp_path, resume=True))
    assert e.value.hint is not None and "Resume with AdamW" in e.value.hint


def test_another_global_batch_on_resume_is_said(tmp_path: Path) -> None:
    _fit(2, "sgd", Checkpointing(dir=tmp_path))
    resumed = _fit(4, "sgd", Checkpointing(dir=tmp_path, resume=True), batch_size=4)
    said = [n for n in resumed.notes if n.startswith("The global batch is 4 samples")]
    assert len(said) == 1 and "the checkpoint's run took 8" in said[0] and "global_batch_size=8" in said[0]


def test_deepspeeds_cpu_adam_is_adamw_and_continues_torch_adamws_state() -> None:
    pytest.importorskip("deepspeed")
    from deepspeed.ops.adam import DeepSpeedCPUAdam

    torch.manual_seed(0)
    weight = nn.Parameter(torch.randn(4, 4))
    saved = torch.optim.AdamW([weight], lr=0.01)
    weight.grad = torch.ones_like(weight)
    saved.step()
    offloaded = DeepSpeedCPUAdam([weight], lr=0.01, weight_decay=0.01, adamw_mode=True)  # as offload builds it
    assert algorithm(offloaded) == algorithm(saved) == "AdamW"
    assert algorithm(DeepSpeedCPUAdam([weight], adamw_mode=False)) == "Adam"
    given = hyperparameters(offloaded)
    offloaded.load_state_dict(saved.state_dict())
    assert "bias_correction" not in offloaded.param_groups[0]  # what failed its step
    assert fill_missing(offloaded, given) == ["bias_correction"]
    offloaded.step()  # no KeyError
    assert replaced(given, hyperparameters(offloaded), scheduled=False) == []


def test_replaced_settings_are_numbers_that_differ_and_a_schedule_owns_lr() -> None:
    given = [{"lr": 1e-4, "betas": (0.9, 0.999), "foreach": None, "weight_decay": 0.0}]
    loaded = [{"lr": torch.tensor(0.05), "betas": (0.9, 0.95), "foreach": True, "weight_decay": 0.0}]
    assert replaced(given, loaded, scheduled=False) == ["lr 0.0001 -> 0.05", "betas (0.9, 0.999) -> (0.9, 0.95)"]
    assert replaced(given, loaded, scheduled=True) == ["betas (0.9, 0.999) -> (0.9, 0.95)"]
