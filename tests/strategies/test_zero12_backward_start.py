"""ZeRO-1/2 where backward's activations peak before its first gradient.

DeepSpeed allocates ZeRO-2's reduce buckets at the first gradient hook and its gradient partition at the first
copy into it (``stage_1_and_2.py``: ``setup_buckets``, ``copy_grads_in_partition``), so neither exists at the
start of backward, where a causal LM's logits' gradient makes the non-state bytes peak. They were charged there
whenever the step's total peak (later) had gradients: Llama-3-8B at 8192 tokens, micro-batch 2, checkpointing,
8 GPUs, put ZeRO-2 at 46.38 GiB, above ZeRO-1's 45.06 (now 42.49).
"""

from __future__ import annotations

import itertools
from pathlib import Path
from types import ModuleType

import pytest
import torch

from autoshard.models import load_source
from autoshard.strategies import build_workload
from autoshard.strategies.deepspeed.memory import _step_facts
from tests.benchmark_scripts import load

MODEL = str(Path(__file__).parent / "gpt_logits" / "gpt_logits.py")


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load("memory_accuracy")


def test_the_highest_activations_of_backward_come_before_any_gradient() -> None:
    """The premise: at micro-batch 2 the step's backward peaks with gradients, its non-state bytes without."""
    workload = build_workload(load_source(MODEL), precision="32-true", target="cpu", seq_len=128,
                              checkpointing=(True,))
    step = _step_facts(workload, workload.trace("amp", True), 2)
    assert step.backward_progress > 0
    assert step.gradients_beside_highest == 0
    assert step.activations["backward"] > step.backward_high_point_non_state


def test_zero2_without_buckets_at_the_start_of_backward_matches_two_gloo_processes(bench: ModuleType) -> None:
    """Real DeepSpeed ZeRO-2 over 2 gloo ranks: the highest rank's allocator peak against the prediction (+0.21 %
    measured; +1.97 % when the buckets and partition were charged at the start of backward)."""
    case = bench.Case(MODEL, 2, 128, "32-true", True, strategy="deepspeed_stage_2", world_size=2,
                      process_group="real", settings=(("reduce_bucket_size", 50000),))
    row = bench.run_case(case, torch.device("cpu"), skip_above_bytes=None)
    assert row["error"] is None, row
    assert abs(row["error_pct"]) < 1.0, row


def test_zero3_gathers_by_how_far_backward_has_got_where_its_activations_peak(bench: ModuleType) -> None:
    """ZeRO-3 pairs the highest activations with the parameters gathered at that same moment (the start of
    backward here), not at the step's total peak (later, with fewer gathered): real DeepSpeed ZeRO-3 over 2 gloo
    ranks at micro-batch 2, -0.03 % measured (-8.3 % before), and the estimate grows evenly with the micro-batch
    (it had risen by 5.0, then 21.8, then 13.4 MB)."""
    from autoshard.strategies import Candidate, get
    from tests.strategies import conformance

    settings = (("reduce_bucket_size", 50000), ("stage3_prefetch_bucket_size", 50000),
                ("stage3_param_persistence_threshold", 1000))
    workload = build_workload(load_source(MODEL), precision="32-true", target="cpu", seq_len=128,
                              checkpointing=(True,))
    hardware = conformance.hardware()["cpu-2-processes"]
    totals = [get("deepspeed_stage_3").memory(workload, hardware, Candidate(
        strategy="deepspeed_stage_3", micro_batch_size=b, activation_checkpointing=True,
        settings=dict(settings))).gpu.total for b in (1, 2, 3, 4)]
    steps = [b - a for a, b in itertools.pairwise(totals)]
    assert max(steps) - min(steps) <= 0.01 * max(steps), steps
    case = bench.Case(MODEL, 2, 128, "32-true", True, strategy="deepspeed_stage_3", world_size=2,
                      process_group="real", settings=settings)
    row = bench.run_case(case, torch.device("cpu"), skip_above_bytes=None)
    assert row["error"] is None, row
    assert abs(row["error_pct"]) < 1.0, row
