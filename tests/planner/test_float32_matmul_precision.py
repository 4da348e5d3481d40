"""fp32 matmuls on TF32 tensor cores (``torch.set_float32_matmul_precision``): priced, planned, exported, trained."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from autoshard import recommend
from autoshard.cli import main
from autoshard.errors import UsageError
from autoshard.export import hf_trainer, notes
from autoshard.hardware.profiles import load_profile
from autoshard.hardware.specs import Achievable, GPUSpec
from autoshard.planner import plan_file
from autoshard.planner.plan_file import dumps, loads
from autoshard.profiler.op_census import MatmulClass, OpCensus
from autoshard.strategies import step_time
from tests.planner.test_plan_file_settings import PLAN

FLOPS = 10**13
GEMM = OpCensus(matmuls=(MatmulClass(kind="gemm", dtype="fp32", min_dim=4096, flops=FLOPS, bytes=1, kernels=1),))


def _gpu(name: str, **fractions: float) -> GPUSpec:
    spec = load_profile(name).spec
    assert isinstance(spec, GPUSpec)
    base = spec.achievable or step_time.GENERIC
    return dataclasses.replace(spec, achievable=dataclasses.replace(base, **fractions))


def _seconds(gpu: GPUSpec, *, tf32: bool) -> float:
    estimate = step_time.estimate(GEMM, 1, gpu, tf32_matmuls=tf32)
    assert estimate is not None
    return estimate.seconds


def test_tf32_matmuls_run_at_the_tf32_peak_and_fraction() -> None:
    gpu = _gpu("a100-sxm-80gb", matmul_fp32=0.9, matmul_tf32=0.5)
    assert gpu.peak_tflops.tf32 is not None and gpu.peak_tflops.fp32 is not None
    assert _seconds(gpu, tf32=False) == pytest.approx(FLOPS / (gpu.peak_tflops.fp32 * 1e12 * 0.9))
    assert _seconds(gpu, tf32=True) == pytest.approx(FLOPS / (gpu.peak_tflops.tf32 * 1e12 * 0.5))
    assert "TF32" in (step_time.estimate(GEMM, 1, gpu, tf32_matmuls=True) or pytest.fail()).note


def test_a_gpu_without_tf32_keeps_fp32_matmuls_on_its_cuda_cores() -> None:
    gpu = _gpu("v100-sxm-32gb", matmul_fp32=0.7)
    assert gpu.peak_tflops.tf32 is None and gpu.peak_tflops.fp32 is not None
    assert _seconds(gpu, tf32=True) == _seconds(gpu, tf32=False) == pytest.approx(
        FLOPS / (gpu.peak_tflops.fp32 * 1e12 * 0.7))


def test_without_fp32_fractions_the_16_bit_one_serves() -> None:
    gpu = _gpu("a100-sxm-80gb", matmul=0.6, matmul_fp32=None, matmul_tf32=None)
    assert gpu.peak_tflops.tf32 is not None
    assert _seconds(gpu, tf32=True) == pytest.approx(FLOPS / (gpu.peak_tflops.tf32 * 1e12 * 0.6))


def test_a_profile_names_its_fp32_and_tf32_fractions(tmp_path: Path) -> None:
    text = (Path(__file__).parents[2] / "profiles" / "gpus" / "h100-sxm-80gb.yaml").read_text(encoding="utf-8")
    assert "matmul_tf32" not in text
    good = tmp_path / "good.yaml"
    memory = '  memory: {value: 0.88, source: hbm, note: "measured on A100 HBM2e; taken for HBM3"}'
    assert memory in text
    good.write_text(text.replace(memory, memory + "\n  matmul_tf32: {value: 0.5, source: hbm}"), encoding="utf-8")
    achievable = load_profile(str(good)).spec.achievable  # type: ignore[union-attr]
    assert isinstance(achievable, Achievable) and achievable.matmul_tf32 == 0.5
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace(memory, memory + "\n  matmul_fp16: {value: 0.5, source: hbm}"), encoding="utf-8")
    with pytest.raises(Exception, match="matmul_fp16"):
        load_profile(str(bad))


def test_recommend_prices_an_fp32_run_with_tf32_matmuls_faster_on_an_a100() -> None:
    # A micro-batch large enough that the GPU, not the kernel launches, sets the step time.
    kw = dict(hardware="a100-sxm-80gb", batch_size=512, seq_len=256, precision="32-true", strategies=["ddp"])
    highest = recommend("tiny-llama", **kw)  # type: ignore[arg-type]
    high = recommend("tiny-llama", float32_matmul_precision="high", **kw)  # type: ignore[arg-type]
    assert high.workload.float32_matmul_precision == "high"
    assert high.recommended.cost.step_time_s < highest.recommended.cost.step_time_s
    assert plan_file.from_plan(high).float32_matmul_precision == "high"


def test_an_unknown_setting_is_refused_in_one_line() -> None:
    with pytest.raises(UsageError, match="unknown float32 matmul precision 'tf32'"):
        recommend("tiny-llama", hardware="a100-sxm-80gb", float32_matmul_precision="tf32")


def test_the_cli_flag_plans_and_exports_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["recommend", "tiny-gpt2", "--hardware", "a100-sxm-80gb", "--seq-len", "32", "--batch-size", "2",
                 "--precision", "32-true", "--float32-matmul-precision", "high", "--strategies", "ddp",
                 "--output-dir", str(tmp_path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["model"]["float32_matmul_precision"] == "high"
    assert plan_file.read(tmp_path / "plan.json").float32_matmul_precision == "high"
    with pytest.raises(SystemExit) as exit_info:
        main(["recommend", "tiny-gpt2", "--float32-matmul-precision", "tf32"])
    assert exit_info.value.code == 2 and "invalid choice" in capsys.readouterr().err


def test_plan_files_keep_it_and_older_ones_read_torchs_default() -> None:
    assert loads(dumps(dataclasses.replace(PLAN, float32_matmul_precision="medium"))).float32_matmul_precision \
        == "medium"
    data = json.loads(dumps(PLAN))
    del data["float32_matmul_precision"]
    assert loads(json.dumps(data)).float32_matmul_precision == "highest"
    data["float32_matmul_precision"] = "fast"
    with pytest.raises(UsageError, match="float32 matmul precision"):
        loads(json.dumps(data))


def test_exports_tell_the_script_to_set_it() -> None:
    exported = dataclasses.replace(PLAN, float32_matmul_precision="high")
    args = hf_trainer.arguments(exported)
    assert args[args.index("--tf32") + 1] == "True"
    assert "--tf32" not in hf_trainer.arguments(PLAN)
    assert any("set_float32_matmul_precision('high')" in n for n in notes(exported))
    assert not any("set_float32_matmul_precision" in n for n in notes(PLAN))


def test_the_trainer_reads_the_flag() -> None:
    """The real TrainingArguments accepts --tf32 and, without an Ampere GPU, refuses it for that reason only."""
    pytest.importorskip("transformers")
    from transformers import HfArgumentParser, TrainingArguments

    args = hf_trainer.arguments(dataclasses.replace(PLAN, float32_matmul_precision="high"))
    with pytest.raises(ValueError, match="Ampere"):
        HfArgumentParser(TrainingArguments).parse_args_into_dataclasses(["--output_dir", "out", "--use_cpu", "True",
                                                                         *args])


def test_fit_plans_with_this_processs_setting_and_trains_with_it() -> None:
    from autoshard.runtime import fit

    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("high")
        result = fit("tiny-gpt2", max_steps=1, seq_len=16, batch_size=2)
        assert result.plan.float32_matmul_precision == "high"
        torch.set_float32_matmul_precision("highest")
        fit("tiny-gpt2", max_steps=1, seq_len=16, batch_size=2, plan=result.plan)
        assert torch.get_float32_matmul_precision() == "high"  # the plan's, set where it trained
    finally:
        torch.set_float32_matmul_precision(before)
