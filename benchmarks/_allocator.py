"""Ground truth for the memory benchmarks: the bytes the allocator hands out, on CPU as on CUDA.

* **CUDA**: the caching allocator's own statistics. :meth:`PeakProbe.mark` synchronizes and calls
  ``torch.cuda.reset_peak_memory_stats()``; the result is ``max_memory_allocated()`` and
  ``max_memory_reserved()`` from then on.
* **CPU**: PyTorch's CPU allocator reports every allocation and free to the profiler while memory profiling is
  on (``c10/core/CPUAllocator.cpp``, ``ProfiledCPUMemoryReporter::New`` / ``Delete``). :class:`PeakProbe` runs
  ``torch.profiler.profile(profile_memory=True)`` around the whole job and replays the allocation events
  (pointer, bytes, time) in order: the live bytes at every moment, and their highest point after the mark.
  Nothing of autoshard's own tracker is involved, so this is independent of how the prediction counts.

What the CPU replay cannot see, and how it is handled:

* allocations on threads the profiler does not follow (gloo's worker threads, DeepSpeed's): neither counted
  nor, when such a thread frees a block this thread allocated, subtracted. The free is inferred when the
  allocator hands the same address out again (the block must have been freed before); a block whose address is
  never reused stays counted. The replay measures this as ``drift_bytes``: live bytes at the end of the last
  step less those at the end of the marked step, which is zero in a steady state. A block freed unseen
  *before* the mark leaves no drift, only a higher peak: ``benchmarks/memory_accuracy.py`` runs each
  distributed case more than once and keeps the lowest peak (an unseen free can only overstate one).
  For the collectives called from Python (FSDP2's and DeepSpeed's), :func:`released_on_caller` removes the
  cause: a synchronous collective returns only once gloo's thread has let go of its tensors, so the caller's
  thread is the one that frees them; DDP's construction-time parameter broadcast goes through it too. (DDP's
  reducer calls gloo from C++ during backward, where this cannot reach.)
* blocks alive before the probe started (import-time constants): not counted; start the probe before the model
  is built.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

MARK = "autoshard.benchmark.mark"
STEP_END = "autoshard.benchmark.step_end"
BUILT = "autoshard.benchmark.built"


@dataclass(frozen=True, slots=True)
class Peak:
    """What one process's probe measured."""

    peak_bytes: int
    """Highest allocated bytes after the mark (CPU: replayed live bytes; CUDA: ``max_memory_allocated``)."""
    before_mark_peak_bytes: int
    """Highest allocated bytes before the mark (model build, wrapping, the warm-up steps)."""
    reserved_bytes: int | None
    """CUDA: ``max_memory_reserved`` after the mark; CPU: ``None`` (no caching allocator)."""
    drift_bytes: int
    """CPU: live bytes at the last step's end less those at the marked step's end (0 in a steady state)."""
    events: int
    """CPU: allocation events replayed."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {"peak_bytes": self.peak_bytes, "before_mark_peak_bytes": self.before_mark_peak_bytes,
                "reserved_bytes": self.reserved_bytes, "drift_bytes": self.drift_bytes, "events": self.events}


class PeakProbe:
    """Measure a job's allocated-bytes peak after a mark, on ``device``.

    Example::

        with PeakProbe(torch.device("cpu")) as probe:
            warm_up()
            probe.mark()
            for _ in range(2):
                step()
                probe.step_end()
        peak = probe.result().peak_bytes
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._profiler: Any = None
        self._cuda_before: int = 0
        self._cuda_steps: list[tuple[int, int]] = []
        self._result: Peak | None = None
        self.timeline: list[tuple[int, int, int]] | None = None
        """CPU: the replayed allocation events and marks (:func:`events`), once the probe's block has ended."""

    def __enter__(self) -> PeakProbe:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            from torch.profiler import ProfilerActivity, profile

            self._profiler = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
            with _stderr_silenced():  # Kineto logs "profiler_start" / "profiler_stop" lines on stderr
                self._profiler.__enter__()
        return self

    def mark(self) -> None:
        """Start of the measured window (after the warm-up steps)."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self._cuda_before = torch.cuda.max_memory_allocated(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            _annotate(MARK)

    def built(self) -> None:
        """The model is on the device (CPU: marked for :func:`allocation_log`; CUDA: nothing to do)."""
        if self.device.type != "cuda":
            _annotate(BUILT)

    def step_end(self) -> None:
        """End of an optimizer step: CPU, for the steady-state check; CUDA, the step's peak is read now (a
        training loop may reset the statistics when the next step starts, as ``autoshard.runtime.loop`` does)."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self._cuda_steps.append((torch.cuda.max_memory_allocated(self.device),
                                     torch.cuda.max_memory_reserved(self.device)))
        else:
            _annotate(STEP_END)

    def __exit__(self, *exc: object) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            steps = [*self._cuda_steps, (torch.cuda.max_memory_allocated(self.device),
                                         torch.cuda.max_memory_reserved(self.device))]
            self._result = Peak(peak_bytes=max(a for a, _ in steps), before_mark_peak_bytes=self._cuda_before,
                                reserved_bytes=max(r for _, r in steps), drift_bytes=0, events=0)
            return
        with _stderr_silenced():
            self._profiler.__exit__(*exc)
        if exc[0] is None:
            self.timeline = events(self._profiler)
            self._result = peak_of(self.timeline)

    def result(self) -> Peak:
        """The measurement (after the ``with`` block)."""
        if self._result is None:
            raise RuntimeError("PeakProbe.result() before the probe's block ended without an error")
        return self._result


