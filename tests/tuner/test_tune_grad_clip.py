"""``tune(grad_clip_norm=)`` / ``autoshard tune --grad-clip-norm``: the study plans with the clipping, every trial's
plan clips (the worker trains with the plan's norm: tests/planner/test_grad_clip_norm.py), the best plan keeps it,
and a study remembers it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import autoshard
from autoshard.cli import main
from autoshard.errors import UsageError
from autoshard.planner import plan_file
from autoshard.planner.plan_file import ExportedPlan

from .standin import DDP_SPACE, replay

ARGS: dict[str, Any] = {"processes": 2, "seq_len": 32, "precision": "32-true", "steps": 5, "warmup_steps": 2,
                        "progress": False, "use_cache": False, "prune": False}


def test_every_trial_and_the_best_plan_clip_and_the_study_remembers_the_norm(tmp_path: Path) -> None:
    calls: list[ExportedPlan] = []
    result = autoshard.tune("tiny-gpt2", trials=2, output_dir=tmp_path, space=DDP_SPACE, runner=replay(calls),
                            grad_clip_norm=0.5, **ARGS)
    assert calls and {e.grad_clip_norm for e in calls} == {0.5}  # from the plan's workload: planned with it
    assert result.best_plan is not None and result.best_plan.grad_clip_norm == 0.5
    assert plan_file.read(tmp_path / "best" / "plan.json").grad_clip_norm == 0.5

    for other in (1.0, None):  # the same study under another norm, or none: another job
        with pytest.raises(UsageError, match="grad_clip_norm"):
            autoshard.tune("tiny-gpt2", trials=3, output_dir=tmp_path, space=DDP_SPACE, runner=replay([]),
                           grad_clip_norm=other, **ARGS)


def test_fit_tunes_with_its_own_norm(tmp_path: Path) -> None:
    """``fit(grad_clip_norm=, tune=...)``: the trials are planned with the norm the training run will clip to."""
    calls: list[ExportedPlan] = []
    result = autoshard.fit("tiny-gpt2", max_steps=1, seq_len=32, batch_size=1, grad_clip_norm=0.5,
                           tune={"trials": 1, "output_dir": tmp_path, "space": DDP_SPACE, "runner": replay(calls),
                                 "processes": 2, "steps": 5, "warmup_steps": 2, "progress": False,
                                 "use_cache": False, "prune": False})
    assert calls and {e.grad_clip_norm for e in calls} == {0.5}
    assert result.plan.grad_clip_norm == 0.5


def test_a_study_made_without_clipping_resumes_as_before(tmp_path: Path) -> None:
    calls: list[ExportedPlan] = []
    autoshard.tune("tiny-gpt2", trials=1, output_dir=tmp_path, space=DDP_SPACE, runner=replay(calls), **ARGS)
    autoshard.tune("tiny-gpt2", trials=2, output_dir=tmp_path, space=DDP_SPACE, runner=replay(calls), **ARGS)
    assert len(calls) == 2 and {e.grad_clip_norm for e in calls} == {None}


@pytest.mark.parametrize("value", [0, -1.0, "1.0", True])
def test_a_bad_norm_is_refused_before_anything_is_traced(tmp_path: Path, value: object) -> None:
    with pytest.raises(UsageError, match="grad_clip_norm must be a positive number"):
        autoshard.tune("tiny-gpt2", trials=1, output_dir=tmp_path, space=DDP_SPACE, runner=replay([]),
                       grad_clip_norm=value, **ARGS)  # type: ignore[arg-type]
    assert not (tmp_path / "study.db").exists()


def test_the_cli_flag_reaches_the_study_and_refuses_a_bad_norm(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    for bad in ("0", "x"):
        with pytest.raises(SystemExit) as exit_info:
            main(["tune", "tiny-gpt2", "--grad-clip-norm", bad])
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and f"argument --grad-clip-norm: must be a positive number, not {bad!r}" in err
    code = main(["tune", "tiny-gpt2", "--gpus", "2", "--seq-len", "16", "--batch-size", "1", "--precision",
                 "32-true", "--strategies", "ddp", "--top", "1", "--trials", "1", "--steps", "3", "--warmup-steps",
                 "1", "--no-cache", "--no-prune", "--grad-clip-norm", "0.25", "--output-dir", str(tmp_path), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0, out
    assert plan_file.read(tmp_path / "best" / "plan.json").grad_clip_norm == 0.25
