"""Which shallow copies a deep model is profiled from, and how they combine into it (used by
:mod:`autoshard.profiler.scaling`, whose docstring says why this is exact)."""

from __future__ import annotations

import functools
import itertools
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from autoshard.errors import AutoshardError
from autoshard.models.hf_layers import LayerKinds, layer_kinds
from autoshard.models.source import ModelSource
from autoshard.profiler.checkpointing import NONE, ActivationCheckpointing
from autoshard.profiler.depth_checkpointing import copy_block_positions, repeated_block_names, split_by_checkpointing

__all__ = ["SHALLOW_LAYERS", "Plan", "Whole", "meta_model", "plan_copies"]

SHALLOW_LAYERS = (2, 3)
"""Block counts traced when extrapolating. Two and three (not one and two): the first and the last block may
differ from the others in what they save (e.g. the first block's input is the embedding output, T5 computes its
shared position bias there); from two blocks on, each added block is an interior one."""


@dataclass(frozen=True, slots=True)
class Plan:
    """Shallow copies to trace, and how to combine them into the model at full depth."""

    sources: tuple[ModelSource, ...]
    positions: tuple[tuple[int, ...], ...]
    """Per copy, the full-depth positions of the blocks it keeps (one stack; the same in every stack)."""
    weights: tuple[int, ...]
    """The model is ``Σ weights[i] · copy[i]`` in every quantity."""
    kinds: LayerKinds | None
    """The model's kinds of block (``None`` when its stacks were not found)."""
    parameter_count: int
    """Unique parameters of the model built at full depth on the meta device."""
    block_positions: tuple[tuple[int, ...], ...] = ()
    """Under ``every-N`` checkpointing, per copy, each of its repeated blocks' index among the model's, which
    says whether it is checkpointed (:mod:`autoshard.profiler.depth_checkpointing`); empty otherwise."""

    @property
    def mixed(self) -> bool:
        """Whether the blocks past the first are of several kinds (always for a composite model's towers)."""
        return self.kinds is not None and (bool(self.kinds.towers) or not self.kinds.alike_after_first())


@dataclass(frozen=True, slots=True)
class Whole:
    """Why every block must be traced."""

    reason: str
    kinds: LayerKinds | None


PLANS_KEPT = 4
"""Sources whose plan :func:`plan_copies` keeps: a recommendation profiles one source a dozen times (modes,
checkpointing, micro-batches), and the plan depends on the source alone (and on ``every-N``, kept apart)."""
_kept: dict[tuple[int, str], tuple[ModelSource, Plan | Whole]] = {}


def plan_copies(source: ModelSource, checkpointing: ActivationCheckpointing = NONE) -> Plan | Whole:
    """:func:`_new_plan`, kept for the last few sources (by identity: a source is an immutable recipe, and
    the entry holds it, so its id is not reused while kept). DeepSeek-V3's full-depth meta build and checks
    take about 0.2 s of each of the 12 profiles of a recommendation. ``checkpointing`` matters only when it is
    ``every-N``, which checkpoints blocks by their place in the model."""
    key = (id(source), str(checkpointing) if checkpointing.mode == "every" else "")
    kept = _kept.get(key)
    if kept is not None and kept[0] is source:
        return kept[1]
    plan = _new_plan(source, checkpointing)
    while len(_kept) >= PLANS_KEPT:
        del _kept[next(iter(_kept))]
    _kept[key] = (source, plan)
    return plan


_meta_kept: dict[int, tuple[ModelSource, nn.Module]] = {}


def meta_model(source: ModelSource) -> nn.Module:
    """``source``'s model built at full depth on the meta device, kept for the last :data:`PLANS_KEPT` sources
    (as :func:`plan_copies` keeps plans): the plan and the workload's parameter layout read the same build.
    Read it; never change it."""
    kept = _meta_kept.get(id(source))
    if kept is not None and kept[0] is source:
        return kept[1]
    with torch.device("meta"):
        model = source.build()
    while len(_meta_kept) >= PLANS_KEPT:
        del _meta_kept[next(iter(_meta_kept))]
    _meta_kept[id(source)] = (source, model)
    return model


