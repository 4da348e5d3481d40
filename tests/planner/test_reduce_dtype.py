"""FSDP2's reduce dtype as a planning setting (#16): fp32 by default, bf16 when asked."""

from __future__ import annotations

import dataclasses

import pytest

from autoshard.errors import UsageError
from autoshard.hardware import load_hardware
from autoshard.planner.machine import plan_for
from autoshard.planner.plan_file import from_plan


def _fsdp(reduce_dtype: str | None):  # type: ignore[no-untyped-def]
    plan = plan_for("tiny-llama", load_hardware("dgx-h100", gpus=4), seq_len=32, batch_size=2,
                    strategies=["fsdp", "ddp"], reduce_dtype=reduce_dtype, checkpointing="none")
    return plan, next(e for e in plan.candidates if e.strategy == "fsdp")


def test_bf16_reduce_reaches_fsdp_candidates_their_cost_and_the_plan_file() -> None:
    (_, fp32), (plan, bf16) = _fsdp(None), _fsdp("bf16")
    assert "reduce_dtype" not in fp32.candidate.settings and bf16.candidate.settings["reduce_dtype"] == "bf16"
    ddp = next(e for e in plan.candidates if e.strategy == "ddp")
    assert "reduce_dtype" not in ddp.candidate.settings  # DDP has no such knob
    # Half the bytes in every gradient reduce-scatter (fsdp/cost.py prices them in reduce_dtype).
    assert bf16.cost is not None and fp32.cost is not None
    assert bf16.cost.communication_s < fp32.cost.communication_s
    assert plan.request.to_dict()["settings"] == {"reduce_dtype": "bf16"}
    assert from_plan(dataclasses.replace(plan, recommended=bf16)).settings["reduce_dtype"] == "bf16"


def test_an_unknown_reduce_dtype_is_refused_before_tracing() -> None:
    with pytest.raises(UsageError, match="reduce dtype must be one of fp32, bf16"):
        plan_for("tiny-llama", load_hardware("dgx-h100", gpus=4), reduce_dtype="fp8")


def test_a_strategy_named_twice_is_weighed_once() -> None:
    """`--strategies ddp ddp` listed every candidate twice (a new user's report)."""
    plan = plan_for("tiny-llama", load_hardware("dgx-h100", gpus=4), seq_len=32, batch_size=2,
                    strategies=["ddp", "fsdp", "ddp"], checkpointing="none")
    assert sorted(c.strategy for c in plan.candidates) == ["ddp", "fsdp"]
