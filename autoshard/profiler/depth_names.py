"""Naming a profile extrapolated from shallow copies at full depth: its per-block list and the blocks its peak
and unused modules are in (used by :mod:`autoshard.profiler.scaling`)."""

from __future__ import annotations

import dataclasses
import itertools
import sys
from collections import Counter
from collections.abc import Hashable, Iterable

from autoshard.models.hf_layers import LayerKinds
from autoshard.profiler.result import BlockProfile, ModelProfile
from autoshard.profiler.tracker import PeakSnapshot

__all__ = ["Layout", "as_layout", "full_depth_blocks", "is_towers", "mixed_full_depth_blocks", "remap_module"]

Layout = tuple[tuple[str, int, int], ...]
"""Per stack, its name and the full-depth positions ``[start, end)`` of its blocks (:meth:`LayerKinds.layout`)."""


def as_layout(stacks: str | tuple[str, ...] | Layout) -> Layout:
    """Stack names (each holding every full-depth position) or a layout, as a layout."""
    names = (stacks,) if isinstance(stacks, str) else stacks
    return tuple(s if isinstance(s, tuple) else (s, 0, sys.maxsize) for s in names)


def is_towers(layout: Layout) -> bool:
    """Whether the stacks are a composite model's towers, their blocks numbered one stack after the other."""
    return any(end != sys.maxsize for _, _, end in layout)


def full_depth_blocks(
    fewer: ModelProfile, shallow: ModelProfile, target: int, depths: tuple[int, int]
) -> tuple[BlockProfile, ...]:
    """Block list at full depth, stack by stack (an encoder-decoder has two).

    A stack that has ``L1`` blocks in the trace at ``L1`` and ``L2`` in the trace at ``L2`` is one the rebuild
    deepened: at full depth it has ``target`` blocks, its traced interior block standing for every interior
    one. A stack whose length the rebuild did not change (e.g. a vision tower beside the language model) stays
    as traced.
    """
    l1, l2 = depths
    traced_at_l1 = Counter(b.name.rpartition(".")[0] for b in fewer.blocks)
    out: list[BlockProfile] = []
    for prefix, group in itertools.groupby(shallow.blocks, key=lambda b: b.name.rpartition(".")[0]):
        stack = list(group)
        names = [f"{prefix}.{i}" if prefix else str(i) for i in range(max(target, len(stack)))]
        deepened = len(stack) == l2 and traced_at_l1[prefix] == l1
        if not (deepened and [b.name for b in stack] == names[: len(stack)]):
            out += stack
            continue
        first, middle, last = stack[0], stack[1], stack[-1]
        out.append(first)
        out += (dataclasses.replace(middle, name=names[i]) for i in range(1, target - 1))
        out.append(dataclasses.replace(last, name=names[target - 1]))
    return tuple(out)


def mixed_full_depth_blocks(
    profiles: list[ModelProfile], positions: tuple[tuple[int, ...], ...], found: LayerKinds
) -> tuple[BlockProfile, ...]:
    """Block list at full depth when the blocks differ. Each block is a traced block in the same place: of
    its kind, first or last in the stack or not, first of its kind or not, after a block of the same kind
    (what a block saves can depend on these, e.g. the first global-attention layer saves the shared rotary
    tables); the last copy that has such a block gives it. Blocks outside the model's stack stay as traced."""
    stacks = found.stacks if found.towers else found.stacks[:1]
    wholes: dict[str, list[BlockProfile]] = {}
    for s, stack in enumerate(stacks):
        kinds = found.kinds[s]
        local = [found.local(kept)[s] for kept in positions]
        per_copy = [[b for b in p.blocks if b.name.rpartition(".")[0] == stack] for p in profiles]
        if any([b.name for b in blocks] != [f"{stack}.{j}" for j in range(len(here))]
               for blocks, here in zip(per_copy, local, strict=True)):
            return profiles[-1].blocks  # the blocks found are not the stack's (see profiler.blocks): as traced
        traced: dict[tuple[object, ...], BlockProfile] = {}
        for blocks, here in zip(per_copy, local, strict=True):
            copy_kinds = tuple(kinds[i] for i in here)
            for j, block in enumerate(blocks):
                for context in _contexts(copy_kinds, j):
                    traced[context] = block
        wholes[stack] = [dataclasses.replace(next(traced[c] for c in _contexts(kinds, i) if c in traced),
                                             name=f"{stack}.{i}") for i in range(len(kinds))]
    out: list[BlockProfile] = []
    for traced_block in profiles[-1].blocks:  # other stacks (e.g. a vision tower) keep their place
        stack = traced_block.name.rpartition(".")[0]
        if stack not in wholes:
            out.append(traced_block)
        elif wholes[stack]:
            out += wholes[stack]
            wholes[stack] = []
    return tuple(out)


