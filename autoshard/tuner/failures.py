"""Why a trial failed, from what its workers reported: out of memory, timeout, communication, user code, crash.

Each worker that raises records its exception's class and message (``error-rank<N>.json``); the earliest
record is the cause (a peer that loses its partner reports later). A worker killed by a signal records
nothing. The classes decide what the study does next: an OOM marks the configuration infeasible (the sampler
learns to avoid its region), a user-code error on the first trial stops the study, the rest are failed trials.
"""

from __future__ import annotations

import os
import re
import traceback
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from autoshard.errors import AutoshardError, UserCodeError, WorkerKilled, WorkerTimeout
from autoshard.runtime import supervisor
from autoshard.runtime.distributed import communication_failure
from autoshard.tuner.result import FailureClass

_OOM_TYPES = frozenset({"OutOfMemoryError", "MemoryError"})
# torch's CUDA OOM ("CUDA out of memory. Tried to allocate ..."), the CUDA runtime's ("CUDA error: out of
# memory"), cuBLAS failing to allocate its workspace, and torch's CPU allocator ("DefaultCPUAllocator: can't
# allocate memory: you tried to allocate N bytes").
_OOM_TEXT = re.compile(r"out of memory|can't allocate memory|not enough memory|CUBLAS_STATUS_ALLOC_FAILED|"
                       r"failed to allocate",
                       re.IGNORECASE)
_USER_TYPES = frozenset({"UserCodeError", "ModelSourceError"})


def classify_record(record: Mapping[str, Any]) -> FailureClass:
    """The class of one worker's error record (``type`` and ``message``).

    Example:
        >>> classify_record({"type": "OutOfMemoryError", "message": "CUDA out of memory. Tried to allocate 2 GiB"})
        <FailureClass.OOM: 'oom'>
        >>> classify_record({"type": "RuntimeError",
        ...                  "message": "[../gloo/transport/tcp/pair.cc:534] Connection closed by peer"})
        <FailureClass.COMMUNICATION: 'communication'>
        >>> classify_record({"type": "UserCodeError", "message": "the model failed on the first batch"})
        <FailureClass.USER_CODE: 'user_code'>
    """
    kind, message = str(record.get("type", "")), str(record.get("message", ""))
    # Out of memory and a lost peer first: both can reach the tuner wrapped as a first-batch user-code error.
    if kind in _OOM_TYPES or _OOM_TEXT.search(message):
        return FailureClass.OOM
    if communication_failure(kind, message):
        return FailureClass.COMMUNICATION
    if kind in _USER_TYPES:
        return FailureClass.USER_CODE
    return FailureClass.CRASH


def classify(error: AutoshardError, run_dir: Path, world_size: int) -> tuple[FailureClass, str]:
    """The class of a failed trial and a one-line message, from the supervisor's error and the ranks' records.

    Args:
        error: what :func:`autoshard.runtime.supervisor.run_workers` raised.
        run_dir: the trial's directory (holding ``error-rank<N>.json``).
        world_size: the trial's number of ranks.
    """
    if isinstance(error, WorkerTimeout):
        return FailureClass.TIMEOUT, _one_line(error.message, limit=500)  # with where each rank was stopped
    if isinstance(error, WorkerKilled):  # a rank died without a word: the others' errors are its consequence
        return FailureClass.CRASH, _one_line(error.message)
    records = supervisor.error_records(run_dir, world_size)
    if not records:
        return FailureClass.CRASH, _one_line(error.message)
    rank = supervisor.first_error(records)
    record = records[rank]
    failure = classify_record(record)
    if failure is FailureClass.OOM:  # in its own words, not as the first-batch user-code error it may come wrapped in
        return failure, _one_line(f"rank {rank}: out of memory: {oom_text(str(record.get('message', '')))}")
    return failure, _one_line(f"rank {rank}: {record.get('type')}: {record.get('message')}")


