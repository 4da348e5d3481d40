"""Running one trial: the configuration's plan written to a fresh directory, one worker per rank in its own
process group with a free port, a wall-clock limit, and the measured throughput and peak memory read back.

Throughput is measured after warm-up: the first ``warmup_steps`` optimizer steps (allocations, communicator
set-up, autotuning) are dropped, and the rest give samples per second as total samples over total step time
on rank 0 (CUDA synchronised at the end of every step).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from autoshard.errors import AutoshardError
from autoshard.planner import plan_file
from autoshard.planner.plan_file import ExportedPlan
from autoshard.runtime import supervisor
from autoshard.runtime.extension_locks import extensions_root, release_locks_left_since
from autoshard.runtime.workers import host_thread_environ
from autoshard.tuner.failures import classify
from autoshard.tuner.result import FailureClass
from autoshard.tuner.trial_files import MEASUREMENT_FILE, PROGRESS_FILE, TRIAL_FILE

WORKER_COMMAND = (sys.executable, "-m", "autoshard.tuner.worker")

Progress = Callable[[int, float], None]
"""``(step, samples per second so far after warm-up)``; may raise to stop the trial (e.g. ``TrialPruned``)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class TrialSpec:
    """What every trial of a study shares besides its configuration."""

    model: str
    """The model source as ``load_source`` takes it (a path or a catalog name)."""
    optimizer: str
    steps: int
    """Optimizer steps per trial, warm-up included."""
    warmup_steps: int
    seed: int = 0
    training_step: dict[str, str] | None = None
    """The user's ``training_step(model, batch)``, by reference
    (:func:`~autoshard.tuner.usercode.function_reference`)."""
    loss_fn: dict[str, str] | None = None
    """The user's ``loss_fn(output, batch)``, by reference; ``None``: the source's own loss."""
    grace_s: float = 5.0
    """Seconds between SIGTERM and SIGKILL when a trial is stopped."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Measurement:
    """A trial's measured figures."""

    samples_per_s: float
    tokens_per_s: float | None
    step_time_s: float
    """Mean time of a timed step."""
    peak_memory_bytes: int | None
    peak_memory_kind: str | None
    step_times_s: tuple[float, ...]
    """Every step's time, warm-up included."""
    step_time_spread: float | None = None
    """(slowest - fastest) / median of the timed steps (:attr:`TrialRecord.step_time_spread`)."""


class TrialFailed(Exception):  # an outcome, not a bug
    """The trial ran and failed; ``failure`` says how."""

    def __init__(self, failure: FailureClass, message: str) -> None:
        super().__init__(message)
        self.failure = failure
        self.message = message


class TrialRunner(Protocol):
    """What :class:`~autoshard.tuner.loop.StudyLoop` calls to measure one configuration: :func:`run_trial`, or a
    stand-in (a benchmark replaying recorded measurements)."""

    def __call__(self, exported: ExportedPlan, spec: TrialSpec, run_dir: Path, *, timeout_s: float,
                 environ: dict[str, str], on_progress: Progress | None = None,
                 on_poll: Callable[[], None] | None = None) -> Measurement: ...


