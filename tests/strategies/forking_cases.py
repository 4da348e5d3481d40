"""Tracing sessions in forked processes: the workload equals the one traced in one process, field by field; a
child that fails has its sessions traced by the parent, which reports the error; forking is refused where it
is not safe.

Run by ``tests/strategies/test_trace_sessions.py`` in a fresh interpreter (``python -m pytest`` on this file):
forking is refused while another thread runs, and a long test session may hold threads other tests left.
"""

from __future__ import annotations

import json
import os
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from autoshard._jsonable import encode
from autoshard.errors import UserCodeError
from autoshard.forked import ForkedCall, fork_refusal
from autoshard.models import load_source
from autoshard.strategies.trace_sessions import jobs_for
from autoshard.strategies.workload import Workload, build_workload


def _without_times(value: Any) -> Any:
    """The workload's JSON less the wall-clock fields (``trace_seconds``), which no two runs share."""
    if isinstance(value, dict):
        return {k: _without_times(v) for k, v in value.items() if k != "trace_seconds"}
    if isinstance(value, list):
        return [_without_times(v) for v in value]
    return value


def _json(workload: Workload) -> str:
    return json.dumps(_without_times(encode(workload, Workload)))


def _pid_recording_model(tmp_path: Path, *, fail_in_child: bool = False) -> str:
    """A model file that appends the building process's id to ``pids.txt`` (and raises when built in a process
    other than the test's, with ``fail_in_child``); three distinct blocks so checkpointed sessions are traced."""
    path = tmp_path / "model.py"
    path.write_text(textwrap.dedent(f"""
        import os
        import torch
        from torch import nn

        class Block(nn.Module):
            def __init__(self):
                super().__init__()
                self.linear = nn.Linear(16, 16)

            def forward(self, x):
                return torch.relu(self.linear(x)) + x

        def model():
            with open({str(tmp_path / "pids.txt")!r}, "a") as f:
                f.write(f"{{os.getpid()}}\\n")
            if {fail_in_child!r} and os.getpid() != {os.getpid()}:
                raise RuntimeError("only the parent may build this model")
            return nn.Sequential(*(Block() for _ in range(3)), nn.Linear(16, 1))

        def batch(batch_size):
            return torch.randn(batch_size, 16)
    """), encoding="utf-8")
    return str(path)


def _pids(tmp_path: Path) -> set[int]:
    return {int(line) for line in (tmp_path / "pids.txt").read_text().split()}


@pytest.fixture(autouse=True)
def _forking_allowed() -> None:
    assert fork_refusal() is None, "these tests need a process that may fork"


@pytest.mark.parametrize(("model", "options", "jobs"), [
    pytest.param("tiny-gpt2", {"seq_len": 32}, 2, id="bf16-mixed-4-sessions"),
    pytest.param("tiny-t5", {"seq_len": 16, "precision": "16-mixed"}, 3, id="fp16-mixed-6-sessions-3-processes"),
    pytest.param("tiny-gpt2", {"seq_len": 32, "precision": "32-true", "target": "cpu"}, 2,
                 id="32-true-modes-share-sessions"),
    pytest.param("tiny-gpt2", {"seq_len": 32, "checkpointing": (True,)}, 2, id="checkpointing-only"),
])
def test_a_workload_traced_in_forked_processes_equals_the_one_traced_in_one(model, options, jobs):
    source = load_source(model)
    alone = build_workload(source, jobs=1, **options)
    together = build_workload(source, jobs=jobs, **options)
    assert _json(together) == _json(alone)
    assert [t.mode for t in together.traces] == [t.mode for t in alone.traces]


def test_sessions_run_in_two_processes_and_progress_counts_each_once(tmp_path):
    calls: list[tuple[int, int]] = []
    workload = build_workload(load_source(_pid_recording_model(tmp_path)), precision="32-true", target="cpu",
                              jobs=2, progress=lambda done, total: calls.append((done, total)))
    assert len(_pids(tmp_path) - {os.getpid()}) == 1  # one child built the model too
    assert calls == [(1, 2), (2, 2)]  # 32-true: amp and half share sessions; with and without checkpointing
    assert {t.checkpointing for t in workload.traces} == {False, True}


