"""benchmarks/fsdp_hooks.py: FSDP2's host time per unit and per parameter tensor (hooks) and per parameter tensor
(the optimizer on DTensors), as slopes over a stack's unit count, less plain torch's.

The summary is checked on rows made up for it (the slopes are what the rows say); one slow test runs real FSDP2 on
a short stack and checks what the report holds, never its timings.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.benchmark_scripts import load


def _rows(unit_ms: dict[str, float], tensor_ms: dict[str, float], opt_ms: dict[str, float]) -> list[dict[str, object]]:
    bench = load("fsdp_hooks")
    rows: list[dict[str, object]] = []
    for kind in bench.KINDS:
        for shape, linears in bench.SHAPES.items():
            tensors_per_unit = 2 * linears
            per_unit = unit_ms[kind] + tensors_per_unit * tensor_ms[kind]
            for n in (4, 8, 16):
                plain = kind.startswith("torch")
                rows += [{"kind": kind, "shape": shape, "units": n, "tensors": n * tensors_per_unit, "width": 64,
                          "median_s": (1.0 + per_unit * n) / 1e3, "repeat": r,
                          "optimizer_s": {impl: (0.5 + (0.02 if plain else ms) * n * tensors_per_unit) / 1e3
                                          for impl, ms in opt_ms.items()}} for r in (0, 1)]
    return rows


def test_the_summary_splits_each_kinds_slope_over_torch_into_units_and_tensors() -> None:
    bench = load("fsdp_hooks")
    unit = {k: 0.0 if k.startswith("torch") else 0.4 for k in bench.KINDS}
    tensor = {k: 0.01 if k.startswith("torch") else 0.05 for k in bench.KINDS}
    summary = bench.summarise(_rows(unit, tensor, {"for-loop": 0.15, "foreach": 0.04}))
    split = summary["forward_backward"]["fsdp-raf-bf16"]["split"]
    assert split["s_per_unit"] == pytest.approx(0.4e-3)
    assert split["s_per_tensor"] == pytest.approx(0.04e-3)  # over torch's 0.01
    assert summary["optimizer"]["for-loop"]["over_torch_s_per_tensor"] == pytest.approx(0.13e-3)
    assert summary["optimizer"]["foreach"]["over_torch_s_per_tensor"] == pytest.approx(0.02e-3)
    assert len(summary["forward_backward"]["fsdp-keep-fp32"]["split_by_repeat"]) == 2


def test_one_unit_count_is_refused() -> None:
    assert load("fsdp_hooks").main(["--units", "8", "8"]) == 2


@pytest.mark.slow  # 24 processes starting torch: about a minute on two cores
def test_the_benchmark_runs_real_fsdp2(tmp_path: Path) -> None:
    bench = load("fsdp_hooks")
    assert bench.main(["--units", "1", "2", "--steps", "2", "--warmup", "2", "--repeats", "1",
                       "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "fsdp_hooks.json").read_text(encoding="utf-8"))
    assert sorted((r["kind"], r["shape"], r["units"]) for r in report["rows"]) == sorted(
        (k, s, n) for k in bench.KINDS for s in bench.SHAPES for n in (1, 2))
    assert all(r["median_s"] > 0 and min(r["optimizer_s"].values()) > 0 for r in report["rows"])
    assert "| fsdp-raf-bf16 | block |" in (tmp_path / "fsdp_hooks.md").read_text(encoding="utf-8")
