"""benchmarks/cpu_optimizer.py: the host optimizer step measured per optimizer and dtype against autoshard's
pricing by traced bytes. The summary is checked on made-up timings; one run on a small size checks the report,
never its timings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.benchmark_scripts import load


def test_speedups_are_over_fp32_adamw_in_the_same_repeat() -> None:
    bench = load("cpu_optimizer")
    seconds = {("adamw", "float32"): 4.0, ("sgd", "float32"): 1.0, ("adamw", "bfloat16"): 2.0}
    rows = [{"optimizer": n, "dtype": d, "repeat": r, "seconds": s * (1 + r)} for (n, d), s in seconds.items()
            for r in (0, 1)]  # the second repeat twice as slow throughout: the ratios hold
    traced = {("adamw", "float32"): 84.0, ("sgd", "float32"): 32.0, ("adamw", "bfloat16"): 42.0}
    summary = {(r["optimizer"], r["dtype"]): r for r in bench.summarise(rows, traced)}
    assert summary[("sgd", "float32")]["measured_speedup"] == pytest.approx(4.0)
    assert summary[("sgd", "float32")]["priced_speedup"] == pytest.approx(84 / 32)
    assert summary[("adamw", "bfloat16")]["priced_over_measured_pct"] == pytest.approx(0.0)
    assert summary[("adamw", "float32")]["median_s"] == pytest.approx(6.0)


def test_traced_bytes_follow_the_optimizer_and_dtype() -> None:
    bench = load("cpu_optimizer")
    import torch

    adamw = bench.traced_bytes_per_parameter("adamw", torch.float32)
    assert adamw == pytest.approx(84.0, rel=0.01)
    assert bench.traced_bytes_per_parameter("sgd", torch.float32) < adamw / 2
    assert bench.traced_bytes_per_parameter("adamw", torch.bfloat16) == pytest.approx(adamw / 2, rel=0.01)


def test_a_small_run_writes_the_report(tmp_path: Path) -> None:
    bench = load("cpu_optimizer")
    assert bench.main(["--params", "4096", "--tensors", "4", "--steps", "1", "--repeats", "1",
                       "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "cpu_optimizer.json").read_text(encoding="utf-8"))
    assert len(report["summary"]) == len(bench.CASES) and len(report["rows"]) == len(bench.CASES)
    assert report["summary"][0]["measured_speedup"] == pytest.approx(1.0)
    assert "| sgd | float32 |" in (tmp_path / "cpu_optimizer.md").read_text(encoding="utf-8")


def test_more_tensors_than_parameters_is_refused() -> None:
    assert load("cpu_optimizer").main(["--params", "2", "--tensors", "4"]) == 2
