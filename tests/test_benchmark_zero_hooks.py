"""benchmarks/zero_hooks.py: the ZeRO engines' host time per parameter (ZeRO-1/2) and per gathered module (ZeRO-3),
as slopes over a stack's layer count, less plain torch's.

The summary is checked on rows made up for it (the slopes are what the rows say); one slow test runs the real
engines on a short stack and checks what the report holds, never its timings.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.benchmark_scripts import load


def _rows(per_layer_ms: dict[str, float]) -> list[dict[str, object]]:
    return [{"kind": kind, "layers": n, "width": 320, "median_s": (1.0 + ms * n) / 1e3, "repeat": r}
            for kind, ms in per_layer_ms.items() for n in (8, 16, 32) for r in (0, 1)]


def test_the_summary_is_each_engines_slope_over_plain_torchs() -> None:
    bench = load("zero_hooks")
    summary = bench.summarise(_rows({"torch": 0.1, "zero1": 0.5, "zero2": 0.3, "zero3": 1.2}))
    assert summary["zero3"]["over_torch_s_per_layer"] == pytest.approx(1.1e-3)
    assert summary["zero1"]["over_torch_s_per_tensor"] == pytest.approx(0.2e-3)  # a weight and a bias per layer
    assert summary["zero2"]["over_torch_s_per_tensor"] == pytest.approx(0.1e-3)
    assert "over_torch_s_per_tensor" not in summary["zero3"]  # ZeRO-3's unit is the module it gathers


def test_one_layer_count_is_refused() -> None:
    assert load("zero_hooks").main(["--layers", "8", "8"]) == 2


@pytest.mark.slow  # eight processes, six of them starting DeepSpeed: about half a minute on two cores
def test_the_benchmark_runs_the_real_engines(tmp_path: Path) -> None:
    bench = load("zero_hooks")
    assert bench.main(["--layers", "2", "4", "--steps", "2", "--warmup", "1", "--repeats", "1",
                       "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "zero_hooks.json").read_text(encoding="utf-8"))
    assert sorted((r["kind"], r["layers"]) for r in report["rows"]) == sorted(
        (k, n) for k in ("torch", "zero1", "zero2", "zero3") for n in (2, 4))
    assert all(r["median_s"] > 0 for r in report["rows"])
    assert "| 4 |" in (tmp_path / "zero_hooks.md").read_text(encoding="utf-8")
