"""Extrapolated phase peaks equal a full trace's where the peak moves as blocks are added.

In the shallow copies of a deep model the backward peak can sit at the start of backward (the logits' gradient,
every checkpointed input still saved) and at full depth at its end (every block's gradient): combining the
copies' peaks as one line then mixes two points of the step (llama-3-8b, seq 4096, bf16-true, checkpointing:
-34 GiB of activations and a peak 9.4 GiB low). A 12-block GPT with a wide hidden and a long sequence crosses
over the same way in a few seconds.
"""

from __future__ import annotations

import pytest

from autoshard.profiler.options import ProfileOptions
from autoshard.profiler.scaling import profile_source, profiles_with_timelines
from autoshard.strategies.workload import StepTrace
from tests.profiler import models

LAYERS = 12
OPTIONS = dict(precision="bf16-true", activation_checkpointing=True, optimizer_impl="fused", target="cuda")


def _source(layers: int = LAYERS, seq: int = 512):
    return models.gpt_source(layers, hidden=256, heads=4, vocab=4096, seq=seq, dropout=0.0)


def test_backward_peak_crosses_over_between_the_copies_and_full_depth():
    """The premise of the other tests: the 2-block copy's backward peaks before any gradient exists, the full
    model's once they all do."""
    opts = ProfileOptions(batch_size=1, **OPTIONS)
    shallow = dict(profile_source(_source(2), opts, extrapolate=False).phase_peaks)["backward"]
    full = dict(profile_source(_source(), opts, extrapolate=False).phase_peaks)["backward"]
    assert shallow.gradients == 0 < full.gradients
    assert full.activations < shallow.activations


@pytest.mark.parametrize("seq", [256, 512])
def test_extrapolated_phase_peaks_equal_full_trace_across_a_crossover(seq):
    opts = ProfileOptions(batch_size=1, **OPTIONS)
    full = profile_source(_source(seq=seq), opts, extrapolate=False)
    fast = profile_source(_source(seq=seq), opts, extrapolate=True)
    assert fast.extrapolated_from_layers == (2, 3)
    assert fast.depth is None, fast.depth  # extrapolated, not traced whole
    assert dict(fast.phase_peaks) == dict(full.phase_peaks)
    assert fast.peak_bytes == full.peak_bytes
    assert fast.peak_breakdown == full.peak_breakdown
    assert all(v >= 0 for _, b in fast.phase_peaks for v in b.to_dict().values())


def test_extrapolated_peak_never_shrinks_with_a_longer_sequence():
    opts = ProfileOptions(batch_size=1, **OPTIONS)
    peaks = [profile_source(_source(seq=seq), opts, extrapolate=True).peak_bytes for seq in (256, 384, 512, 768)]
    assert peaks == sorted(peaks)


def _step_trace(extrapolate: bool) -> StepTrace:
    opts = ProfileOptions(batch_size=1, **OPTIONS)
    (one, _), (two, t2), (_, t3) = profiles_with_timelines(_source(), opts, (1, 2, 3), extrapolate=extrapolate)
    return StepTrace(mode="half", checkpointing=True, precision=opts.precision, at_1=one, at_2=two,
                     timelines_2=t2, timelines_3=t3)


def test_planner_phase_peaks_from_extrapolated_timelines_equal_full_trace():
    """What the planner prices memory from (:meth:`StepTrace.phases`, :meth:`StepTrace.activation_bytes`) at
    micro-batches past those traced, from the copies' timelines place by place."""
    fast, full = _step_trace(True), _step_trace(False)
    assert fast.timelines_2 is not None and fast.timelines_2.depths == (2, 3)
    for micro_batch in (1, 2, 3, 5):
        phases = full.phases(micro_batch)
        assert fast.phases(micro_batch) == phases, micro_batch
        assert "backward" in phases
        for phase in phases:
            assert fast.activation_bytes(phase, micro_batch) == full.activation_bytes(phase, micro_batch), (
                phase, micro_batch)
