"""FSDP2 under checkpointing reads what a recomputed block holds from the trace without checkpointing; a workload
traced with checkpointing alone (the planner no longer makes one for FSDP) says its figure is low, never silently."""

from __future__ import annotations

import dataclasses

from autoshard.hardware import load_hardware
from autoshard.strategies import Candidate, get
from autoshard.strategies.fsdp.strategy import UNCHECKED_MISSING
from tests.strategies import conformance


def test_fsdp_memory_without_the_unchecked_trace_says_it_is_low() -> None:
    both = conformance.workloads()["tiny-llama"]
    alone = dataclasses.replace(both, traces=tuple(t for t in both.traces if t.checkpointing))
    hw = load_hardware("dgx-h100", gpus=4)
    checkpointed = Candidate(strategy="fsdp", micro_batch_size=4, activation_checkpointing=True)
    full, low = get("fsdp").memory(both, hw, checkpointed), get("fsdp").memory(alone, hw, checkpointed)
    assert UNCHECKED_MISSING in low.notes and UNCHECKED_MISSING not in full.notes
    assert low.gpu.total <= full.gpu.total
    unchecked = Candidate(strategy="fsdp", micro_batch_size=4, activation_checkpointing=False)
    assert UNCHECKED_MISSING not in get("fsdp").memory(both, hw, unchecked).notes