def run_trial(exported: ExportedPlan, spec: TrialSpec, run_dir: Path, *, timeout_s: float,
              environ: dict[str, str], on_progress: Progress | None = None,
              on_poll: Callable[[], None] | None = None) -> Measurement:
    """Run one trial of ``exported`` and measure it.

    Args:
        exported: the configuration as a plan.
        spec: model, optimizer, steps and seed.
        run_dir: an empty directory for the trial's files (plan, logs, progress, errors).
        timeout_s: wall-clock limit for the whole trial, process start-up included.
        environ: the workers' environment; a plan whose optimizer steps on the host gets ``OMP_NUM_THREADS`` in
            it, each rank's share of this machine's cores, unless ``environ`` sets it
            (:func:`~autoshard.runtime.workers.host_thread_environ`, as ``fit()``'s workers get it): the threads
            the plan's step time was priced with.
        on_progress: called as steps complete after warm-up; an exception it raises stops the workers
            (SIGTERM, grace, SIGKILL by process group) and is raised from here.
        on_poll: called about every 50 ms while the workers run (heartbeats).

    Raises:
        TrialFailed: the workers failed or timed out (classified; every process was stopped).
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    plan_file.write(exported, run_dir / "plan.json")
    (run_dir / TRIAL_FILE).write_text(json.dumps({"model": spec.model, "optimizer": spec.optimizer,
                                                         "steps": spec.steps, "seed": spec.seed,
                                                         "training_step": spec.training_step,
                                                         "loss_fn": spec.loss_fn}), encoding="utf-8")
    world = exported.hardware.world_size
    samples_per_step = exported.micro_batch_size * exported.gradient_accumulation * world
    watcher = _ProgressWatcher(run_dir / PROGRESS_FILE, spec.warmup_steps, samples_per_step, on_progress)

    def poll() -> None:
        if on_poll is not None:
            on_poll()
        watcher.poll()

    started = time.time()
    try:
        supervisor.run_workers(list(WORKER_COMMAND), world_size=world, run_dir=run_dir,
                               environ=host_thread_environ(environ, exported),
                               timeout_s=timeout_s, grace_s=spec.grace_s, log_rank0=True, on_poll=poll)
    except AutoshardError as e:
        failure, message = classify(e, run_dir, world)
        # Its workers are all stopped: a DeepSpeed op they were building would leave its lock, on which every
        # later trial and run loading that op waits for ever (a probe's tune, stopped mid-build).
        released = release_locks_left_since(started, extensions_root(environ))
        if released:
            message += (f" Its workers were stopped while building torch extension op(s) "
                        f"{', '.join(lock.parent.name for lock in released)}: the build's lock was removed.")
        raise TrialFailed(failure, message) from e
    return _measurement(run_dir, spec, exported)


def _measurement(run_dir: Path, spec: TrialSpec, exported: ExportedPlan) -> Measurement:
    path = run_dir / MEASUREMENT_FILE
    try:
        data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise TrialFailed(FailureClass.CRASH, f"the workers exited without a measurement ({path}: {e}).") from e
    steps = data["steps"]
    timed = steps[spec.warmup_steps:]
    if not timed:
        raise TrialFailed(FailureClass.CRASH, f"only {len(steps)} step(s) ran, none after the warm-up.")
    seconds = sum(s["step_time_s"] for s in timed)
    samples = exported.micro_batch_size * exported.gradient_accumulation * exported.hardware.world_size * len(timed)
    rate = samples / seconds
    return Measurement(samples_per_s=rate, tokens_per_s=None if exported.seq_len is None else rate * exported.seq_len,
                       step_time_s=seconds / len(timed), peak_memory_bytes=data.get("peak_memory_bytes"),
                       peak_memory_kind=data.get("peak_memory_kind"),
                       step_times_s=tuple(s["step_time_s"] for s in steps),
                       step_time_spread=spread([s["step_time_s"] for s in timed]))


def spread(seconds: list[float]) -> float | None:
    """(slowest - fastest) / median of step times; ``None`` for fewer than two.

    Example:
        >>> spread([1.0, 1.2, 0.9]), spread([2.0])
        (0.3, None)
    """
    if len(seconds) < 2:
        return None
    ordered = sorted(seconds)
    middle = len(ordered) // 2
    median = ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
    return round((ordered[-1] - ordered[0]) / median, 6) if median > 0 else None


class _ProgressWatcher:
    """Follows rank 0's ``progress.jsonl`` and reports throughput after warm-up as steps arrive."""

    def __init__(self, path: Path, warmup_steps: int, samples_per_step: int, callback: Progress | None) -> None:
        self._path, self._warmup, self._samples = path, warmup_steps, samples_per_step
        self._callback = callback
        self._offset = 0
        self._seconds = 0.0
        self._timed = 0

    def poll(self) -> None:
        if self._callback is None or not self._path.is_file():
            return
        with open(self._path, "rb") as f:
            f.seek(self._offset)
            chunk = f.read()
        complete = chunk[: chunk.rfind(b"\n") + 1]  # a line still being written waits for the next poll
        self._offset += len(complete)
        for line in complete.decode("utf-8").splitlines():
            entry = json.loads(line)
            if entry["step"] <= self._warmup:
                continue
            self._seconds += entry["seconds"]
            self._timed += 1
            self._callback(entry["step"], self._samples * self._timed / self._seconds)
