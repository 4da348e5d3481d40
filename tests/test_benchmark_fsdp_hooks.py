"""benchmarks/fsdp_hooks.py: FSDP2's host time per unit and per parameter tensor (hooks) and per parameter tensor
(the optimizer on DTensors), as slopes over a stack's unit count, less plain torch's.

The summary is checked on rows made up for it (the slopes are what the rows say); one slow test runs real FSDP2 on
a short stack and checks what the report holds, never its timings.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.benchmark_scripts import load


def _rows(unit_ms: dict[str, float], tensor_ms: dict[str, float], opt_ms: dict[str, float],
          kinds: tuple[str, ...] | None = None) -> list[dict[str, object]]:
    bench = load("fsdp_hooks")
    rows: list[dict[str, object]] = []
    for kind in kinds or bench.KINDS:
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


def test_a_subset_of_kinds_is_summarised_and_its_optimizer_compared_with_plain_bf16() -> None:
    bench = load("fsdp_hooks")
    kinds = ("torch-bf16", "fsdp-raf-bf16", "fsdp-keep-bf16")
    unit = {k: 0.0 if k.startswith("torch") else 0.4 for k in bench.KINDS}
    tensor = {k: 0.01 if k.startswith("torch") else 0.05 for k in bench.KINDS}
    summary = bench.summarise(_rows(unit, tensor, {"for-loop": 0.15, "foreach": 0.04}, kinds))
    assert summary["kinds"] == list(kinds) and set(summary["forward_backward"]) == set(kinds)
    assert summary["forward_backward"]["fsdp-keep-bf16"]["split"]["s_per_unit"] == pytest.approx(0.4e-3)
    assert summary["optimizer_baseline"] == "torch-bf16"
    assert summary["optimizer"]["for-loop"]["over_torch_s_per_tensor"] == pytest.approx(0.13e-3)


def test_a_cuda_report_names_the_gpu_and_nccl() -> None:
    bench = load("fsdp_hooks")
    kinds = ("torch-bf16", "fsdp-keep-bf16")
    rows = _rows({k: 0.1 for k in bench.KINDS}, {k: 0.01 for k in bench.KINDS}, {"for-loop": 0.1, "foreach": 0.02},
                 kinds)
    meta = {"date": "2026-11-29 10:00 UTC", "machine": "Intel Xeon", "cores": 16, "python": "3.12.3",
            "torch": "2.11.0", "command": "python benchmarks/fsdp_hooks.py --accelerator cuda", "units": [4, 8, 16],
            "width": 64, "steps": 10, "warmup": 3, "repeats": 2, "accelerator": "cuda", "device": "NVIDIA H200"}
    text = bench.markdown({"meta": meta, "summary": bench.summarise(rows), "rows": rows})
    assert "NVIDIA H200" in text and "a real NCCL group" in text and "gloo" not in text
    assert "| fsdp-keep-bf16 | block |" in text and "| fsdp-raf-bf16 |" not in text


def test_one_unit_count_is_refused() -> None:
    assert load("fsdp_hooks").main(["--units", "8", "8"]) == 2


@pytest.mark.parametrize("kinds", [["fsdp-raf-bf16"], ["torch-fp32", "fsdp-keep-bf16"], ["torch-fp32", "torch-bf16"]])
def test_kinds_without_an_fsdp_kind_or_its_baseline_are_refused(kinds: list[str],
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert load("fsdp_hooks").main(["--kinds", *kinds]) == 2
    assert capsys.readouterr().err.startswith("error: --kinds needs")


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is here: --accelerator cuda would measure")
def test_cuda_without_a_gpu_is_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert load("fsdp_hooks").main(["--accelerator", "cuda", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--accelerator cuda" in err and "no CUDA GPU" in err
    assert not list(tmp_path.iterdir())  # nothing measured, nothing written


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
