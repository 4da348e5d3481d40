"""Killing the tuner mid-study and running the same command again: nothing finished is lost, the trial the
killed tuner was running is marked failed, its workers are gone, and the study goes on to its budget."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import optuna

from tests.tuner.test_tune_study import leftover_workers

TRIALS = 4


def command(out: Path) -> list[str]:
    return [sys.executable, "-m", "autoshard", "tune", "tiny-gpt2", "--gpus", "2", "--seq-len", "32",
            "--batch-sizes", "2", "4", "--top", "2", "--steps", "200", "--warmup-steps", "2", "--trials", str(TRIALS),
            "--precision", "32-true", "--no-prune", "--no-cache", "--output-dir", str(out), "--json"]


def wait_for_running_trial(db: Path, tuner: subprocess.Popen[bytes], deadline_s: float) -> None:
    """Poll the study until at least one trial is complete and another is running with its workers started."""
    end = time.monotonic() + deadline_s
    storage = f"sqlite:///{db}"
    while time.monotonic() < end:
        if tuner.poll() is not None:
            raise AssertionError(f"the tuner finished (exit code {tuner.returncode}) before it could be killed")
        if not db.is_file():
            time.sleep(0.5)
            continue
        try:
            trials = optuna.load_study(study_name=None, storage=storage).get_trials(deepcopy=False)
        except (KeyError, ValueError, RuntimeError):  # the study does not exist yet
            trials = []
        complete = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
        running = [t for t in trials if t.state == optuna.trial.TrialState.RUNNING and "config" in t.user_attrs]
        if complete and running and leftover_workers(db.parent):  # its workers have started (seconds to go)
            return
        time.sleep(0.2)
    raise AssertionError("the tuner never had a completed and a running trial at once")


def test_sigkilled_tuner_resumes_with_its_finished_trials(tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = subprocess.Popen(command(out), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
    try:
        wait_for_running_trial(out / "study.db", first, deadline_s=300)
        first.kill()  # SIGKILL: no chance to clean up
        first.wait(timeout=30)
    finally:
        if first.poll() is None:
            first.kill()
    # The killed tuner's workers notice their parent is gone and leave.
    end = time.monotonic() + 20
    while leftover_workers(out) and time.monotonic() < end:
        time.sleep(0.5)
    assert not leftover_workers(out)
    seen = optuna.load_study(study_name=None, storage=f"sqlite:///{out / 'study.db'}").get_trials(deepcopy=False)
    before = {t.number: t.value for t in seen if t.state == optuna.trial.TrialState.COMPLETE}
    stale = [t.number for t in seen if t.state == optuna.trial.TrialState.RUNNING]
    assert before and stale, [(t.number, t.state) for t in seen]

    again = subprocess.run(command(out), capture_output=True, text=True, timeout=600, check=False)
    assert again.returncode == 0, again.stderr[-3000:]
    payload = json.loads(again.stdout)
    trials = {t["number"]: t for t in payload["trials"]}
    for number, value in before.items():  # every completed trial is still there, unchanged
        assert trials[number]["state"] == "complete" and trials[number]["samples_per_s"] == value
    for number in stale:
        assert trials[number]["state"] == "failed" and trials[number]["failure"] == "stale"
    counted = [t for t in payload["trials"] if t["failure"] not in ("stale", "predicted_oom")]
    assert len(counted) == TRIALS and len([t for t in counted if t["state"] == "complete"]) > len(before)
    assert any("marked failed" in note for note in payload["notes"])
    assert not leftover_workers(out)
