"""Gradient clipping (``grad_clip_norm``): priced, planned, kept in plan.json, trained with (the exports:
tests/export/test_grad_clip_exports.py)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from autoshard import recommend
from autoshard.cli import main
from autoshard.errors import UsageError
from autoshard.hardware import load_hardware
from autoshard.planner import plan_file
from autoshard.planner.plan_file import dumps, loads
from autoshard.strategies import costs, step_time
from tests.planner.test_plan_file_settings import PLAN

CLIPPED = dataclasses.replace(PLAN, grad_clip_norm=1.0)
KW = dict(hardware="a100-sxm-80gb", batch_size=2, seq_len=64, precision="bf16-mixed")


def test_clipping_is_a_norm_and_a_scaling_pass_over_each_ranks_gradients() -> None:
    plain = recommend("tiny-llama", strategies=["ddp"], **KW)  # type: ignore[arg-type]
    clipped = recommend("tiny-llama", strategies=["ddp"], grad_clip_norm=1.0, **KW)  # type: ignore[arg-type]
    w, gpu = clipped.workload, clipped.hardware.gpu
    assert w.grad_clip_norm == 1.0 and plain.workload.grad_clip_norm is None and gpu is not None
    extra = clipped.recommended.cost.optimizer_s - plain.recommended.cost.optimizer_s
    # fp32 gradients (bf16-mixed keeps fp32 parameters): 3 passes x 4 bytes, at least the memory-bound time.
    assert extra >= step_time.memory_bound_seconds(12 * w.trainable_parameter_count, gpu) > 0
    assert clipped.recommended.cost.step_time_s == pytest.approx(plain.recommended.cost.step_time_s + extra)
    assert any("gradient clipping at norm 1" in n for n in clipped.recommended.cost.notes)
    assert not any("gradient clipping" in n for n in plain.recommended.cost.notes)


def test_sharded_gradients_are_clipped_on_each_shard() -> None:
    w = recommend("tiny-llama", strategies=["fsdp"], grad_clip_norm=0.5, **KW).workload  # type: ignore[arg-type]
    hw = load_hardware("h100-sxm-80gb", gpus=1)
    whole, _ = costs.grad_clip_seconds(w, hw)
    # A model big enough that bytes, not kernel launches, set the time: the same workload with 1000 x the elements.
    big = dataclasses.replace(w, trainable_parameter_count=w.trainable_parameter_count * 1000)
    one, _ = costs.grad_clip_seconds(big, hw)
    eight, note = costs.grad_clip_seconds(big, hw, shard=8)
    assert one / eight == pytest.approx(8, rel=0.05) and whole > 0
    assert note is not None and "1/8 of the gradients" in note
    host, host_note = costs.grad_clip_seconds(big, hw, shard=8, on_host=True)
    assert host > eight and host_note is not None and "on the host" in host_note
    assert costs.grad_clip_seconds(dataclasses.replace(w, grad_clip_norm=None), hw) == (0.0, None)


@pytest.mark.parametrize("value", [0, -1.0, float("inf"), "1.0", True])
def test_a_bad_norm_is_refused_in_one_line(value: object) -> None:
    with pytest.raises(UsageError, match="grad_clip_norm must be a positive number"):
        recommend("tiny-llama", grad_clip_norm=value, **KW)  # type: ignore[arg-type]


def test_the_cli_flag_plans_and_exports_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["recommend", "tiny-gpt2", "--hardware", "a100-sxm-80gb", "--seq-len", "32", "--batch-size", "2",
                 "--grad-clip-norm", "1", "--strategies", "ddp", "--output-dir", str(tmp_path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["model"]["grad_clip_norm"] == 1.0
    assert plan_file.read(tmp_path / "plan.json").grad_clip_norm == 1.0
    for bad in ("0", "abc"):
        with pytest.raises(SystemExit) as exit_info:
            main(["recommend", "tiny-gpt2", "--grad-clip-norm", bad])
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and f"argument --grad-clip-norm: must be a positive number, not {bad!r}" in err


def test_plan_files_keep_it_and_older_ones_read_no_clipping() -> None:
    assert loads(dumps(CLIPPED)).grad_clip_norm == 1.0
    data = json.loads(dumps(PLAN))
    del data["grad_clip_norm"]
    assert loads(json.dumps(data)).grad_clip_norm is None
    data["grad_clip_norm"] = -2
    with pytest.raises(UsageError, match="the plan's grad_clip_norm must be a positive number"):
        loads(json.dumps(data))


def test_fit_plans_with_it_and_a_plan_file_clips_when_fit_is_not_told() -> None:
    from autoshard.runtime import fit

    planned = fit("tiny-gpt2", max_steps=1, seq_len=16, batch_size=2, grad_clip_norm=0.25)
    assert planned.plan.grad_clip_norm == 0.25
    replayed = fit("tiny-gpt2", max_steps=1, seq_len=16, batch_size=2, plan=planned.plan)
    assert any("clipping the gradients' norm to 0.25, as the plan says" in n for n in replayed.notes)
    unclipped = fit("tiny-gpt2", max_steps=1, seq_len=16, batch_size=2)
    assert unclipped.plan.grad_clip_norm is None
    assert not any("as the plan says" in n for n in unclipped.notes)
