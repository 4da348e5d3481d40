"""Python's garbage collector around a traced step: when it runs decides when some tensors die, so a trace that
should be deterministic controls it (:mod:`autoshard.profiler.trace`, and ``benchmarks/memory_accuracy.py`` for
the real-tensor side it is held against).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator

import torch


@contextlib.contextmanager
def older_objects_frozen() -> Iterator[None]:
    """Leave the objects that exist before a tracing session out of its garbage collections (``gc.freeze``).

    The collection between two micro-batches of a session is a full one; without this it visits every object of
    the process (torch's imports alone are ~300,000) when only the session's own objects can hold its tensors.
    What the collection frees is the same: garbage made during the session is made of the session's objects.
    Nothing is frozen where the process froze objects of its own (``gc.get_freeze_count()`` above the interpreter's
    own, :func:`interpreter_frozen_count`): unfreezing after the session would undo that.
    """
    import gc

    if gc.get_freeze_count() > interpreter_frozen_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@functools.cache
def interpreter_frozen_count() -> int:
    """How many objects a fresh interpreter of this Python holds in the permanent generation: none before 3.12;
    from 3.12 its immortal objects, which a collection moves there (375 in CPython 3.12.1), so a non-zero
    ``gc.get_freeze_count()`` no longer means that the process froze anything. Read once, from a fresh
    ``python -I -S`` (0 where that cannot run)."""
    import subprocess
    import sys

    if sys.version_info < (3, 12) or not sys.executable:
        return 0
    try:
        code = "import gc; gc.collect(); print(gc.get_freeze_count())"
        done = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=30,
                              check=True)
        return int(done.stdout.strip())
    except (OSError, ValueError, subprocess.SubprocessError):
        return 0


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector for the traced steps.

    Some tensors die only when the GC breaks a reference cycle (seen with non-reentrant checkpointing of
    attention with dropout). When that happens depends on how many Python objects were allocated, which
    differs between fake and real tensors and between runs. With the GC paused the trace is deterministic and
    counts such tensors until the step ends: an upper bound.
    """
    import gc

    was_enabled = gc.isenabled()
    # No collection first: garbage from before the trace holds no storage this trace's tracker counts.
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@functools.cache
def warm_up_checkpoint() -> None:
    """Run checkpoint once on a tiny real tensor, outside any trace.

    The first checkpointed backward in a process imports modules (torch._dynamo among them); the import's
    frames form reference cycles that keep that block's recomputed tensors alive until Python's next garbage
    collection. A long run never sees this one-off, and it would make the trace depend on when the GC runs.
    """
    from torch.utils.checkpoint import checkpoint

    x = torch.ones(2, requires_grad=True)
    checkpoint(lambda t: torch.nn.functional.dropout(t * 2, 0.5), x, use_reentrant=False).sum().backward()
