"""What ``autoshard.tune`` returns: every trial with its measurement or failure, and the best configuration."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

from autoshard.planner.plan_file import ExportedPlan


class TrialState(str, Enum):
    """How a trial ended, in autoshard's words (Optuna's state is kept beside it)."""

    COMPLETE = "complete"
    """Ran and was measured."""
    INFEASIBLE = "infeasible"
    """Ran out of memory (or was predicted to): recorded as an Optuna constraint violation, throughput 0."""
    FAILED = "failed"
    """Timed out, crashed, lost communication, the user's code raised, or the tuner was stopped during it
    (``interrupted``, ``stale``: run again on resume)."""
    PRUNED = "pruned"
    """Stopped early: clearly slower than the best so far."""
    RUNNING = "running"
    WAITING = "waiting"


class FailureClass(str, Enum):
    """Why a trial did not produce a measurement."""

    OOM = "oom"
    """Out of device (or host) memory while running."""
    PREDICTED_OOM = "predicted_oom"
    """Not run: the memory model says it does not fit."""
    IMPLIED_OOM = "implied_oom"
    """Not run: a trial of the same strategy, at no larger a micro-batch (checkpointed, if this one is), ran out
    of memory, and this one is predicted to need no less (other bucket sizes or comm hooks, a larger
    micro-batch)."""
    TIMEOUT = "timeout"
    """Did not finish within the trial's wall-clock limit; its process groups were stopped."""
    CRASH = "crash"
    """A worker died (a signal, an abort) or raised something else."""
    COMMUNICATION = "communication"
    """A collective failed or a peer was lost (gloo / NCCL / store errors)."""
    USER_CODE = "user_code"
    """The model, its loss or its optimizer raised: the study stops, every trial would fail the same way."""
    STALE = "stale"
    """Found RUNNING with its process gone (a killed tuner): marked failed on resume."""
    INTERRUPTED = "interrupted"
    """Stopped by Ctrl-C or SIGTERM to the tuner: not counted, and run again first when the study is resumed."""


@dataclass(frozen=True, kw_only=True, slots=True)
class TrialConfig:
    """One configuration a trial runs: a strategy, its knob settings, the micro-batch and checkpointing."""

    strategy: str
    micro_batch_size: int
    activation_checkpointing: bool
    settings: dict[str, Any] = field(default_factory=dict)
    """Knob values chosen by the trial (the rest take the strategy's defaults)."""

    def key(self) -> str:
        """A stable text key of the configuration (sorted settings), used by the result cache."""
        import json

        return json.dumps(self.to_dict(), sort_keys=True, default=str)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        d = asdict(self)
        d["settings"] = dict(self.settings)
        return d


