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
