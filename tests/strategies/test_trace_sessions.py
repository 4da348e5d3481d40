"""Tracing sessions side by side: the forking cases (``forking_cases.py``) in a fresh interpreter, the number of
processes, and Ctrl-C on a real ``recommend``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autoshard.strategies.trace_sessions import jobs_for


def test_the_forking_cases_pass_in_a_fresh_interpreter():
    # A fresh process: this one may run threads other tests left behind, and then autoshard rightly never forks.
    cases = Path(__file__).with_name("forking_cases.py")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(cases)],
                          capture_output=True, text=True, timeout=900, cwd=Path(__file__).parents[2])
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and "skipped" not in proc.stdout


@pytest.mark.parametrize("jobs", [0, -1, 1.5, True])
def test_jobs_must_be_a_positive_integer(jobs):
    with pytest.raises(ValueError, match="jobs must be a positive integer"):
        jobs_for(jobs, 4)


def test_ctrl_c_during_recommend_stops_the_forked_tracer_too(tmp_path):
    """The terminal's SIGINT reaches the whole process group: the CLI says it was interrupted, and no tracing
    process is left behind."""
    import psutil

    env = {**os.environ, "AUTOSHARD_CACHE_DIR": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-m", "autoshard", "recommend", "gpt2", "--hardware", "dgx-h100",
                             "--no-cache", "--json", "--jobs", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, start_new_session=True,
                            # A shell without job control starts background jobs with SIGINT ignored, and the
                            # child would inherit that: give it the default a terminal's foreground job has.
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    def tracers() -> list[psutil.Process]:
        # A forked tracer runs the parent's command line; other children (an import's short-lived `ldconfig`,
        # say) do not, and a Ctrl-C sent while one of them runs tests nothing of this.
        parent = psutil.Process(proc.pid)
        try:
            return [c for c in parent.children() if c.cmdline() == parent.cmdline()]
        except psutil.NoSuchProcess:
            return []

    try:
        deadline = time.monotonic() + 60
        while not tracers() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.02)
        children = tracers()
        assert children, "recommend forked no tracing process"
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the foreground process group
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    # 130, or killed by SIGINT after saying so (Python does that for a Ctrl-C that lands while torch._dynamo is
    # imported, with or without forking): a shell shows 130 for both.
    assert proc.returncode in (130, -signal.SIGINT) and stderr.count("autoshard: interrupted") == 1, stderr
    assert "Traceback" not in stderr
    _, alive = psutil.wait_procs(children, timeout=10)
    assert not alive
