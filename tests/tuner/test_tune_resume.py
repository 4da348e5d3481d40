"""Stopping the tuner mid-study and running the same command again: nothing finished is lost, the trial it was
running is marked failed (``stale`` when killed, ``interrupted`` on Ctrl-C) without using up the budget, its
workers are gone, its configuration runs again first, and the study goes on to its budget."""

from __future__ import annotations

import datetime
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import optuna
import psutil
import pytest

from tests.tuner.test_tune_study import leftover_workers

TRIALS = 4


def command(out: Path, trials: int = TRIALS, steps: int = 200) -> list[str]:
    """The tune command of these tests. Its trials are long enough (200 steps) for a signal sent once a trial is
    seen running to reach the tuner before that trial ends: at 20 steps, under the load of a whole test run, the
    tuner once finished the study's last trial and exited 0 between the two (2026-12-01, `pytest -m slow`)."""
    return [sys.executable, "-m", "autoshard", "tune", "tiny-gpt2", "--gpus", "2", "--seq-len", "32",
            "--batch-sizes", "2", "4", "--top", "2", "--steps", str(steps), "--warmup-steps", "2", "--trials",
            str(trials), "--precision", "32-true", "--no-prune", "--no-cache", "--output-dir", str(out), "--json"]


def _stderr_tail(out: Path) -> str:
    log = out.parent / "tuner.stderr"
    return log.read_text(encoding="utf-8", errors="replace")[-1500:] if log.is_file() else "(no stderr kept)"


def wait_for_running_trial(db: Path, tuner: subprocess.Popen[Any], deadline_s: float, *,
                           after_complete: bool = True) -> int:
    """Poll the study until a trial is running with its workers started (and, with ``after_complete``, another
    is complete); returns the running trial's number."""
    end = time.monotonic() + deadline_s
    storage = f"sqlite:///{db}"
    while time.monotonic() < end:
        if tuner.poll() is not None:
            raise AssertionError(f"the tuner finished (exit code {tuner.returncode}) before it could be killed: "
                                 f"{_stderr_tail(db.parent)}")
        # Open the study only once a trial has started: opening an SQLite storage creates its tables, and doing
        # that while the tuner creates them too can fail the tuner's own open (exit 2, seen under load).
        trials_dir = db.parent / "trials"
        if not db.is_file() or not trials_dir.is_dir() or not any(trials_dir.iterdir()):
            time.sleep(0.5)
            continue
        try:
            trials = optuna.load_study(study_name=None, storage=storage).get_trials(deepcopy=False)
        except (KeyError, ValueError, RuntimeError):  # the study does not exist yet
            trials = []
        complete = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
        running = [t for t in trials if t.state == optuna.trial.TrialState.RUNNING and "config" in t.user_attrs]
        if (complete or not after_complete) and running and leftover_workers(db.parent):  # workers started
            return running[0].number
        time.sleep(0.2)
    raise AssertionError("the tuner never had a completed and a running trial at once")


