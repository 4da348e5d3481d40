"""benchmarks/memory_accuracy.py and its ground truth (benchmarks/_allocator.py), on CPU."""

from __future__ import annotations

import dataclasses
import json
import threading
from pathlib import Path
from types import ModuleType

import pytest
import torch

from tests.benchmark_scripts import load


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load("memory_accuracy")


@pytest.fixture(scope="module")
def allocator() -> ModuleType:
    return load("_allocator")


def test_probe_measures_the_allocators_peak_after_the_mark(allocator: ModuleType) -> None:
    with allocator.PeakProbe(torch.device("cpu")) as probe:
        kept = torch.empty(1000, dtype=torch.float32)  # 4,000 B, alive across the mark
        before = torch.empty(10_000, dtype=torch.uint8)  # the highest point before the mark
        del before
        probe.mark()
        transient = torch.empty(3000, dtype=torch.uint8)
        also = torch.empty(500, dtype=torch.float64)  # 4,000 B
        del transient, also
        probe.step_end()
        del kept
    peak = probe.result()
    assert peak.before_mark_peak_bytes == 14_000
    assert peak.peak_bytes == 4_000 + 3_000 + 4_000
    assert peak.drift_bytes == 0


def test_a_block_freed_on_another_thread_counts_until_its_address_is_handed_out_again(allocator: ModuleType
                                                                                        ) -> None:
    # (time, bytes, address): 100 B at address 7 freed unseen, then 7 handed out again; 50 B at 8 freed in view.
    timeline = [(0, 100, 7), (1, 30, 9), (2, 0, -1), (3, 100, 7), (4, 50, 8), (5, -50, 8), (6, 0, -2),
                (7, -999, 123)]  # a block from before the probe: ignored
    peak = allocator.peak_of(timeline)
    assert peak.before_mark_peak_bytes == 130
    assert peak.peak_bytes == 180  # 100 (one block at 7, not two) + 30 + 50
    assert peak.drift_bytes == 0


def test_a_block_freed_on_another_thread_is_seen_as_drift_or_reuse_in_a_real_run(allocator: ModuleType) -> None:
    with allocator.PeakProbe(torch.device("cpu")) as probe:
        probe.mark()
        holder = [torch.empty(50_000, dtype=torch.uint8)]
        thread = threading.Thread(target=holder.clear)  # freed on a thread the profiler does not follow
        thread.start()
        thread.join()
        probe.step_end()
    assert probe.result().drift_bytes == 50_000  # still counted: the replay has no way to know


def test_probe_without_a_mark_says_so(allocator: ModuleType) -> None:
    with pytest.raises(ValueError, match="no mark"), allocator.PeakProbe(torch.device("cpu")):
        torch.empty(10)


def test_single_device_prediction_matches_the_allocator_and_report_is_written(bench: ModuleType,
                                                                              tmp_path: Path) -> None:
    cases = [
        bench.Case("tiny-gpt2", 2, 32, "32-true", False),
        bench.Case("tiny-llama", 2, 32, "bf16-mixed", True),
    ]
    assert bench.main(["--device", "cpu", "--out", str(tmp_path)], cases=cases) == 0

    report = json.loads((tmp_path / "memory_accuracy.json").read_text())
    rows = report["rows"]
    assert [r["error"] for r in rows] == [None, None]
    assert all(abs(r["error_pct"]) < 1.0 for r in rows), rows
    assert report["summary"]["by_strategy"]["single"]["measured"] == 2
    assert report["meta"]["torch"] and report["meta"]["command"].startswith("python benchmarks/memory_accuracy.py")
    markdown = (tmp_path / "memory_accuracy.md").read_text()
    assert "| tiny-llama | single | 1 | bf16-mixed | 2 | 32 | on | defaults |" in markdown


