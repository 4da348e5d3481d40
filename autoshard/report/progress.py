"""The progress bar a study shows on stderr: trials done out of the budget, and the running trial's step and
throughput so far."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autoshard.tuner.observer import TuneObserver


class ProgressDisplay(TuneObserver):
    """A rich progress bar on stderr, from the loop's start to its end, and a line per trial; where stderr is not
    a terminal (a log file, a scheduler's output), the lines alone."""

    def __init__(self) -> None:
        self._progress: Any = None
        self._task: Any = None
        self._total = 0
        self._console: Any = None
        self._what = ""

    def study_started(self, *, budget: int) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self._total = budget
        self._console = Console(stderr=True)
        if not self._console.is_terminal:  # a log file gets the lines alone (a bar drawn once, cut, came last)
            return
        self._progress = Progress(TextColumn("[bold]tune[/bold]"), BarColumn(), MofNCompleteColumn(),
                                  TimeElapsedColumn(), TextColumn("{task.description}"), console=self._console,
                                  transient=False)
        self._progress.start()
        self._task = self._progress.add_task("", total=self._total)

    def study_ended(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def trials_done(self, done: int) -> None:
        if self._progress is not None:
            self._progress.update(self._task, completed=min(done, self._total))

    def say(self, line: str) -> None:
        if self._console is not None:
            self._console.print(line, highlight=False)

    def trial_started(self, number: int, what: str) -> None:
        self._what = f"trial {number}: {what}"
        if self._progress is not None:
            self._progress.update(self._task, description=f"{self._what} (starting)")

    def trial_step(self, step: int, steps: int, samples_per_s: float) -> None:
        if self._progress is not None:
            self._progress.update(self._task, description=f"{self._what} step {step}/{steps} "
                                                          f"{samples_per_s:.1f} samples/s")

    def trial_ended(self, number: int, outcome: Mapping[str, Any]) -> None:
        if self._console is None:
            return
        if "samples_per_s" in outcome and not outcome.get("pruned"):
            how = f"{outcome['samples_per_s']:.1f} samples/s"
        elif outcome.get("pruned"):
            how = f"pruned ({outcome.get('message')})"
        else:
            how = f"{outcome.get('failure')}: {outcome.get('message')}"
        told = f" (from {outcome['from']})" if outcome.get("from") else ""
        self._console.print(f"  {self._what}: {how}{told}", highlight=False)
