"""Checkpointing every N-th block of a deep model profiled from shallow copies equals tracing every block.

Until 2026-11-29 a copy counted its own blocks: with every-2, the 3-block copy checkpointed its second block and
the block it adds (its third, standing for every interior block) was not, so a 40-block model came out with one
block's recomputation instead of twenty's, and nearly the memory of no checkpointing (torchtitan's Llama-2 13B
"selective layer" run on A100 predicted 11.7 % fast). Configs from transformers' config classes, as in
``test_heterogeneous.py``.
"""

from __future__ import annotations

from typing import Any

import pytest

from autoshard.profiler.checkpointing import parse_checkpointing
from autoshard.profiler.depth_plan import Plan, Whole, plan_copies
from autoshard.profiler.options import ProfileOptions
from autoshard.profiler.scaling import AUTO_MIN_LAYERS, profile_source
from tests.profiler import models
from tests.profiler.test_heterogeneous import (
    SMALL,
    _deepseek_v3,
    _llama,
    assert_same_at_other_micro_batches,
    step_trace,
)

transformers = pytest.importorskip("transformers")

LAYERS = AUTO_MIN_LAYERS
FIELDS = ("parameter_count", "parameter_bytes", "gradient_bytes", "optimizer_state_bytes", "peak_bytes",
          "peak_breakdown", "peak_phase", "peak_module", "phase_peaks", "forward_flops", "backward_flops",
          "flops_per_step", "blocks", "checkpointed_blocks")


def _gemma2_24() -> Any:
    # Sliding and global attention alternate; every-3 of 24 blocks repeats a unit of 6 (kind x checkpointed).
    return transformers.Gemma2Config(**{**SMALL, "num_hidden_layers": 24}, head_dim=8, sliding_window=16,
                                     architectures=["Gemma2ForCausalLM"])


def _t5() -> Any:
    return transformers.T5Config(vocab_size=128, d_model=32, d_kv=8, d_ff=64, num_layers=LAYERS, num_heads=4,
                                 architectures=["T5ForConditionalGeneration"])


@pytest.mark.parametrize(("every", "options"), [
    pytest.param("every-2", {"precision": "bf16-mixed", "target": "cuda"}, id="every-2-cuda"),
    pytest.param("every-3", {"precision": "32-true", "target": "cpu"}, id="every-3-cpu"),
])
def test_every_nth_block_extrapolates_exactly(every, options, saved):
    source = saved(_llama)
    opts = ProfileOptions(batch_size=2, seq_len=32, checkpointing=every, **options)
    full = profile_source(source, opts, extrapolate=False)
    fast = profile_source(source, opts)  # automatic from AUTO_MIN_LAYERS blocks
    n = parse_checkpointing(every).every
    # Copies of whole groups of n blocks: the first and the last group, then the first two and the last.
    assert fast.extrapolated_from_layers == (2 * n, 3 * n)
    for field in FIELDS:
        assert getattr(fast, field) == getattr(full, field), field
    assert full.checkpointed_blocks == LAYERS // n
    assert fast.depth is not None and fast.depth.kinds[1].endswith(", checkpointed")
    assert fast.depth.counts == (LAYERS - LAYERS // n, LAYERS // n)


def test_every_nth_block_recomputes_its_share_of_full_checkpointing(saved):
    source = saved(_llama)
    opts = {"batch_size": 2, "seq_len": 32, "precision": "32-true", "target": "cpu"}
    none, every2, full = (profile_source(source, ProfileOptions(checkpointing=c, **opts))
                          for c in ("none", "every-2", "full"))
    assert every2.extrapolated_from_layers is not None
    assert (every2.backward_flops - none.backward_flops) * 2 == full.backward_flops - none.backward_flops
    assert full.peak_bytes < every2.peak_bytes < none.peak_bytes


def test_a_stack_with_blocks_left_over_after_its_groups_extrapolates_exactly():
    source = models.gpt_source(9)  # 4 groups of 2 blocks, then 1
    opts = ProfileOptions(batch_size=2, precision="32-true", target="cpu", checkpointing="every-2")
    full, fast = profile_source(source, opts, extrapolate=False), profile_source(source, opts, extrapolate=True)
    assert fast.extrapolated_from_layers == (5, 7)
    for field in FIELDS:
        assert getattr(fast, field) == getattr(full, field), field


def test_each_copy_checkpoints_the_blocks_that_stand_for_checkpointed_ones(saved):
    plan = plan_copies(saved(_llama), parse_checkpointing("every-2"))
    assert isinstance(plan, Plan)
    assert plan.positions == ((0, 1, 10, 11), (0, 1, 2, 3, 10, 11)) and plan.weights == (-3, 4)
    assert plan.block_positions == plan.positions  # one stack, its blocks named in order
    assert plan_copies(saved(_llama)).block_positions == ()  # other choices plan as before


@pytest.mark.parametrize(("make", "every", "copies"), [
    # 3 dense blocks, then a unit of 2 MoE blocks (one checkpointed) repeated 4 times and 1 over: 8 and 10.
    pytest.param(_deepseek_v3, "every-2", (8, 10), id="deepseek-v3-every-2"),
    pytest.param(_gemma2_24, "every-3", (12, 18), id="gemma2-every-3"),
])
def test_blocks_of_several_kinds_extrapolate_by_their_repeating_unit(make, every, copies, saved):
    source = saved(make)
    opts = ProfileOptions(batch_size=2, seq_len=32, precision="bf16-mixed", target="cuda", checkpointing=every)
    full, fast = profile_source(source, opts, extrapolate=False), profile_source(source, opts)
    assert fast.extrapolated_from_layers == copies
    for field in FIELDS:
        assert getattr(fast, field) == getattr(full, field), field


@pytest.mark.parametrize(("make", "every", "reason"), [
    pytest.param(_t5, "every-2", "only a model with one stack of blocks", id="t5-two-stacks"),
    pytest.param(_llama, "every-5", "repeat no pattern 4 times", id="llama-too-few-units"),
])
def test_what_cannot_be_extrapolated_is_traced_whole_and_says_why(make, every, reason, saved):
    source = saved(make)
    plan = plan_copies(source, parse_checkpointing(every))
    assert isinstance(plan, Whole) and reason in plan.reason
    opts = ProfileOptions(batch_size=1, seq_len=16, precision="32-true", target="cpu", checkpointing=every)
    profile = profile_source(source, opts)
    assert profile.extrapolated_from_layers is None
    assert profile.checkpointed_blocks == profile_source(source, opts, extrapolate=False).checkpointed_blocks > 0


def test_workload_phase_peaks_at_other_micro_batches_match_the_full_trace(saved):
    # What the strategies read at micro-batches never traced (StepTrace from traces at 1, 2 and 3).
    source = saved(_llama)
    options = {"seq_len": 16, "precision": "bf16-mixed", "target": "cuda", "checkpointing": "every-2"}
    fast, full = (step_trace(source, options, extrapolate) for extrapolate in (True, False))
    assert fast.timelines_2.depths == (4, 6)
    assert_same_at_other_micro_batches(fast, full)