def test_distributed_cases_train_the_plan_in_real_and_fake_process_groups(bench: ModuleType, tmp_path: Path) -> None:
    """DDP in two gloo processes and FSDP2 as rank 0 of four: each rank's allocator peak against the planner."""
    cases = [
        bench.Case("tiny-gpt2", 4, 64, "32-true", False, strategy="ddp", world_size=2, process_group="real"),
        bench.Case("tiny-llama", 4, 64, "32-true", False, strategy="fsdp", world_size=4, process_group="fake"),
    ]
    assert bench.main(["--device", "cpu", "--out", str(tmp_path)], cases=cases) == 0
    rows = json.loads((tmp_path / "memory_accuracy.json").read_text())["rows"]
    assert [r["error"] for r in rows] == [None, None], rows
    ddp, fsdp = rows
    assert len(ddp["ranks_bytes"]) == 2 and 2 <= len(ddp["runs_bytes"]) <= bench.MAX_RUNS
    assert len(fsdp["ranks_bytes"]) == 1
    # The figures the published table reports for these two cases: both within the project's 3 % target.
    assert abs(ddp["error_pct"]) < 3.0 and abs(fsdp["error_pct"]) < 3.0, rows
    # FSDP2 over 4 ranks keeps a quarter of the model states: well under DDP's whole copy of a similar model.
    assert fsdp["measured_bytes"] < ddp["measured_bytes"]


def test_distributed_cases_with_fewer_blocks_plan_and_train_the_shortened_model(bench: ModuleType,
                                                                                  tmp_path: Path) -> None:
    """The GPU grid shards a 4-block Llama-2 8 ways (the whole 7B does not fit one GPU as rank 0 of 8): the plan
    and the trained model both have the case's blocks (on an H200 these cases were refused before)."""
    cases = [bench.Case("tiny-llama", 4, 64, "32-true", False, n, strategy="fsdp", world_size=4,
                        process_group="fake") for n in (1, None)]
    assert bench.main(["--device", "cpu", "--out", str(tmp_path)], cases=cases) == 0
    short, whole = json.loads((tmp_path / "memory_accuracy.json").read_text())["rows"]
    assert short["error"] is None and whole["error"] is None, (short, whole)
    assert abs(short["error_pct"]) < 3.0, short
    assert short["measured_bytes"] < whole["measured_bytes"] and short["predicted_bytes"] < whole["predicted_bytes"]


def test_accumulated_gradients_are_counted_against_real_runs(bench: ModuleType, tmp_path: Path) -> None:
    """Two micro-batches per step: one device (the module unwrapped, .grad kept between micro-batches), FSDP2 as
    rank 0 of four (unsharded gradients kept without sync), ZeRO-2 and ZeRO-1 in two gloo processes (a small
    reduce bucket, so that the gradients are not hidden under it): the planner against the allocator's peak."""
    small_bucket = (("reduce_bucket_size", 100_000),)
    cases = [
        bench.Case("tiny-gpt2", 4, 64, "32-true", False, strategy="ddp", world_size=1, process_group="real",
                   grad_accumulation=2),
        bench.Case("tiny-llama", 4, 64, "bf16-mixed", False, strategy="fsdp", world_size=4, process_group="fake",
                   grad_accumulation=2),
        bench.Case("tiny-gpt2", 4, 64, "bf16-mixed", False, strategy="deepspeed_stage_2", world_size=2,
                   process_group="real", settings=small_bucket, grad_accumulation=2),
        bench.Case("tiny-gpt2", 4, 64, "bf16-mixed", False, strategy="deepspeed_stage_1", world_size=2,
                   process_group="real", settings=small_bucket, grad_accumulation=2),
    ]
    assert bench.main(["--device", "cpu", "--out", str(tmp_path)], cases=cases) == 0
    rows = json.loads((tmp_path / "memory_accuracy.json").read_text())["rows"]
    assert [r["error"] for r in rows] == [None] * len(cases), rows
    # ZeRO-1 too since its first micro-batch's reduce bucket is counted (kept until the boundary): -0.14 %, from -3 %
    assert all(abs(r["error_pct"]) < 1.0 for r in rows), rows
    # Without the kept gradients the plan is smaller by them: what accumulation adds is in the prediction.
    once = [bench.predict_distributed(dataclasses.replace(c, grad_accumulation=1), torch.device("cpu"))[0]
            for c in cases]
    assert all(r["predicted_bytes"] > one for r, one in zip(rows, once, strict=True))


def test_failed_case_is_recorded_in_its_row_not_raised(bench: ModuleType, tmp_path: Path) -> None:
    cases = [bench.Case("no-such-model", 1, None, "32-true", False),
             bench.Case("tiny-gpt2", 1, 64, "32-true", False, strategy="ddp", world_size=2, process_group="real",
                        settings=(("no_such_knob", 1),))]
    assert bench.main(["--device", "cpu", "--out", str(tmp_path)], cases=cases) == 0
    rows = json.loads((tmp_path / "memory_accuracy.json").read_text())["rows"]
    assert all(r["error"] and r["measured_bytes"] is None for r in rows)
    assert "no_such_knob" in rows[1]["error"]


