"""The memory timeline of a trace, and the exact peak at other micro-batches.

Two traces of the same step at micro-batches 1 and 2 run the same operations in the same order, so their
timelines — the per-category totals after every allocation — line up event by event. Every tensor's size is
either independent of the micro-batch or proportional to it, so each event's totals are affine in the
micro-batch, and the peak at any micro-batch is the maximum over events of those affine values: exact, even
when the peak moves to another point of the step as the batch grows (which extrapolating the peaks themselves
gets wrong — e.g. under activation checkpointing).

Each event also says which repeated block it happened in, so that the highest point inside each block
(:func:`located_peaks`) can be found as well: profiles of deep models made from shallow copies extrapolate
these, place by place (:class:`autoshard.profiler.scaling.DepthTimelines`).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

import torch

from autoshard.profiler.result import MemoryBreakdown
from autoshard.profiler.tracker import Category

_ORDER = tuple(c.value for c in Category)
_NON_STATE = [list(Category).index(c) for c in (Category.ACTIVATIONS, Category.TEMPORARIES, Category.INPUTS)]


@dataclass(frozen=True, slots=True)
class Timeline:
    """Per phase, the per-category totals after every allocation (an ``(events, categories)`` int64 tensor)."""

    phases: dict[str, torch.Tensor]
    blocks: dict[str, torch.Tensor] = field(default_factory=dict)
    """Per phase, the repeated block each event happened in, as an index into :attr:`block_names` (an
    ``(events,)`` int64 tensor); empty when not recorded."""
    block_names: tuple[str, ...] = ()
    """The blocks events happened in (``""``: outside every block)."""

    @classmethod
    def from_events(cls, events: list[tuple[str, tuple[int, ...], str]]) -> Timeline:
        """Group a tracker's recorded events by phase (the set-up phase is left out)."""
        grouped: dict[str, list[tuple[int, ...]]] = {}
        blocks: dict[str, list[int]] = {}
        names: dict[str, int] = {}
        for phase, totals, block in events:
            if phase != "setup":
                grouped.setdefault(phase, []).append(totals)
                blocks.setdefault(phase, []).append(names.setdefault(block, len(names)))
        return cls({p: torch.tensor(rows, dtype=torch.int64) for p, rows in grouped.items()},
                   {p: torch.tensor(ids, dtype=torch.int64) for p, ids in blocks.items()}, tuple(names))

    def aligned_with(self, other: Timeline) -> bool:
        """Whether both timelines have the same phases with the same number of events, in the same blocks."""
        return (
            self.phases.keys() == other.phases.keys()
            and all(self.phases[p].shape == other.phases[p].shape for p in self.phases)
            and self.block_names == other.block_names
            and self.blocks.keys() == other.blocks.keys()
            and all(torch.equal(self.blocks[p], other.blocks[p]) for p in self.blocks)
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


def located_peaks(
    one: Timeline, two: Timeline, micro_batch: int, place: Callable[[str], Hashable]
) -> dict[tuple[str, Hashable], tuple[MemoryBreakdown, int, int]]:
    """Per phase and place, the highest point at ``micro_batch`` (from timelines at micro-batches 1 and 2), the
    event it is at, and the highest activations + temporaries + inputs there (wherever they fall in that place).

    Args:
        place: maps an event's block (``""`` outside every block) to its place, e.g. its position in
            the model at full depth.

    Raises:
        ValueError: the timelines do not line up, or do not say which block each event is in.
    """
    if not one.aligned_with(two):
        raise ValueError("timelines at micro-batch 1 and 2 do not line up")
    if one.blocks.keys() != one.phases.keys():
        raise ValueError("the timelines do not record the block of each event")
    out = {}
    for phase, a in one.phases.items():
        values = _at(a, two.phases[phase], micro_batch)
        totals, non_state = values.sum(dim=1), values[:, _NON_STATE].sum(dim=1)
        ids = one.blocks[phase]
        by_place: dict[Hashable, list[int]] = {}
        for i, block in enumerate(one.block_names):
            by_place.setdefault(place(block), []).append(i)
        for key, block_ids in by_place.items():
            index = torch.isin(ids, torch.tensor(block_ids)).nonzero().flatten()
            if not len(index):
                continue
            event = int(index[int(totals[index].argmax())])
            row = values[event]
            breakdown = MemoryBreakdown.from_categories(dict(zip(_ORDER, (int(v) for v in row), strict=True)))
            out[phase, key] = (breakdown, event, int(non_state[index].max()))
    return out


def non_state_peaks(one: Timeline, two: Timeline, micro_batch: int) -> dict[str, int]:
    """Per phase, the highest activations + temporaries + inputs at ``micro_batch`` (wherever it falls)."""
    if not one.aligned_with(two):
        raise ValueError("timelines at micro-batch 1 and 2 do not line up")
    return {
        phase: int(_at(a, two.phases[phase], micro_batch)[:, _NON_STATE].sum(dim=1).max())
        for phase, a in one.phases.items()
    }
