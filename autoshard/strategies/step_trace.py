"""One compute mode's traced step, as the strategies read it: :class:`StepTrace`.

Profiles at micro-batch 1 and 2 and memory timelines at 2 and 3 (:mod:`autoshard.profiler.timeline`) give each
phase's peak, and the highest non-state bytes with the gradients beside them, at any micro-batch.
"""

from __future__ import annotations

from dataclasses import dataclass

from autoshard.profiler.options import Precision
from autoshard.profiler.result import MemoryBreakdown, ModelProfile
from autoshard.profiler.scaling import DepthTimelines
from autoshard.profiler.timeline import lines_up, non_state_peaks, phase_peaks


def _affine(a: MemoryBreakdown, b: MemoryBreakdown, x: int) -> MemoryBreakdown:
    """``a`` at micro-batch 1, ``b`` at 2: the breakdown at micro-batch ``x``.

    Exact when the phase's high point sits at the same place of the step at both sizes (true for models
    whose activations dominate). In small models the high point of backward can move (e.g. to where fewer
    gradients exist yet), which makes a model-state category shrink with the batch; such slopes are clamped
    at zero, and strategies take model states from their own rules rather than from these snapshots.
    """
    fields = ("parameters", "gradients", "optimizer_state", "activations", "temporaries", "buffers", "inputs")
    return MemoryBreakdown(
        **{f: max(0, getattr(a, f) + (getattr(b, f) - getattr(a, f)) * (x - 1)) for f in fields}
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class StepTrace:
    """Profiles at micro-batch 1 and 2, and timelines at 2 and 3, for one compute mode and checkpointing."""

    mode: str
    checkpointing: bool
    precision: Precision
    """The precision actually traced for this mode."""
    at_1: ModelProfile
    """The profile at micro-batch 1 (with FLOPs)."""
    at_2: ModelProfile
    """The profile at micro-batch 2."""
    timelines_2: DepthTimelines | None = None
    """Timelines at micro-batch 2 and 3. Micro-batch 1 is not used as a base point: some ops allocate nothing
    there (``contiguous()`` of a transpose whose batch dimension is 1 is already contiguous), so its timeline
    need not line up with larger batches."""
    timelines_3: DepthTimelines | None = None

    def _aligned(self) -> tuple[DepthTimelines, DepthTimelines] | None:
        """The timelines at micro-batch 2 and 3 when they line up event by event, else ``None``."""
        t2, t3 = self.timelines_2, self.timelines_3
        if t2 is None or t3 is None or t2.depths != t3.depths:
            return None
        if not all(lines_up(a, b) for a, b in zip(t2.timelines, t3.timelines, strict=True)):
            return None
        return t2, t3

    def phases(self, micro_batch: int) -> dict[str, MemoryBreakdown]:
        """Per-phase peak breakdowns at ``micro_batch``.

        Exact: micro-batch 1 from its own trace, larger ones from the timelines at micro-batch 2 and 3 when
        they line up event by event (with blocks of several kinds, place by place:
        :meth:`DepthTimelines.located`); otherwise each phase's peak is extrapolated on its own (see
        :func:`_affine`).
        """
        if micro_batch == 1:
            return dict(self.at_1.phase_peaks)
        aligned = self._aligned()
        if aligned is None:
            one, two = dict(self.at_1.phase_peaks), dict(self.at_2.phase_peaks)
            return {p: _affine(one[p], two[p], micro_batch) for p in one if p in two}
        t1, t2 = aligned
        # Timelines are at micro-batch 2 and 3: the value at b is v2 + (v3 - v2)(b - 2).
        x = micro_batch - 1
        if t1.positions:
            located = t1.located(t2, x)
            if located is None:  # a copy peaks in a block only it keeps: each phase extrapolated on its own
                one, two = dict(self.at_1.phase_peaks), dict(self.at_2.phase_peaks)
                return {p: _affine(one[p], two[p], micro_batch) for p in one if p in two}
            return {phase: breakdown for phase, (breakdown, *_) in located.items()}
        per_depth = [phase_peaks(a, b, x) for a, b in zip(t1.timelines, t2.timelines, strict=True)]
        out = {}
        for phase in per_depth[0]:
            values = t1.extrapolate([d[phase].to_dict() for d in per_depth])
            values.pop("total", None)
            out[phase] = MemoryBreakdown(**values)
        return out

    def block_activation_bytes(self, micro_batch: int) -> tuple[int, ...]:
        """Activations each repeated block saves in forward at ``micro_batch``, in block order (empty without
        repeated blocks): affine in the batch like everything else, and where the batch-2 profile records none,
        proportional to the batch-1 figure."""
        one = [b.activation_bytes for b in self.at_1.blocks]
        two = [b.activation_bytes for b in self.at_2.blocks]
        return tuple(a + (b - a) * (micro_batch - 1) if b else a * micro_batch
                     for a, b in zip(one, two, strict=False))

    def activation_bytes(self, phase: str, micro_batch: int) -> int:
        """The highest activations + temporaries + inputs of ``phase`` at ``micro_batch`` — the bytes that are
        not model states, wherever in the phase they peak.

        At micro-batch 1 as well: its own profile keeps only the moment of highest *total*, which in backward can
        be its end (every gradient, few activations left) while the activations peak at its start (llama-3-8b
        blocks, 4096 tokens, checkpointing: 1.0 GiB there against 6.5 GiB), so the timelines at micro-batch 2
        and 3 are extended back to 1, never below the bytes at micro-batch 1's own high point (which are exact).
        The few ops that allocate nothing at micro-batch 1 (see :attr:`timelines_2`) make the extended lines
        count a little more than the step holds, never less (tiny-gpt2, ZeRO-2, checkpointing: +150 KB).

        In the optimizer phase this is the optimizer's scratch (e.g. foreach temporaries) for the unsharded
        model; strategies that shard the optimizer scale it themselves.
        """
        return self.activation_moment(phase, micro_batch)[0]

    def activation_moment(self, phase: str, micro_batch: int) -> tuple[int, int]:
        """:meth:`activation_bytes`, and the gradients the single-device step holds at that same moment: ``0``
        when the bytes peak before backward has made any gradient (the start of a causal LM's backward, where
        the logits' gradient is), which is before ZeRO allocates its gradient partition and reduce buckets."""
        along = self._non_state_along(phase, micro_batch)
        if along is not None and micro_batch > 1:
            return along
        b = self.phases(micro_batch)[phase]
        at_peak = b.activations + b.temporaries + b.inputs
        return along if along is not None and along[0] > at_peak else (at_peak, b.gradients)

    def _non_state_along(self, phase: str, micro_batch: int) -> tuple[int, int] | None:
        """The highest non-state bytes of ``phase`` and the gradients beside them, from the timelines at
        micro-batch 2 and 3 when they line up (place by place for blocks of several kinds), else ``None``."""
        aligned = self._aligned()
        if aligned is None:
            return None
        t1, t2 = aligned
        x = micro_batch - 1
        if t1.positions:
            located = t1.located(t2, x)
            return None if located is None or phase not in located else located[phase][1:]
        per_depth = [non_state_peaks(a, b, x) for a, b in zip(t1.timelines, t2.timelines, strict=True)]
        if not all(phase in d for d in per_depth):
            return None
        highest, gradients = (t1.extrapolate([{phase: d[phase][i]} for d in per_depth])[phase] for i in (0, 1))
        return highest, gradients

    def flops_per_sample(self) -> int:
        """Forward + backward FLOPs of one sample (recomputation included under checkpointing)."""
        return self.at_1.forward_flops + self.at_1.backward_flops