@contextlib.contextmanager
def _stderr_silenced() -> Iterator[None]:
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def _annotate(name: str) -> None:
    with torch.profiler.record_function(name):
        pass


_MARKS = {MARK: -1, STEP_END: -2, BUILT: -3}


def events(profiler: Any) -> list[tuple[int, int, int]]:
    """A profiled run's CPU allocation events and marks, in time order: ``(time ns, bytes (+/-), address)``;
    a :data:`MARK` has address ``-1``, a :data:`STEP_END` ``-2``, :data:`BUILT` ``-3``."""
    out: list[tuple[int, int, int, int]] = []  # (time, allocation id, bytes, address)
    stack = list(profiler.profiler.kineto_results.experimental_event_tree())
    while stack:
        node = stack.pop()
        stack.extend(node.children)
        fields = node.extra_fields
        if type(fields).__name__ == "_ExtraFields_Allocation":
            if fields.device.type == "cpu":
                out.append((node.start_time_ns, fields.id, fields.alloc_size, fields.ptr))
        elif node.name in _MARKS:
            out.append((node.start_time_ns, -1, 0, _MARKS[node.name]))
    out.sort()
    return [(t, size, ptr) for t, _, size, ptr in out]


def peak_of(timeline: list[tuple[int, int, int]]) -> Peak:
    """Replay allocation events: live bytes at every moment, their highest point before and after the mark.

    A block allocated at an address the replay still holds as live was freed unseen (on another thread): it is
    released then. A free of a block allocated before the probe started is ignored.

    Raises:
        ValueError: no :data:`MARK` in ``timeline``.

    Example:
        >>> peak_of([(0, 100, 7), (1, 0, -1), (2, 100, 7), (3, 50, 8), (4, -50, 8), (5, 0, -2)]).peak_bytes
        150
    """
    live: dict[int, int] = {}
    total = before = after = 0
    marked = False
    step_levels: list[int] = []
    for _, size, ptr in timeline:
        if ptr == -1:
            marked = True
            step_levels.append(total)
            continue
        if ptr == -2:
            if marked:
                step_levels.append(total)
            continue
        if size > 0:
            total -= live.pop(ptr, 0)  # the address is handed out again: its last block was freed unseen
            live[ptr] = size
            total += size
        else:
            total -= live.pop(ptr, 0)  # a block from before the probe is not in ``live``
        if marked:
            after = max(after, total)
        else:
            before = max(before, total)
    if not marked:
        raise ValueError("the profiled run has no mark: call PeakProbe.mark() after the warm-up steps")
    drift = step_levels[-1] - step_levels[0] if len(step_levels) > 1 else 0
    return Peak(peak_bytes=max(after, step_levels[0]), before_mark_peak_bytes=before, reserved_bytes=None,
                drift_bytes=drift, events=sum(1 for e in timeline if e[2] >= 0))


def allocation_log(timeline: list[tuple[int, int, int]], *, after_build: bool = False) -> list[tuple[int, int]]:
    """A profiled run's allocations and frees as ``(key, bytes)`` / ``(key, -1)``, the form
    :func:`autoshard.profiler.cuda_reserve.replay` takes: each allocation gets a key of its own; a free is matched
    by address; an address handed out again while still live was freed unseen (as in :func:`peak_of`), and is
    freed just before; a free of a block from before the probe is dropped.

    With ``after_build``, what happened before the :data:`BUILT` mark is left out except the blocks still live
    there, allocated first in the order they were: a GPU sees a model built on the CPU arrive that way
    (``model.to(device)``), without the temporaries of its construction (initial weights replaced by tied ones).

    Example:
        >>> allocation_log([(0, 100, 7), (1, 0, -1), (2, 100, 7), (3, 50, 8), (4, -50, 8), (5, -9, 3)])
        [(1, 100), (1, -1), (2, 100), (3, 50), (3, -1)]
        >>> allocation_log([(0, 100, 7), (1, 30, 8), (2, -30, 8), (3, 0, -3), (4, 20, 9)], after_build=True)
        [(1, 100), (3, 20)]
    """
    out: list[tuple[int, int]] = []
    live: dict[int, int] = {}
    sizes: dict[int, int] = {}
    keys = 0
    building = after_build
    for _, size, ptr in timeline:
        if ptr == -3 and building:
            building = False
            out = [(key, sizes[key]) for key in sorted(live.values())]
            continue
        if ptr < 0:
            continue
        if size > 0:
            if ptr in live:
                out.append((live.pop(ptr), -1))
            keys += 1
            live[ptr], sizes[keys] = keys, size
            out.append((keys, size))
        elif ptr in live:
            out.append((live.pop(ptr), -1))
    return out


