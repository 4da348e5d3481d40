"""The worker modules run as ``python -m`` are not imported by the package that starts them: runpy would warn in
every rank's log (``RuntimeWarning: 'autoshard.tuner.worker' found in sys.modules after import of package``)."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize("entry", ["autoshard.tuner.worker", "autoshard.runtime.worker"])
def test_running_a_worker_module_warns_nothing_about_its_own_import(entry: str) -> None:
    # Without the supervisor's environment the worker stops at once (no run directory): what matters is stderr's
    # first lines, which runpy's warning would lead.
    done = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-m", entry], capture_output=True,
                          text=True, timeout=300, env={"PATH": "/usr/bin:/bin"})
    assert "found in sys.modules" not in done.stderr, done.stderr[-2000:]
    assert "RuntimeWarning" not in done.stderr, done.stderr[-2000:]
