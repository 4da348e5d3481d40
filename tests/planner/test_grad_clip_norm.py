"""Gradient clipping (``grad_clip_norm``): priced, planned, kept in plan.json, exported, trained with."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from autoshard import recommend
from autoshard.cli import main
from autoshard.errors import UsageError
from autoshard.export import hf_trainer, lightning, notes, render
from autoshard.hardware import load_hardware
from autoshard.planner import plan_file
from autoshard.planner.plan_file import dumps, loads
from autoshard.strategies import costs, step_time
from autoshard.strategies.deepspeed import config as ds_config
from tests.export.conftest import cpu_plan
from tests.planner.test_plan_file_settings import PLAN

CLIPPED = dataclasses.replace(PLAN, grad_clip_norm=1.0)


@pytest.fixture(scope="module")
def gpt2_plan():
    """A planned model that the export tests re-target (tests/export/conftest.py's ``cpu_plan``)."""
    return recommend("tiny-gpt2", hardware="dgx-h100", seq_len=64, batch_size=4, strategies=["ddp"])
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


def test_every_export_clips_as_the_plan_says(gpt2_plan) -> None:
    ddp = cpu_plan(gpt2_plan, "ddp", ranks=2)
    clipped = dataclasses.replace(ddp, grad_clip_norm=1.0)
    ds = dataclasses.replace(cpu_plan(gpt2_plan, "deepspeed_stage_2", ranks=2), grad_clip_norm=1.0)
    assert ds_config.ds_config(ds)["gradient_clipping"] == 1.0
    assert ds_config.ds_config(cpu_plan(gpt2_plan, "deepspeed_stage_2", ranks=2))["gradient_clipping"] == 0.0
    args = hf_trainer.arguments(clipped)
    assert args[args.index("--max_grad_norm") + 1] == "1.0"
    assert "gradient_clip_val=1.0" in lightning.snippet(clipped)
    assert "gradient_clip_val" not in lightning.snippet(ddp)
    assert any("clipped to norm 1 " in n for n in notes(clipped))
    assert any("--grad-clip-norm" in n for n in notes(ddp))


def test_deepspeed_and_lightning_read_the_norm(gpt2_plan, tmp_path: Path) -> None:
    """The real DeepSpeed config class takes the exported ``gradient_clipping``; the real Lightning ``Trainer``
    built from the exported snippet clips at the plan's norm."""
    pytest.importorskip("lightning")
    pytest.importorskip("deepspeed")
    from deepspeed.runtime.config import DeepSpeedConfig

    e = dataclasses.replace(cpu_plan(gpt2_plan, "deepspeed_stage_2", ranks=1, accumulation=2), grad_clip_norm=0.5)
    files = render(e)
    assert DeepSpeedConfig(json.loads(files["ds_config.json"])).gradient_clipping == 0.5  # one rank: no group
    (tmp_path / "lightning_trainer.py").write_text(files["lightning_trainer.py"])
    code = ("import runpy; ns = runpy.run_path('lightning_trainer.py'); t = ns['trainer']; "
            "print('RESULT', t.gradient_clip_val)")  # the algorithm left to Lightning's default, the norm
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.splitlines()[-1] == "RESULT 0.5"


def test_fit_plans_with_it_and_a_plan_file_clips_when_fit_is_not_told() -> None:
    from autoshard.runtime import fit

    planned = fit("tiny-gpt2", max_steps=1, seq_len=16, batch_size=2, grad_clip_norm=0.25)
    assert planned.plan.grad_clip_norm == 0.25
    replayed = fit("tiny-gpt2", max_steps=1, seq_len=16, batch_size=2, plan=planned.plan)
    assert any("clipping the gradients' norm to 0.25, as the plan says" in n for n in replayed.notes)
    unclipped = fit("tiny-gpt2", max_steps=1, seq_len=16, batch_size=2)
    assert unclipped.plan.grad_clip_norm is None
    assert not any("as the plan says" in n for n in unclipped.notes)
