"""Backward's highest non-state bytes, wherever they fall, and FSDP's start of backward.

Without checkpointing, backward's total peaks at its end (every gradient, the activations freed) while its
activations peak at its start: the profile at micro-batch 1 keeps only the former. FSDP shards the gradients
that crowd the unsharded step's end, so its own backward peaks at the start: a probe found FSDP's estimate for
Llama-3-8B-shaped models at 4096 tokens falling from 8.27 to 7.95 GiB as the depth went from 8 to 16 layers.
"""

from __future__ import annotations

import pytest

from autoshard.hardware import load_hardware
from autoshard.profiler.options import ProfileOptions
from autoshard.profiler.scaling import profiles_with_timelines
from autoshard.profiler.timeline import Timeline
from autoshard.profiler.tracker import Category
from autoshard.strategies import Candidate, build_workload, get
from autoshard.strategies.workload import StepTrace
from tests.profiler import models

_NON_STATE = [list(Category).index(c) for c in (Category.ACTIVATIONS, Category.TEMPORARIES, Category.INPUTS)]


def _highest_non_state(timeline: Timeline, phase: str) -> int:
    return int(timeline.phases[phase][:, _NON_STATE].sum(dim=1).max())


@pytest.mark.parametrize("checkpointing", [False, True], ids=["plain", "checkpointing"])
def test_backward_non_state_at_micro_batch_1_is_the_phase_highest(checkpointing: bool) -> None:
    source = models.gpt_source(4, hidden=256, vocab=512, seq=64, dropout=0.0)
    opts = ProfileOptions(batch_size=1, precision="bf16-mixed", target="cpu", activation_checkpointing=checkpointing)
    (one, t1), (two, t2), (_, t3) = profiles_with_timelines(source, opts, (1, 2, 3), extrapolate=False)
    trace = StepTrace(mode="amp", checkpointing=checkpointing, precision=opts.precision, at_1=one, at_2=two,
                      timelines_2=t2, timelines_3=t3)
    exact = _highest_non_state(t1.timelines[0], "backward")
    at_peak = dict(one.phase_peaks)["backward"]
    if not checkpointing:  # the premise: the total peaks where the non-state bytes do not
        assert at_peak.activations + at_peak.temporaries + at_peak.inputs < exact
    got = [trace.activation_bytes("backward", b) for b in (1, 2, 3, 4)]
    assert got[0] == exact
    assert got == sorted(got)
    assert [trace.activation_moment("backward", b)[0] for b in (1, 2, 3, 4)] == got


def test_fsdp_start_of_backward_holds_the_highest_non_state_bytes() -> None:
    """The start of backward (the loss's gradients) is charged backward's highest non-state bytes, not those at
    the unsharded step's highest total, nor the loss phase's (a model whose forward returns its loss has none)."""
    source = models.gpt_source(4, hidden=256, vocab=512, seq=64, dropout=0.0)
    workload = build_workload(source, precision="bf16-mixed", target="cpu", seq_len=64)
    hardware = load_hardware("h100-sxm-80gb", gpus=8)
    trace = workload.trace("half", False)
    at_peak = trace.phases(1)["backward"]
    assert at_peak.activations + at_peak.temporaries + at_peak.inputs < trace.activation_bytes("backward", 1)
    for micro_batch in (1, 2):
        candidate = Candidate(strategy="fsdp", micro_batch_size=micro_batch, activation_checkpointing=False)
        start = next(m for m in get("fsdp").moments(workload, hardware, candidate) if m.where == "start")
        assert start.activations == trace.activation_bytes("backward", micro_batch)
