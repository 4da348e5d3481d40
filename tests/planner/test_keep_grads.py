"""``recommend(..., set_grads_to_none=False)`` / ``--keep-grads``: a run that zeroes its gradients in place between
steps keeps them allocated through the next forward, and the plan's memory counts them (DDP, FSDP2); DeepSpeed keeps
its own gradient buffers either way."""

from __future__ import annotations

import json

import pytest

from autoshard import profile, recommend
from autoshard.cli import main
from autoshard.errors import UsageError

KW = dict(hardware="a100-sxm-80gb", batch_size=2, seq_len=64, precision="bf16-mixed")


def test_kept_gradients_raise_ddps_peak_to_the_traced_steps_with_them() -> None:
    # On one device DDP's estimate is the traced step's own peak: with kept gradients, profile()'s with them.
    freed = recommend("tiny-llama", strategies=["ddp"], **KW)  # type: ignore[arg-type]
    kept = recommend("tiny-llama", strategies=["ddp"], set_grads_to_none=False, **KW)  # type: ignore[arg-type]
    assert freed.workload.set_grads_to_none and not kept.workload.set_grads_to_none
    # bf16-mixed: fp32 gradients, each tensor's block rounded up to the allocator's 512 bytes.
    w = kept.workload
    grads = 4 * w.trainable_parameter_count + 512 * len(w.parameter_numels)
    extra = kept.recommended.memory.gpu.total - freed.recommended.memory.gpu.total
    assert 0 < extra <= grads
    traced = profile("tiny-llama", batch_size=2, seq_len=64, precision="bf16-mixed", set_grads_to_none=False)
    assert kept.recommended.memory.gpu.total == traced.peak_bytes
    assert kept.to_dict()["model"]["set_grads_to_none"] is False


def test_deepspeeds_memory_does_not_depend_on_it() -> None:
    freed = recommend("tiny-llama", strategies=["deepspeed_stage_2"], **KW)  # type: ignore[arg-type]
    kept = recommend("tiny-llama", strategies=["deepspeed_stage_2"], set_grads_to_none=False,
                     **KW)  # type: ignore[arg-type]
    assert kept.recommended.memory.gpu.total == freed.recommended.memory.gpu.total


@pytest.mark.parametrize("value", [0, 1, "False", None])
def test_anything_but_a_bool_is_refused_in_one_line(value: object) -> None:
    with pytest.raises(UsageError, match="set_grads_to_none must be True or False"):
        recommend("tiny-llama", set_grads_to_none=value, **KW)  # type: ignore[arg-type]


def test_the_cli_flag_plans_with_kept_gradients(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["recommend", "tiny-llama", "--hardware", "a100-sxm-80gb", "--seq-len", "64", "--batch-size", "2",
            "--strategies", "ddp"]
    assert main([*argv, "--keep-grads", "--json"]) == 0
    kept = json.loads(capsys.readouterr().out)
    assert main([*argv, "--json"]) == 0
    freed = json.loads(capsys.readouterr().out)
    assert kept["model"]["set_grads_to_none"] is False and freed["model"]["set_grads_to_none"] is True
    assert kept["recommended"]["memory"]["gpu"]["total"] > freed["recommended"]["memory"]["gpu"]["total"]
    assert main([*argv, "--keep-grads"]) == 0
    assert "gradients kept between steps" in capsys.readouterr().out
