"""benchmarks/memory_accuracy.py: on CPU the prediction and the real step count with the same tracker."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "memory_accuracy.py"


@pytest.fixture(scope="module")
def bench():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("memory_accuracy", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file executes
    spec.loader.exec_module(module)
    return module


def test_cpu_prediction_matches_real_step_exactly_and_report_is_written(bench, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cases = [
        bench.Case("tiny-gpt2", 2, 32, "32-true", False),
        bench.Case("tiny-llama", 2, 32, "bf16-mixed", True),
    ]
    assert bench.main(["--device", "cpu", "--out", str(tmp_path)], cases=cases) == 0

    report = json.loads((tmp_path / "memory_accuracy.json").read_text())
    rows = report["rows"]
    assert [r["error"] for r in rows] == [None, None]
    assert [r["predicted_bytes"] for r in rows] == [r["measured_bytes"] for r in rows]
    assert [r["error_pct"] for r in rows] == [0.0, 0.0]
    assert report["summary"]["max_abs_error_pct"] == 0.0
    assert report["meta"]["torch"] and report["meta"]["command"].startswith("python benchmarks/memory_accuracy.py")
    markdown = (tmp_path / "memory_accuracy.md").read_text()
    assert "| tiny-llama | bf16-mixed | 2 | 32 | on |" in markdown


def test_failed_case_is_recorded_in_its_row_not_raised(bench, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cases = [bench.Case("no-such-model", 1, None, "32-true", False)]
    assert bench.main(["--device", "cpu", "--out", str(tmp_path)], cases=cases) == 0
    row = json.loads((tmp_path / "memory_accuracy.json").read_text())["rows"][0]
    assert row["error"] and row["measured_bytes"] is None
