"""The planner weighs none / full checkpointing by default, and only the choice asked for otherwise (#16)."""

from __future__ import annotations

import pytest

from autoshard.hardware import load_hardware
from autoshard.planner.machine import plan_for
from autoshard.planner.plan_file import from_plan
from autoshard.profiler.checkpointing import FULL, ActivationCheckpointing


def _plan(checkpointing: str | None):  # type: ignore[no-untyped-def]
    return plan_for("tiny-llama", load_hardware("dgx-h100", gpus=2), seq_len=32, batch_size=2,
                    strategies=["ddp", "fsdp"], checkpointing=checkpointing)


def test_default_search_weighs_no_checkpointing_against_full() -> None:
    plan = _plan(None)
    assert plan.workload.checkpoint_mode == FULL
    assert {e.candidate.activation_checkpointing for e in plan.candidates} == {False, True}


@pytest.mark.parametrize(("asked", "mode"), [("op", ActivationCheckpointing("op")), ("every-2", ActivationCheckpointing("every", 2))])
def test_a_named_mode_is_the_only_one_planned_and_exported(asked: str, mode: ActivationCheckpointing) -> None:
    plan = _plan(asked)
    assert plan.workload.checkpoint_mode == mode
    assert all(e.candidate.activation_checkpointing for e in plan.candidates)
    exported = from_plan(plan)
    assert exported.checkpointing == asked and exported.checkpointing_choice == mode
    assert not exported.checkpoints_every_block
    assert f", {mode.label}" in plan.explanation[0]  # "activation checkpointing of every 2nd block", not "full"


def test_asking_for_none_plans_without_checkpointing() -> None:
    plan = _plan("none")
    assert not any(e.candidate.activation_checkpointing for e in plan.candidates)
    assert from_plan(plan).checkpointing is None
