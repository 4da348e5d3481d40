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


@pytest.mark.slow  # 16 s; fit()'s and tune's timeouts (below; tests/tuner/test_tune_study.py) run in every suite
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


STUCK_MODEL = '''
import os, time
import torch


class Stuck(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 1)

    def forward(self, x):
        if os.environ.get("AUTOSHARD_RUN_DIR"):  # in fit()'s workers only, not while it plans
            wait_for_data()
        return self.lin(x)


def wait_for_data():
    time.sleep(300)


def model():
    return Stuck()


def batch(batch_size):
    return torch.randn(batch_size, 8)


def loss(output, batch):
    return output.pow(2).mean()
'''

FIT_STUCK = """
import json, sys
import autoshard

try:
    autoshard.fit(sys.argv[1], max_steps=2, processes=2, batch_size=2, precision="32-true", strategy="ddp",
                  timeout_s=30, progress=False)
except autoshard.WorkerTimeout as e:
    print("TIMEOUT " + json.dumps({"message": e.message, "hint": e.hint}), flush=True)
"""


def test_fit_stopped_at_its_timeout_says_where_each_rank_was(tmp_path: Path) -> None:
    import json
    import subprocess

    (tmp_path / "model.py").write_text(STUCK_MODEL, encoding="utf-8")
    (tmp_path / "train.py").write_text(FIT_STUCK, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    done = subprocess.run([sys.executable, "train.py", "model.py"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    lines = [x for x in done.stdout.splitlines() if x.startswith("TIMEOUT ")]
    assert len(lines) == 1, f"exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    error = json.loads(lines[0].removeprefix("TIMEOUT "))
    for rank in (0, 1):
        assert f"rank {rank} was in wait_for_data ({tmp_path / 'model.py'}:" in error["message"], error["message"]
    assert error["hint"].startswith("fit(timeout_s=30) stopped it")
