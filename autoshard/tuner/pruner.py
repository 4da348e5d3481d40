"""A pruner for trials that are clearly slower than the best so far.

Throughput after warm-up settles within a few steps, so a trial running at half the best completed trial's
rate after ``min_steps`` timed steps will not catch up: it is stopped and recorded as PRUNED. Unlike a
median rule, it never prunes a trial that is merely average, which matters when every trial is expensive
and the budget is a dozen trials.
"""

from __future__ import annotations

from collections.abc import Collection

import optuna

from autoshard.tuner.records import trial_strategy


class SlowerThanBestPruner(optuna.pruners.BasePruner):
    """Prune when the running throughput is below ``ratio`` × the best feasible completed trial's.

    Args:
        ratio: the fraction of the best throughput below which a trial is pruned (0 < ratio < 1).
        min_steps: timed steps a trial runs before it may be pruned.
        strategies: compare only with trials of these strategies (the run's search space): a study resumed with
            other ``--strategies`` holds trials of others, which its new trials do not compete with (``None``:
            every trial).
    """

    def __init__(self, ratio: float = 0.5, min_steps: int = 2, strategies: Collection[str] | None = None) -> None:
        if not 0 < ratio < 1:
            raise ValueError(f"ratio must be in (0, 1), but got {ratio=}.")
        if min_steps < 1:
            raise ValueError(f"min_steps must be >= 1, but got {min_steps=}.")
        self.ratio = ratio
        self.min_steps = min_steps
        self.strategies = None if strategies is None else frozenset(strategies)

    def prune(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> bool:
        """Whether ``trial`` is clearly slower than the best trial completed so far."""
        values = trial.intermediate_values
        if len(values) < self.min_steps:
            return False
        best = best_throughput(study, self.strategies)
        return best is not None and values[max(values)] < self.ratio * best


def best_throughput(study: optuna.Study, strategies: Collection[str] | None = None) -> float | None:
    """The highest value of a feasible completed trial (of one of ``strategies``, when given), or ``None``."""
    best = None
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        if t.value is None or any(v > 0 for v in t.constraints.values()):
            continue
        if strategies is not None and trial_strategy(t) not in strategies:
            continue
        best = t.value if best is None else max(best, t.value)
    return best
