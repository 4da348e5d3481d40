"""benchmarks/gpu_kernels.py: the step-time model's kernels timed (on CPU here: the plumbing and the arithmetic)."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest
import torch

from autoshard.hardware.profiles import load_profile
from autoshard.hardware.specs import GPUSpec
from autoshard.strategies import step_time
from tests.benchmark_scripts import load


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load("gpu_kernels")


@pytest.fixture(scope="module")
def h100() -> GPUSpec:
    spec = load_profile("h100-sxm-80gb").spec
    assert isinstance(spec, GPUSpec)
    return spec


def test_a_gemm_row_holds_the_measured_rate_against_the_peak_and_the_model(bench: ModuleType, h100: GPUSpec) -> None:
    kernel = bench.gemm("g", 64, 48, 32, "bf16", torch.device("cpu"))
    assert kernel.flops == 2 * 64 * 48 * 32 and kernel.bytes == 2 * (64 * 32 + 32 * 48 + 64 * 48)
    assert kernel.census().matmuls[0].min_dim == 32  # the smallest dimension, a power of two
    seconds = kernel.flops / (h100.peak_tflops.bf16 * 1e12 * 0.5)  # as if at half the dense peak
    row = bench.row(kernel, seconds, h100)
    assert row["fraction_of_peak"] == pytest.approx(0.5)
    assert row["profile_fraction"] == h100.achievable.matmul
    predicted = step_time.estimate(kernel.census(), 1, h100, launch_s=0.0).seconds
    assert row["predicted_s"] == pytest.approx(predicted)
    assert row["error_percent"] == pytest.approx((predicted - seconds) / seconds * 100)


def test_attention_and_memory_rows_use_their_own_fractions(bench: ModuleType, h100: GPUSpec) -> None:
    attention = bench.attention("a", 1, 2, 16, 8, "bf16", torch.device("cpu"), causal=True)
    # Forward 4·b·h·s²·d, backward 2.5 × that (equal head dims), as autoshard's profiler counts them.
    assert attention.flops == 4 * 2 * 16 * 16 * 8 * 7 // 2
    assert bench.row(attention, 1e-3, h100)["profile_fraction"] == h100.achievable.attention
    copy = bench.memory("m", 1024, torch.device("cpu"), "copy")
    row = bench.row(copy, copy.bytes / h100.memory_bandwidth_bytes_per_s, h100)
    assert row["fraction_of_peak"] == pytest.approx(1.0) and row["profile_fraction"] == h100.achievable.memory
    assert bench.row(copy, 1e-3, None)["predicted_s"] is None  # a GPU without a profile: measured only


def test_dry_run_writes_both_reports_with_the_lm_head_ratio(bench: ModuleType, tmp_path: Path) -> None:
    assert bench.main(["--dry-run", "--repeats", "1", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "gpu_kernels.json").read_text())
    assert report["meta"]["dry_run"] and report["meta"]["gpu_profile"] == "h100-sxm-80gb"
    assert {r["kind"] for r in report["rows"]} == {"gemm", "attention", "memory"}
    assert all(r["measured_s"] > 0 and r["predicted_s"] > 0 for r in report["rows"])
    ratio = report["summary"]["lm_head_unaligned_over_padded_bf16"]
    assert ratio["unaligned"] == "256x1001x64" and ratio["predicted"] == pytest.approx(1.0, rel=0.01)
    sweep = report["summary"]["alignment_sweep_over_padded"]
    assert {"N 1001 (256x1001x64)", "N 1002 (256x1002x64)", "N 1004 (256x1004x64)", "K 1001 (256x64x1001)",
            "M 255 (255x1008x64)"} <= set(sweep) and all(v > 0 for v in sweep.values())
    table = (tmp_path / "gpu_kernels.md").read_text()
    assert "DRY RUN" in table and "| GPT-2 LM head, vocabulary 1001 | bf16 |" in table
    assert "Alignment sweep (bf16)" in table
    tiles = report["summary"]["tile_sweep"]
    assert [(t["dtype"], t["m"], t["tiles"]) for t in tiles][:2] == [("bf16", 16, 1), ("bf16", 32, 1)]
    assert {t["dtype"] for t in tiles} == {"bf16", "fp32"} and report["summary"]["sms"] is None  # no GPU: unknown
    assert "Tile sweep (`M x 64x64`)" in table and "| bf16 | 128 | 1 | — |" in table


def test_a_step_memory_kernel_is_priced_from_the_census_of_its_own_op(bench: ModuleType, h100: GPUSpec) -> None:
    kernels = {k.name: k for k in bench.step_memory_kernels(torch.device("cpu"), dry=True)}
    gelu = kernels["GELU"]  # one op: 256 x 64 bf16 read, the same written
    assert gelu.bytes == 2 * 256 * 64 * 2 and gelu.census().kernels == 1 and gelu.census().matmuls == ()
    # The embedding lookup as the census counts it: the whole table read (1,008 x 64), ids, and the rows written.
    assert kernels["embedding"].bytes == 1008 * 64 * 2 + 256 * 8 + 256 * 64 * 2
    assert kernels["layer norm backward"].census().kernels >= 1
    row = bench.row(gelu, gelu.bytes / h100.memory_bandwidth_bytes_per_s, h100)
    assert row["fraction_of_peak"] == pytest.approx(1.0) and row["predicted_s"] > 0


def test_the_tile_table_counts_tiles_and_waves_against_the_largest_gemm(bench: ModuleType) -> None:
    rows = [{"name": f"tile sweep: M {m}", "dtype": "bf16", "shape": f"{m}x4096x4096", "fraction_of_peak": f,
             "error_percent": 0.0} for m, f in ((200, 0.2), (8192, 0.8))]
    small, large = bench.tile_table(rows, 80)
    assert (small["tiles"], small["waves"], small["of_largest"]) == (2 * 32, 0.8, pytest.approx(0.25))
    assert (large["tiles"], large["of_largest"]) == (64 * 32, 1.0)
    assert bench.tile_table(rows, None)[0]["waves"] is None


def test_without_a_gpu_it_says_so_in_one_line(bench: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    if torch.cuda.is_available():
        pytest.skip("a GPU is here")
    with pytest.raises(SystemExit) as stop:
        bench.main(["--out", "unused"])
    assert stop.value.code == 2 and "--dry-run" in capsys.readouterr().err
