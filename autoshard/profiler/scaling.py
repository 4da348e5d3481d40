"""Profiling deep models fast: trace two shallow copies and extrapolate linearly in the block count.

A stack of identical blocks adds the same tensors for every block it has: the same parameters, gradients and
optimizer state, the same saved activations, the same FLOPs. So every quantity the trace measures — and the
high point of each phase of the step, category by category — is an affine function of the block count ``L``
as long as the shape of the step does not change. Tracing at ``L1`` and ``L2`` blocks gives both
coefficients; the profile at the real ``L`` follows. The peak is the highest of the extrapolated phase peaks.

``tests/profiler/test_scaling.py`` checks that this equals a full trace, byte for byte, on models small enough
to trace whole; ``benchmarks/profile_speed.py`` measures the speed-up.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

from autoshard.models.source import ModelSource
from autoshard.profiler.options import ProfileOptions
from autoshard.profiler.result import BlockProfile, MemoryBreakdown, ModelProfile
from autoshard.profiler.timeline import Timeline
from autoshard.profiler.trace import trace_timeline, trace_with_phases
from autoshard.profiler.tracker import Category, PeakSnapshot

SHALLOW_LAYERS = (2, 3)
"""Block counts traced when extrapolating. Two and three (not one and two): the first and the last block may
differ from the others in what they save (e.g. the first block's input is the embedding output, T5 computes its
shared position bias there); from two blocks on, each added block is an interior one."""

AUTO_MIN_LAYERS = 12
"""Extrapolate automatically from this many blocks up: below it a full trace is as fast."""


@dataclass(frozen=True, slots=True)
class DepthTimelines:
    """The timelines a profile was made from: one full-depth trace, or the shallow traces it extrapolates."""

    depths: tuple[int, ...]
    """Block counts traced: ``(L,)`` for a full trace (``L`` may be 0 when unknown), or :data:`SHALLOW_LAYERS`."""
    timelines: tuple[Timeline, ...]
    target: int
    """The real block count (equal to ``depths[0]`` for a full trace)."""

    def extrapolate(self, values: list[dict[str, int]]) -> dict[str, int]:
        """Combine one value per traced depth into the value at :attr:`target` (linear in the block count)."""
        if len(values) == 1:
            return values[0]
        (l1, l2), (a, b) = self.depths, values
        return {k: a[k] + (b[k] - a[k]) * (self.target - l1) // (l2 - l1) for k in a if k in b}


def profile_with_timelines(
    source: ModelSource, options: ProfileOptions, *, extrapolate: bool | None = None, count_flops: bool = True
) -> tuple[ModelProfile, DepthTimelines]:
    """:func:`profile_source`, also returning the memory timelines it was made from."""
    if _should_extrapolate(source, extrapolate):
        return _extrapolated(source, options, count_flops=count_flops, record=True)
    profile, _, timeline = trace_timeline(source, options, count_flops=count_flops, record=True)
    depth = source.num_layers or 0
    return profile, DepthTimelines(depths=(depth,), timelines=(timeline,), target=depth)


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
    """Profile at the source's full depth from traces at :data:`SHALLOW_LAYERS` blocks."""
    return _extrapolated(source, options, count_flops=count_flops, record=False)[0]


def _extrapolated(
    source: ModelSource, options: ProfileOptions, *, count_flops: bool, record: bool
) -> tuple[ModelProfile, DepthTimelines]:
    rebuild, target = source.with_num_layers, source.num_layers
    if rebuild is None or target is None:
        raise ValueError(f"{source.name} cannot change its block count; check _should_extrapolate first.")
    started = time.perf_counter()
    l1, l2 = SHALLOW_LAYERS
    p1, phases1, t1 = trace_timeline(rebuild(l1), options, count_flops=count_flops, record=record)
    p2, phases2, t2 = trace_timeline(rebuild(l2), options, count_flops=count_flops, record=record)

    def lin(a: int, b: int) -> int:
        # Exact integer arithmetic: the per-block increment (b - a) / (l2 - l1) is a whole number of bytes.
        return a + (b - a) * (target - l1) // (l2 - l1)

    snapshots: list[PeakSnapshot] = []
    for phase, s2 in phases2.items():
        s1 = phases1.get(phase)
        if s1 is not None:
            by_category = {c: lin(s1.by_category[c], s2.by_category[c]) for c in Category}
            snapshots.append(PeakSnapshot(sum(by_category.values()), by_category, phase,
                                          _remap(s2.module, l2, target), s2.step))
    phases = [(s.phase, MemoryBreakdown.from_categories(s.by_category)) for s in snapshots if s.phase != "setup"]
    best = max(snapshots, key=lambda s: s.total_bytes)  # the first of equal heights, in step order
    in_allocator = sum(o.bytes for o in p2.overheads if o.in_allocator)
    blocks = _blocks(p2, target)
    timelines = DepthTimelines(depths=(l1, l2), timelines=(t1, t2), target=target)
    profile = dataclasses.replace(
        p2,
        model=source.name,
        parameter_count=lin(p1.parameter_count, p2.parameter_count),
        trainable_parameter_count=lin(p1.trainable_parameter_count, p2.trainable_parameter_count),
        parameter_bytes=lin(p1.parameter_bytes, p2.parameter_bytes),
        gradient_bytes=lin(p1.gradient_bytes, p2.gradient_bytes),
        optimizer_state_bytes=lin(p1.optimizer_state_bytes, p2.optimizer_state_bytes),
        buffer_bytes=lin(p1.buffer_bytes, p2.buffer_bytes),
        peak_bytes=best.total_bytes + in_allocator,
        peak_phase=best.phase,
        peak_module=best.module,
        peak_breakdown=MemoryBreakdown.from_categories(best.by_category),
        phase_peaks=tuple(phases),
        forward_flops=lin(p1.forward_flops, p2.forward_flops),
        backward_flops=lin(p1.backward_flops, p2.backward_flops),
        flops_per_step=lin(p1.flops_per_step, p2.flops_per_step),
        blocks=blocks,
        extrapolated_from_layers=(l1, l2),
        trace_seconds=time.perf_counter() - started,
    )
    return profile, timelines


def _blocks(shallow: ModelProfile, target: int) -> tuple[BlockProfile, ...]:
    """Block list at full depth: the shallow trace's interior block stands for every interior block."""
    if not shallow.blocks:
        return ()
    names = [b.name for b in shallow.blocks]
    prefix = names[0].rsplit(".", 1)[0] if "." in names[0] else ""
    if len(names) < 3 or not all(n.rsplit(".", 1)[0] == prefix for n in names):
        return shallow.blocks  # blocks live in several stacks (e.g. encoder + decoder): keep the traced ones
    first, middle, last = shallow.blocks[0], shallow.blocks[1], shallow.blocks[-1]
    out = [first]
    for i in range(1, target - 1):
        out.append(dataclasses.replace(middle, name=f"{prefix}.{i}"))
    out.append(dataclasses.replace(last, name=f"{prefix}.{target - 1}"))
    return tuple(out)


def _remap(module: str, shallow_layers: int, target: int) -> str:
    """Rename the last traced block (``x.{l2-1}...``) to the last real block."""
    parts = module.split(".")
    for i, part in enumerate(parts):
        if part == str(shallow_layers - 1) and i > 0:
            parts[i] = str(target - 1)
            return ".".join(parts)
    return module
