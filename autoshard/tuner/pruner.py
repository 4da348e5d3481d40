"""A pruner for trials that are clearly slower than the best so far.

Throughput after warm-up settles within a few steps, so a trial running at half the best completed trial's
rate after ``min_steps`` timed steps will not catch up: it is stopped and recorded as PRUNED. Unlike a
median rule, it never prunes a trial that is merely average, which matters when every trial is expensive
and the budget is a dozen trials.
"""

from __future__ import annotations

import optuna


class SlowerThanBestPruner(optuna.pruners.BasePruner):
    """Prune when the running throughput is below ``ratio`` × the best feasible completed trial's.

    Args:
        ratio: the fraction of the best throughput below which a trial is pruned (0 < ratio < 1).
        min_steps: timed steps a trial runs before it may be pruned.
    """

    def __init__(self, ratio: float = 0.5, min_steps: int = 2) -> None:
        if not 0 < ratio < 1:
            raise ValueError(f"ratio must be in (0, 1), but got {ratio=}.")
        if min_steps < 1:
            raise ValueError(f"min_steps must be >= 1, but got {min_steps=}.")
        self.ratio = ratio
        self.min_steps = min_steps

    def prune(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> bool:
        """Whether ``trial`` is clearly slower than the best trial completed so far."""
        values = trial.intermediate_values
        if len(values) < self.min_steps:
            return False
        best = best_throughput(study)
        return best is not None and values[max(values)] < self.ratio * best


def best_throughput(study: optuna.Study) -> float | None:
    """The highest value of a feasible completed trial, or ``None``."""
    best = None
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        if t.value is None or any(v > 0 for v in t.constraints.values()):
            continue
        best = t.value if best is None else max(best, t.value)
    return best
