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


@dataclass(frozen=True, slots=True, eq=False)
class Timeline:
    """Per phase, the per-category totals after every allocation (an ``(events, categories)`` int64 tensor).

    Equal when their tensors are (``torch.equal``): the dataclass's own ``==`` asked a tensor for its truth, so
    comparing two plans or workloads raised "Boolean value of Tensor with more than one value is ambiguous"."""

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

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Timeline):
            return NotImplemented
        return (self.block_names == other.block_names and _same(self.phases, other.phases)
                and _same(self.blocks, other.blocks))

    __hash__ = None  # type: ignore[assignment]  # mutable tensors inside: as the dataclass's eq=True made it

    def aligned_with(self, other: Timeline) -> bool:
        """Whether both timelines have the same phases with the same number of events, in the same blocks."""
        return (
            self.phases.keys() == other.phases.keys()
            and all(self.phases[p].shape == other.phases[p].shape for p in self.phases)
            and self.block_names == other.block_names
            and self.blocks.keys() == other.blocks.keys()
            and all(torch.equal(self.blocks[p], other.blocks[p]) for p in self.blocks)
        )


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@dataclass(frozen=True, slots=True)
class _Lines:
    """One phase of a pair of aligned timelines as lines in the micro-batch: each event's totals at micro-batch
    ``b`` are ``base + slope · (b - 1)``, and so are their sums (all integers: exact)."""

    base: torch.Tensor
    """``(events, categories)`` totals at micro-batch 1."""
    slope: torch.Tensor
    """``(events, categories)`` growth per sample."""
    total_base: torch.Tensor
    total_slope: torch.Tensor
    non_state_base: torch.Tensor
    """``(events,)``: activations + temporaries + inputs at micro-batch 1."""
    non_state_slope: torch.Tensor

    @classmethod
    def of(cls, one: torch.Tensor, two: torch.Tensor) -> _Lines:
        slope = two - one
        return cls(one, slope, one.sum(dim=1), slope.sum(dim=1), one[:, _NON_STATE].sum(dim=1),
                   slope[:, _NON_STATE].sum(dim=1))

    def totals(self, micro_batch: int) -> torch.Tensor:
        return self.total_base + self.total_slope * (micro_batch - 1)

    def non_state(self, micro_batch: int) -> torch.Tensor:
        return self.non_state_base + self.non_state_slope * (micro_batch - 1)

    def breakdown(self, event: int, micro_batch: int) -> MemoryBreakdown:
        row = self.base[event] + self.slope[event] * (micro_batch - 1)
        return MemoryBreakdown.from_categories(dict(zip(_ORDER, (int(v) for v in row), strict=True)))


_LINES: dict[tuple[int, int], tuple[Timeline, Timeline, dict[str, _Lines]]] = {}
_LINES_KEPT = 32
"""Pairs of timelines whose lines are kept: planning asks the same pair for hundreds of micro-batches (the
largest that fits, per strategy); the entry holds both timelines, so their ids stay theirs while it lives."""


def _lines(one: Timeline, two: Timeline) -> dict[str, _Lines]:
    """Per phase, the lines of two aligned timelines (computed once per pair).

    Raises:
        ValueError: the timelines do not line up (the step's operations depend on the batch size).
    """
    key = (id(one), id(two))
    kept = _LINES.get(key)
    if kept is not None and kept[0] is one and kept[1] is two:
        return kept[2]
    if not one.aligned_with(two):
        raise ValueError("timelines at micro-batch 1 and 2 do not line up")
    lines = {phase: _Lines.of(a, two.phases[phase]) for phase, a in one.phases.items()}
    if len(_LINES) >= _LINES_KEPT:
        del _LINES[next(iter(_LINES))]
    _LINES[key] = (one, two, lines)
    return lines


def lines_up(one: Timeline, two: Timeline) -> bool:
    """:meth:`Timeline.aligned_with`, remembered for the pairs planning asks about again and again."""
    try:
        _lines(one, two)
    except ValueError:
        return False
    return True


def phase_peaks(one: Timeline, two: Timeline, micro_batch: int) -> dict[str, MemoryBreakdown]:
    """The highest point of each phase at ``micro_batch``, from timelines at micro-batches 1 and 2.

    Raises:
        ValueError: the timelines do not line up (the step's operations depend on the batch size).
    """
    return {phase: lines.breakdown(int(lines.totals(micro_batch).argmax()), micro_batch)
            for phase, lines in _lines(one, two).items()}


def located_peaks(
    one: Timeline, two: Timeline, micro_batch: int, place: Callable[[str], Hashable]
) -> dict[tuple[str, Hashable], tuple[MemoryBreakdown, int, int, int]]:
    """Per phase and place, the highest point at ``micro_batch`` (from timelines at micro-batches 1 and 2), the
    event it is at, the highest activations + temporaries + inputs there (wherever they fall in that place) and
    the gradients alive at that moment.

    Args:
        place: maps an event's block (``""`` outside every block) to its place, e.g. its position in
            the model at full depth.

    Raises:
        ValueError: the timelines do not line up, or do not say which block each event is in.
    """
    if one.blocks.keys() != one.phases.keys():
        raise ValueError("the timelines do not record the block of each event")
    out = {}
    for phase, lines in _lines(one, two).items():
        totals, non_state = lines.totals(micro_batch), lines.non_state(micro_batch)
        ids = one.blocks[phase]
        by_place: dict[Hashable, list[int]] = {}
        for i, block in enumerate(one.block_names):
            by_place.setdefault(place(block), []).append(i)
        for key, block_ids in by_place.items():
            index = torch.isin(ids, torch.tensor(block_ids)).nonzero().flatten()
            if not len(index):
                continue
            event = int(index[int(totals[index].argmax())])
            highest = int(index[int(non_state[index].argmax())])
            out[phase, key] = (lines.breakdown(event, micro_batch), event, int(non_state[highest]),
                               lines.breakdown(highest, micro_batch).gradients)
    return out


def non_state_peaks(one: Timeline, two: Timeline, micro_batch: int) -> dict[str, tuple[int, int]]:
    """Per phase, the highest activations + temporaries + inputs at ``micro_batch`` (wherever it falls), and the
    gradients alive at that moment."""
    out = {}
    for phase, lines in _lines(one, two).items():
        non_state = lines.non_state(micro_batch)
        event = int(non_state.argmax())
        out[phase] = (int(non_state[event]), lines.breakdown(event, micro_batch).gradients)
    return out
