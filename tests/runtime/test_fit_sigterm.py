"""SIGTERM to a script whose fit() runs workers (a job scheduler's time limit, `kill`) stops the workers and removes
the run directory, as Ctrl-C does: it ended the launching process at once and left ``$TMPDIR/autoshard-fit-*``
with the model's weights in it (a concurrency probe)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.runtime.test_fit_backends import REPO, SCRIPT


def _workers(marker: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        if marker in " ".join(p.info["cmdline"] or []):
            found.append(p)
    return found


@pytest.mark.skipif(sys.platform != "linux", reason="POSIX signals and process groups")
def test_sigterm_stops_the_workers_and_removes_the_run_directory(tmp_path: Path) -> None:
    steps = 987_654  # never reached; marks this run's processes
    env = dict(os.environ, TMPDIR=str(tmp_path), OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p))
    env.pop("RANK", None)
    env.pop("WORLD_SIZE", None)
    proc = subprocess.Popen([sys.executable, str(SCRIPT), json.dumps({"strategy": "ddp", "processes": 2,
                                                                        "max_steps": steps})],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    while not list(tmp_path.glob("autoshard-fit-*/rank1.log")) and time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.5)
    assert list(tmp_path.glob("autoshard-fit-*")), "the workers never started"
    time.sleep(3)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err[-2000:]
    assert "autoshard: fit() terminated (SIGTERM): its workers are stopped." in err
    assert not list(tmp_path.glob("autoshard-fit-*"))
    time.sleep(1)
    assert not _workers(str(steps))


def test_the_sigterm_message_names_the_latest_checkpoint_and_how_to_continue(tmp_path: Path) -> None:
    # a probe's SIGTERM at step 2,000 said the workers were stopped, not where the run could continue from
    import torch

    import autoshard
    from autoshard.runtime.supervisor import _resumable

    root = tmp_path / "ck"
    assert _resumable(None) == ""
    assert _resumable(root) == f" No checkpoint was written in {root} yet."
    data = [(torch.randn(4, 8), torch.randn(4, 1)) for _ in range(4)]
    autoshard.fit(torch.nn.Linear(8, 1), data, loss_fn=torch.nn.functional.mse_loss, max_steps=4, progress=False,
                  checkpointing=autoshard.Checkpointing(dir=root, every=2))
    assert _resumable(root) == (f" The latest checkpoint is {root / 'step-00000004'}: fit(..., checkpointing="
                                f"Checkpointing(dir={str(root)!r}, resume=True)) continues from it.")
