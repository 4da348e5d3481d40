"""The GPU campaign's plumbing on CPU: benchmarks/gpu_strategies.py and benchmarks/gpu_campaign.sh --dry-run."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path
from types import ModuleType

import pytest

from tests.benchmark_scripts import BENCHMARKS, load

ROOT = BENCHMARKS.parent


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load("gpu_strategies")


def _row(strategy: str, samples_per_s: float | None, recommended: bool = False) -> dict:
    return {"strategy": strategy, "recommended": recommended,
            "measured": None if samples_per_s is None else {"samples_per_s": samples_per_s}}


@pytest.mark.parametrize(("rows", "fastest", "ok"), [
    ([_row("ddp", 96.0, True), _row("fsdp", 100.0)], "fsdp", True),  # 4 % slower: within 5 %
    ([_row("ddp", 94.0, True), _row("fsdp", 100.0)], "fsdp", False),  # 6 % slower
    ([_row("ddp", 100.0, True), _row("fsdp", 50.0)], "ddp", True),
    ([_row("ddp", None, True), _row("fsdp", 50.0)], "fsdp", None),  # the recommended one did not run
    ([_row("ddp", None, True)], None, None),
])
def test_recommendation_is_judged_against_the_fastest_measured(bench: ModuleType, rows: list, fastest: str | None,
                                                               ok: bool | None) -> None:
    result = bench.verdict(rows)
    assert result["recommended"] == "ddp" and result["fastest"] == fastest and result["ok"] is ok


def test_warm_up_steps_are_dropped_and_the_median_is_taken(bench: ModuleType) -> None:
    steps = [{"step_time_s": t, "samples_per_s": 8 / t, "tokens_per_s": 512 / t, "peak_memory_bytes": p, "loss": 1.0}
             for t, p in ((9.0, 900), (1.0, 100), (4.0, 300), (2.0, 200))]
    summary = bench.summarize_steps(steps, 1)
    assert summary["step_time_s"] == 2.0 and summary["timed_steps"] == 3
    assert summary["samples_per_s"] == pytest.approx(4.0) and summary["tokens_per_s"] == pytest.approx(256.0)
    assert summary["peak_bytes"] == 300  # the warm-up step's 900 is not a timed step's
    with pytest.raises(ValueError, match="no step after the 4 warm-up"):
        bench.summarize_steps(steps, 4)


def test_dry_run_trains_a_strategy_in_fit_workers_and_writes_its_tables(bench: ModuleType, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert bench.main(["--dry-run", "--models", "tiny-gpt2", "--strategies", "ddp", "--out", str(out),
                       "--runs", str(tmp_path / "runs")]) == 0
    report = json.loads((out / "gpu_strategies.json").read_text())
    assert report["meta"]["machine"]["device"] == "cpu" and report["meta"]["world_size"] == 1
    (model,) = report["models"]
    assert model["model"] == "tiny-gpt2" and model["error"] is None
    (row,) = model["rows"]
    assert row["strategy"] == "ddp" and row["error"] is None, row["error"]
    assert row["checkpointing"] == (None if not row["activation_checkpointing"] else "full")
    measured = row["measured"]
    assert measured["timed_steps"] == 2 and measured["step_time_s"] > 0
    assert measured["tokens_per_s"] == pytest.approx(measured["samples_per_s"] * 64)
    assert measured["peak_bytes"] is None  # no CUDA allocator on CPU
    assert row["predicted"]["peak_bytes"] > 0 and row["predicted"]["step_time_s"] > 0
    assert (tmp_path / "runs" / "tiny-gpt2-ddp" / "plan.json").is_file()
    table = (out / "gpu_strategies.md").read_text()
    assert "## tiny-gpt2 — " in table and "micro-batch 2, sequence 64, 32-true" in table and "| ddp |" in table
    assert f"| {row['checkpointing'] or 'off'} |" in table


def test_no_gpu_without_dry_run_is_refused_in_one_line(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(BENCHMARKS / "gpu_strategies.py"), "--out", str(tmp_path)],
                          capture_output=True, text=True, cwd=ROOT, timeout=120, env=_env())
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "--dry-run" in done.stderr.strip().splitlines()[-1]


def _env() -> dict[str, str]:
    import os

    # The campaign's Python is $PYTHON (else python3 on PATH): this interpreter, whatever PATH says.
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", PYTHON=sys.executable)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def _campaign(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    out = tmp_path / "campaign-out"
    done = subprocess.run(["bash", str(BENCHMARKS / "gpu_campaign.sh"), "--dry-run", "--out", str(out), *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=900, env=_env())
    return done, out


def test_campaign_records_versions_steps_and_an_archive(tmp_path: Path) -> None:
    done, out = _campaign(tmp_path, "--steps", "ops")
    assert done.returncode == 0, done.stderr
    summary = (out / "summary.md").read_text()
    assert "| setup | ok |" in summary and "| ops | ok |" in summary and "| pytest |" not in summary
    assert "torch: " in summary and "deepspeed: " in summary
    with tarfile.open(out / "gpu_campaign.tar.gz") as archive:
        names = set(archive.getnames())
    assert {"campaign/versions.json", "campaign/logs/01-setup.log", "campaign/logs/02-ops.log"} <= names


SHORT_PLAN = [("setup", 40), ("breakdown", 40), ("host", 60), ("zero-hooks", 110), ("fsdp-hooks", 60),
              ("strategies", 100), ("memory-single", 80), ("memory-sharded", 60), ("published", 40)]
"""--short: where a step's GPU time goes and the host's side first (what the 2026-11-28 sessions could not
explain), then what they did not reach."""


def _plan(*args: str) -> list[tuple[str, int]]:
    done = subprocess.run(["bash", str(BENCHMARKS / "gpu_campaign.sh"), "--plan", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=60, env=_env())
    assert done.returncode == 0, done.stderr
    return [(name, int(limit)) for name, limit in (line.split() for line in done.stdout.splitlines())]


def test_short_plan_measures_the_host_side_first_within_one_device_call() -> None:
    plan = _plan("--short")
    assert plan[:-1] == SHORT_PLAN
    assert plan[-1] == ("total", sum(limit for _, limit in SHORT_PLAN)) and plan[-1][1] <= 590  # 600 s a call


@pytest.mark.parametrize("steps", [
    "pytest,kernels,memory-single", "memory-sharded,published,zero-hooks", "ops,strategies",
    "breakdown,probe,host,fsdp-hooks",
])
def test_the_full_campaigns_four_calls_each_fit_one_device_call(steps: str) -> None:
    assert _plan("--steps", steps)[-1][1] <= 590


def test_the_four_calls_run_every_step_of_the_full_campaign() -> None:
    every = {name for name, _ in _plan()} - {"setup", "total"}
    assert "fsdp-hooks" in every
    calls = ("pytest,kernels,memory-single", "memory-sharded,published,zero-hooks", "ops,strategies",
             "breakdown,probe,host,fsdp-hooks")
    assert sorted(s for call in calls for s in call.split(",")) == sorted(every)


def test_campaign_refuses_an_unknown_step_in_one_line(tmp_path: Path) -> None:
    done, _ = _campaign(tmp_path, "--steps", "memory")
    assert done.returncode == 2 and "unknown step 'memory'" in done.stderr and len(done.stderr.splitlines()) == 1


@pytest.mark.slow  # every step in miniature: about 3 minutes on 2 cores
def test_campaign_dry_run_writes_every_table(tmp_path: Path) -> None:
    done, out = _campaign(tmp_path)
    assert done.returncode == 0, done.stderr
    summary = (out / "summary.md").read_text()
    for step in ("setup", "pytest", "kernels", "probe", "memory-single", "memory-sharded", "published", "zero-hooks",
                 "fsdp-hooks", "ops", "strategies", "host"):
        assert f"| {step} | ok |" in summary, summary
    docs = out / "campaign" / "docs" / "benchmarks"
    for name in ("gpu_kernels", "gpu_published", "gpu_memory_accuracy_single", "gpu_memory_accuracy_sharded",
                 "gpu_zero_hooks", "gpu_fsdp_hooks", "gpu_strategies", "host_overhead"):
        assert (docs / f"{name}.md").is_file() and json.loads((docs / f"{name}.json").read_text())
    single = json.loads((docs / "gpu_memory_accuracy_single.json").read_text())
    assert {r["model"] for r in single["rows"]} == {"tiny-gpt2", "tiny-llama"}
    strategies = json.loads((docs / "gpu_strategies.json").read_text())
    assert all(r["measured"] for m in strategies["models"] for r in m["rows"]), strategies


@pytest.mark.slow  # the one-call plan in miniature: about 4 minutes on 2 cores
def test_short_campaign_runs_the_one_call_steps_only(tmp_path: Path) -> None:
    done, out = _campaign(tmp_path, "--short")
    assert done.returncode == 0, done.stderr
    summary = (out / "summary.md").read_text()
    ran = [name for name, _ in SHORT_PLAN]
    for step in ran:
        assert f"| {step} | ok |" in summary, summary
    assert [line.split("|")[1].strip() for line in summary.splitlines()
            if line.startswith("| ") and line.split("|")[1].strip() in ran] == ran  # the host's side first
    for step in ("pytest", "kernels", "probe", "ops"):
        assert f"| {step} |" not in summary, summary
    docs = out / "campaign" / "docs" / "benchmarks"
    assert {r["kind"] for r in json.loads((docs / "gpu_fsdp_hooks.json").read_text())["rows"]} == {
        "torch-bf16", "fsdp-keep-bf16"}
