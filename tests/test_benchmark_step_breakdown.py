"""benchmarks/step_breakdown.py: one step's time by part under torch.profiler (on CPU here: the plumbing)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.benchmark_scripts import BENCHMARKS, load


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load("step_breakdown")


def test_dry_run_attributes_a_real_steps_ops_to_every_part_and_predicts_the_same_case(bench: ModuleType,
                                                                                        tmp_path: Path) -> None:
    assert bench.main(["--dry-run", "--cases", "tiny-gpt2", "--steps", "2", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "step_breakdown.json").read_text())
    (row,) = report["cases"]
    assert "error" not in row, row.get("error")
    measured, predicted = row["measured"], row["predicted"]
    assert set(measured["seconds"]) == set(predicted["seconds"]) == set(bench.CATEGORIES)
    # The GEMMs, the elementwise ops and the optimizer's own ops (inside optimizer.step()) each took time.
    assert measured["seconds"]["matmul"] > 0 and measured["seconds"]["memory"] > 0
    assert measured["seconds"]["optimizer"] > 0 and measured["seconds"]["communication"] == 0
    assert any(t["category"] == "optimizer" for t in measured["top_ops"])
    assert all(t["op"] in ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")
               for t in measured["top_matmul_shapes"])
    assert measured["wall_s"] > 0 and measured["profiled_wall_s"] > 0
    assert predicted["step_s"] > 0 and predicted["kernels_forward_backward"] > 0
    assert predicted["matmul_classes"] and predicted["matmul_classes"][0]["seconds"] > 0
    table = (tmp_path / "step_breakdown.md").read_text()
    assert "## tiny-gpt2: tiny-gpt2, batch 2, sequence 64, 32-true" in table and "| optimizer |" in table
    assert "**Dry run**" in table


def test_a_failing_case_is_recorded_and_the_others_still_run(bench: ModuleType, tmp_path: Path) -> None:
    broken = bench.Case("broken", "no-such-model", 2, 64, "32-true")
    row = bench.run_case(broken, bench.torch.device("cpu"), bench.DRY_RUN_GPU, tmp_path, steps=1)
    assert row["case"] == "broken" and "no-such-model" in row["error"]


def test_unknown_case_and_no_gpu_are_refused_in_one_line(tmp_path: Path) -> None:
    import os

    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    for args, expected in ((["--dry-run", "--cases", "nope"], "--cases: unknown nope"), ([], "--dry-run")):
        done = subprocess.run([sys.executable, str(BENCHMARKS / "step_breakdown.py"), *args, "--out", str(tmp_path)],
                              capture_output=True, text=True, timeout=120, env=env)
        assert done.returncode == 2 and "Traceback" not in done.stderr
        assert expected in done.stderr.strip().splitlines()[-1]
