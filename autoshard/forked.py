"""Part of a job run in a forked child process, its result coming back as typed JSON.

``recommend`` spends nearly all its time in independent tracing sessions (one per compute mode and
checkpointing choice). On a machine with more than one core, :class:`ForkedCall` runs some of them in a child
process while the parent runs the others. The child is a ``fork`` of the parent — the model source, imports
and caches as they are, nothing re-imported — and sends its result back through a pipe as JSON
(:mod:`autoshard._jsonable`, the workload cache's own format: never a pickle), so the parent reads exactly what
it would have computed itself.

Forking is refused (:func:`fork_refusal`) where it is not safe: off Linux, with other threads in the process (a
lock held by one of them would stay held in the child forever), or once CUDA is initialised (a forked child
cannot use it). The child's output goes to ``/dev/null``; a child that fails for any reason returns ``None``, and
the caller runs that part itself — so a failure is reported once, by the parent, in the parent's words. The child
ignores Ctrl-C: the parent's ``KeyboardInterrupt`` kills it (:meth:`ForkedCall.cancel`, in the caller's
``finally``), and nothing of the caller's runs in the child.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from autoshard._jsonable import SchemaError, decode, encode

__all__ = ["ForkedCall", "fork_refusal", "usable_cores"]

T = TypeVar("T")


def fork_refusal() -> str | None:
    """Why this process should not fork now, or ``None`` when it may."""
    if not sys.platform.startswith("linux") or not hasattr(os, "fork"):
        return f"forking is used on Linux only (this is {sys.platform})"
    if threading.active_count() > 1:
        return f"{threading.active_count() - 1} other thread(s) run in this process"
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return "CUDA is initialised in this process"
    return None


def usable_cores() -> int:
    """CPU cores this process can keep busy: its affinity mask cut to its cgroup's CPU limit
    (:func:`autoshard.hardware.host.usable_cores`); the CPU count off Linux."""
    from autoshard.hardware.host import usable_cores as cgroup_usable_cores

    return cgroup_usable_cores() or os.cpu_count() or 1


class ForkedCall(Generic[T]):
    """``fn()`` run in a forked child from construction on; :meth:`result` waits for it.

    Args:
        fn: what the child runs. Its result must be encodable as ``result_type``.
        result_type: the declared type of ``fn``'s result (:func:`autoshard._jsonable.encode`).

    Raises:
        RuntimeError: :func:`fork_refusal` gives a reason not to fork.

    Example:
        >>> if fork_refusal() is None:  # Linux, no other thread, CUDA not initialised
        ...     pid, answer = ForkedCall(lambda: (os.getpid(), 6 * 7), tuple[int, int]).result()
        ...     assert pid != os.getpid() and answer == 42
    """

    def __init__(self, fn: Callable[[], T], result_type: Any) -> None:
        refusal = fork_refusal()
        if refusal is not None:
            raise RuntimeError(f"cannot fork: {refusal}.")
        self._type = result_type
        for stream in (sys.stdout, sys.stderr):  # nothing buffered is written twice
            with contextlib.suppress(Exception):
                stream.flush()
        read_fd, write_fd = os.pipe()
        # Ctrl-C is held back across the fork: a child must never run the caller's handlers (it ignores SIGINT;
        # the parent's KeyboardInterrupt cancels it), and the parent must know its child before it can be
        # interrupted.
        held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        pid = os.fork()
        if pid == 0:  # the child: never returns
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
            _child(fn, result_type, read_fd, write_fd)
        os.close(write_fd)
        self._pid: int | None = pid
        self._read_fd = read_fd
        try:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)  # a Ctrl-C that came meanwhile is raised here
        except BaseException:
            self.cancel()
            raise

    def result(self) -> T | None:
        """The child's result, or ``None`` when it failed (raised, crashed, was killed, sent what does not
        decode as the declared type). Waits for the child; once only."""
        if self._pid is None:
            raise RuntimeError("this forked call's result was already taken or cancelled.")
        fd, self._read_fd = self._read_fd, -1  # the file closes it, even when a Ctrl-C interrupts the read
        with os.fdopen(fd, "rb") as pipe:
            data = pipe.read()
        _, status = os.waitpid(self._pid, 0)
        self._pid = None
        if os.waitstatus_to_exitcode(status) != 0:
            return None
        try:
            value: T = decode(json.loads(data), self._type)
        except (ValueError, SchemaError):
            return None
        return value

    def cancel(self) -> None:
        """Kill the child (this call's own, and nothing else) and reap it; nothing when it is already done."""
        if self._pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self._pid, signal.SIGKILL)
        os.waitpid(self._pid, 0)
        self._pid = None
        if self._read_fd >= 0:
            os.close(self._read_fd)
            self._read_fd = -1


def _child(fn: Callable[[], Any], result_type: Any, read_fd: int, write_fd: int) -> None:
    code = 1
    try:
        os.close(read_fd)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        torch = sys.modules.get("torch")
        if torch is not None:  # as DataLoader workers do: no OpenMP pool of the parent's in the child
            torch.set_num_threads(1)
        data = json.dumps(encode(fn(), result_type)).encode()
        with os.fdopen(write_fd, "wb") as pipe:
            pipe.write(data)
        code = 0
    except BaseException:  # noqa: BLE001 - the parent runs this part again and reports the failure itself
        pass
    finally:
        os._exit(code)
