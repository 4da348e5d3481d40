"""Resuming a study with another search space (other micro-batches, other strategies, a CPU cap measured
anew), a trial the tuner abandoned before it had a configuration, and a trial stopped by SIGTERM: real Optuna
studies of tiny-gpt2 on 2 CPU processes, their trials measured by the stand-in runner (nothing starts)."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import optuna
import pytest

import autoshard
from autoshard.planner.plan_file import ExportedPlan
from autoshard.tuner import study as study_mod
from autoshard.tuner.loop import Terminated
from autoshard.tuner.result import TrialConfig, TrialState
from autoshard.tuner.runner import Measurement, TrialSpec
from autoshard.tuner.space import SearchSpace

from .standin import DDP_SPACE, replay

ARGS: dict[str, Any] = {"processes": 2, "seq_len": 32, "precision": "32-true", "steps": 5, "warmup_steps": 2,
                        "progress": False, "use_cache": False, "prune": False}


def _stored(out: Path) -> optuna.Study:
    return optuna.load_study(study_name=None, storage=f"sqlite:///{out / 'study.db'}")


def _counted(result: autoshard.TuneResult) -> int:
    """Trials that ran their configuration and did not fail (a trial still queued shows the configuration it was
    queued with, and has not run)."""
    return len([t for t in result.trials if t.config is not None and t.failure is None
                and t.state is not TrialState.WAITING])


@pytest.mark.parametrize(("first", "then"), [
    ({"micro_batch_sizes": [1, 2]}, {"micro_batch_sizes": [1, 2, 4]}),
    ({"top_strategies": 2}, {"top_strategies": 3}),
], ids=["batch-sizes", "top"])
def test_a_study_resumed_with_other_choices_goes_on(tmp_path: Path, first: dict[str, Any],
                                                    then: dict[str, Any]) -> None:
    """Optuna refuses a categorical's second choice set under one name ("CategoricalDistribution does not
    support dynamic value space"): the resume was an internal error, as docs/tune.md says it works."""
    calls: list[ExportedPlan] = []
    before = autoshard.tune("tiny-gpt2", trials=2, output_dir=tmp_path, runner=replay(calls), **first, **ARGS)
    assert _counted(before) == 2
    after = autoshard.tune("tiny-gpt2", trials=4, output_dir=tmp_path, runner=replay(calls), **then, **ARGS)
    assert _counted(after) == 4 and len(calls) >= 3  # the new trials ran (repeats are answered from the study)
    assert after.best is not None


def test_a_resumed_cpu_study_keeps_the_micro_batch_cap_it_was_made_with(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The cap follows the CPU rate measured at each start, which varies with the machine's load: the same
    command, resumed, asked Optuna for other micro-batches and crashed."""
    spaces = []
    for rate in (1e12, 1e9):  # two starts, the second on a busy machine
        monkeypatch.setattr(study_mod, "cpu_flops_per_s", lambda threads, rate=rate: rate)
        autoshard.tune("tiny-gpt2", trials=len(spaces) + 2, output_dir=tmp_path, runner=replay([]), **ARGS)
        spaces.append(_stored(tmp_path).user_attrs["autoshard_space"])
    assert spaces[0] == spaces[1]
    assert max(spaces[0][next(iter(spaces[0]))]["micro_batch_size"]) > 64  # the first start's, uncapped at 1e9


def test_the_same_cpu_job_tuned_again_elsewhere_takes_its_trials_from_the_cache(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A new study (another output directory) measured the CPU afresh: a rate that crossed a power of two gave another
    micro-batch cap, so other configurations, and no trial came from the result cache (docs/tune.md says they do).
    The cache keeps the cap its measurements were made with."""
    args = {**ARGS, "use_cache": True, "cache_dir": tmp_path / "cache"}
    calls: list[list[ExportedPlan]] = []
    results = []
    for out, rate in (("a", 1e12), ("b", 1e9)):
        monkeypatch.setattr(study_mod, "cpu_flops_per_s", lambda threads, rate=rate: rate)
        calls.append([])
        results.append(autoshard.tune("tiny-gpt2", trials=3, output_dir=tmp_path / out, runner=replay(calls[-1]),
                                      **args))
    spaces = [_stored(tmp_path / out).user_attrs["autoshard_space"] for out in ("a", "b")]
    assert spaces[0] == spaces[1]
    ran = [t for t in results[1].trials if t.state is TrialState.COMPLETE]
    assert len(calls[0]) >= 2 and calls[1] == [] and ran and all(t.cached for t in ran)
    assert results[1].best is not None and results[0].best is not None
    assert results[1].best.config == results[0].best.config


class _FailsOnce(SearchSpace):
    """DDP_SPACE whose first suggestion fails, as a bug in the tuner would, before the trial has a configuration."""

    def suggest(self, trial: optuna.trial.BaseTrial) -> TrialConfig:
        if not _FailsOnce.failed:
            _FailsOnce.failed = True
            raise RuntimeError("a bug in the tuner")
        return SearchSpace.suggest(self, trial)

    failed = False


def test_a_trial_abandoned_before_its_configuration_uses_up_no_budget(tmp_path: Path) -> None:
    autoshard.tune("tiny-gpt2", trials=1, output_dir=tmp_path, space=DDP_SPACE, runner=replay([]), **ARGS)
    with pytest.raises(RuntimeError, match="a bug in the tuner"):
        autoshard.tune("tiny-gpt2", trials=2, output_dir=tmp_path, space=_FailsOnce(strategies=DDP_SPACE.strategies),
                       runner=replay([]), **ARGS)
    calls: list[ExportedPlan] = []
    result = autoshard.tune("tiny-gpt2", trials=2, output_dir=tmp_path, space=DDP_SPACE, runner=replay(calls), **ARGS)
    abandoned = [t for t in result.trials if t.config is None]
    assert len(abandoned) == 1 and abandoned[0].failure is not None and abandoned[0].failure.value == "crash"
    assert calls and _counted(result) == 2, result.trials  # the run went on to its budget


def test_a_trial_stopped_by_sigterm_says_so(tmp_path: Path) -> None:
    def terminated(exported: ExportedPlan, spec: TrialSpec, run_dir: Path, **_: Any) -> Measurement:
        raise Terminated  # what `autoshard tune`'s SIGTERM handler raises while a trial runs

    with pytest.raises(KeyboardInterrupt):
        autoshard.tune("tiny-gpt2", trials=1, output_dir=tmp_path, space=DDP_SPACE, runner=terminated, **ARGS)
    (trial,) = _stored(tmp_path).trials
    assert trial.user_attrs["failure"] == "interrupted"
    assert trial.user_attrs["message"].startswith("stopped by SIGTERM to the tuner")


def test_the_command_raises_terminated_on_sigterm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    import autoshard.tuning
    from autoshard.cli import main

    seen: list[BaseException] = []

    def tune(*args: Any, **kwargs: Any) -> None:
        try:
            os.kill(os.getpid(), signal.SIGTERM)
        except BaseException as e:
            seen.append(e)
            raise

    monkeypatch.setattr(autoshard.tuning, "tune", tune)
    assert main(["tune", "tiny-gpt2", "--gpus", "2", "--output-dir", str(tmp_path)]) == 143
    assert [type(e) for e in seen] == [Terminated]
    assert "autoshard: terminated (SIGTERM)" in capsys.readouterr().err