def test_a_model_without_repeated_blocks_drops_the_childs_checkpointed_sessions():
    calls: list[tuple[int, int]] = []
    mlp = Path(__file__).parents[2] / "examples" / "mlp" / "model.py"
    workload = build_workload(load_source(str(mlp)), precision="32-true", target="cpu", jobs=2,
                              progress=lambda done, total: calls.append((done, total)))
    assert workload.block_class is None
    assert [t.checkpointing for t in workload.traces] == [False, False]
    assert calls == [(1, 1)]


def test_a_failed_child_has_its_sessions_traced_by_the_parent(tmp_path):
    source = load_source(_pid_recording_model(tmp_path, fail_in_child=True))
    together = build_workload(source, precision="32-true", target="cpu", jobs=2)
    assert len(_pids(tmp_path)) == 2  # the child tried, and failed
    assert _json(together) == _json(build_workload(source, precision="32-true", target="cpu", jobs=1))


def test_sessions_whose_fork_is_refused_are_traced_here(tmp_path):
    from autoshard.profiler.checkpointing import FULL
    from autoshard.profiler.options import Precision
    from autoshard.strategies.trace_sessions import TraceSessions

    sessions = TraceSessions(source=load_source(_pid_recording_model(tmp_path)), seq_len=None, optimizer="adamw",
                             target="cpu", optimizer_impl=None, checkpoint_mode=FULL)
    keys = [(Precision.FP32, False, False), (Precision.FP32, False, True)]
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()  # a thread started after the number of processes was chosen: the fork is refused
    try:
        traced = sessions.run(keys, 2)
    finally:
        stop.set()
        thread.join()
    assert list(traced) == keys and _pids(tmp_path) == {os.getpid()}


def test_an_error_in_the_users_model_is_raised_by_the_parent_once(tmp_path):
    path = tmp_path / "model.py"
    path.write_text("import torch\nfrom torch import nn\n"
                    "def model():\n    raise ValueError('broken on purpose')\n"
                    "def batch(batch_size):\n    return torch.randn(batch_size, 4)\n", encoding="utf-8")
    with pytest.raises(UserCodeError, match="broken on purpose"):
        build_workload(load_source(str(path)), target="cpu", jobs=2)


def test_a_forked_call_returns_its_result_or_none_when_the_child_fails():
    assert ForkedCall(lambda: (os.getpid(), "x"), tuple[int, str]).result()[0] != os.getpid()  # type: ignore[index]
    assert ForkedCall(lambda: 1 / 0, float).result() is None
    assert ForkedCall(lambda: os._exit(3), int).result() is None
    assert ForkedCall(lambda: "not an int", int).result() is None  # encode refuses: nothing decodes


def test_cancel_kills_the_child_at_once():
    started = time.perf_counter()
    call = ForkedCall(lambda: time.sleep(60), type(None))
    call.cancel()
    assert time.perf_counter() - started < 30
    call.cancel()  # a second time: nothing to do
    with pytest.raises(RuntimeError, match="already taken or cancelled"):
        call.result()


def test_a_ctrl_c_while_waiting_for_the_result_leaves_cancel_to_kill_the_child():
    """A Ctrl-C during ``result()``'s read closed the pipe with the file; ``cancel()``, which the caller's handler
    runs, closed it again: ``autoshard tune`` interrupted while tracing ended in an internal error (EBADF)."""
    import signal

    def interrupt(*_: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    call = ForkedCall(lambda: time.sleep(60), type(None))
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.5)
        with pytest.raises(KeyboardInterrupt):
            call.result()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    call.cancel()  # kills and reaps the child; closes nothing twice
    call.cancel()


def test_no_fork_while_another_thread_runs():
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert "other thread" in (fork_refusal() or "")
        assert jobs_for(None, 4) == 1 and jobs_for(4, 4) == 1
        with pytest.raises(RuntimeError, match="cannot fork"):
            ForkedCall(lambda: 1, int)
    finally:
        stop.set()
        thread.join()
    assert jobs_for(2, 4) == 2 and jobs_for(8, 3) == 3 and jobs_for(1, 4) == 1
