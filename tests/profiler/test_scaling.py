"""Extrapolating from 2- and 3-block traces equals tracing every block."""

from __future__ import annotations

import pytest

from autoshard.errors import UsageError
from autoshard.profiler.options import ProfileOptions
from autoshard.profiler.scaling import profile_source
from autoshard.profiler.trace import trace
from tests.profiler import models

CASES = [
    ("fp32-adamw", dict(precision="32-true"), 9),
    ("fp32-checkpointing", dict(precision="32-true", activation_checkpointing=True), 10),
    ("bf16-true-sgd", dict(precision="bf16-true", optimizer="sgd"), 8),
    ("accumulation", dict(precision="32-true", grad_accumulation=2), 7),
]


@pytest.mark.parametrize(("options", "layers"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_extrapolated_profile_equals_full_trace(options, layers):
    source = models.gpt_source(layers)
    opts = ProfileOptions(batch_size=2, target="cpu", **options)
    full = trace(source, opts)
    fast = profile_source(source, opts, extrapolate=True)
    assert fast.extrapolated_from_layers == (2, 3)
    assert fast.peak_bytes == full.peak_bytes
    assert fast.peak_breakdown == full.peak_breakdown
    assert fast.peak_phase == full.peak_phase
    for field in ("parameter_count", "parameter_bytes", "gradient_bytes", "optimizer_state_bytes",
                  "forward_flops", "backward_flops", "flops_per_step"):
        assert getattr(fast, field) == getattr(full, field), field
    assert [b.name for b in fast.blocks] == [b.name for b in full.blocks]
    assert [b.activation_bytes for b in fast.blocks] == [b.activation_bytes for b in full.blocks]


def test_extrapolation_is_automatic_only_for_deep_sources():
    opts = ProfileOptions(batch_size=1, target="cpu", precision="32-true")
    assert profile_source(models.gpt_source(4), opts).extrapolated_from_layers is None
    assert profile_source(models.gpt_source(12), opts).extrapolated_from_layers == (2, 3)


def test_forcing_extrapolation_on_a_source_that_cannot_change_depth_is_an_error():
    with pytest.raises(UsageError, match="cannot be rebuilt with fewer blocks"):
        profile_source(models.mlp_source(), ProfileOptions(batch_size=1, target="cpu"), extrapolate=True)


def test_extrapolated_phase_peaks_equal_full_trace():
    source = models.gpt_source(8)
    opts = ProfileOptions(batch_size=2, target="cpu", precision="32-true")
    full, fast = trace(source, opts), profile_source(source, opts, extrapolate=True)
    assert dict(fast.phase_peaks) == dict(full.phase_peaks)
    assert max(b.total for _, b in full.phase_peaks) == full.peak_breakdown.total
