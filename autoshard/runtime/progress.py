"""What ``fit()`` says while it trains: the plan it trains, then a line every ``log_every`` steps (rank 0, on
standard error), so that a run of hours is not silent until it returns. ``fit(progress=False)`` says nothing."""

from __future__ import annotations

import sys
from collections.abc import Sequence
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
        self._write(f"step {s.step:,}{total}  epoch {s.epoch}  loss {sum(x.loss for x in steps) / len(steps):.4g}{lr}"
                    f"  {samples / seconds:,.1f} samples/s{tokens}  {seconds / len(steps):.3g} s/step")

    def evaluated(self, metrics: EvalMetrics) -> None:
        """A scoring of ``eval_data``."""
        self._write(f"eval at step {metrics.step:,}  loss {metrics.loss:.4g}  ({metrics.batches:,} batches)")
