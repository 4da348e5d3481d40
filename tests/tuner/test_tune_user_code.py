"""Trials train what the user trains: the model file's ``optimizer()`` (the plan named it, the trials stepped
AdamW), with real trials of a tiny model file on CPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import autoshard
from autoshard.errors import UsageError

from . import own_step_model

MODEL = Path(__file__).parent / "own_step_model.py"
ONE_TRIAL = {"processes": 1, "strategies": ["ddp"], "top_strategies": 1, "micro_batch_sizes": [4], "trials": 1,
             "steps": 3, "warmup_steps": 1, "trial_timeout_s": 120, "use_cache": False, "progress": False,
             "precision": "32-true"}


def test_trials_train_with_the_model_files_optimizer_not_the_flags(tmp_path: Path) -> None:
    """best/plan.json said sgd (the file's), and every trial stepped AdamW at its default lr (--optimizer's)."""
    result = autoshard.tune(MODEL, optimizer="adam", output_dir=tmp_path / "out", **ONE_TRIAL)
    assert result.best is not None and result.best_plan is not None, [t.to_dict() for t in result.trials]
    assert result.best_plan.optimizer == "sgd"
    measured = json.loads((tmp_path / "out" / "trials" / "0000" / "measurement.json").read_text())
    assert {s["lr"] for s in measured["steps"]} == {own_step_model.LR}
    assert any("model file's optimizer() (sgd)" in n and "(adam) is not used" in n for n in result.notes)


def test_an_unknown_optimizer_is_refused_before_planning_even_when_the_file_declares_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--optimizer bogus ran 12 trials, each failing 'unknown optimizer' (the planner took the file's)."""
    monkeypatch.setattr("autoshard.tuner.study.plan_for", lambda *a, **k: pytest.fail("planned before the check"))
    with pytest.raises(UsageError, match="unknown optimizer 'bogus'"):
        autoshard.tune(MODEL, optimizer="bogus", output_dir=tmp_path / "out", **ONE_TRIAL)
    assert not (tmp_path / "out" / "trials").exists()
