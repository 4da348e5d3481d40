"""The README's examples run as written: every ``python`` block as a script, and every command of the
"Recommend", "Profile" sections that needs nothing but this repository (no ``path/to/...``, no Hub cache)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"```python\n(.*?)```", README, flags=re.S)
COMMANDS = [line.strip().split("  #")[0].strip() for line in README.splitlines()
            if line.startswith("    autoshard ") and "path/to" not in line and "/" not in line.split("#")[0]]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}


def test_the_readme_has_examples() -> None:
    assert len(BLOCKS) >= 2 and len(COMMANDS) >= 3, (len(BLOCKS), COMMANDS)


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_each_python_example_runs(index: int, tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(BLOCKS[index], encoding="utf-8")
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=_env(), capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert done.stdout.strip(), "the example prints its result"


@pytest.mark.parametrize("command", COMMANDS)
def test_each_command_runs(command: str, tmp_path: Path) -> None:
    argv = shlex.split(command)
    done = subprocess.run([sys.executable, "-m", "autoshard", *argv[1:]], cwd=tmp_path, env=_env(),
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]


def test_the_training_example_runs_and_prints_its_steps(tmp_path: Path) -> None:
    """examples/train_gpt.py, which the README's Train section and docs/fit.md point to: it crashed after training
    (``result.steps`` is a tuple) and no test ran it."""
    done = subprocess.run([sys.executable, str(REPO / "examples" / "train_gpt.py"), "--steps", "3"], cwd=tmp_path,
                          env=_env(), capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert "micro-batch 4" in lines[0] and [line.split()[:2] for line in lines[1:]] == [["step", "1"], ["step", "2"],
                                                                                       ["step", "3"]]
