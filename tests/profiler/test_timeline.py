"""Timelines at micro-batch 2 and 3 give the exact peak of every phase at larger micro-batches."""

from __future__ import annotations

import pytest

from autoshard.models import load_source
from autoshard.profiler.options import ProfileOptions
from autoshard.profiler.scaling import profile_source
from autoshard.strategies.workload import build_workload


@pytest.mark.parametrize("name", ["tiny-gpt2", "tiny-llama"])
@pytest.mark.parametrize("checkpointing", [False, True], ids=["plain", "checkpointing"])
def test_phase_peaks_at_larger_micro_batches_equal_a_direct_trace(name, checkpointing):
    source = load_source(name)
    workload = build_workload(source, seq_len=64, target="cpu", precision="32-true", checkpointing=(checkpointing,))
    trace = workload.trace("amp", checkpointing)
    for micro_batch in (1, 4, 7):
        direct = profile_source(source, ProfileOptions(batch_size=micro_batch, seq_len=64, precision="32-true",
                                                       target="cpu", activation_checkpointing=checkpointing))
        predicted = trace.phases(micro_batch)
        for phase, breakdown in direct.phase_peaks:
            assert predicted[phase].total == breakdown.total, (phase, micro_batch)
            non_state = breakdown.activations + breakdown.temporaries + breakdown.inputs
            assert trace.activation_bytes(phase, micro_batch) >= non_state


def test_flop_counting_does_not_change_the_measured_memory():
    # FlopCounterMode's module tracking keeps tensors alive longer; memory is measured on the step after it.
    source = load_source("tiny-gpt2")
    options = ProfileOptions(batch_size=3, seq_len=64, precision="32-true", target="cpu",
                             activation_checkpointing=True)
    with_flops = profile_source(source, options, count_flops=True)
    without = profile_source(source, options, count_flops=False)
    assert with_flops.peak_bytes == without.peak_bytes
    assert with_flops.forward_flops > 0 and without.forward_flops == 0


@pytest.mark.parametrize(("name", "options"), [
    ("tiny-gpt2", dict(precision="32-true")),
    ("tiny-llama", dict(precision="bf16-mixed", activation_checkpointing=True)),
    ("tiny-t5", dict(precision="bf16-true", optimizer="adafactor")),
    ("tiny-bert", dict(precision="bf16-mixed", grad_accumulation=2)),
])
def test_warm_started_first_step_measures_the_same_steady_state(name, options):
    from autoshard.profiler.trace import trace_timeline

    source = load_source(name)
    opts = ProfileOptions(batch_size=2, seq_len=32, target="cuda", **options)
    full, full_phases, full_timeline = trace_timeline(source, opts, count_flops=True)
    warm, warm_phases, warm_timeline = trace_timeline(source, opts, count_flops=False)
    assert warm.peak_bytes == full.peak_bytes
    assert warm.peak_breakdown == full.peak_breakdown
    assert dict(warm.phase_peaks) == dict(full.phase_peaks)
    assert [b.activation_bytes for b in warm.blocks] == [b.activation_bytes for b in full.blocks]
    for phase, events in full_timeline.phases.items():
        assert bool((warm_timeline.phases[phase] == events).all()), phase