def oom_text(message: str) -> str:
    """The allocator's own sentence in an out-of-memory ``message`` (what wraps it and torch's ``[enforce fail at
    ...] err == 0.`` prefix left out), byte counts in GiB.

    Example:
        >>> oom_text("the model failed on the first batch (tensor(64, 32) int64): RuntimeError: [enforce fail at "
        ...          "alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: you tried to "
        ...          "allocate 68719476736 bytes. Error code 12")
        "DefaultCPUAllocator: can't allocate memory: you tried to allocate 64 GiB. Error code 12"
    """
    found = _OOM_TEXT.search(message)
    if found is None:
        return message
    before = message[:found.start()]
    starts = [at + len(mark) for mark in (". ", "Error: ") if (at := before.rfind(mark)) >= 0]
    return re.sub(r"\b(\d{7,}) bytes\b", lambda m: _gib(int(m.group(1))), message[max(starts, default=0):]).strip()


def _gib(n_bytes: int) -> str:
    gib = n_bytes / 2**30
    return f"{gib:,.0f} GiB" if gib >= 100 else f"{gib:.3g} GiB"


def user_error(exc: BaseException, user_files: Sequence[str], step: int) -> UserCodeError | None:
    """``exc``, raised in a trial's worker, as the user's error naming their file and line, or ``None`` when it is
    not theirs (called in the worker, which records what this returns in place of ``exc``).

    It is theirs when its innermost frame in one of ``user_files`` (the model file, the files of their
    ``training_step`` / ``loss_fn``) has below it only frames of other libraries — not autoshard's, not
    torch.distributed's or DeepSpeed's (a sharding hook that fails inside their forward). Running out of memory
    and a lost peer are never theirs. A first-step :class:`UserCodeError` (the runtime blames any failure of
    the first forward or loss on the user) gets the location of the frame it came from. At any step, the
    message starts ``path:line:``, so that the one-line record the tuner keeps still names it.

    Args:
        exc: what the worker's training raised.
        user_files: the user's files.
        step: the optimizer step it was raised in (1-based).
    """
    if not isinstance(exc, Exception) or classify_record(
            {"type": type(exc).__name__, "message": str(exc)}) in (FailureClass.OOM, FailureClass.COMMUNICATION):
        return None
    location = _user_location(exc, user_files)
    if isinstance(exc, UserCodeError):
        if exc.location is not None or location is None:
            return None
        return UserCodeError(f"{location}: {exc.message}", hint=exc.hint, location=location)
    if location is None or isinstance(exc, AutoshardError):
        return None
    return UserCodeError(f"{location}: your code raised {type(exc).__name__} at step {step}: {exc}",
                         hint=f"Fix it in {location.rsplit(':', 1)[0]}; every trial runs this code. The trial's "
                              "full traceback is in its error-rank<N>.json.", location=location)


_MACHINERY = (str(Path(__file__).resolve().parents[1]) + os.sep,  # autoshard's own code
              f"{os.sep}torch{os.sep}distributed{os.sep}", f"{os.sep}deepspeed{os.sep}")
"""Paths of frames that make an error raised through the user's code not theirs."""


def _user_location(exc: BaseException, user_files: Sequence[str]) -> str | None:
    """``"path:line"`` of the innermost frame in ``user_files`` of ``exc`` or what it was raised from, if no
    frame of autoshard, torch.distributed or DeepSpeed lies below it."""
    targets = {os.path.realpath(f) for f in user_files if f}
    if not targets:
        return None
    for link in _chain(exc):
        frames = traceback.extract_tb(link.__traceback__)
        mine = [i for i, f in enumerate(frames) if os.path.realpath(f.filename) in targets]
        if not mine:
            continue
        below = frames[mine[-1] + 1:]
        if any(m in os.path.realpath(f.filename) for f in below for m in _MACHINERY):
            return None
        return f"{frames[mine[-1]].filename}:{frames[mine[-1]].lineno}"
    return None


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc``, then what it was raised from (``__cause__``, else ``__context__``), and so on."""
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        yield link
        link = link.__cause__ or link.__context__


def _one_line(text: str, limit: int = 300) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"
