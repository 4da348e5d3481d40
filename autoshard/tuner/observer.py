"""What a running study tells its onlookers: the hooks :func:`~autoshard.tuner.study.run_study` calls.

The tuner renders nothing itself. A progress bar, the summary files and the plots are observers given by the
caller (:mod:`autoshard.report`; :func:`autoshard.tune` passes them), in the way Lightning's ``Trainer`` calls
its ``Callback`` hooks (``lightning/pytorch/callbacks/callback.py``): every hook here does nothing, and an
observer overrides those it needs.

Example:
    >>> class Count(TuneObserver):
    ...     started = 0
    ...     def trial_started(self, number: int, what: str) -> None:
    ...         self.started += 1
    >>> seen = Count()
    >>> fan = Observers([seen, TuneObserver()])
    >>> fan.trial_started(0, "ddp mb=4")
    >>> seen.started
    1
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import optuna

    from autoshard.tuner.result import TuneResult


class TuneObserver:
    """Hooks a study calls while it runs; each does nothing unless overridden."""

    def study_started(self, *, budget: int) -> None:
        """The loop starts; the study should hold ``budget`` trials when done."""

    def say(self, line: str) -> None:
        """A sentence for the user before the first trial (what a trial is predicted to cost)."""

    def trials_done(self, done: int) -> None:
        """The study now holds ``done`` trials that use up the budget."""

    def trial_started(self, number: int, what: str) -> None:
        """Trial ``number`` starts running ``what`` (e.g. ``ddp mb=4 ckpt``)."""

    def trial_step(self, step: int, steps: int, samples_per_s: float) -> None:
        """The running trial reached ``step`` of ``steps`` at ``samples_per_s`` so far."""

    def trial_ended(self, number: int, outcome: Mapping[str, Any]) -> None:
        """A trial that ran ended: its measurement (``samples_per_s``, ...), ``pruned`` or ``failure``, with
        ``message``."""

    def study_ended(self) -> None:
        """The loop stopped (its budget used up, its time up, or an error on its way out)."""

    def study_finished(self, result: TuneResult, study: optuna.Study) -> Sequence[str]:
        """The study's result is settled (the best plan exported); returns notes to add to it."""
        return ()


class Observers(TuneObserver):
    """Several observers as one: each hook calls theirs in order, and the notes are joined."""

    def __init__(self, observers: Sequence[TuneObserver]) -> None:
        self.observers = tuple(observers)

    def study_started(self, *, budget: int) -> None:
        for o in self.observers:
            o.study_started(budget=budget)

    def say(self, line: str) -> None:
        for o in self.observers:
            o.say(line)

    def trials_done(self, done: int) -> None:
        for o in self.observers:
            o.trials_done(done)

    def trial_started(self, number: int, what: str) -> None:
        for o in self.observers:
            o.trial_started(number, what)

    def trial_step(self, step: int, steps: int, samples_per_s: float) -> None:
        for o in self.observers:
            o.trial_step(step, steps, samples_per_s)

    def trial_ended(self, number: int, outcome: Mapping[str, Any]) -> None:
        for o in self.observers:
            o.trial_ended(number, outcome)

    def study_ended(self) -> None:
        for o in self.observers:
            o.study_ended()

    def study_finished(self, result: TuneResult, study: optuna.Study) -> Sequence[str]:
        return [note for o in self.observers for note in o.study_finished(result, study)]
