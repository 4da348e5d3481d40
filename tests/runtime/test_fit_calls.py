"""A script calling fit() several times: the workers each call starts run the script again from the top, and
must train that call — not the first one they reach — from the weights the module has in the launching process.

The workers of a second call trained the first call's model and data with the second call's plan (16 steps at
the loader's batch of 8 where the plan said 32), and every worker trained from its own initialisation of the
module, not from what the earlier calls had trained.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_each_call_trains_itself_from_the_launching_process_weights(tmp_path: Path) -> None:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p))
    done = subprocess.run([sys.executable, str(REPO / "tests/runtime/fit_calls_script.py"), str(tmp_path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    calls = {c["tag"]: c for c in json.loads((tmp_path / "calls.json").read_text(encoding="utf-8"))}
    assert list(calls) == ["loop-lr0.0", "loop-lr0.05", "refused", "launcher-only", "after"]
    # Each call trained its own data: 32 samples, 2 ranks, the loader's batch, 2 steps.
    assert [(calls[t]["micro_batch"], calls[t]["steps"], calls[t]["world_size"])
            for t in ("loop-lr0.0", "loop-lr0.05", "launcher-only", "after")] == [(4, 2, 2), (8, 2, 2), (4, 2, 1),
                                                                                  (2, 2, 2)]
    # At lr 0 the workers end where they started: with the launching process's (unseeded) weights.
    assert calls["loop-lr0.0"]["after"] == pytest.approx(calls["loop-lr0.0"]["before"], abs=1e-6)
    assert calls["loop-lr0.05"]["after"] != pytest.approx(calls["loop-lr0.05"]["before"], abs=1e-4)
    # The last call starts from what the run in the launching process alone trained, and keeps it at lr 0.
    assert calls["after"]["before"] == calls["launcher-only"]["after"] != calls["launcher-only"]["before"]
    assert calls["after"]["after"] == pytest.approx(calls["after"]["before"], abs=1e-6)
    assert "batch_size=3, and the DataLoader batches 4 samples" in calls["refused"]["message"]


def test_a_worker_replays_an_earlier_calls_error_as_the_launching_process_caught_it(tmp_path: Path) -> None:
    """What an earlier call raised there is raised again in the worker, so the script's own ``except`` takes the
    same path: autoshard's errors by class, Python's built-in ones by class, anything else as RuntimeError."""
    from autoshard.errors import UsageError
    from autoshard.runtime import calls

    earlier = {
        "s.py:3#1": {"error": {"type": "UsageError", "message": "m", "hint": "h", "autoshard": True}},
        "s.py:3#2": {"error": {"type": "TypeError", "message": "t", "hint": None, "autoshard": False}},
        "s.py:3#3": {"error": {"type": "MyError", "message": "x", "hint": None, "autoshard": False}},
    }
    (tmp_path / calls.CALLS_FILE).write_text(json.dumps({"target": "s.py:9#1", "earlier": earlier}), "utf-8")
    raised = []
    for key in earlier:
        with pytest.raises(Exception) as info:  # each case's class is checked below
            calls._replay(calls.at_worker(tmp_path, key, {}), None)  # type: ignore[arg-type]
        raised.append((type(info.value), str(info.value)))
    assert raised[0][0] is UsageError and raised[1] == (TypeError, "t") and raised[2] == (RuntimeError, "MyError: x")
    assert calls.at_worker(tmp_path, "s.py:9#1", {}) is None
    with pytest.raises(UsageError, match=r"reached a fit\(\) call \(s.py:5: max_steps 2\) that the launching "
                                         r"process did not make before the one it started the workers for \(s.py:9"):
        calls.at_worker(tmp_path, "s.py:5#1", {"max_steps": 2})
