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
                            stderr=subprocess.PIPE, text=True, preexec_fn=_default_sigint)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (_command_running(proc.pid) and _torch_loaded(proc.pid)):
        assert proc.poll() is None, "the command ended before it was seen running"
        time.sleep(0.05)
    time.sleep(1.0)  # torch is imported; the trace of a 7B model runs for seconds after
    assert proc.poll() is None, "the command ended before the signal: give it a larger model"
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    # Exit 130, or, for SIGINT, death by SIGINT once the line is said (-2 here): a shell reports both as 130
    # (128 + 2), which is what "ends as Ctrl-C does" means to it. CI saw the second twice in a session
    # (2026-12-04), once with every later SIGINT ignored; the cause is not found (see the closing note).
    assert proc.returncode == code or (sig == signal.SIGINT and proc.returncode == -sig), err[-2000:]
    assert err.strip().splitlines()[-1] == f"autoshard: {said}"
    assert "Traceback" not in err
    assert json.loads(out)["error"] == {"type": "Interrupted", "message": said, "hint": None, "exit_code": code}


def _command_running(pid: int) -> bool:
    """Whether the command's own code runs: it catches SIGTERM (bit 15 of ``SigCgt`` in ``/proc/PID/status``)
    only inside the ``try`` that turns a signal into one line. It waited for the process's memory to pass
    200 MB before, which a fast machine never reached before the command finished (CI, session 57)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = next((line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), "0")
    return bool(int(caught, 16) >> (signal.SIGTERM - 1) & 1)


def _torch_loaded(pid: int) -> bool:
    """Whether the process has mapped torch's library: the command is importing torch or tracing."""
    try:
        return "libtorch_cpu" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


def _default_sigint() -> None:
    """SIGINT as a shell leaves it: a pytest-xdist worker ignores it, its children inherit that, and Python then
    installs no KeyboardInterrupt handler, so the command ran to its end (exit 0) in CI twice."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
