"""fit() with bitsandbytes' 8-bit AdamW by name, on CPU: 2 gloo processes, the real DDP and DeepSpeed engines
stepping the real bitsandbytes optimizer (its CPU kernel, bitsandbytes >= 0.50)."""

from __future__ import annotations

import pytest

from tests.runtime.test_fit_backends import results, run_script

pytest.importorskip("bitsandbytes")


@pytest.fixture(scope="module")
def ddp() -> dict:
    return results(run_script({"strategy": "ddp", "processes": 2, "optimizer": "adamw8bit"}))[0]


def test_ddp_trains_with_the_8bit_optimizer(ddp: dict) -> None:
    losses = ddp["losses"]
    assert ddp["strategy"] == "ddp" and ddp["world_size"] == 2 and len(losses) == 4
    # AdamW8bit at autoshard's default learning rate (1e-4): a small but steady fall on repeated batches.
    assert all(b < a for a, b in zip(losses, losses[1:], strict=False)) and losses[-1] < losses[0] - 0.05
    assert ddp["model_digest"] == pytest.approx(ddp["state_digest"])


def test_zero_steps_its_flat_partition_with_it_and_agrees_with_ddp(ddp: dict) -> None:
    out = results(run_script({"strategy": "deepspeed_stage_2", "processes": 2, "optimizer": "adamw8bit"}))[0]
    # One flat partition per rank in place of DDP's tensors: the 8-bit blocks fall differently, so the
    # quantization rounds differently after the first update.
    assert out["losses"][0] == pytest.approx(ddp["losses"][0], rel=1e-6)
    assert out["losses"][1:] == pytest.approx(ddp["losses"][1:], rel=1e-4)


def test_a_plan_for_fsdp_is_refused_before_any_process_starts() -> None:
    proc = run_script({"plan_for": {"strategy": "fsdp"}, "processes": 2, "optimizer": "adamw8bit"}, check=False)
    assert proc.returncode != 0
    assert "cannot step optimizer adamw8bit" in proc.stderr and "DTensor" in proc.stderr
    assert "rank 1 failed" not in proc.stderr  # refused in the launching process, not by a worker


def test_another_bitsandbytes_class_is_refused_under_fsdp_before_any_process_starts() -> None:
    """Lion8bit (8-bit, not Adam): its kernel is bitsandbytes' own (``optimizer_update_8bit_blockwise``), which
    FSDP2's DTensors fail in. (32-bit AdamW's ``optimizer_update_32bit`` too: test_bnb_optimizer_plans.py.)"""
    proc = run_script({"plan_for": {"strategy": "fsdp"}, "processes": 2, "optimizer": "bnb:Lion8bit"}, check=False)
    assert proc.returncode != 0
    assert "cannot step optimizer bitsandbytes.Lion8bit" in proc.stderr and "DTensor" in proc.stderr
    assert "rank 1 failed" not in proc.stderr  # refused in the launching process, not by a worker


def test_a_factory_building_one_under_fsdp_is_refused_in_the_strategys_words() -> None:
    """A factory's class is known only once it has built the optimizer, in the workers: refused there, by name,
    not by the DTensor dispatcher's NotImplementedError."""
    proc = run_script({"plan_for": {"strategy": "fsdp"}, "processes": 2, "optimizer": "bnb-factory:Lion8bit"},
                      check=False)
    assert proc.returncode != 0
    assert "cannot step the optimizer the factory built (bitsandbytes.Lion8bit)" in proc.stderr
    assert "sharding strategy" not in proc.stderr and "mixed torch.Tensor and DTensor" not in proc.stderr


def test_planned_automatically_it_trains_on_a_strategy_that_can_step_it() -> None:
    """plan='auto' with Lion8bit as a class: the planner leaves out FSDP2 and ZeRO-Offload, and the run trains."""
    proc = run_script({"processes": 2, "optimizer": "bnb:Lion8bit"})
    out = results(proc)[0]
    assert not out["strategy"].startswith("fsdp") and "offload" not in out["strategy"]
    assert out["losses"][-1] < out["losses"][0]
    assert "optimizer bitsandbytes.Lion8bit is planned with AdamW's memory" in proc.stdout + proc.stderr