def _contexts(kinds: tuple[int, ...], j: int) -> tuple[tuple[object, ...], ...]:
    """Where block ``j`` sits, from the most specific description to the least (its kind alone)."""
    kind = kinds[j]
    ends = (j == 0, j == len(kinds) - 1)
    first_of_kind = kind not in kinds[:j]
    after = kinds[j - 1] if j else None
    return ((kind, *ends, first_of_kind, after), (kind, *ends, first_of_kind), (kind, *ends), (kind,))


def remap_module(module: str, kept: tuple[int, ...], target: int, stacks: tuple[str, ...] | Layout | None) -> str:
    """Rename a block of the last copy (``stack.j...``) to the full-depth block it stands for."""
    if stacks is None:  # stacks unknown: only the last traced block is renamed, to the last real one
        parts = module.split(".")
        for i, part in enumerate(parts):
            if part == str(len(kept) - 1) and i > 0:
                parts[i] = str(target - 1)
                return ".".join(parts)
        return module
    for stack, start, end in as_layout(stacks):
        if module.startswith(stack + "."):
            index, dot, rest = module[len(stack) + 1:].partition(".")
            here = [p - start for p in kept if start <= p < end]
            if index.isdigit() and int(index) < len(here):
                return f"{stack}.{here[int(index)]}{dot}{rest}"
    return module


def by_place(
    stack: str | Layout, kept: tuple[int, ...], within: dict[str, PeakSnapshot]
) -> dict[Hashable, PeakSnapshot]:
    """A copy's highest points by :func:`place`: where several labels make one place, the highest, the first
    of equal heights (as :class:`~autoshard.profiler.tracker.MemoryTracker` keeps them)."""
    out: dict[Hashable, PeakSnapshot] = {}
    for block, peak in within.items():
        key = place(stack, kept, block)
        best = out.get(key)
        if best is None or (peak.total_bytes, peak.step, -peak.order) > (best.total_bytes, best.step, -best.order):
            out[key] = peak
    return out


def place(stack: str | Layout, kept: tuple[int, ...], block: str) -> Hashable:
    """Where a traced block stands in the model: for a block of ``stack`` (or of a stack of a layout) in a copy
    that keeps the blocks at ``kept``, its position at full depth; any other block (e.g. of a vision tower, the
    same in every copy) by its name; ``""`` outside every block.

    Outside every block, the stretch after each block (``"@name"``,
    :meth:`~autoshard.profiler.tracker.MemoryTracker.place`) is a place of its own, ``("after", its block's
    place)``: backward peaks outside its blocks at the start (the logits' gradient) in shallow copies and at the
    end (every gradient) at full depth, in LLaVA as in llama-3-8b under checkpointing. Stacks that are not
    towers (an encoder's and a decoder's) number their blocks from 0 each: their places carry the stack's name.

    Example (a copy keeping blocks 0, 1 and 9 of ``h``)::

        >>> [place("h", (0, 1, 9), b) for b in ("", "h.2", "@h.2", "@h.0", "h.1.attn", "wte")]
        ['', 9, ('after', 9), ('after', 0), 1, 'wte']
    """
    if block.startswith("@"):
        return ("after", place(stack, kept, block[1:]))
    layout = as_layout(stack)
    for name, start, end in layout:
        if block.startswith(name + "."):
            index = block[len(name) + 1:].partition(".")[0]
            here = [p for p in kept if start <= p < end]
            if index.isdigit() and int(index) < len(here):
                # Stacks that are not towers number their blocks from 0 each (an encoder's and a decoder's).
                return here[int(index)] if len(layout) == 1 or is_towers(layout) else (name, here[int(index)])
    return block


def layout_of(places: Iterable[str]) -> Layout:
    """Stacks named by the blocks a trace ran (``"h.3"`` is block 3 of stack ``h``; ``"@h.3"`` the stretch after
    it), each holding every full-depth position: for a model whose stacks
    :func:`~autoshard.models.hf_layers.layer_kinds` did not find.

    Example:
        >>> layout_of(["", "h.0", "@h.0", "h.1", "enc.block.0"])
        (('h', 0, 9223372036854775807), ('enc.block', 0, 9223372036854775807))
    """
    stacks = dict.fromkeys(name for name, dot, index in (p.lstrip("@").rpartition(".") for p in places)
                           if dot and name and index.isdigit())
    return as_layout(tuple(stacks))
