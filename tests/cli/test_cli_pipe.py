"""A reader that stops early (``autoshard ... | head -1``): the command ends as a shell reports a SIGPIPE (141),
quietly, whichever printer wrote the output (rich's own answer to a broken pipe was exit 1, a failure under
``set -o pipefail``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("argv", [["hardware", "--hardware", "dgx-h100"], ["hardware", "--list"], ["models"],
                                  ["hardware", "--hardware", "dgx-h100", "--json"]])
def test_a_closed_pipe_ends_the_command_with_141_and_no_message(argv: list[str]) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "autoshard", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before the first line: every write meets a broken pipe
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141, stderr
    assert "error" not in stderr.lower(), stderr
