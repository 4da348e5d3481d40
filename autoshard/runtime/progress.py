"""What ``fit()`` says while it trains: the plan it trains, then a line every ``log_every`` steps (rank 0, on
standard error), so that a run of hours is not silent until it returns. ``fit(progress=False)`` says nothing."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from autoshard.planner.plan_file import ExportedPlan
from autoshard.runtime.result import EvalMetrics, StepMetrics


def say(line: str, stream: TextIO | None = None) -> None:
    """Write one progress line (``autoshard: ...``) to ``stream`` (default: standard error)."""
    out = stream or sys.stderr
    out.write(f"autoshard: {line}\n")
    out.flush()


class Reporter:
    """Writes the progress lines of one run.

    Args:
        total_steps: the optimizer steps the run will take, when known.
        stream: where to write (default: standard error).
    """

    def __init__(self, total_steps: int | None, stream: TextIO | None = None) -> None:
        self.total_steps = total_steps
        self.stream = stream
        self._started = time.monotonic()
        self._first_step = 0

    def _write(self, line: str) -> None:
        say(line, self.stream)

    def start(self, plan: ExportedPlan, world_size: int, device_type: str, first_step: int,
              notes: Sequence[str] = ()) -> None:
        """The plan about to train, and what was decided on the way (``FitResult.notes``) but the plan itself."""
        for note in notes:
            if not note.startswith("Planned "):
                self._write(f"note: {note}")
        accumulated = (f" × {plan.gradient_accumulation} accumulated (global batch "
                       f"{plan.micro_batch_size * plan.gradient_accumulation * world_size})"
                       if plan.gradient_accumulation > 1 else "")
        steps = "" if self.total_steps is None else f", to step {self.total_steps:,}"
        resumed = f" from step {first_step:,}" if first_step else ""
        self._started, self._first_step = time.monotonic(), first_step
        self._write(f"training {plan.strategy} on {world_size} {device_type} rank(s), micro-batch "
                    f"{plan.micro_batch_size}{accumulated}, {plan.precision}{steps}{resumed}")

    def __call__(self, steps: Sequence[StepMetrics]) -> None:
        """``steps``, just averaged over the ranks: the newest one's step, epoch and learning rate, their mean
        loss, and their throughput (their samples over their time)."""
        if not steps:
            return
        s = steps[-1]
        seconds = sum(x.step_time_s for x in steps)
        samples = sum(x.samples_per_s * x.step_time_s for x in steps)
        total = "" if self.total_steps is None else f"/{self.total_steps:,}"
        lr = "" if s.lr is None else f"  lr {s.lr:.3g}"
        per_sample = None if s.tokens_per_s is None else s.tokens_per_s / s.samples_per_s
        tokens = "" if per_sample is None else f"  {per_sample * samples / seconds:,.0f} tokens/s"
        loss = sum(x.loss for x in steps) / len(steps)
        self._write(f"step {s.step:,}{total}  epoch {s.epoch}  loss {loss:.4g}{lr}  {samples / seconds:,.1f} "
                    f"samples/s{tokens}  {seconds / len(steps):.3g} s/step{self._eta(s.step)}")

    def _eta(self, step: int) -> str:
        """``  ETA 1:02:03``: the steps left at the run's mean wall-clock time per step so far (scorings and
        checkpoints included), when the total is known."""
        done = step - self._first_step
        if self.total_steps is None or done <= 0 or step >= self.total_steps:
            return ""
        left = (time.monotonic() - self._started) / done * (self.total_steps - step)
        return f"  ETA {clock(left)}"

    def saved(self, step: int, path: Path) -> None:
        """A checkpoint written."""
        self._write(f"checkpoint at step {step:,}: {path}")

    def finished(self, steps: Sequence[StepMetrics], last_checkpoint: Path | None) -> None:
        """The run's end: its steps, wall-clock time, last loss and last checkpoint."""
        if not steps:
            return
        kept = f"; last checkpoint {last_checkpoint}" if last_checkpoint is not None else ""
        self._write(f"done: {len(steps):,} step(s) in {clock(time.monotonic() - self._started)}, last loss "
                    f"{steps[-1].loss:.4g}{kept}")

    def evaluated(self, metrics: EvalMetrics) -> None:
        """A scoring of ``eval_data``."""
        self._write(f"eval at step {metrics.step:,}  loss {metrics.loss:.4g}  ({metrics.batches:,} batches)")


def clock(seconds: float) -> str:
    """``seconds`` as ``H:MM:SS`` (``M:SS`` under an hour).

    Example:
        >>> clock(59.6), clock(3725), clock(90061)
        ('1:00', '1:02:05', '25:01:01')
    """
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
