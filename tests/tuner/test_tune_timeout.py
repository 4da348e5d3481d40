"""``--timeout`` does not start a trial it cannot finish: with less time left than this study's trials take (the
median of those measured), the study stops and says why; it used to start one, which the time limit stopped as
a ``timeout`` failure, its time spent for nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

import autoshard
from autoshard.tuner import FailureClass, TrialState

MODEL = Path(__file__).parent / "trial_model.py"


def test_no_trial_starts_with_less_time_left_than_a_trial_takes(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The second run (resuming the first's study) had 3 s: it started a trial of about 6 s, stopped at 3 s."""
    monkeypatch.setenv("AUTOSHARD_TEST_FORWARD_SLEEP_S", "0.5")  # a trial: start-up and 3 steps of >= 0.5 s
    args = {"processes": 1, "strategies": ["ddp"], "top_strategies": 1, "micro_batch_sizes": [2, 4], "steps": 3,
            "warmup_steps": 1, "trial_timeout_s": 120, "output_dir": tmp_path / "out",
            "cache_dir": tmp_path / "cache", "progress": False, "precision": "32-true"}
    first = autoshard.tune(MODEL, trials=1, **args)
    (measured,) = first.trials
    assert measured.state is TrialState.COMPLETE and measured.duration_s is not None
    assert measured.duration_s > 3.0, measured.duration_s  # 1.5 s of steps and seconds of start-up
    # The plan comes from the workload cache now (the second run's set-up took 0.8 s where measured): about 2 s
    # of the 3 are left when the first trial could start, less than the one measured.
    again = autoshard.tune(MODEL, trials=3, timeout_s=3.0, **args)
    assert [t.number for t in again.trials] == [0], [t.to_dict() for t in again.trials]
    assert not any(t.failure is FailureClass.TIMEOUT for t in again.trials)
    stop = [n for n in again.notes if n.startswith("Stopped: ")]
    assert len(stop) == 1 and "less than a trial takes here" in stop[0] and "the median of 1 measured" in stop[0]
    assert "after 1 of 3 trial(s)" in stop[0], stop
