"""The tracing sessions of a workload (:func:`autoshard.strategies.workload.build_workload`), run one after the
other or several at once in forked processes (:mod:`autoshard.forked`).

A session traces micro-batches 1, 2 and 3 of one compute precision and checkpointing choice and gives a
:class:`~autoshard.strategies.workload.StepTrace`. Sessions are independent: each builds its own model under its
own fake-tensor mode, so the order they run in, and the process, change nothing in what they trace.
``tests/strategies/test_trace_sessions.py`` checks that a workload traced in parallel equals, field by field,
the one traced in one process.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from autoshard.errors import UserCodeError
from autoshard.forked import ForkedCall, fork_refusal, usable_cores
from autoshard.models.source import ModelSource
from autoshard.profiler.checkpointing import NONE, ActivationCheckpointing
from autoshard.profiler.options import OptimizerImpl, Precision, ProfileOptions
from autoshard.strategies.workload import BATCH_SIZES, StepTrace, TraceKey

__all__ = ["TraceSessions", "jobs_for"]


def jobs_for(jobs: int | None, sessions: int) -> int:
    """Processes to trace ``sessions`` sessions with: at most ``jobs`` (``None``: one per usable core) and at
    most one per session; 1 where forking is not safe (:func:`autoshard.forked.fork_refusal`).

    Raises:
        ValueError: ``jobs`` is not a positive integer.
    """
    if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1):
        raise ValueError(f"jobs must be a positive integer or None, but got {jobs!r}.")
    wanted = usable_cores() if jobs is None else jobs
    return 1 if wanted == 1 or sessions <= 1 or fork_refusal() is not None else min(wanted, sessions)


@dataclass(frozen=True, kw_only=True, slots=True)
class TraceSessions:
    """What every session of one workload shares; :meth:`run` traces them."""

    source: ModelSource
    seq_len: int | None
    optimizer: str
    target: str
    optimizer_impl: OptimizerImpl | None
    checkpoint_mode: ActivationCheckpointing

    def trace(self, key: TraceKey) -> StepTrace:
        """One session: micro-batches 1, 2 and 3 at ``key``'s precision, output cast and checkpointing (FLOPs
        and the op census counted at micro-batches 1 and 2: what of the memory traffic comes once per micro-batch
        and what with each sample, :func:`autoshard.strategies.step_time.estimate`)."""
        from autoshard.profiler.scaling import profiles_with_timelines

        precision, fp32_output, checkpointing = key
        options = ProfileOptions(batch_size=1, seq_len=self.seq_len, precision=precision, optimizer=self.optimizer,
                                 checkpointing=self.checkpoint_mode if checkpointing else NONE, target=self.target,
                                 fp32_output=fp32_output, optimizer_impl=self.optimizer_impl)
        (one, _), (two, t2), (_, t3) = profiles_with_timelines(self.source, options, BATCH_SIZES, count_flops=True,
                                                               census_twice=True)
        return StepTrace(mode="", checkpointing=checkpointing, precision=precision, at_1=one, at_2=two,
                         timelines_2=t2, timelines_3=t3)

    def trace_all(self, keys: Sequence[TraceKey]) -> tuple[StepTrace, ...]:
        """:meth:`trace` of each key, in order."""
        return tuple(self.trace(key) for key in keys)

    def run_or_amp_alone(self, keys: Sequence[TraceKey], modes: dict[str, tuple[Precision, bool]], jobs: int,
                         progress: Callable[[int, int], None] | None = None
                         ) -> tuple[dict[TraceKey, StepTrace], str | None, dict[str, tuple[Precision, bool]]]:
        """:meth:`run` of every key; or, when the model's code fails in a 16-bit session (``modes``' ``half``)
        while the autocast ones trace, those alone, with why the 16-bit ones failed, and the modes left.

        Raises:
            UserCodeError: the autocast sessions fail too (the first failure is raised).
        """
        try:
            return self.run(keys, jobs, progress), None, modes
        except UserCodeError as exc:
            amp = modes["amp"]
            amp_keys = [k for k in keys if k[:2] == amp]
            if len(amp_keys) == len(keys):
                raise
            try:
                traced = self.run(amp_keys, min(jobs, len(amp_keys)), progress)
            except UserCodeError:
                raise exc from None
            half = "bf16" if modes["half"][0] is Precision.BF16_TRUE else modes["half"][0].value
            why = (f"{HALF_FAILS} {half}, as this strategy "
                   f"trains them: {exc.message}")
            return traced, why, {"amp": amp}

    def run(self, keys: Sequence[TraceKey], jobs: int,
            progress: Callable[[int, int], None] | None = None) -> dict[TraceKey, StepTrace]:
        """Trace every key, the first in this process first; with ``jobs`` > 1 the keys are cut in ``jobs``
        runs of consecutive keys (a mode's sessions with and without checkpointing together), the first
        traced here and each other in a forked child. Checkpointed sessions are dropped when the first
        session finds no repeated block (nothing to checkpoint). A child that fails has its sessions traced
        here, so an error is raised here, as without children.

        ``progress(done, total)`` is called after each session traced here, and for each of a child's when its
        results arrive.
        """
        size, extra = divmod(len(keys), jobs)
        ends = list(itertools.accumulate(size + (i < extra) for i in range(jobs)))
        groups = [list(keys[end - size - (i < extra):end]) for i, end in enumerate(ends)]
        children: list[tuple[list[TraceKey], ForkedCall[tuple[StepTrace, ...]] | None]] = []
        traced: dict[TraceKey, StepTrace] = {}
        total = len(keys)

        def done(key: TraceKey, trace: StepTrace) -> None:
            traced[key] = trace
            if progress is not None:
                progress(len(traced), total)

        try:
            for group in groups[1:]:
                try:
                    call = ForkedCall(functools.partial(self.trace_all, group), tuple[StepTrace, ...])
                except (OSError, RuntimeError):  # no fork now (no process slot, a thread started): traced here
                    call = None
                children.append((group, call))
            for key in groups[0]:
                if traced and not _needed(key, traced[keys[0]]):
                    continue
                if not traced:  # the first session: it says whether checkpointed sessions are wanted
                    first = self.trace(key)
                    total = sum(_needed(k, first) for k in keys)
                    done(key, first)
                else:
                    done(key, self.trace(key))
            for group, child in children:
                wanted = [k for k in group if _needed(k, traced[keys[0]])]
                if not wanted and child is not None:
                    child.cancel()
                found = None if child is None or not wanted else child.result()
                # A child that failed: its sessions are traced here, to report what went wrong.
                results = {} if found is None else dict(zip(group, found, strict=True))
                for key in wanted:
                    done(key, results[key] if key in results else self.trace(key))
        finally:
            for _, child in children:
                if child is not None:
                    child.cancel()
        return traced


HALF_FAILS = "the model's forward fails with its parameters in"
"""The start of the reason a strategy that trains 16-bit parameters is rejected for (its trace failed there)."""


def _needed(key: TraceKey, base: StepTrace) -> bool:
    """Whether the session ``key`` is wanted once the first session traced ``base``: a checkpointed one only
    when something repeats."""
    return not key[2] or base.at_1.block_class is not None
