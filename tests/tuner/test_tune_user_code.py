"""Trials train what the user trains: the model file's ``optimizer()`` (the plan named it, the trials stepped
AdamW), with real trials of a tiny model file on CPU; and an error the user's code raises at any step is
theirs, with its file and line."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest

import autoshard
from autoshard.errors import UsageError, UserCodeError
from autoshard.tuner import FailureClass

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


def test_trials_run_the_users_training_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """fit(tune=..., training_step=...) and tune() trained the stand-in forward + loss: the step was dropped."""
    counter = tmp_path / "steps"
    monkeypatch.setenv("AUTOSHARD_TEST_STEP_COUNTER", str(counter))
    fitted = autoshard.fit(MODEL, training_step=own_step_model.shifted_step, max_steps=1, progress=False,
                           processes=1, precision="32-true", tune={k: v for k, v in ONE_TRIAL.items() if k not in (
                               "processes", "precision")} | {"output_dir": str(tmp_path / "out")})
    assert any(n.startswith("Tuned with 1 trial(s)") for n in fitted.notes), fitted.notes
    trial = json.loads((tmp_path / "out" / "trials" / "0000" / "trial.json").read_text())
    assert trial["training_step"]["qualname"] == "shifted_step"
    assert counter.read_text().count("step") == ONE_TRIAL["steps"]  # every step of the trial ran the user's


def _closure() -> object:
    def step(model: object, batch: object) -> object:
        return own_step_model.shifted_step(model, batch)  # type: ignore[arg-type]
    return step


@pytest.mark.parametrize("step", [lambda model, batch: model(batch[0]).sum(), _closure()])
def test_a_step_the_trials_cannot_import_is_refused_before_any_trial(tmp_path: Path, step: object) -> None:
    with pytest.raises(UsageError, match=r"training_step .* is a lambda, a closure"):
        autoshard.tune(MODEL, training_step=step, output_dir=tmp_path / "out", **ONE_TRIAL)  # type: ignore[arg-type]
    assert not (tmp_path / "out" / "trials").exists()


LATE = Path(__file__).parent / "late_error_model.py"
RAISE_LINE = next(n for n, line in enumerate(LATE.read_text().splitlines(), 1) if "# RAISE_LINE" in line)


@pytest.mark.parametrize(("where", "at", "step"), [("forward", 1, 1), ("forward", 2, 2), ("loss", 3, 3),
                                                   ("step", 2, 2)])
def test_the_users_error_at_any_step_is_theirs_with_file_and_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str, at: int, step: int) -> None:
    """A ValueError in forward, the loss or training_step after the first step was a 'crash' with no file:line
    (at the first step: user_code, no file:line either); now user_code naming the file and line, at any step."""
    from . import late_error_model

    monkeypatch.setenv("AUTOSHARD_TEST_RAISE_IN", where)
    monkeypatch.setenv("AUTOSHARD_TEST_RAISE_AT", str(at))
    given = {"training_step": late_error_model.training_step} if where == "step" else {}
    with pytest.raises(UserCodeError, match="the first trial failed in your code") as caught:
        autoshard.tune(LATE, output_dir=tmp_path / "out", **ONE_TRIAL, **given)
    assert f"{LATE}:{RAISE_LINE}: " in caught.value.message, caught.value.message
    assert f"injected bug in the user's {where}" in caught.value.message
    if step > 1:
        assert f"at step {step}" in caught.value.message
    stored = optuna.load_study(study_name=None, storage=f"sqlite:///{tmp_path / 'out' / 'study.db'}")
    assert [t.user_attrs.get("failure") for t in stored.trials] == [FailureClass.USER_CODE.value]