@pytest.mark.parametrize("flags", [["--models", "no-such-model"], ["--strategies", "no-such-strategy"]])
def test_filters_name_what_the_grid_has(bench: ModuleType, tmp_path: Path, flags: list[str],
                                        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        bench.main(["--device", "cpu", "--out", str(tmp_path), *flags])
    assert info.value.code == 2
    assert "not in the grid" in capsys.readouterr().err


def test_grids_cover_every_strategy_family_and_larger_worlds(bench: ModuleType) -> None:
    grid = bench.GRIDS["cpu"]()
    strategies = {c.strategy for c in grid}
    assert {"single", "ddp", "fsdp", "fsdp_shard_grad_op", "deepspeed_stage_1", "deepspeed_stage_2",
            "deepspeed_stage_3"} <= strategies
    assert {c.world_size for c in grid if c.process_group == "fake"} == {4, 8}
    assert {c.precision for c in grid} == {"32-true", "bf16-mixed", "16-mixed"}


def test_the_hf_grid_measures_transformers_architectures_by_name(bench: ModuleType, tmp_path: Path) -> None:
    """``hf:NAME`` is a transformers config class written as a config.json, in the grid's process and in the
    workers': one device, and FSDP2 over 2 gloo processes (whose planned memory the tied head's moments change)."""
    grid = bench.GRIDS["hf"]()
    assert {c.model for c in grid} == {f"hf:{n}" for n in ("llama", "qwen2-tied", "gemma2-tied", "mixtral", "gpt2",
                                                           "opt")}
    assert {c.strategy for c in grid} == {"single", "ddp", "fsdp", "deepspeed_stage_2", "deepspeed_stage_3"}
    cases = [bench.Case("hf:llama", 1, 64, "bf16-mixed", False),
             bench.Case("hf:qwen2-tied", 2, 64, "bf16-mixed", False, strategy="fsdp", world_size=2,
                        process_group="real")]
    assert bench.main(["--device", "cpu", "--out", str(tmp_path)], cases=cases) == 0
    rows = json.loads((tmp_path / "memory_accuracy.json").read_text())["rows"]
    assert [r["error"] for r in rows] == [None, None], rows
    assert all(abs(r["error_pct"]) < 0.5 for r in rows), rows


def test_one_device_rows_on_cuda_carry_the_replayed_reserved_peak(bench: ModuleType, tmp_path: Path) -> None:
    """The GPU campaign's memory step holds the replay to ``max_memory_reserved``: the row's prediction, its
    error, and the report's columns and summary (a measured figure written in here, as a GPU would give it)."""
    import autoshard
    from autoshard.profiler.options import ProfileOptions

    source = autoshard.load_source("tiny-gpt2")
    options = ProfileOptions(batch_size=2, seq_len=32, precision="bf16-mixed", target="cpu")
    row = {**dataclasses.asdict(bench.Case("tiny-gpt2", 2, 32, "bf16-mixed", False)), "settings": {},
           "predicted_bytes": 10 * 2**20, "measured_bytes": 10 * 2**20, "reserved_bytes": 40 * 2**20,
           "drift_bytes": 0, "error_pct": 0.0, "note": "", "error": None}
    bench.add_reserved_prediction(row, source, options, (9, 0))
    predicted = row["predicted_reserved_bytes"]
    assert predicted >= 2 * 32 * 2**20  # two Hopper cuBLAS workspaces, 32 MiB each, before anything traced
    assert row["reserved_error_pct"] == pytest.approx(100 * (predicted - 40 * 2**20) / (40 * 2**20))
    summary = bench.summarize([row])
    assert summary["reserved_measured"] == 1
    meta = {"machine": {"device": "cuda", "gpu": "H100", "cuda": "13.0", "cpu": "x"}, "date": "d", "python": "3",
            "torch": "t", "deepspeed": "d", "autoshard": "a", "grid": "full", "target": "cuda", "seconds": 1.0,
            "command": "c"}
    bench.write_report(tmp_path, meta, summary, [row])
    markdown = (tmp_path / "memory_accuracy.md").read_text()
    assert "reserved predicted (MiB) | reserved error |" in markdown
    assert f"| {predicted / 2**20:,.2f} | {row['reserved_error_pct']:+.2f} % |" in markdown
    assert "Reserved (`max_memory_reserved`), one-device cases" in markdown
