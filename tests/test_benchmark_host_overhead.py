"""benchmarks/host_overhead.py: the host's time per counted kernel of narrow copies of real architectures. The
summary is checked on made-up timings; the copies are checked to keep their depth and to run; one small run checks
the report, never its timings."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.benchmark_scripts import load


def test_each_case_is_its_median_over_the_rounds_per_counted_kernel() -> None:
    bench = load("host_overhead")
    rows = [{"arch": "a", "mode": m, "repeat": r, "seconds": s} for m, times in
            (("step", (0.030, 0.020, 0.025)), ("checkpointed", (0.06, 0.05, 0.04)),
             ("op-checkpointed", (0.13, 0.13, 0.13)), ("optimizer", (0.01,) * 3))
            for r, s in enumerate(times)]
    kernels = {"a": {"step": 1000, "checkpointed": 1250, "op-checkpointed": 1200, "optimizer": 2000, "blocks": 10}}
    summary = {r["mode"]: r for r in bench.summarise(rows, kernels)}
    assert summary["step"]["us_per_kernel"] == pytest.approx(25.0)
    assert summary["checkpointed"]["us_per_kernel"] == pytest.approx(40.0)
    assert summary["optimizer"]["us_per_kernel"] == pytest.approx(5.0)
    # Checkpointing's own cost: 50 ms less 1,250 kernels at the plain step's 25 µs, over 10 blocks.
    assert summary["checkpointed"]["ms_per_block"] == pytest.approx(1.875, abs=0.01)  # rounded to 0.01 ms
    assert "ms_per_block" not in summary["step"]
    overall = bench.overall(list(summary.values()))
    assert overall["step_us"] == pytest.approx(25.0) and overall["step_range_us"] == [25.0, 25.0]
    assert overall["checkpoint_block_ms"] == pytest.approx(1.875, abs=0.01)
    # The op-selective policy's own cost: 130 ms less 1,200 kernels at 25 µs, over the same 10 blocks.
    assert overall["op_checkpoint_block_ms"] == pytest.approx(10.0, abs=0.01)
    assert overall["optimizer_us"] == pytest.approx(5.0)


def test_the_narrow_copies_keep_their_depth_and_train(tmp_path: Path) -> None:
    bench = load("host_overhead")
    import transformers

    for arch in bench.ARCHS:
        config = transformers.AutoConfig.from_pretrained(bench.write_config(arch, tmp_path / arch.name).parent)
        assert config.num_hidden_layers in (12, 16, 24), arch.name  # the real model's depth, not a shallow copy
        assert json.loads((tmp_path / arch.name / "config.json").read_text(encoding="utf-8"))[
            "attn_implementation"] == "eager"
    gpt2 = next(a for a in bench.ARCHS if a.name == "gpt2-medium")
    fns = bench.timers(gpt2, tmp_path / gpt2.name / "config.json", [f"transformer.h.{i}" for i in range(24)])
    assert set(fns) == set(bench.MODES)
    for fn in fns.values():
        fn()  # a forward + backward (plain, checkpointed) and an optimizer step run for real


def test_a_small_run_writes_the_report(tmp_path: Path) -> None:
    bench = load("host_overhead")
    assert bench.main(["--only", "gpt2-medium", "--steps", "1", "--repeats", "1", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "host_overhead.json").read_text(encoding="utf-8"))
    kernels = {r["mode"]: r["kernels"] for r in report["summary"]}
    assert set(kernels) == set(bench.MODES)
    assert kernels["checkpointed"] > kernels["step"] > 24  # recomputation adds the blocks' forward kernels
    assert next(r for r in report["summary"] if r["mode"] == "checkpointed")["blocks"] == 24  # every layer
    assert "ms_per_block" in next(r for r in report["summary"] if r["mode"] == "op-checkpointed")
    assert all(math.isfinite(r["us_per_kernel"]) and r["us_per_kernel"] > 0 for r in report["summary"])
    assert "| gpt2-medium | checkpointed |" in (tmp_path / "host_overhead.md").read_text(encoding="utf-8")


def test_an_unknown_architecture_is_refused() -> None:
    with pytest.raises(SystemExit) as exit_info:
        load("host_overhead").main(["--only", "resnet"])
    assert exit_info.value.code == 2


def test_cuda_without_a_gpu_is_refused_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the refusal is for machines without one")
    assert load("host_overhead").main(["--device", "cuda"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --device cuda:") and "\n" not in err