def _new_plan(source: ModelSource, checkpointing: ActivationCheckpointing = NONE) -> Plan | Whole:
    """Choose the shallow copies, from the model built at full depth on the meta device (seconds even for
    671B parameters: nothing is allocated), and check that each copy has the kinds of block it stands for.
    Under ``every-N`` the blocks are told apart by whether they are checkpointed too."""
    target, with_num_layers = source.num_layers, source.with_num_layers
    if target is None or with_num_layers is None:
        raise ValueError(f"{source.name} cannot change its block count; check _should_extrapolate first.")
    model = meta_model(source)
    parameter_count = sum(p.numel() for p in model.parameters())  # parameters() yields a tied tensor once
    arch = layer_kinds(model, target)
    kinds = arch
    every = checkpointing.mode == "every"
    full_names = repeated_block_names(model) if every else ()
    if every:
        if arch is None or arch.towers or len(arch.stacks) > 1:
            return Whole(f"under {checkpointing.label}, only a model with one stack of blocks is extrapolated",
                         arch)
        kinds = split_by_checkpointing(arch, frozenset(checkpointing.checkpointed(full_names)))
    rebuild: Callable[[tuple[int, ...]], ModelSource] = functools.partial(_with_count, with_num_layers)
    positions: tuple[tuple[int, ...], ...]
    weights: tuple[int, ...]
    if kinds is None or (kinds.alike_after_first() and not kinds.towers):
        # A stack of n blocks has the model's first n kinds: copies of SHALLOW_LAYERS blocks, as ever.
        l1, l2 = SHALLOW_LAYERS
        positions = ((*range(l1 - 1), target - 1), (*range(l2 - 1), target - 1))
        weights = (l2 - target, target - l1)  # copy1 + (target - l1) · (copy2 - copy1), as l2 = l1 + 1
    elif every:
        periodic = _periodic(kinds.flat())
        if periodic is None:
            return Whole(f"under {checkpointing.label} its blocks repeat no pattern 4 times, which leaves no copy "
                         "shallower than it", kinds)
        positions, weights = periodic
        if arch is not None and not arch.alike_after_first():  # else a copy of n blocks has the first n kinds
            if source.with_layers is None:
                return Whole(f"its blocks are of several kinds and {source.kind} sources cannot be rebuilt with a "
                             "chosen mix of them", kinds)
            rebuild = source.with_layers
    elif len(kinds.stacks) > 1 and not kinds.towers:
        return Whole(f"its blocks are of {len(kinds.labels)} kinds in {len(kinds.stacks)} stacks", kinds)
    elif source.with_layers is None:
        return Whole(f"its blocks are of {len(kinds.labels)} kinds and {source.kind} sources cannot be "
                      "rebuilt with a chosen mix of them", kinds)
    else:
        positions, weights = _mix(kinds.flat(), tuple(len(k) for k in kinds.kinds) if kinds.towers else (),
                                  kinds.last_used)
        rebuild = source.with_layers
    if kinds is not None and max(len(p) for p in positions) >= target:
        return Whole(f"its {len(kinds.labels)} kinds of block leave no copy shallower than it", kinds)
    sources, block_positions = [], []
    for kept in positions:
        try:
            copy = rebuild(kept)
            built = None if arch is None else _meta_build(copy)
        except AutoshardError as exc:
            return Whole(f"a copy with {len(kept)} of its blocks cannot be built ({exc.message})", kinds)
        wrong = None if built is None or arch is None else _wrong_kinds(built, arch, kept)
        if wrong is not None:
            return Whole(wrong, kinds)
        if every and built is not None and arch is not None:
            placed = copy_block_positions(built, arch, kept, full_names)
            if placed is None:
                return Whole(f"a copy with {len(kept)} of its blocks has blocks the model does not have where "
                             f"{checkpointing.label} counts them", kinds)
            block_positions.append(placed)
        sources.append(copy)
    return Plan(tuple(sources), positions, weights, kinds, parameter_count, tuple(block_positions))


def _meta_build(source: ModelSource) -> nn.Module:
    with torch.device("meta"):
        return source.build()


def _with_count(with_num_layers: Callable[[int], ModelSource], kept: tuple[int, ...]) -> ModelSource:
    return with_num_layers(len(kept))


