"""The memory timeline of a trace, and the exact peak at other micro-batches.

Two traces of the same step at micro-batches 1 and 2 run the same operations in the same order, so their
timelines — the per-category totals after every allocation — line up event by event. Every tensor's size is
either independent of the micro-batch or proportional to it, so each event's totals are affine in the
micro-batch, and the peak at any micro-batch is the maximum over events of those affine values: exact, even
when the peak moves to another point of the step as the batch grows (which extrapolating the peaks themselves
gets wrong — e.g. under activation checkpointing).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from autoshard.profiler.result import MemoryBreakdown
from autoshard.profiler.tracker import Category

_ORDER = tuple(c.value for c in Category)
_NON_STATE = [list(Category).index(c) for c in (Category.ACTIVATIONS, Category.TEMPORARIES, Category.INPUTS)]


@dataclass(frozen=True, slots=True)
class Timeline:
    """Per phase, the per-category totals after every allocation (an ``(events, categories)`` int64 tensor)."""

    phases: dict[str, torch.Tensor]

    @classmethod
    def from_events(cls, events: list[tuple[str, tuple[int, ...]]]) -> Timeline:
        """Group a tracker's recorded events by phase (the set-up phase is left out)."""
        grouped: dict[str, list[tuple[int, ...]]] = {}
        for phase, totals in events:
            if phase != "setup":
                grouped.setdefault(phase, []).append(totals)
        return cls({p: torch.tensor(rows, dtype=torch.int64) for p, rows in grouped.items()})

    def aligned_with(self, other: Timeline) -> bool:
        """Whether both timelines have the same phases with the same number of events."""
        return self.phases.keys() == other.phases.keys() and all(
            self.phases[p].shape == other.phases[p].shape for p in self.phases
        )


def _at(one: torch.Tensor, two: torch.Tensor, micro_batch: int) -> torch.Tensor:
    return one + (two - one) * (micro_batch - 1)


def phase_peaks(one: Timeline, two: Timeline, micro_batch: int) -> dict[str, MemoryBreakdown]:
    """The highest point of each phase at ``micro_batch``, from timelines at micro-batches 1 and 2.

    Raises:
        ValueError: the timelines do not line up (the step's operations depend on the batch size).
    """
    if not one.aligned_with(two):
        raise ValueError("timelines at micro-batch 1 and 2 do not line up")
    out = {}
    for phase, a in one.phases.items():
        values = _at(a, two.phases[phase], micro_batch)
        row = values[int(values.sum(dim=1).argmax())]
        out[phase] = MemoryBreakdown.from_categories(dict(zip(_ORDER, (int(v) for v in row), strict=True)))
    return out


def non_state_peaks(one: Timeline, two: Timeline, micro_batch: int) -> dict[str, int]:
    """Per phase, the highest activations + temporaries + inputs at ``micro_batch`` (wherever it falls)."""
    if not one.aligned_with(two):
        raise ValueError("timelines at micro-batch 1 and 2 do not line up")
    return {
        phase: int(_at(a, two.phases[phase], micro_batch)[:, _NON_STATE].sum(dim=1).max())
        for phase, a in one.phases.items()
    }