@dataclass(frozen=True, kw_only=True, slots=True)
class TrialRecord:
    """One trial of the study, as stored."""

    number: int
    state: TrialState
    config: TrialConfig | None
    """``None`` for a trial that failed before its configuration was recorded."""
    samples_per_s: float | None = None
    """Measured global throughput over the timed steps (after warm-up); ``None`` unless measured."""
    tokens_per_s: float | None = None
    step_time_s: float | None = None
    """Mean wall-clock time of a timed step on rank 0."""
    step_time_spread: float | None = None
    """How much the timed steps' times varied: (slowest - fastest) / median; ``None`` with fewer than two timed
    steps or unmeasured. Two trials whose throughputs differ by less than this are not told apart by one run."""
    peak_memory_bytes: int | None = None
    """Measured peak per rank (the highest rank): see ``peak_memory_kind``."""
    peak_memory_kind: str | None = None
    """``cuda_allocated`` (``torch.cuda.max_memory_allocated``) or ``host_rss`` (on CPU: growth of the resident
    set from before the model was built to the end, which also counts the framework's own allocations)."""
    predicted_peak_bytes: int | None = None
    """The planner's per-device prediction for this configuration."""
    predicted_samples_per_s: float | None = None
    failure: FailureClass | None = None
    message: str | None = None
    """The failure's message (one line), or a note on the measurement."""
    cached: bool = False
    """The measurement was reused, not run: from an earlier trial of this study (``duplicate_of``) or from the
    result cache."""
    duplicate_of: int | None = None
    """The earlier trial of this study with the same configuration (such a trial does not use up the budget)."""
    rerun_of: int | None = None
    """The trial, stopped before it finished (Ctrl-C, a tuner that is gone), whose configuration this one runs
    again."""
    duration_s: float | None = None
    """Wall-clock time the trial took, including starting its processes."""

    @property
    def memory_error(self) -> float | None:
        """(predicted − measured) / measured, when both are known and comparable: only against
        ``cuda_allocated``. A CPU trial's resident-set growth also holds the framework's own memory (gloo
        buffers, kernels loaded on first use, the allocator's free lists), which the prediction does not model;
        ``benchmarks/memory_accuracy.py`` measures CPU accuracy on live tensors instead."""
        if not self.peak_memory_bytes or self.predicted_peak_bytes is None or self.peak_memory_kind != "cuda_allocated":
            return None
        return (self.predicted_peak_bytes - self.peak_memory_bytes) / self.peak_memory_bytes

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (the ``--json`` format, documented in docs/tune.md)."""
        return {
            "number": self.number,
            "state": self.state.value,
            "config": None if self.config is None else self.config.to_dict(),
            "samples_per_s": self.samples_per_s,
            "tokens_per_s": self.tokens_per_s,
            "step_time_s": self.step_time_s,
            "step_time_spread": self.step_time_spread,
            "peak_memory_bytes": self.peak_memory_bytes,
            "peak_memory_kind": self.peak_memory_kind,
            "predicted_peak_bytes": self.predicted_peak_bytes,
            "predicted_samples_per_s": self.predicted_samples_per_s,
            "memory_error": self.memory_error,
            "failure": None if self.failure is None else self.failure.value,
            "message": self.message,
            "cached": self.cached,
            "duplicate_of": self.duplicate_of,
            "rerun_of": self.rerun_of,
            "duration_s": self.duration_s,
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class TrialEstimate:
    """What one trial is predicted to cost, and what the prediction rests on."""

    seconds: float
    """Start-up plus ``steps`` × ``step_s``."""
    startup_s: float
    step_s: float
    """One optimizer step of the configuration the study runs first (the planner's)."""
    steps: int
    micro_batch_size: int
    basis: str
    """What the step time was derived from, in words."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return asdict(self)


@dataclass(frozen=True, kw_only=True)
class TuneResult:
    """The outcome of :func:`autoshard.tune`."""

    study_name: str
    storage: str
    """The storage URL, with any password masked."""
    output_dir: str
    trials: tuple[TrialRecord, ...]
    """Every trial in the study, this run's and earlier runs' (resumed), by number."""
    best: TrialRecord | None
    """The fastest feasible measured trial (``None`` if none completed)."""
    best_plan: ExportedPlan | None
    """The best configuration as ``plan.json`` holds it: usable by ``fit(plan=...)`` and the exporters."""
    planner_trial: int | None = None
    """The number of the trial that ran the planner's own recommendation."""
    exported: tuple[str, ...] = ()
    """Files written for the best configuration (plan.json, ds_config.json, ...)."""
    notes: tuple[str, ...] = ()
    trial_estimate: TrialEstimate | None = None
    """What one trial was predicted to cost before the study started (:mod:`autoshard.tuner.estimate`)."""
    device_type: str | None = None
    """``cpu`` or ``cuda``: what the trials ran on (the report leaves the planner's CPU speeds out; not in
    :meth:`to_dict`, whose fields are documented)."""

    def __repr__(self) -> str:
        """One line (the dataclass's own repr printed every trial, thousands of characters): the study, its
        trials by state and the best one.

        Example:
            >>> TuneResult(study_name="s", storage="sqlite:///s.db", output_dir="out", trials=(), best=None,
            ...            best_plan=None)
            <TuneResult 's': 0 trials; nothing measured; out>
        """
        counts = ", ".join(f"{n} {state}" for state, n in self.counts().items())
        best = self.best
        if best is None or best.config is None:
            top = "nothing measured"
        else:
            rate = "" if best.samples_per_s is None else f": {best.samples_per_s:,.4g} samples/s"
            top = (f"best trial {best.number}, {best.config.strategy} at micro-batch "
                   f"{best.config.micro_batch_size}{rate}")
        return (f"<TuneResult {self.study_name!r}: {len(self.trials)} trials{f' ({counts})' if counts else ''}; "
                f"{top}; {self.output_dir}>")

    def counts(self) -> dict[str, int]:
        """Trials by state."""
        out: dict[str, int] = {}
        for t in self.trials:
            out[t.state.value] = out.get(t.state.value, 0) + 1
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (the ``--json`` format)."""
        return {
            "study_name": self.study_name,
            "storage": self.storage,
            "output_dir": self.output_dir,
            "counts": self.counts(),
            "best": None if self.best is None else self.best.to_dict(),
            "best_plan": None if self.best_plan is None else self.best_plan.to_dict(),
            "planner_trial": self.planner_trial,
            "exported": list(self.exported),
            "trials": [t.to_dict() for t in self.trials],
            "notes": list(self.notes),
            "trial_estimate": None if self.trial_estimate is None else self.trial_estimate.to_dict(),
        }
