"""``fit(tune=...)`` (autoshard/fitting.py) refuses what it cannot do before any trial runs."""

from __future__ import annotations

import pytest
import torch

import autoshard
from autoshard.errors import UsageError
from autoshard.runtime import supervisor


def _batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(torch.randn(4, 3), torch.randn(4, 1)) for _ in range(2)]


def test_tuning_needs_a_model_source() -> None:
    with pytest.raises(UsageError, match="needs a model source"):
        autoshard.fit(torch.nn.Linear(3, 1), _batches(), loss_fn=torch.nn.functional.mse_loss, tune=True)


def test_tuning_chooses_the_plan_itself(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(UsageError, match="cannot be combined with plan="):
        autoshard.fit("tiny-gpt2", max_steps=1, plan=tmp_path / "plan.json", tune=True)


def test_bad_arguments_are_refused_before_tuning() -> None:
    with pytest.raises(UsageError, match="max_steps"):
        autoshard.fit("tiny-gpt2", max_steps=0, tune={"trials": 1})


def test_a_tune_argument_autoshard_tune_does_not_take_is_named_with_the_closest() -> None:
    """``tune={"trial_timeout": 60}`` (the flag's name) was "got an argument tune() does not take", naming none."""
    with pytest.raises(UsageError, match="'trial_timeout' is not an argument of autoshard.tune\\(\\); did you mean "
                                         "'trial_timeout_s'") as info:
        autoshard.fit("tiny-gpt2", [], tune={"trial_timeout": 60}, max_steps=1, progress=False)
    assert "micro_batch_sizes" in (info.value.hint or "")


def test_tuning_under_a_launcher_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Under torchrun every rank would tune. (A worker fit() started itself reaches fit(tune=...) too, running the
    script again: it trains the plan the launching process tuned, tests/tuner/test_tune_study.py.)"""
    for name, value in {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv(supervisor.RUN_DIR_VAR, raising=False)
    with pytest.raises(UsageError, match="under a launcher would tune once per rank"):
        autoshard.fit("tiny-gpt2", max_steps=1, tune=True)
