"""benchmarks/fit_overhead.py: both sides train the same model on the same data, and the report says so.

The end-to-end tests run the script as a user does (``python benchmarks/fit_overhead.py``), since fit() starts
its workers by running the calling script again. They check behaviour (steps counted, losses identical, the
JSON and the table written), never timing values.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.benchmark_scripts import load

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "fit_overhead.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load("fit_overhead")


def run_benchmark(args: list[str], tmp_path: Path, timeout: float) -> tuple[dict[str, Any], str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p))
    for name in ("RANK", "WORLD_SIZE", "AUTOSHARD_RUN_DIR"):
        env.pop(name, None)
    out = tmp_path / "report.json"
    cmd = [sys.executable, str(SCRIPT), *args, "--out", str(out)]
    proc = subprocess.run(cmd, check=False, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{cmd} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return json.loads(out.read_text()), proc.stdout


def test_defaults_match_the_issue(bench: ModuleType) -> None:
    args = bench.parse_args([])
    assert args.backends == ["ddp", "fsdp", "deepspeed_stage_2"]
    assert (args.processes, args.model, args.batch_size, args.seq_len) == (2, "tiny-gpt2", 4, 64)
    assert (args.steps, args.warmup, args.repeats) == (30, 5, 3)
    assert args.out == Path("docs/benchmarks/fit_overhead.json")
    assert not args.hand_worker


@pytest.mark.parametrize("argv", [
    ["--backends", "deepspeed_stage_3_offload"],
    ["--backends", "ddp", "ddp"],
    ["--steps", "0"],
    ["--repeats", "-1"],
    ["--processes", "two"],
    ["--warmup", "-1"],
    ["--timeout-s", "0"],
])
def test_bad_command_line_exits_with_usage_error(bench: ModuleType, argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        bench.parse_args(argv)
    assert exc.value.code == 2


@pytest.mark.parametrize(("change", "refused"), [
    ({"precision": "bf16-mixed"}, "precision bf16-mixed"),
    ({"gradient_accumulation": 2}, "gradient accumulation 2"),
    ({"activation_checkpointing": True}, "activation checkpointing"),
    ({"settings": {"comm_hook": "powersgd"}}, "comm_hook=powersgd"),
])
def test_plan_the_hand_written_loop_does_not_implement_is_refused(bench: ModuleType, change: dict[str, Any],
                                                                  refused: str) -> None:
    import dataclasses

    from autoshard.planner import plan_file as pj

    hardware = pj.HardwareFingerprint(gpu=None, gpu_memory_bytes=None, gpus_per_node=2, nodes=1, device_type="cpu",
                                      backend="gloo", nvme_path=None)
    model = pj.ModelFingerprint(name="m", parameter_count=1, block_class=None, layout_hash="0" * 16)
    plan = pj.ExportedPlan(strategy="ddp", family="ddp", micro_batch_size=4, gradient_accumulation=1,
                           activation_checkpointing=False, settings={"comm_hook": "none"}, precision="32-true",
                           optimizer="adamw", seq_len=64, model=model, hardware=hardware)
    bench.check_plan(plan)
    with pytest.raises(ValueError, match=refused):
        bench.check_plan(dataclasses.replace(plan, **change))


def test_summary_pools_repeats_and_reports_overhead_per_repeat(bench: ModuleType, tmp_path: Path) -> None:
    side = bench.SideRun
    rounds = [
        {"order": "hand-fit", "hand": side(step_time_s=(1.0, 1.0, 3.0), losses=(2.0, 1.0)),
         "fit": side(step_time_s=(1.1, 1.1, 3.0), losses=(2.0, 1.5))},
        {"order": "fit-hand", "hand": side(step_time_s=(2.0, 2.0, 2.0), losses=(2.0, 1.0), foreign_cores=0.5),
         "fit": side(step_time_s=(2.0, 2.0, 2.0), losses=(2.0, 1.0))},
    ]
    row = bench.summarise("ddp", None, rounds, None)
    assert row["hand_median_s"] == 2.0 and row["fit_median_s"] == 2.0 and row["overhead_pct"] == 0.0
    assert row["overhead_pct_by_repeat"] == pytest.approx([10.0, 0.0])
    assert row["overhead_pct_spread"] == pytest.approx([0.0, 10.0])
    assert row["overhead_paired_pct"] == pytest.approx(5.0)
    assert row["max_abs_loss_diff"] == 0.5
    assert row["max_foreign_cores"] == 0.5
    assert [r["order"] for r in row["rounds"]] == ["hand-fit", "fit-hand"]

    failed = bench.summarise("fsdp", None, [], "WorkerError: rank 1 failed")
    assert failed["error"] == "WorkerError: rank 1 failed" and "overhead_pct" not in failed
    table = bench.markdown([row, failed])
    assert ("| ddp | 2000.00 | 2000.00 | +0.00 % | +10.0 %, +0.0 % | +5.00 % | 1833.33 / 1866.67 | 5.0e-01 | 0.50 |"
            in table)
    assert "| fsdp | — | — | — | failed: WorkerError: rank 1 failed | — | — | — | — |" in table

    setup = bench.Setup(model="tiny-gpt2", processes=2, batch_size=4, seq_len=64, warmup=1, steps=3)
    path = tmp_path / "deep" / "report.json"
    bench.write_report(path, bench.environment(["benchmarks/fit_overhead.py"]), setup, [row, failed])
    report = json.loads(path.read_text())
    assert report["setup"] == setup.to_dict()
    assert report["meta"]["command"] == "python benchmarks/fit_overhead.py"
    assert report["meta"]["torch"] and report["meta"]["cpu_count"] and report["meta"]["threads_per_rank"] == 1
    assert report["rows"][0]["rounds"][0]["fit"]["step_time_s"] == [1.1, 1.1, 3.0]


def test_ddp_run_measures_both_sides_on_identical_training(tmp_path: Path) -> None:
    report, stdout = run_benchmark(["--backends", "ddp", "--steps", "2", "--warmup", "1", "--repeats", "1"],
                                   tmp_path, timeout=300)
    assert report["setup"] == {"model": "tiny-gpt2", "processes": 2, "batch_size": 4, "seq_len": 64, "warmup": 1,
                               "steps": 2}
    assert "--backends ddp" in report["meta"]["command"]
    (row,) = report["rows"]
    assert row["error"] is None and row["repeats"] == 1 and row["plan"]["strategy"] == "ddp"
    assert row["max_foreign_cores"] is not None
    (round_,) = row["rounds"]
    assert len(round_["hand"]["step_time_s"]) == len(round_["fit"]["step_time_s"]) == 2
    assert len(round_["hand"]["losses"]) == len(round_["fit"]["losses"]) == 3
    # Same weights, batches, dropout seed and optimizer: the two loops compute the same losses.
    assert round_["fit"]["losses"] == pytest.approx(round_["hand"]["losses"], rel=1e-6)
    assert row["overhead_pct"] == pytest.approx((row["fit_median_s"] - row["hand_median_s"])
                                                / row["hand_median_s"] * 100)
    assert "| ddp |" in stdout


@pytest.mark.slow
def test_every_default_backend_alternates_sides_and_agrees_on_losses(tmp_path: Path) -> None:
    report, stdout = run_benchmark(["--steps", "2", "--warmup", "1", "--repeats", "2"], tmp_path, timeout=900)
    assert [r["backend"] for r in report["rows"]] == ["ddp", "fsdp", "deepspeed_stage_2"]
    for row in report["rows"]:
        assert row["error"] is None, row["error"]
        assert [r["order"] for r in row["rounds"]] == ["hand-fit", "fit-hand"]
        assert row["max_abs_loss_diff"] < 1e-5
        assert f"| {row['backend']} |" in stdout
