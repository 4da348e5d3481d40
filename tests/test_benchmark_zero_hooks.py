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


def test_the_step_pass_is_a_line_per_parameter_tensor_beside_the_hooks() -> None:
    # The narrow stack's step() rows: a line over the parameter tensors (two per layer), its intercept the part
    # paid once per step; the hooks' summary is computed from the hooks' rows alone.
    bench = load("zero_hooks")
    step_rows = [{"kind": kind, "layers": n, "width": 8, "median_s": 1.0, "step_median_s": (a + b * 2 * n) / 1e3,
                  "repeat": 0, "pass": "step"}
                 for kind, a, b in (("torch", 0.5, 0.07), ("zero1", 2.0, 0.05), ("zero2", 3.0, 0.025))
                 for n in (16, 32, 64)]
    summary = bench.summarise(_rows({"torch": 0.1, "zero1": 0.5, "zero2": 0.3, "zero3": 1.2}) + step_rows)
    assert summary["zero2"]["over_torch_s_per_tensor"] == pytest.approx(0.1e-3)
    assert summary["step"]["zero2"]["slope_s_per_tensor"] == pytest.approx(0.025e-3)
    assert summary["step"]["zero2"]["intercept_s"] == pytest.approx(3.0e-3)
    assert summary["step"]["zero1"]["intercept_s"] == pytest.approx(2.0e-3)
    only_step = bench.summarise(step_rows)
    assert set(only_step) == {"step"}
    page = bench.markdown({"meta": {"date": "d", "machine": "c", "cores": 2, "device": "CPU only", "python": "3",
                                    "torch": "t", "deepspeed": "ds", "command": "x", "step_width": 8},
                           "summary": only_step})
    assert "## The engine's step" in page and "| 64 | 9.46 | 8.40 | 6.20 |" in page


def test_zero3s_hooks_are_priced_by_what_each_module_owns() -> None:
    # Forward + backward over torch's, per layer: the wide stack's gathered weight (hooks pass), the narrow stack
    # with every parameter gathered or every one persistent (step pass), the ReLU stack (modules pass).
    bench = load("zero_hooks")

    def rows(name: str, per_layer_ms: dict[str, float]) -> list[dict[str, object]]:
        return [{"kind": kind, "layers": n, "width": 8, "median_s": (2.0 + ms * n) / 1e3,
                 "step_median_s": (1.0 + 0.01 * n) / 1e3, "repeat": 0, "pass": name}
                for kind, ms in per_layer_ms.items() for n in (16, 64)]

    summary = bench.summarise(
        rows("hooks", {"torch": 0.1, "zero1": 0.5, "zero2": 0.3, "zero3": 1.2})
        + rows("step", {"torch": 0.05, "zero1": 0.2, "zero2": 0.2, "zero3-gathered": 1.05, "zero3": 0.85})
        + rows("modules", {"torch": 0.01, "zero3": 0.41}))
    assert summary["zero3_modules"] == pytest.approx(
        {"gathered": 1.1e-3, "gathered_narrow": 1.0e-3, "persistent": 0.8e-3, "parameterless": 0.4e-3})
    assert summary["step"]["zero3"]["slope_s_per_tensor"] == pytest.approx(0.005e-3)  # two tensors per layer
    page = bench.markdown({"meta": {"date": "d", "machine": "c", "cores": 2, "device": "CPU only", "python": "3",
                                    "torch": "t", "deepspeed": "ds", "command": "x", "step_width": 8, "width": 320,
                                    "steps": 3, "warmup": 1, "repeats": 1, "accelerator": "cpu"},
                           "summary": json.loads(json.dumps(summary))})  # as read back: layer counts as strings
    assert "## ZeRO-3's hooks by module" in page and "| no parameter (`nn.ReLU`) | 0.400 |" in page
    assert "| 64 | 2.64 | 28.24 |" in page  # the ReLU stack's medians, torch and ZeRO-3