def _periodic(kinds: tuple[int, ...]) -> tuple[tuple[tuple[int, ...], ...], tuple[int, ...]] | None:
    """Copies of a stack whose blocks (told apart by kind and by whether every-N checkpoints them) are a head,
    a unit of ``q`` blocks repeated ``k >= 4`` times, then a tail shorter than the unit, made of whole units
    as the 2- and 3-block copies are made of blocks: the head, the first unit and the last (with the tail),
    then the head, the first two units and the last. The added unit stands for the model's interior units, all
    after the first and before the last, as it is: every place a phase can peak in both copies grows with the
    unit count alone (an interior block kept by both copies, with blocks of its kind on both sides, would not:
    what is saved before it and what is freed after it differ). The shortest unit, then the shortest head;
    ``None`` when no unit repeats 4 times.

    Example:
        >>> _periodic((0, 0, 1) * 4 + (0, 0))  # every-3 of 14 alike blocks: 4 units of 3, then 2
        (((0, 1, 2, 9, 10, 11, 12, 13), (0, 1, 2, 3, 4, 5, 9, 10, 11, 12, 13)), (-1, 2))
        >>> _periodic((0, 1, 0) + (2, 3) * 5)  # 3 dense blocks (every other checkpointed), then 10 MoE blocks
        (((0, 1, 2, 3, 4, 11, 12), (0, 1, 2, 3, 4, 5, 6, 11, 12)), (-2, 3))
    """
    n = len(kinds)
    for q in range(1, n // 4 + 1):
        for head in range(n - 4 * q + 1):
            tail = (n - head) % q
            body = kinds[head:n - tail]
            if all(body[i] == body[i % q] for i in range(len(body))):
                units = len(body) // q
                last = tuple(range(n - tail - q, n))
                one, two = (*range(head + q), *last), (*range(head + 2 * q), *last)
                return (one, two), (3 - units, units - 2)  # one + (units - 2) · (two - one)
    return None


def _mix(
    kinds: tuple[int, ...], sizes: tuple[int, ...] = (), last_used: tuple[int, ...] = ()
) -> tuple[tuple[tuple[int, ...], ...], tuple[int, ...]]:
    """The blocks each shallow copy keeps, and the weights that combine the copies into the whole stack (or
    into stacks of ``sizes`` blocks numbered one after the other: a composite model's towers).

    The reference copy keeps the first block, the last (of each stack, and ``last_used``: a tower's last block
    that runs), and the first block of each kind, so every copy starts each kind where the model does; each
    further copy adds the next block of one kind the model has more of (an interior block that is not the
    first of its kind), the most numerous kind last; with towers, one block of each kind the model has as
    many more of.

    Example:
        >>> _mix((0, 0, 0, 1, 1, 1, 1, 1))  # 3 dense layers, then 5 MoE layers
        (((0, 3, 7), (0, 1, 3, 7), (0, 3, 4, 7)), (-4, 2, 3))
        >>> _mix((0, 0, 0, 0, 1, 1, 1), (4, 3))  # towers of 4 and 3 blocks
        (((0, 3, 4, 6), (0, 3, 4, 5, 6), (0, 1, 3, 4, 6)), (-2, 1, 2))
        >>> _mix((0, 0, 0, 0, 1, 1, 1, 1), (4, 4))  # towers of 4 blocks each: one copy adds to both
        (((0, 3, 4, 7), (0, 1, 3, 4, 5, 7)), (-1, 2))
    """
    ends = list(itertools.accumulate(sizes or (len(kinds),)))
    edges = {i for end, size in zip(ends, sizes or (len(kinds),), strict=True) for i in (end - size, end - 1)}
    base = {*edges, *last_used, *(kinds.index(kind) for kind in set(kinds))}
    reference = tuple(sorted(base))
    more = Counter(kinds)
    more.subtract(kinds[i] for i in reference)
    positions, weights = [reference], [1]
    pending = sorted((k for k in more if more[k] > 0), key=lambda k: (more[k], kinds.index(k)))
    # Towers' kinds of which the model has as many more each can be added together, in one copy: every
    # quantity is the reference's plus, per kind, its count times its increment.
    groups = [list(g) for _, g in itertools.groupby(pending, key=lambda k: more[k])] if sizes else [
        [k] for k in pending]
    for group in groups:
        extras = (next(i for i, k in enumerate(kinds) if k == kind and i not in base) for kind in group)
        positions.append(tuple(sorted((*reference, *extras))))
        weights.append(more[group[0]])
        weights[0] -= more[group[0]]
    return tuple(positions), tuple(weights)


def _wrong_kinds(model: nn.Module, kinds: LayerKinds, kept: tuple[int, ...]) -> str | None:
    """Why ``model`` (a copy, built) does not have the kinds of the blocks it keeps, or ``None`` when it does."""
    local = kinds.local(kept)
    found = kinds.match(model, tuple(map(len, local)) if kinds.towers else len(kept))
    expected = tuple(tuple(stack[i] for i in here) for stack, here in zip(kinds.kinds, local, strict=True))
    if found == expected:
        return None
    if found is None:
        return f"a copy with {len(kept)} of its blocks does not have its stacks ({', '.join(kinds.stacks)})"
    s, bad = next((s, j) for s, (fs, es) in enumerate(zip(found, expected, strict=True))
                  for j, (f, e) in enumerate(zip(fs, es, strict=True)) if f != e)
    got = "a block of no kind it has" if found[s][bad] < 0 else kinds.labels[found[s][bad]]
    return (f"rebuilt with {len(kept)} blocks, its block {kinds.stacks[s]}.{local[s][bad]} "
            f"({kinds.labels[expected[s][bad]]}) becomes {got}")
