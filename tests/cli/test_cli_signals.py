"""SIGTERM (``kill``, a scheduler's time limit) ends a command as Ctrl-C does: one line, exit 143, and with
``--json`` the error document on stdout. It ended ``recommend`` and ``profile`` with no word and no JSON (a
concurrency probe)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(sys.platform != "linux", reason="POSIX signals")
@pytest.mark.parametrize(("sig", "code", "said"), [(signal.SIGTERM, 143, "terminated (SIGTERM)"),
                                                   (signal.SIGINT, 130, "interrupted")])
def test_a_signal_during_tracing_ends_the_command_in_one_line(tmp_path: Path, sig: signal.Signals, code: int,
                                                              said: str) -> None:
    env = dict(os.environ, AUTOSHARD_CACHE_DIR=str(tmp_path))
    proc = subprocess.Popen([sys.executable, "-m", "autoshard", "recommend", "llama-2-7b", "--hardware", "dgx-h100",
                             "--no-cache", "--json"], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # until it is tracing: the handler is in place by then
        time.sleep(0.5)
        if proc.poll() is not None or _tracing(proc.pid):
            break
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err[-2000:]
    assert err.strip().splitlines()[-1] == f"autoshard: {said}"
    assert "Traceback" not in err
    assert json.loads(out)["error"] == {"type": "Interrupted", "message": said, "hint": None, "exit_code": code}


def _tracing(pid: int) -> bool:
    """Whether the process has imported torch (its memory past 200 MB): the command's own code runs by then."""
    try:
        rss_pages = int(Path(f"/proc/{pid}/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return False
    return rss_pages * os.sysconf("SC_PAGE_SIZE") > 200 * 2**20
