"""The progress bar a study shows on stderr: trials done out of the budget, and the running trial's step and
throughput so far."""

from __future__ import annotations

from collections.abc import Mapping
from types import TracebackType
from typing import Any


class ProgressDisplay:
    """A rich progress bar on stderr (nothing when ``enabled`` is false)."""

    def __init__(self, *, total: int, enabled: bool) -> None:
        self._enabled = enabled
        self._progress: Any = None
        self._task: Any = None
        self._total = total
        self._console: Any = None

    def __enter__(self) -> ProgressDisplay:
        if self._enabled:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            self._console = Console(stderr=True)
            self._progress = Progress(TextColumn("[bold]tune[/bold]"), BarColumn(), MofNCompleteColumn(),
                                      TimeElapsedColumn(), TextColumn("{task.description}"), console=self._console,
                                      transient=False)
            self._progress.__enter__()
            self._task = self._progress.add_task("", total=self._total)
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._progress is not None:
            self._progress.__exit__(kind, value, tb)

    def advance_to(self, done: int) -> None:
        """Set the number of finished trials."""
        if self._progress is not None:
            self._progress.update(self._task, completed=min(done, self._total))

    def say(self, line: str) -> None:
        """One line above the bar (the study's cost estimate before it starts)."""
        if self._console is not None:
            self._console.print(line, highlight=False)

    def start_trial(self, number: int, what: str) -> None:
        """A trial starts."""
        self._what = f"trial {number}: {what}"
        if self._progress is not None:
            self._progress.update(self._task, description=f"{self._what} (starting)")

    def update(self, step: int, steps: int, samples_per_s: float) -> None:
        """The running trial reached ``step`` at ``samples_per_s`` so far."""
        if self._progress is not None:
            self._progress.update(self._task, description=f"{self._what} step {step}/{steps} "
                                                          f"{samples_per_s:.1f} samples/s")

    def end_trial(self, number: int, outcome: Mapping[str, Any]) -> None:
        """A trial ended: one line with its result above the bar."""
        if self._progress is None:
            return
        if "samples_per_s" in outcome and not outcome.get("pruned"):
            how = f"{outcome['samples_per_s']:.1f} samples/s"
        elif outcome.get("pruned"):
            how = f"pruned ({outcome.get('message')})"
        else:
            how = f"{outcome.get('failure')}: {outcome.get('message')}"
        self._console.print(f"  {self._what}: {how}", highlight=False)
