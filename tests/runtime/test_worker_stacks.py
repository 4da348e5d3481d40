"""A run stopped at its time limit says where each rank was: real worker processes, really stopped."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from autoshard.errors import WorkerTimeout
from autoshard.runtime import supervisor

STUCK_WORKER = """
import os, time
from autoshard.runtime.supervisor import dump_stacks_when_stopped

dump_stacks_when_stopped(os.environ)
open(os.path.join(os.environ["AUTOSHARD_RUN_DIR"], f"ready{os.environ['RANK']}"), "w").close()


def wait_for_peer():
    time.sleep(120)  # a collective that never completes


wait_for_peer()
"""


def test_a_timed_out_run_names_each_ranks_innermost_frame(tmp_path: Path) -> None:
    script = tmp_path / "stuck.py"
    script.write_text(STUCK_WORKER, encoding="utf-8")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with pytest.raises(WorkerTimeout) as caught:
        supervisor.run_workers([sys.executable, str(script)], world_size=2, run_dir=run_dir,
                               environ=dict(os.environ), timeout_s=15, grace_s=10, log_rank0=True)
    assert (run_dir / "ready0").is_file() and (run_dir / "ready1").is_file(), "a worker took 15 s to start"
    lines = STUCK_WORKER.splitlines()
    inner = lines.index("    time.sleep(120)  # a collective that never completes") + 1
    outer = lines.index("wait_for_peer()") + 1
    message = caught.value.message
    assert message.startswith("the workers did not finish within the time limit")
    for rank in (0, 1):
        assert f"rank {rank} was in wait_for_peer ({script}:{inner}) ← <module> ({script}:{outer})" in message
        assert (run_dir / f"stacks-rank{rank}.txt").is_file()
    assert "stacks-rankN.txt" in (caught.value.hint or "")


def test_without_stacks_the_timeout_says_what_it_always_said(tmp_path: Path) -> None:
    error = supervisor._error({-1: None}, tmp_path, 2)
    assert isinstance(error, WorkerTimeout) and error.hint is None
    assert error.message == "the workers did not finish within the time limit and were stopped."
