"""Profiling deep models fast: trace shallow copies and extrapolate linearly in the block count.

A stack of identical blocks adds the same tensors for every block it has: the same parameters, gradients and
optimizer state, the same saved activations, the same FLOPs. So every quantity the trace measures — and the
memory at any one point of the step, category by category — is an affine function of the block count ``L``
as long as the shape of the step does not change. Tracing at ``L1`` and ``L2`` blocks gives both
coefficients; the profile at the real ``L`` follows. The peak is the highest of the extrapolated phase peaks.

Blocks of several kinds (DeepSeek-V3's 3 dense and 58 MoE layers, Gemma-2's alternating sliding and global
attention; :func:`autoshard.models.hf_layers.layer_kinds` tells them apart) make every quantity affine in the
count of each kind instead: ``base + Σ count_k · increment_k``. A reference copy keeps the first and the last
block and one block of each kind; one more copy per kind adds a block of that kind inside the stack; the
differences give each kind's increment. With one kind this is the 2- and 3-block extrapolation above.

The high point of a phase is the exception: it is the highest of many points, and where it falls can differ
between copies, and the maximum of several lines is not a line. With alike blocks, backward can peak at its
start in the shallow copies (the logits' gradient, every block's saved input) and at its end at full depth
(every block's gradient): llama-3-8b at 4096 tokens under checkpointing peaks at the start with 2 and 3 blocks
and at the end with 32, and combining the two copies' peaks as one line gave -34 GiB of activations and a peak
9.4 GiB low. With blocks of two kinds, one copy's backward can peak inside a block of one kind and the others'
inside a block of the other. So each phase's highest point *inside each block every copy keeps* (the first, the
last, the first of each kind), *before its first block* and *after each such block* (the stretches between
blocks and at the end: :meth:`~autoshard.profiler.tracker.MemoryTracker.place`) is extrapolated, each being the
same place in every copy, so the same operations with the same bytes alive around them; the phase's peak is the
highest of those. Inside one place the bytes that grow with the block count (the other blocks' saved
activations, their gradients) are the same at every point, so its highest point is the same point in every
copy and at full depth: the result is exact. Grouping by kind instead is not enough: within a kind the highest
point moves too (to the block a copy adds). When a copy's phase peaks inside the block it adds (or right after
it), which no other copy has, nothing says how those points grow, and every block is traced instead, the
profile saying why (:attr:`ModelProfile.depth`).

Every extrapolated profile is checked: each shallow copy must have the kinds of block it stands for, and the
extrapolated parameter count must equal that of the model built at full depth on the meta device. When a
check fails, or the source cannot build a copy with a chosen mix of kinds, every block is traced and the
profile says why (:attr:`ModelProfile.depth`): a profile is slow rather than wrong.

``tests/profiler/test_scaling.py`` and ``tests/profiler/test_heterogeneous.py`` check that this equals a full
trace, byte for byte, on models small enough to trace whole; ``benchmarks/profile_speed.py`` measures the
speed-up.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from dataclasses import dataclass, field
from typing import Any

from autoshard.models.hf_layers import LayerKinds
from autoshard.models.source import ModelSource
from autoshard.profiler.checkpointing import parse_checkpointing
from autoshard.profiler.depth_names import (
    Layout,
    by_place,
    full_depth_blocks,
    layout_of,
    mixed_full_depth_blocks,
    place,
    remap_module,
)
from autoshard.profiler.depth_plan import SHALLOW_LAYERS, Plan, Whole, plan_copies
from autoshard.profiler.op_census import OpCensus
from autoshard.profiler.options import ProfileOptions
from autoshard.profiler.result import (
    DepthRecord,
    MemoryBreakdown,
    ModelProfile,
)
from autoshard.profiler.timeline import Timeline, located_peaks
from autoshard.profiler.trace import trace_timelines, trace_with_phases
from autoshard.profiler.tracker import Category, PeakSnapshot

AUTO_MIN_LAYERS = 12
"""Extrapolate automatically from this many blocks up: below it a full trace is as fast."""


@dataclass(frozen=True, slots=True)
class DepthTimelines:
    """The timelines a profile was made from: one full-depth trace, or the shallow traces it extrapolates."""

    depths: tuple[int, ...]
    """Block counts traced: ``(L,)`` for a full trace (``L`` may be 0 when unknown), :data:`SHALLOW_LAYERS`,
    or one count per shallow copy when the blocks are of several kinds (e.g. ``(3, 4, 4)``)."""
    timelines: tuple[Timeline, ...]
    target: int
    """The real block count (equal to ``depths[0]`` for a full trace)."""
    weights: tuple[int, ...] = ()
    """The value at :attr:`target` is ``Σ weights[i] · value[i]`` over the traces (empty for a full trace)."""

    stack: str | Layout = ""
    """Per stack its name and full-depth positions (:meth:`LayerKinds.layout`) for shallow traces; ``""`` for a
    full trace."""
    positions: tuple[tuple[int, ...], ...] = ()
    """For shallow traces: per trace, the full-depth position of each of its blocks in order. Phase peaks are
    then extrapolated place by place (:meth:`located`); empty for a full trace."""
    _located: dict[int, tuple[DepthTimelines, dict[str, tuple[MemoryBreakdown, int, int]] | None]] = field(
        default_factory=dict, init=False, repr=False, compare=False)
    """:meth:`located`'s answers by micro-batch, with the ``later`` timelines each is for: a plan asks for
    the same micro-batches thousands of times (each strategy's memory rules, each candidate micro-batch), and
    each answer scans every event of every trace."""

    def extrapolate(self, values: list[dict[str, int]]) -> dict[str, int]:
        """Combine one value per trace into the value at :attr:`target` (linear in each kind's count)."""
        if len(values) == 1:
            return values[0]
        return {k: sum(w * v[k] for w, v in zip(self.weights, values, strict=True))
                for k in values[0] if all(k in v for v in values)}

    def located(self, later: DepthTimelines, micro_batch: int) -> dict[str, tuple[MemoryBreakdown, int, int]] | None:
        """Per phase, the peak breakdown, the highest activations + temporaries + inputs at :attr:`target` and the
        gradients alive beside those: each the highest of those inside each block every trace keeps, before the
        first block and after each such block, extrapolated place by place (see the module docstring). As in
        :func:`~autoshard.profiler.timeline.located_peaks`, these timelines count as micro-batch 1 and
        ``later``'s (one sample more) as 2.

        Returns:
            ``None`` when in some trace a phase's peak, or its highest activations + temporaries + inputs, is
            in a block that not every trace keeps: it cannot be extrapolated.
        """
        kept = self._located.get(micro_batch)
        if kept is None or kept[0] is not later:
            kept = (later, self._locate(later, micro_batch))
            self._located[micro_batch] = kept
        return kept[1]

    def _locate(self, later: DepthTimelines, micro_batch: int) -> dict[str, tuple[MemoryBreakdown, int, int]] | None:
        per_trace = [located_peaks(a, b, micro_batch, functools.partial(place, self.stack, kept))
                     for a, b, kept in zip(self.timelines, later.timelines, self.positions, strict=True)]
        common = [key for key in per_trace[0] if all(key in p for p in per_trace)]
        for p in per_trace:
            for phase in {ph for ph, _ in p}:
                here = [v for (ph, _), v in p.items() if ph == phase]
                kept = [p[phase, where] for ph, where in common if ph == phase]
                highest = max(here, key=lambda v: (v[0].total, -v[1]))
                if not any(v is highest for v in kept) or max(v[2] for v in here) > max(
                        (v[2] for v in kept), default=-1):
                    return None
        best: dict[str, tuple[MemoryBreakdown, int]] = {}
        non_state: dict[str, tuple[int, int]] = {}  # the highest, and the gradients beside it
        for phase, where in common:
            values = self.extrapolate([p[phase, where][0].to_dict() for p in per_trace])
            values.pop("total", None)
            breakdown = MemoryBreakdown(**values)
            event = per_trace[-1][phase, where][1]  # the first of equal heights, in step order
            if phase not in best or (breakdown.total, -event) > (best[phase][0].total, -best[phase][1]):
                best[phase] = (breakdown, event)
            pairs = [(w, p[phase, where]) for w, p in zip(self.weights, per_trace, strict=True)]
            weighted = (sum(w * v[2] for w, v in pairs), sum(w * v[3] for w, v in pairs))
            non_state[phase] = max(weighted, non_state.get(phase, weighted))
        return {phase: (breakdown, *non_state[phase]) for phase, (breakdown, _) in best.items()}


def profile_with_timelines(
    source: ModelSource, options: ProfileOptions, *, extrapolate: bool | None = None, count_flops: bool = True
) -> tuple[ModelProfile, DepthTimelines]:
    """:func:`profile_source`, also returning the memory timelines it was made from."""
    if _should_extrapolate(source, extrapolate):
        return _extrapolated(source, options, count_flops=count_flops, record=True)
    profile, _, timeline = trace_timelines(source, options, (options.batch_size,), count_flops=count_flops)[0]
    depth = source.num_layers or 0
    return profile, DepthTimelines(depths=(depth,), timelines=(timeline,), target=depth)


def profiles_with_timelines(
    source: ModelSource, options: ProfileOptions, batch_sizes: tuple[int, ...], *, extrapolate: bool | None = None,
    count_flops: bool = True, census_twice: bool = False,
) -> list[tuple[ModelProfile, DepthTimelines]]:
    """:func:`profile_with_timelines` at each micro-batch of ``batch_sizes`` (``options.batch_size`` is ignored),
    each copy of the model traced once for all of them (:func:`~autoshard.profiler.trace.trace_timelines`);
    FLOPs (``count_flops``) are counted at the first micro-batch, and with ``census_twice`` at the second too."""
    if _should_extrapolate(source, extrapolate):
        return _extrapolated_batches(source, options, batch_sizes, count_flops=count_flops, record=True,
                                     census_twice=census_twice)
    depth = source.num_layers or 0
    return [(profile, DepthTimelines(depths=(depth,), timelines=(timeline,), target=depth))
            for profile, _, timeline in trace_timelines(source, options, batch_sizes, count_flops=count_flops,
                                                         census_twice=census_twice)]


def profile_source(
    source: ModelSource, options: ProfileOptions, *, extrapolate: bool | None = None, count_flops: bool = True
) -> ModelProfile:
    """Profile ``source``, extrapolating from shallow traces when that is possible and worthwhile.

    Args:
        source: the model source.
        options: the profile options.
        extrapolate: ``True`` forces extrapolation (error if the source cannot change its block count),
            ``False`` forces a full trace, ``None`` decides: extrapolate when the source can rebuild itself with
            fewer blocks and has at least :data:`AUTO_MIN_LAYERS`.
        count_flops: count FLOPs (skip when only memory is needed; the FLOP fields are then 0).
    """
    if _should_extrapolate(source, extrapolate):
        return _extrapolated(source, options, count_flops=count_flops, record=False)[0]
    return trace_with_phases(source, options, count_flops=count_flops)[0]


def _should_extrapolate(source: ModelSource, extrapolate: bool | None) -> bool:
    can = source.with_num_layers is not None and source.num_layers is not None
    if extrapolate is None:
        extrapolate = can and source.num_layers >= AUTO_MIN_LAYERS  # type: ignore[operator]
    if extrapolate and not can:
        from autoshard.errors import UsageError

        raise UsageError(
            f"{source.name} cannot be rebuilt with fewer blocks, so it cannot be extrapolated.",
            hint="Trace it whole (drop --extrapolate); catalog models and HF configs support extrapolation.",
        )
    return bool(extrapolate) and source.num_layers > SHALLOW_LAYERS[1]  # type: ignore[operator]


def extrapolated(source: ModelSource, options: ProfileOptions, *, count_flops: bool = True) -> ModelProfile:
    """Profile at the source's full depth from traces of shallow copies (see the module docstring)."""
    return _extrapolated(source, options, count_flops=count_flops, record=False)[0]


def _extrapolated(
    source: ModelSource, options: ProfileOptions, *, count_flops: bool, record: bool
) -> tuple[ModelProfile, DepthTimelines]:
    return _extrapolated_batches(source, options, (options.batch_size,), count_flops=count_flops, record=record)[0]


def _extrapolated_batches(
    source: ModelSource, options: ProfileOptions, batch_sizes: tuple[int, ...], *, count_flops: bool, record: bool,
    census_twice: bool = False,
) -> list[tuple[ModelProfile, DepthTimelines]]:
    if source.with_num_layers is None or source.num_layers is None:
        raise ValueError(f"{source.name} cannot change its block count; check _should_extrapolate first.")
    started = time.perf_counter()
    plan = plan_copies(source, parse_checkpointing(options.checkpointing))
    if isinstance(plan, Whole):
        return _traced_whole(source, options, batch_sizes, plan, started, count_flops=count_flops, record=record,
                             census_twice=census_twice)
    copies = [trace_timelines(s, options, batch_sizes, count_flops=count_flops, record=record,
                              block_positions=plan.block_positions[i] if plan.block_positions else None,
                              census_twice=census_twice)
              for i, s in enumerate(plan.sources)]
    out: list[tuple[ModelProfile, DepthTimelines] | Whole] = []
    for i in range(len(batch_sizes)):
        traced = [copy[i] for copy in copies]
        combined = _checked(source, plan, [(p, phases) for p, phases, _ in traced])
        if isinstance(combined, Whole):
            out.append(combined)
            continue
        timelines = DepthTimelines(depths=tuple(len(p) for p in plan.positions),
                                   timelines=tuple(t for _, _, t in traced), target=source.num_layers,
                                   weights=plan.weights, **_placed(plan, tuple(t for _, _, t in traced)))
        out.append((dataclasses.replace(combined, trace_seconds=(time.perf_counter() - started) / len(batch_sizes)),
                    timelines))
    # A copy whose checks fail at some micro-batch: those are traced whole, each saying why.
    return [
        _traced_whole(source, options, (batch_sizes[i],), item, started,
                      count_flops=count_flops and (not i or (i == 1 and census_twice)), record=record)[0]
        if isinstance(item, Whole) else item
        for i, item in enumerate(out)
    ]


def _checked(source: ModelSource, plan: Plan, traced: list[tuple[ModelProfile, dict[str, PeakSnapshot]]]
             ) -> ModelProfile | Whole:
    """The copies combined at full depth, or why they cannot be (:class:`Whole`): the self-check of every
    extrapolated profile (its parameter count against the meta build's, its unused parameters in range)."""
    if source.num_layers is None:  # plan_copies plans only for a source with a layer count; never trusted blindly
        return Whole("the model source gives no layer count to extrapolate to", plan.kinds)
    depths = ", ".join(str(len(p)) for p in plan.positions)
    combined = _combine(source.name, source.num_layers, plan, traced)
    if isinstance(combined, str):
        return Whole(combined, plan.kinds)
    profile = combined
    reason = None
    if profile.parameter_count != plan.parameter_count:
        reason = (f"extrapolating from copies of {depths} blocks gives {profile.parameter_count:,} parameters, "
                  f"but the model built at full depth has {plan.parameter_count:,}")
    elif not 0 <= profile.unused_parameter_count <= profile.trainable_parameter_count:
        reason = (f"extrapolating from copies of {depths} blocks gives {profile.unused_parameter_count:,} unused "
                  f"parameters of {profile.trainable_parameter_count:,} trainable")
    return profile if reason is None else Whole(reason, plan.kinds)


def _combine(
    name: str, target: int, plan: Plan, traced: list[tuple[ModelProfile, dict[str, PeakSnapshot]]]
) -> ModelProfile | str:
    """The profile at full depth: every quantity is ``Σ weights[i] · copy[i]`` (exact integers); each phase's
    peak is the highest of its extrapolated peaks place by place (:func:`_phase_peak`). A string says why the
    copies cannot be combined."""
    profiles = [p for p, _ in traced]
    last, last_phases = traced[-1]
    stacks = plan.kinds.layout() if plan.kinds is not None else None

    def total(values: list[int]) -> int:
        return sum(w * v for w, v in zip(plan.weights, values, strict=True))

    def field(attribute: str) -> int:
        return total([getattr(p, attribute) for p in profiles])

    snapshots: list[PeakSnapshot] = []
    for phase in last_phases:
        group = [phases[phase] for _, phases in traced if phase in phases]
        if len(group) != len(traced):
            continue
        stack = stacks if stacks is not None else layout_of(where for s in group for where in s.within)
        snapshot = _phase_peak(group, plan.weights, plan.positions, stack, target, stacks)
        if isinstance(snapshot, str):
            return snapshot
        snapshots.append(snapshot)
    phases = [(s.phase, MemoryBreakdown.from_categories(s.by_category)) for s in snapshots if s.phase != "setup"]
    best = max(snapshots, key=lambda s: s.total_bytes)  # the first of equal heights, in step order
    in_allocator = sum(o.bytes for o in last.overheads if o.in_allocator)
    if plan.mixed and plan.kinds is not None:
        blocks = mixed_full_depth_blocks(profiles, plan.positions, plan.kinds)
    else:
        blocks = full_depth_blocks(profiles[0], last, target, SHALLOW_LAYERS)
    return dataclasses.replace(
        last,
        model=name,
        parameter_count=field("parameter_count"),
        trainable_parameter_count=field("trainable_parameter_count"),
        parameter_bytes=field("parameter_bytes"),
        gradient_bytes=field("gradient_bytes"),
        optimizer_state_bytes=field("optimizer_state_bytes"),
        buffer_bytes=field("buffer_bytes"),
        peak_bytes=best.total_bytes + in_allocator,
        peak_phase=best.phase,
        peak_module=best.module,
        peak_breakdown=MemoryBreakdown.from_categories(best.by_category),
        phase_peaks=tuple(phases),
        forward_flops=field("forward_flops"),
        backward_flops=field("backward_flops"),
        flops_per_step=field("flops_per_step"),
        census=_combined_census(plan.weights, [p.census for p in profiles]),
        optimizer_census=_combined_census(plan.weights, [p.optimizer_census for p in profiles]),
        blocks=blocks,
        extrapolated_from_layers=tuple(len(p) for p in plan.positions),
        depth=_record(plan.kinds, plan.positions) if plan.mixed and plan.kinds is not None else None,
        # Affine in each kind's count like the parameters: unused parameters outside the deepened stack (a vision
        # tower's last layer) are the same in every copy, and the weights sum to 1.
        unused_parameter_count=field("unused_parameter_count"),
        unused_parameter_bytes=field("unused_parameter_bytes"),
        routed_expert_parameter_count=field("routed_expert_parameter_count"),
        unused_modules=tuple(dict.fromkeys(remap_module(m, plan.positions[-1], target, stacks)
                                           for m in last.unused_modules)),
        written_modules=tuple(dict.fromkeys(remap_module(m, plan.positions[-1], target, stacks)
                                            for m in last.written_modules)),
        uncounted_ops=last.uncounted_ops,
    )


def _combined_census(weights: tuple[int, ...], censuses: list[OpCensus | None]) -> OpCensus | None:
    """An op census at full depth, combined with the FLOPs' weights (each copy's kernels and bytes are affine in
    its depth, as its FLOPs and parameters are); ``None`` unless every copy has one."""
    if any(c is None for c in censuses):
        return None
    return OpCensus.combine(weights, [c for c in censuses if c is not None])


def _phase_peak(
    group: list[PeakSnapshot], weights: tuple[int, ...], positions: tuple[tuple[int, ...], ...],
    stack: str | Layout, target: int, stacks: tuple[str, ...] | Layout | None,
) -> PeakSnapshot | str:
    """One phase's peak at full depth from its peak in each copy: the highest of its highest points place by
    place (inside each block every copy keeps, before the first block, after each such block), each
    extrapolated as ``Σ weights[i] · copy[i]`` (see the module docstring). A string says why it cannot be
    extrapolated.

    The copies' peaks themselves are not combined: they need not be at the same place. Two copies whose
    backward is highest at its start (the logits' gradient) while its end (after block 0, every gradient)
    grows faster peak at the end at full depth, where one line through their peaks says 100::

        >>> def ends(start, end):  # a copy's backward: its start and its end
        ...     within = {}
        ...     within[""] = PeakSnapshot(start, {c: start if c is Category.ACTIVATIONS else 0 for c in Category},
        ...                               "backward", "head", 1, 0, within)
        ...     within["@s.0"] = PeakSnapshot(end, {c: end if c is Category.GRADIENTS else 0 for c in Category},
        ...                                   "backward", "embed", 1, 9, within)
        ...     return within[""]
        >>> peak = _phase_peak([ends(100, 60), ends(100, 80)], (-7, 8), ((0, 9), (0, 1, 9)), "s", 10, ("s",))
        >>> peak.total_bytes, peak.module, peak.by_category[Category.ACTIVATIONS]
        (220, 'embed', 0)

    Example (two copies of a stack ``s`` of two and three blocks, ten in all: the peak moves from block 0 to the
    last block as blocks are added)::

        >>> def at(total, module, within):
        ...     by_category = {c: total if c is Category.ACTIVATIONS else 0 for c in Category}
        ...     return PeakSnapshot(total, by_category, "backward", module, 1, 0, within)
        >>> def copy(first, last, *extra):  # the peak inside each block of a copy; returns the copy's peak
        ...     within = {}
        ...     for j, total in enumerate((first, *extra, last)):
        ...         within[f"s.{j}"] = at(total, f"s.{j}", within)
        ...     return max(within.values(), key=lambda s: s.total_bytes)
        >>> two, three = copy(100, 90), copy(110, 115, 50)
        >>> _phase_peak([two, three], (-7, 8), ((0, 9), (0, 1, 9)), "s", 10, ("s",)).total_bytes
        290
        >>> print(_phase_peak([two, copy(110, 115, 120)], (-7, 8), ((0, 9), (0, 1, 9)), "s", 10, ("s",)))
        ... # doctest: +ELLIPSIS
        the backward peak of the copy of 3 blocks is in block 1, which the other copies do not have, so it ...
    """

    def combined(peaks: list[PeakSnapshot]) -> PeakSnapshot:
        by_category = {c: sum(w * s.by_category[c] for w, s in zip(weights, peaks, strict=True))
                       for c in Category}
        last = peaks[-1]
        module = remap_module(last.module, positions[-1], target, stacks)
        return PeakSnapshot(sum(by_category.values()), by_category, last.phase, module, last.step, last.order)

    per_copy = [by_place(stack, kept, s.within) for s, kept in zip(group, positions, strict=True)]
    common = [at for at in per_copy[0] if all(at in p for p in per_copy)]
    for s, p, kept in zip(group, per_copy, positions, strict=True):
        if not any(p[at] is s for at in common):
            where = next((at for at, peak in p.items() if peak is s), "?")
            return (f"the {s.phase} peak of the copy of {len(kept)} blocks is in block {where}, which the other "
                    "copies do not have, so it cannot be extrapolated")
    candidates = [combined([p[at] for p in per_copy]) for at in common]
    return max(candidates, key=lambda c: (c.total_bytes, c.step, -c.order))


def _placed(plan: Plan, timelines: tuple[Timeline, ...]) -> dict[str, Any]:
    """The :class:`DepthTimelines` fields that let phase peaks be extrapolated place by place: always, alike
    blocks too (see the module docstring). Stacks that were not found are read off the blocks' names."""
    stack = plan.kinds.layout() if plan.kinds is not None else layout_of(
        name for t in timelines for name in t.block_names)
    return {"stack": stack, "positions": plan.positions}


def _record(kinds: LayerKinds, positions: tuple[tuple[int, ...], ...]) -> DepthRecord:
    counts = kinds.counts()
    flat = kinds.flat()
    traced = tuple(tuple(sum(1 for i in kept if flat[i] == k) for k in range(len(counts)))
                   for kept in positions)
    mix = ", ".join(f"{label} × {n}" for label, n in zip(kinds.labels, counts, strict=True))
    copies = ", ".join("+".join(map(str, c)) for c in traced)
    note = (f"Blocks of {len(counts)} kinds: {mix}; traced copies with {copies} blocks of each kind and "
            "solved for each kind's cost.")
    return DepthRecord(kinds=kinds.labels, counts=counts, traced_counts=traced, note=note)


def _traced_whole(
    source: ModelSource, options: ProfileOptions, batch_sizes: tuple[int, ...], whole: Whole, started: float, *,
    count_flops: bool, record: bool, census_twice: bool = False
) -> list[tuple[ModelProfile, DepthTimelines]]:
    """Trace every block, saying why in :attr:`ModelProfile.depth`."""
    traced = trace_timelines(source, options, batch_sizes, count_flops=count_flops, record=record,
                             census_twice=census_twice)
    target = source.num_layers or 0
    kinds = whole.kinds
    note = f"Traced all {target} blocks: {whole.reason}."
    depth = DepthRecord(kinds=kinds.labels if kinds else (), counts=kinds.counts() if kinds else (),
                        traced_counts=(), note=note)
    seconds = (time.perf_counter() - started) / len(batch_sizes)
    return [(dataclasses.replace(profile, depth=depth, trace_seconds=seconds),
             DepthTimelines(depths=(target,), timelines=(timeline,), target=target))
            for profile, _, timeline in traced]
