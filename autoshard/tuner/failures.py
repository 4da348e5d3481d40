"""Why a trial failed, from what its workers reported: out of memory, timeout, communication, user code, crash.

Each worker that raises records its exception's class and message (``error-rank<N>.json``); the earliest
record is the cause (a peer that loses its partner reports later). A worker killed by a signal records
nothing. The classes decide what the study does next: an OOM marks the configuration infeasible (the sampler
learns to avoid its region), a user-code error on the first trial stops the study, the rest are failed trials.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from autoshard.errors import AutoshardError, WorkerKilled, WorkerTimeout
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
    return classify_record(record), _one_line(f"rank {rank}: {record.get('type')}: {record.get('message')}")


def _one_line(text: str, limit: int = 300) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"
