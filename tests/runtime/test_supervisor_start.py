"""A worker process that cannot be started is the user's problem in the user's words, not an internal error: a
Python without execute permission (a probe's venv) surfaced as `PermissionError` from `subprocess.Popen`."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from autoshard.errors import WorkerError
from autoshard.runtime.supervisor import run_workers


@pytest.mark.parametrize("how", ["not executable", "missing"])
def test_a_worker_that_cannot_be_started_is_a_worker_error(tmp_path: Path, how: str) -> None:
    program = tmp_path / "python"
    if how == "not executable":
        program.write_text("#!/bin/sh\nexit 0\n")
        program.chmod(0o644)
    with pytest.raises(WorkerError) as info:
        run_workers([str(program), "-c", "pass"], world_size=2, run_dir=tmp_path, environ=dict(os.environ))
    message = str(info.value)
    assert message.startswith(f"could not start rank 0's worker process ({program}): ")
    assert ("Permission denied" if how == "not executable" else "No such file") in message
    assert "executable" in (info.value.hint or "")


def test_workers_that_start_still_run(tmp_path: Path) -> None:
    run_workers([sys.executable, "-c", "pass"], world_size=2, run_dir=tmp_path, environ=dict(os.environ))


def test_the_other_ranks_lines_are_said_on_stderr_once_each(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    # what only rank 1 printed or warned was lost with the run directory after a run that succeeded (a probe)
    program = ("import os, sys, warnings; rank = os.environ['RANK']; print('every rank says this', flush=True); "
               "[print('rank', rank, 'step', i, flush=True) for i in range(2)]; "
               "rank == '2' and warnings.warn('only rank 2 saw a long batch')")
    run_workers([sys.executable, "-c", program], world_size=3, run_dir=tmp_path, environ=dict(os.environ))
    out, err = capfd.readouterr()
    assert out.splitlines() == ["every rank says this", "rank 0 step 0", "rank 0 step 1"]  # rank 0's own stream
    lines = err.splitlines()
    assert sum(line.endswith("] every rank says this") for line in lines) == 1  # once for ranks 1 and 2
    for rank in (1, 2):
        assert [f"[rank {rank}] rank {rank} step {i}" for i in range(2)] == [
            line for line in lines if line.startswith(f"[rank {rank}] rank ")]
    assert any(line.startswith("[rank 2] ") and "UserWarning: only rank 2 saw a long batch" in line for line in lines)
    assert "rank 1 step 1" in (tmp_path / "rank1.log").read_text()  # the log an error's tail is read from
