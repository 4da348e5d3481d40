"""A study's budget: how many trials, how long, and how long each; checked before anything runs."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from autoshard.errors import UsageError


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Budget:
    """How many trials the study should hold, and its clock."""

    trials: int
    timeout_s: float | None
    trial_timeout_s: float
    started: float

    def remaining_s(self) -> float | None:
        return None if self.timeout_s is None else self.timeout_s - (time.monotonic() - self.started)


def check_budget(trials: int, timeout_s: float | None, trial_timeout_s: float, steps: int, warmup_steps: int
                 ) -> Budget:
    """The budget, its clock started now.

    Raises:
        UsageError: a count or a time out of range.
    """
    def whole(name: str, value: Any, low: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise UsageError(f"{name} must be a whole number >= {low}, but got {value!r}.")

    def seconds(name: str, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise UsageError(f"{name} must be a positive number of seconds, but got {value!r}.")

    whole("trials", trials, 1)
    if timeout_s is not None:
        seconds("timeout_s", timeout_s)
    seconds("trial_timeout_s", trial_timeout_s)
    whole("warmup_steps", warmup_steps, 0)
    whole("steps", steps, 1)
    if steps < warmup_steps + 2:
        raise UsageError(f"steps ({steps}) must exceed warmup_steps ({warmup_steps}) by at least 2, so that "
                         "throughput is measured over more than one step.")
    return Budget(trials=trials, timeout_s=timeout_s, trial_timeout_s=float(trial_timeout_s),
                   started=time.monotonic())
