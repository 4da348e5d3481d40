"""benchmarks/published.py: the published GPU points validate, and the benchmark runs end to end on cheap points.

The data-file tests check what every point must carry (a source with a commit or a paper, a GPU profile that
exists, a metric from the allowed set, a half, consistent batch sizes); the end-to-end test runs ``main`` with
``--only`` on three points (two GPT-2 configurations compared, one point not expressible) and checks the rows and
the report it writes, never the predicted values.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.benchmark_scripts import load

CHEAP = ["dse-gpt2-ddp-mb8", "torchtitan-h100-llama31-8b-g8-memory", "dse-gpt2-zero1-mb8"]


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load("published")


@pytest.fixture(scope="module")
def data(bench: ModuleType) -> dict[str, Any]:
    return bench.load_points()


def test_points_file_validates_with_at_least_25_points_in_both_halves(bench: ModuleType,
                                                                      data: dict[str, Any]) -> None:
    points = data["points"]
    assert bench.validate(data) == []
    assert len(points) >= 25
    assert {p["half"] for p in points} == {"fit", "held_out"}
    assert len({p["id"] for p in points}) == len(points)


def test_every_point_quotes_a_source_with_a_commit_or_a_paper(data: dict[str, Any]) -> None:
    for point in data["points"]:
        source = data["sources"][point["source"]]
        assert source["url"].startswith("https://"), point["id"]
        assert source.get("paper") or len(source["commit"]) == 40, point["id"]
        assert point["quote"] and point["where"], point["id"]


def test_each_source_lies_in_one_half(data: dict[str, Any]) -> None:
    halves: dict[str, set[str]] = {}
    for point in data["points"]:
        halves.setdefault(point["source"], set()).add(point["half"])
    assert all(len(h) == 1 for h in halves.values()), halves


def test_both_halves_hold_points_autoshard_can_compare(bench: ModuleType, data: dict[str, Any]) -> None:
    for half in ("fit", "held_out"):
        assert any(not bench.not_expressible(p) for p in data["points"] if p["half"] == half), half


@pytest.mark.parametrize(("path", "value", "problem"), [
    (("hardware", "gpu"), "h100-sxm-96gb", "is not a profile in profiles/gpus"),
    (("published", "metric"), "tokens_per_s", "metric must be one of"),
    (("half",), "train", "half must be one of"),
    (("source",), "no-such-source", "unknown source"),
    (("global_batch",), 7, "global_batch must be micro_batch x grad_accumulation x GPUs"),
    (("strategy", "activation_checkpointing"), "partial", "activation_checkpointing in"),
    (("hardware", "nodes"), 2, "several nodes need a network"),
    (("optimizer", "impl"), "fast", "optimizer impl in"),
    (("strategy", "settings"), ["overlap_comm"], "strategy settings must be a mapping"),
    (("strategy", "settings"), {"overlap_com": False}, "ddp has no knob overlap_com"),
    (("grad_clip_norm",), 0, "grad_clip_norm must be a positive number"),
    (("strategy", "alternative"), {"autoshard": "deepspeed_stage_1"}, "strategy alternative must be a mapping"),
    (("strategy", "alternative"), {"autoshard": "zero9", "why": "w"}, "no autoshard strategy 'zero9'"),
    (("strategy", "alternative"), {"autoshard": "fsdp", "why": "w", "settings": {"bucket_cap_mb": 5}},
     "fsdp has no knob bucket_cap_mb"),
    (("hardware", "node"), "p4d", "node 'p4d' is not a profile in profiles/nodes"),
    (("hardware", "node"), "aws-p4d-24xlarge", "has 8 x a100-sxm-40gb, not the point's 16 x v100-sxm-32gb"),
])
def test_a_bad_point_is_reported_by_id_and_field(bench: ModuleType, data: dict[str, Any], path: tuple[str, ...],
                                                 value: Any, problem: str) -> None:
    broken = copy.deepcopy(data)
    point = next(p for p in broken["points"] if p["id"] == "dse-gpt2-ddp-mb8")
    target = point
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    problems = bench.validate(broken)
    assert any(p.startswith("dse-gpt2-ddp-mb8: ") and problem in p for p in problems), problems


def test_a_models_attention_is_written_where_autoshard_reads_it(bench: ModuleType, data: dict[str, Any],
                                                                tmp_path: Path) -> None:
    """transformers 4.12 had eager attention only: the DeepSpeedExamples points build GPT-2 with it."""
    from autoshard.models import load_source

    point = next(p for p in data["points"] if p["id"] == "dse-gpt2-ddp-mb8")
    source = load_source(bench.Predictor(data, tmp_path).model_source(point))
    assert source.metadata["attn_implementation"] == "eager"
    assert source.metadata["attn_implementation_chosen_by"] == "config.json"


def test_a_point_naming_a_node_profile_gets_its_host(bench: ModuleType, data: dict[str, Any], tmp_path: Path) -> None:
    """The FSDP blog's runs were on AWS p4d.24xlarge nodes: their 48 cores and 1152 GiB, with the point's network."""
    point = next(p for p in data["points"] if p["id"] == "fsdp-blog-a100-mingpt-175b-mb20")
    hardware = bench.Predictor(data, tmp_path).hardware(point)
    assert hardware.world_size == 128 and hardware.node.gpu is not None and hardware.node.gpu.name == "a100-sxm-40gb"
    assert hardware.node.cpu.physical_cores == 48 and hardware.node.cpu.memory_total_bytes == 1152 * 2**30
    assert hardware.node.network is not None and hardware.node.network.ports == 4


def test_a_point_may_run_on_some_of_a_nodes_gpus_with_the_whole_host(bench: ModuleType, data: dict[str, Any],
                                                                     tmp_path: Path) -> None:
    """ZeRO-Offload's one V100 of a DGX-2 has the DGX-2's 48 cores for its CPU Adam; more GPUs than the node has
    are refused."""
    point = next(p for p in data["points"] if p["id"] == "zero-offload-gpt2-10b-v100")
    hardware = bench.Predictor(data, tmp_path).hardware(point)
    assert hardware.world_size == 1 and hardware.node.cpu.physical_cores == 48
    broken = copy.deepcopy(data)
    too_many = next(p for p in broken["points"] if p["id"] == "zero-offload-gpt2-10b-v100")
    too_many["hardware"]["gpus_per_node"] = 32
    assert any("node dgx-2 has 16 x v100-sxm-32gb, not the point's 32 x v100-sxm-32gb" in problem
               for problem in bench.validate(broken))


def test_a_duplicate_id_is_reported(bench: ModuleType, data: dict[str, Any]) -> None:
    broken = copy.deepcopy(data)
    broken["points"].append(copy.deepcopy(broken["points"][0]))
    assert f"{broken['points'][0]['id']}: id used twice" in bench.validate(broken)


@pytest.mark.parametrize(("checkpointing", "metric", "unmodelled", "expected"), [
    ("full", "tokens_per_s_per_gpu", [], []),
    ("selective-op", "tokens_per_s_per_gpu", [], []),
    ("selective-layer", "tokens_per_s_per_gpu", ["tensor parallelism"], ["tensor parallelism"]),
    ("none", "peak_reserved_gib", [], ["reserved memory"]),
    ("none", "nvidia_smi_gib", ["torch.compile"], ["torch.compile", "an nvidia-smi total"]),
])
def test_what_autoshard_cannot_express_is_named(bench: ModuleType, data: dict[str, Any], checkpointing: str,
                                                metric: str, unmodelled: list[str], expected: list[str]) -> None:
    point = copy.deepcopy(data["points"][0])
    point["strategy"].update(activation_checkpointing=checkpointing, unmodelled=unmodelled)
    point["published"]["metric"] = metric
    missing = bench.not_expressible(point)
    assert len(missing) == len(expected)
    assert all(any(m.startswith(e) for m in missing) for e in expected), missing


@pytest.mark.parametrize("metric", ["peak_reserved_gib", "nvidia_smi_gib"])
def test_reserved_memory_is_predicted_on_one_gpu_only(bench: ModuleType, data: dict[str, Any], metric: str) -> None:
    point = copy.deepcopy(data["points"][0])
    point["strategy"].update(activation_checkpointing="none", unmodelled=[])
    point["published"]["metric"] = metric
    assert point["hardware"]["gpus_per_node"] * point["hardware"]["nodes"] > 1
    assert any("several GPUs" in m for m in bench.not_expressible(point))
    point["hardware"].update(gpus_per_node=1, nodes=1)
    assert bench.not_expressible(point) == []


def test_summary_separates_halves_and_memory_from_throughput(bench: ModuleType) -> None:
    def row(half: str, metric: str, error: float | None, status: str = "compared") -> dict[str, Any]:
        return {"half": half, "metric": metric, "error": error, "status": status,
                "prediction": None if error is None else {"fits": error < 50}}

    rows = [row("fit", "tokens_per_s_per_gpu", -10.0), row("fit", "tokens_per_s_per_gpu", 30.0),
            row("fit", "peak_active_gib", 5.0), row("held_out", "samples_per_s", 200.0),
            row("held_out", "max_micro_batch", -1.0), row("held_out", "peak_reserved_gib", None, "not expressible"),
            row("held_out", "nvidia_smi_gib", -12.0)]
    summary = bench.summarise(rows)
    assert summary["fit"]["throughput"] == {"n": 2, "median_abs_error_pct": 20.0, "max_abs_error_pct": 30.0}
    assert summary["fit"]["memory"]["n"] == 1
    assert summary["held_out"]["memory"] == {"n": 1, "median_abs_error_pct": 12.0, "max_abs_error_pct": 12.0}
    assert summary["held_out"]["max_micro_batch"] == {"n": 1, "within_one": 1}
    assert summary["held_out"]["not_expressible"] == 1
    assert summary["held_out"]["published_run_predicted_not_to_fit"] == 1
    assert summary["all"]["points"] == 7


@pytest.fixture(scope="module")
def report(bench: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str]:
    out = tmp_path_factory.mktemp("published")
    assert bench.main(["--only", *CHEAP, "--out", str(out)]) == 0
    return (json.loads((out / "published.json").read_text(encoding="utf-8")),
            (out / "published.md").read_text(encoding="utf-8"))


def test_cheap_points_run_end_to_end_and_write_the_table(report: tuple[dict[str, Any], str]) -> None:
    data, md = report
    rows = {r["id"]: r for r in data["rows"]}
    assert set(rows) == set(CHEAP)
    compared = rows["dse-gpt2-ddp-mb8"]
    assert compared["status"] == "compared" and compared["predicted"] > 0
    assert compared["error"] == pytest.approx((compared["predicted"] - 284.142) / 284.142 * 100)
    assert compared["prediction"]["world_size"] == 16 and compared["prediction"]["parameters"] == 124_439_808
    skipped = rows["torchtitan-h100-llama31-8b-g8-memory"]
    assert skipped["status"] == "not expressible" and skipped["error"] is None
    assert "reserved memory" in skipped["reason"] and "selective" not in skipped["reason"]
    assert data["summary"]["held_out"]["throughput"]["n"] == 2
    assert data["summary"]["fit"]["not_expressible"] == 1
    assert "published.py --only dse-gpt2-ddp-mb8" in data["meta"]["command"]
    assert data["meta"]["torch"] and data["meta"]["deepspeed"] and data["meta"]["transformers"]
    assert "| dse-gpt2-ddp-mb8 | held_out | samples_per_s | 284.1 |" in md
    assert "not expressible: " in md and "## Summary" in md


def test_the_report_ranks_configurations_published_side_by_side(report: tuple[dict[str, Any], str]) -> None:
    data, md = report
    (group,) = data["rankings"]  # DDP and ZeRO-1 of one GPT-2 on the same 16 V100
    assert group["points"] == ["dse-gpt2-ddp-mb8", "dse-gpt2-zero1-mb8"]
    assert group["published_best"] == "dse-gpt2-zero1-mb8" and group["pick"] in group["points"]
    assert "## Ranking: would autoshard have picked the fastest?" in md and "| dse-gpt2-… |" in md


def test_another_model_of_a_run_is_reported_beside_it_and_not_counted(bench: ModuleType, data: dict[str, Any],
                                                                      tmp_path: Path) -> None:
    """NVIDIA's apex O2 runs are also shown as DeepSpeed's fp16 (the same arrangement): a row of its own in the
    report, outside the summary."""
    point = copy.deepcopy(next(p for p in data["points"] if p["id"] == "dse-gpt2-ddp-mb8"))
    point["strategy"]["alternative"] = {"autoshard": "deepspeed_stage_1", "why": "the same run as ZeRO-1"}
    row = bench.run_point(point, bench.Predictor(data, tmp_path))
    alternative = row["alternative"]
    assert alternative["strategy"] == "deepspeed_stage_1" and alternative["predicted"] != row["predicted"]
    assert alternative["error"] == pytest.approx((alternative["predicted"] - 284.142) / 284.142 * 100)
    rows = [row]
    md = bench.markdown({"meta": {k: "x" for k in ("date", "machine", "cpu_count", "python", "torch", "transformers",
                                                   "deepspeed", "autoshard", "command")},
                         "summary": bench.summarise(rows), "by_source": bench.by_source(rows), "rankings": [],
                         "rows": rows, "sources": {}})
    assert "## The same runs modelled another way (not counted above)" in md
    assert "| dse-gpt2-ddp-mb8 | 284.1 |" in md and "| deepspeed_stage_1 | the same run as ZeRO-1 |" in md
    assert bench.summarise(rows)["held_out"]["throughput"]["n"] == 1


def test_unknown_id_exits_2_with_one_line(bench: ModuleType, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(["--only", "no-such-point", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == f"error: no point no-such-point in {bench.POINTS_FILE}."


@pytest.mark.parametrize(("text", "message"), [
    ("points: []\n", "sources, models and points"),
    ("sources: {}\nmodels: {}\npoints: [3]\n", "points must be a list of mappings"),
    ("sources: {}\nmodels: {}\npoints: [{id: a, hardware: h100}]\n", "a: missing half"),
    ("sources: [\n", "cannot read"),
])
def test_a_bad_points_file_exits_2_with_one_line(bench: ModuleType, tmp_path: Path, text: str, message: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(text, encoding="utf-8")
    assert bench.main(["--points", str(bad), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1
    assert not (tmp_path / "published.json").exists()


def test_measure_on_gpu_dry_run_trains_each_single_gpu_configuration_once(bench: ModuleType, tmp_path: Path) -> None:
    # The two torchtune points (memory, tokens/s) share one configuration: one run, both rows.
    ids = ["torchtune-a100-llama32-3b-packed-memory", "torchtune-a100-llama32-3b-packed-tps", "dse-gpt2-ddp-mb8"]
    assert bench.main(["--measure-on-gpu", "--dry-run", "--out", str(tmp_path), "--only", *ids]) == 0
    report = json.loads((tmp_path / "gpu_published.json").read_text())
    rows = {r["id"]: r for r in report["rows"]}
    assert set(rows) == set(ids[:2])  # the 16-GPU point is not a one-GPU run
    memory, tps = rows[ids[0]], rows[ids[1]]
    assert memory["error"] is None and tps["error"] is None
    assert memory["measured"]["step_seconds"] == tps["measured"]["step_seconds"]  # one run, timed once
    assert memory["measured"]["peak_allocated_gib"] > 0 and len(memory["measured"]["step_seconds"]) == 4
    assert memory["predicted"]["peak_allocated_gib"] > 0 and memory["reproduction_percent"] is not None
    assert tps["reproduction_percent"] is None  # throughput is not compared across GPU models
    assert "DRY RUN" in (tmp_path / "gpu_published.md").read_text()


def test_measure_on_gpu_counts_every_accumulated_micro_batch(bench: ModuleType, tmp_path: Path) -> None:
    # An optimizer step of the guide's accumulating run trains 4 micro-batches: all four count in tokens/s
    # (the H200 run of 2026-11-28 counted one and reported a quarter of the throughput).
    point = "hf1gpu-v100-bert-large-ga4-ckpt-fp16-tps"
    assert bench.main(["--measure-on-gpu", "--dry-run", "--out", str(tmp_path), "--only", point]) == 0
    row = json.loads((tmp_path / "gpu_published.json").read_text())["rows"][0]
    measured = row["measured"]
    assert row["error"] is None
    assert measured["tokens_per_s_per_gpu"] == pytest.approx(4 * 64 / measured["step_time_s"])  # 4 x 1 x 64 tokens


def test_measure_on_gpu_without_a_gpu_exits_2_in_one_line(bench: ModuleType, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is here")
    assert bench.main(["--measure-on-gpu", "--out", str(tmp_path)]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert bench.main(["--dry-run", "--out", str(tmp_path)]) == 2