def test_the_recompute_pass_is_zero3s_extra_over_torch_when_checkpointed() -> None:
    # Per kind of module: ZeRO-3 over torch, checkpointed, less ZeRO-3 over torch, wrapped (the wrapper's own
    # hooks, run once either way, cancel): the hooks a module runs again in the recomputation.
    bench = load("zero_hooks")
    per_layer_ms = {("torch", "wrapped-linear"): 0.1, ("torch", "checkpointed-linear"): 0.5,
                    ("zero3-gathered", "wrapped-linear"): 1.6, ("zero3-gathered", "checkpointed-linear"): 2.5,
                    ("zero3", "wrapped-linear"): 1.3, ("zero3", "checkpointed-linear"): 2.0,
                    ("torch", "wrapped-relu"): 0.05, ("torch", "checkpointed-relu"): 0.35,
                    ("zero3", "wrapped-relu"): 0.95, ("zero3", "checkpointed-relu"): 1.55}
    assert set(per_layer_ms) == set(bench.RECOMPUTE_RUNS)
    rows = [{"kind": kind, "unit": unit, "layers": n, "width": 8, "median_s": (3.0 + ms * n) / 1e3,
             "step_median_s": 1e-3, "repeat": 0, "pass": "recompute"}
            for (kind, unit), ms in per_layer_ms.items() for n in (16, 48)]
    summary = bench.summarise(rows)
    assert set(summary) == {"recompute"}
    modules = summary["recompute"]["modules"]
    assert {k: v["recompute_s"] for k, v in modules.items()} == pytest.approx(
        {"gathered": 0.5e-3, "persistent": 0.3e-3, "parameterless": 0.3e-3})
    assert modules["gathered"]["wrapped_over_torch_s"] == pytest.approx(1.5e-3)
    page = bench.markdown({"meta": {"date": "d", "machine": "c", "cores": 2, "device": "CPU only", "python": "3",
                                    "torch": "t", "deepspeed": "ds", "command": "x", "step_width": 8},
                           "summary": json.loads(json.dumps(summary))})
    assert "## ZeRO-3's hooks again in the recomputation" in page
    assert "| no parameter (`nn.ReLU`) | 0.900 | 1.200 | 0.300 |" in page


def test_one_layer_count_is_refused() -> None:
    assert load("zero_hooks").main(["--layers", "8", "8"]) == 2


@pytest.mark.slow  # forty-two processes, twenty-eight of them starting DeepSpeed: about five minutes on two cores
def test_the_benchmark_runs_the_real_engines(tmp_path: Path) -> None:
    bench = load("zero_hooks")
    assert bench.main(["--layers", "2", "4", "--steps", "2", "--warmup", "1", "--repeats", "1",
                       "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "zero_hooks.json").read_text(encoding="utf-8"))
    hooks = [r for r in report["rows"] if r.get("pass") == "hooks"]
    assert sorted((r["kind"], r["layers"]) for r in hooks) == sorted(
        (k, n) for k in ("torch", "zero1", "zero2", "zero3") for n in (2, 4))
    steps = [r for r in report["rows"] if r.get("pass") == "step"]
    assert sorted((r["kind"], r["layers"], r["width"]) for r in steps) == sorted(
        (k, n, 8) for k in ("torch", "zero1", "zero2", "zero3-gathered", "zero3") for n in (2, 4))
    modules = [r for r in report["rows"] if r.get("pass") == "modules"]
    assert sorted((r["kind"], r["layers"], r["unit"]) for r in modules) == sorted(
        (k, n, "relu") for k in ("torch", "zero3") for n in (2, 4))
    recompute = [r for r in report["rows"] if r.get("pass") == "recompute"]
    assert sorted((r["kind"], r["unit"], r["layers"]) for r in recompute) == sorted(
        (k, u, n) for k, u in bench.RECOMPUTE_RUNS for n in (2, 4))
    assert all(r["median_s"] > 0 and r["step_median_s"] > 0 for r in report["rows"])
    page = (tmp_path / "zero_hooks.md").read_text(encoding="utf-8")
    assert "| 4 |" in page and "## The engine's step" in page and "## ZeRO-3's hooks by module" in page
