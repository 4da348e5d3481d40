"""A trial stopped while its workers build a torch extension op (DeepSpeed's ``deepspeed_shm_comm`` and
``cpu_adam`` are built on first load, minutes on a CPU) left the build's lock file, and every later trial and run
that loads the op then waited on it for ever (a tune probe, stopped mid-build; fit() refuses to start on it). The
trial's workers are all stopped by then: the lock they made is removed, and the failure says so."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from autoshard.tuner.result import FailureClass
from autoshard.tuner.runner import TrialFailed, TrialSpec, run_trial
from tests.tuner.test_trial_host_threads import REPO, _plan

MODEL = Path(__file__).parent / "building_model.py"


def test_a_trial_stopped_mid_build_leaves_no_lock_for_later_runs_to_wait_on(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tests.tuner.test_trial_host_threads.MODEL", MODEL)  # the plan's model fingerprint
    extensions = tmp_path / "extensions"
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    env.update(TORCH_EXTENSIONS_DIR=str(extensions), OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p))
    lock = extensions / "py311_cpu" / "building_op" / "lock"
    unrelated = extensions / "py311_cpu" / "older_op" / "lock"  # left before the trial: not the trial's to remove
    unrelated.parent.mkdir(parents=True)
    unrelated.touch()
    os.utime(unrelated, (1, 1))
    spec = TrialSpec(model=str(MODEL), optimizer="adamw", steps=3, warmup_steps=1)
    with pytest.raises(TrialFailed) as failed:
        run_trial(_plan("ddp"), spec, tmp_path / "trial", timeout_s=40, environ=env)
    assert failed.value.failure is FailureClass.TIMEOUT
    assert "stopped while building torch extension op(s) building_op: the build's lock was removed" in \
        failed.value.message
    assert not lock.exists() and lock.parent.is_dir()
    assert unrelated.exists()
