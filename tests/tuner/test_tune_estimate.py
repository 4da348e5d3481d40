"""On a CPU machine the default search space offers micro-batches whose trials finish in seconds, and the study
says what a trial will cost before it starts — checked against a real trial."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

import autoshard
from autoshard.tuner import TrialState


@pytest.mark.slow
def test_a_cpu_study_of_tiny_gpt2_offers_small_micro_batches_and_says_what_a_trial_costs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    result = autoshard.tune("tiny-gpt2", processes=2, seq_len=32, top_strategies=1, trials=1, steps=5, warmup_steps=2,
                            precision="32-true", use_cache=False, prune=False, progress=True, output_dir=out,
                            trial_timeout_s=120)
    space = optuna.load_study(study_name=result.study_name, storage=f"sqlite:///{out / 'study.db'}").user_attrs[
        "autoshard_space"]
    offered = [m for s in space.values() for m in s["micro_batch_size"]]
    assert max(offered) <= 512, offered  # the memory model alone offers up to 1024

    stderr = " ".join(capsys.readouterr().err.split())
    estimate = result.trial_estimate
    assert estimate is not None and estimate.steps == 5
    assert "1 trial, about" in stderr and "(estimate:" in stderr and "GFLOP/s" in stderr  # said before trial 0
    assert stderr.index("(estimate:") < stderr.index("trial 0:")
    assert result.to_dict()["trial_estimate"]["seconds"] == estimate.seconds
    import json  # summary.json says the same (it was written before the estimate was added: null)
    assert json.loads((out / "summary.json").read_text())["trial_estimate"]["seconds"] == estimate.seconds

    assert estimate.steps * estimate.step_s <= 5.0  # estimate.CPU_TRIAL_STEPS_S
    trial = result.trials[0]
    assert trial.state is TrialState.COMPLETE and trial.duration_s is not None
    assert trial.config is not None and trial.config.micro_batch_size == estimate.micro_batch_size
    # The estimate is a forecast on a shared 2-core machine: within a factor of 3 of what the trial took.
    assert estimate.seconds / 3 <= trial.duration_s <= estimate.seconds * 3, (trial.duration_s, estimate)
