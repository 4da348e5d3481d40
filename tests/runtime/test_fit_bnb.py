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