def test_sigkilled_tuner_resumes_with_its_finished_trials(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with (tmp_path / "tuner.stderr").open("wb") as err:
        first = subprocess.Popen(command(out), stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
    try:
        wait_for_running_trial(out / "study.db", first, deadline_s=300)
        first.kill()  # SIGKILL: no chance to clean up
        # Not reaped until the end: a killed tuner is a zombie until its parent waits for it (a script that calls
        # Popen.kill() and goes on), and the resumed tuner must see it as gone all the same.
        end = time.monotonic() + 30
        while psutil.Process(first.pid).status() != psutil.STATUS_ZOMBIE and time.monotonic() < end:
            time.sleep(0.1)
    except BaseException:
        first.kill()
        first.wait()
        raise
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
    first.wait(timeout=5)


@pytest.mark.slow
def test_ctrl_c_records_the_trial_as_interrupted_and_the_resumed_study_runs_it_again_first(tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = subprocess.Popen(command(out, trials=2), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, start_new_session=True)
    try:
        interrupted = wait_for_running_trial(out / "study.db", first, deadline_s=300, after_complete=False)
        os.killpg(first.pid, signal.SIGINT)  # Ctrl-C: the terminal's process group (the workers have their own)
        stdout, stderr = first.communicate(timeout=60)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert first.returncode == 130, stderr[-3000:]
    assert not leftover_workers(out)  # stopped by process group before the tuner exited
    seen = {t.number: t for t in optuna.load_study(study_name=None, storage=f"sqlite:///{out / 'study.db'}").trials}
    assert seen[interrupted].state == optuna.trial.TrialState.FAIL
    assert seen[interrupted].user_attrs["failure"] == "interrupted"
    written = json.loads((out / "summary.json").read_text())  # what finished is readable before any resume
    assert any(note.startswith("Interrupted (Ctrl-C)") for note in written["notes"])
    assert written["trials"][interrupted]["failure"] == "interrupted"
    printed = json.loads(stdout)  # --json prints what finished, as summary.json holds it (it printed nothing)
    assert printed["trials"] == written["trials"] and printed["notes"][:len(written["notes"])] == written["notes"]
    # stderr also says each trial as it runs (under --json too); the last word is the interruption's alone
    said = [line for line in stderr.splitlines() if line.startswith("autoshard:")]
    assert said == [
        f"autoshard: interrupted; what finished is in {out / 'summary.md'}, and the same command resumes the study "
        f"in {out} (a trial it was running runs again first)."]
    assert stderr.rstrip().endswith(said[0])
    config = seen[interrupted].user_attrs["config"]

    resumed_at = datetime.datetime.now()  # optuna's clock: local, naive
    again = subprocess.run(command(out, trials=2), capture_output=True, text=True, timeout=600,
                           check=False)
    assert again.returncode == 0, again.stderr[-3000:]
    payload = json.loads(again.stdout)
    trials = {t["number"]: t for t in payload["trials"]}
    assert trials[interrupted]["state"] == "failed" and trials[interrupted]["failure"] == "interrupted"
    counted = [t for t in payload["trials"] if t["failure"] not in ("interrupted", "stale", "predicted_oom")]
    assert len(counted) == 2, payload["trials"]  # the interrupted trial used up none of the budget
    ran = sorted((t for t in optuna.load_study(study_name=None, storage=f"sqlite:///{out / 'study.db'}").trials
                  if t.datetime_start is not None and t.datetime_start >= resumed_at), key=lambda t: t.datetime_start)
    rerun = ran[0]  # the first trial the resumed tuner ran, ahead of the ones queued before it
    assert rerun.user_attrs.get("rerun_of") == interrupted and rerun.user_attrs["config"] == config
    assert trials[rerun.number]["rerun_of"] == interrupted  # in summary.json and --json too, as tune.md says
    assert trials[rerun.number]["state"] == "complete"
    assert [t for t in payload["trials"] if t["config"] == config and t["state"] == "complete"]
    assert any(f"Trial {interrupted} was stopped before it finished" in note for note in payload["notes"])
    assert not leftover_workers(out)


@pytest.mark.slow
def test_sigterm_stops_the_tuner_as_ctrl_c_does(tmp_path: Path) -> None:
    """`kill PID` (a job scheduler's time limit) left the running trial RUNNING in the study and wrote no summary:
    it is Ctrl-C's path now, the trial's workers stopped and the trial recorded, exit 143."""
    out = tmp_path / "out"
    first = subprocess.Popen(command(out, trials=2), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, start_new_session=True)
    try:
        interrupted = wait_for_running_trial(out / "study.db", first, deadline_s=300, after_complete=False)
        first.terminate()  # the tuner alone, not its group
        stdout, stderr = first.communicate(timeout=60)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert first.returncode == 143, stderr[-3000:]
    assert "autoshard: terminated (SIGTERM); what finished is in" in stderr
    assert not leftover_workers(out)
    seen = {t.number: t for t in optuna.load_study(study_name=None, storage=f"sqlite:///{out / 'study.db'}").trials}
    assert seen[interrupted].state == optuna.trial.TrialState.FAIL
    assert seen[interrupted].user_attrs["failure"] == "interrupted"
    assert json.loads((out / "summary.json").read_text())["trials"][interrupted]["failure"] == "interrupted"


@pytest.mark.parametrize("launcher_is_parent", [True, False], ids=["launcher-alive", "orphaned-while-starting"])
def test_a_trial_worker_whose_tuner_died_while_it_started_leaves_at_once(tmp_path: Path,
                                                                          launcher_is_parent: bool) -> None:
    """The tuner names itself in the workers' environment: a worker started just before its tuner was killed is
    already an orphan when it first looks at its parent, and must not record the new parent as its tuner."""
    from autoshard.runtime.supervisor import LAUNCHER_PID_VAR, RUN_DIR_VAR

    launcher = os.getpid() if launcher_is_parent else os.getpid() + 1  # the worker's parent is this process
    env = {**os.environ, RUN_DIR_VAR: str(tmp_path), LAUNCHER_PID_VAR: str(launcher), "RANK": "0",
           "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}
    done = subprocess.run([sys.executable, "-m", "autoshard.tuner.worker"], env=env, capture_output=True,
                          timeout=120, check=False)
    assert done.returncode == 1
    # With its tuner alive the worker goes on, finds no trial files and reports that; orphaned, it ran nothing.
    assert (tmp_path / "error-rank0.json").exists() is launcher_is_parent, done.stderr.decode()[-2000:]