COLLECTIVES = ("all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor", "all_gather_single",
               "reduce_scatter_single", "broadcast", "all_gather", "reduce_scatter", "all_to_all_single",
               "_all_gather_base", "_reduce_scatter_base")
"""``torch.distributed`` functions :func:`released_on_caller` wraps (FSDP2 and DeepSpeed call them as
``torch.distributed.<name>`` at call time)."""
RELEASE_WAIT_S = 0.05
HANDOVER_S = 0.001


@contextlib.contextmanager
def released_on_caller() -> Iterator[dict[str, int]]:
    """Make the caller's thread, not gloo's, free what a ``torch.distributed`` collective held.

    A gloo collective completes its work's future on gloo's worker thread, which drops its own reference to the
    work a moment later (``ProcessGroupGloo::runLoop``). If that reference is the last, the work's tensors —
    the arguments, and gloo's own copies such as ``_reduce_scatter_base``'s clone of its input — are freed on
    gloo's thread, which the profiler does not follow. So each wrapped synchronous call runs asynchronously,
    waits, gives gloo's thread :data:`HANDOVER_S` to let go and drops the work here, then waits (at most
    :data:`RELEASE_WAIT_S`) until every tensor argument's storage has the reference count it had before the
    call. An asynchronous call's work gets the same pause after its ``wait()``. DDP's construction-time
    ``_broadcast_coalesced``, which calls gloo from C++, is replaced by the same steps through the wrapped
    ``broadcast``. Memory is unchanged; only the thread that frees it. A wrapped synchronous call returns
    ``None``, as the wrapped ones do.

    Yields:
        Counters: ``waits`` (calls that had to wait for the reference counts), ``timeouts`` (calls that gave up).
    """
    import torch.distributed as dist

    counters = {"waits": 0, "timeouts": 0}
    saved = {name: getattr(dist, name) for name in COLLECTIVES if hasattr(dist, name)}

    def wrap(fn: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            if kwargs.get("async_op"):
                work = fn(*args, **kwargs)
                return None if work is None else _PatientWork(work)
            tensors = _tensors(args, kwargs)
            before = _use_counts(tensors)
            work = fn(*args, **{**kwargs, "async_op": True})
            if work is not None:
                work.wait()
                time.sleep(HANDOVER_S)  # gloo's thread drops its reference to the work right after completing it
                del work  # ... so that the last one, and what the work holds (gloo's own copies), goes here
            if _use_counts(tensors) != before:
                counters["waits"] += 1
                deadline = time.monotonic() + RELEASE_WAIT_S
                while _use_counts(tensors) != before:
                    if time.monotonic() > deadline:
                        counters["timeouts"] += 1
                        break
                    time.sleep(0)
            return None

        return call

    for name, fn in saved.items():
        setattr(dist, name, wrap(fn))
    coalesced = dist._broadcast_coalesced
    dist._broadcast_coalesced = _broadcast_coalesced  # DDP's construction-time sync of parameters and buffers
    try:
        yield counters
    finally:
        dist._broadcast_coalesced = coalesced
        for name, fn in saved.items():
            setattr(dist, name, fn)


def _broadcast_coalesced(process_group: Any, tensors: list[torch.Tensor], buffer_size: int, src: int = 0) -> None:
    """c10d's ``broadcast_coalesced`` (``torch/csrc/distributed/c10d/comm.cpp``), through the wrapped
    ``broadcast``: tensors bucketed by dtype up to ``buffer_size`` bytes (``compute_bucket_assignment_by_size``),
    each bucket flattened into one new tensor, broadcast from ``src`` and copied back on the other ranks.

    The C++ version frees each flat tensor with its work, and gloo's thread often holds the last reference:
    DDP's whole-model flat buffer (all parameters) then stayed counted for the rest of a run, on one rank or
    the other, in some runs only.
    """
    import torch.distributed as dist
    from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

    buckets, _ = dist._compute_bucket_assignment_by_size(tensors, [buffer_size])
    receiving = dist.get_rank(process_group) != src
    for indices in buckets:
        bucket = [tensors[i] for i in indices]
        flat = _flatten_dense_tensors(bucket)
        dist.broadcast(flat, src, group=process_group)
        if receiving:
            for tensor, synced in zip(bucket, _unflatten_dense_tensors(flat, bucket), strict=True):
                tensor.copy_(synced)
        del flat


class _PatientWork:
    """An asynchronous collective's work whose ``wait()`` also gives gloo's thread time to let go of it."""

    def __init__(self, work: Any) -> None:
        self._work = work

    def wait(self, *args: Any, **kwargs: Any) -> Any:
        done = self._work.wait(*args, **kwargs)
        time.sleep(HANDOVER_S)
        return done

    def __getattr__(self, name: str) -> Any:
        return getattr(self._work, name)


def _tensors(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[torch.Tensor]:
    out = []
    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor):
            out.append(value)
        elif isinstance(value, (list, tuple)):
            out.extend(v for v in value if isinstance(v, torch.Tensor))
    return out


def _use_counts(tensors: list[torch.Tensor]) -> list[int]:
    return [torch._C._storage_Use_Count(t.untyped_storage()._cdata) for t in tensors]
