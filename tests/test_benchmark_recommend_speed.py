"""benchmarks/recommend_speed.py: one command times cold `profile` and `recommend` per model and writes the report.

The end-to-end test runs the benchmark's ``main`` on gpt2 (one cold run of each command) and on a name that is
not in the catalog, and checks behaviour (rows written, sequence capped, failures recorded), never timing values.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.benchmark_scripts import load


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load("recommend_speed")


@pytest.fixture(scope="module")
def report(bench: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str]:
    out = tmp_path_factory.mktemp("recommend_speed")
    assert bench.main(["--models", "gpt2", "no-such-model", "--repeat", "1", "--sections", "models",
                       "--out", str(out)]) == 0
    return (json.loads((out / "recommend_speed.json").read_text(encoding="utf-8")),
            (out / "recommend_speed.md").read_text(encoding="utf-8"))


def test_defaults_cover_catalog_models_from_gpt2_to_llama_2_70b(bench: ModuleType) -> None:
    args = bench.parse_args([])
    assert args.models == ["gpt2", "gpt2-xl", "llama-2-7b", "llama-2-13b", "llama-2-70b"]
    assert (args.hardware, args.nodes, args.seq_len, args.repeat) == ("dgx-h100", 4, 4096, 3)
    assert (args.sections, args.cache_model, args.cached_nodes, args.hf_size) == (
        ["models", "speed"], "llama-2-70b", 2, "published")
    assert args.out == Path("docs/benchmarks")


@pytest.mark.parametrize(("model", "requested", "expected"), [
    ("gpt2", 4096, 1024),  # learned positions: the CLI refuses longer
    ("gpt2", 512, 512),
    ("llama-2-70b", 4096, 4096),
    ("tiny-resnet", 4096, None),  # no sequence at all
    ("no-such-model", 4096, 4096),  # left to the CLI, which reports the error in the row
])
def test_sequence_is_capped_at_the_models_longest(bench: ModuleType, model: str, requested: int,
                                                  expected: int | None) -> None:
    assert bench.seq_len_for(model, requested) == expected


def test_gpt2_row_has_positive_profile_and_recommend_times(report: tuple[dict[str, Any], str]) -> None:
    data, md = report
    row = next(r for r in data["rows"] if r["model"] == "gpt2")
    assert row["seq_len"] == 1024 and row["parameters"] == 124_439_808
    for side in ("profile", "recommend"):
        assert row[side]["error"] is None, row[side]["error"]
        assert len(row[side]["seconds"]) == 1 and row[side]["median_s"] > 0
    assert row["recommend"]["command"].startswith("python -m autoshard recommend gpt2 --hardware dgx-h100 --nodes 4 "
                                                  "--seq-len 1024 --json")
    assert row["recommend"]["exit_code"] in (0, 3)
    assert "micro-batch" in row["outcome"] or row["outcome"] == "no feasible plan"
    assert "| gpt2 | 124.44M | 1024 |" in md
    assert data["meta"]["command"].startswith("python ")
    assert "recommend_speed.py --models gpt2 no-such-model --repeat 1 --sections models --out " in \
        data["meta"]["command"]
    assert data["speed"] == [] and "## Workload cache" not in md
    assert data["meta"]["torch"] and data["meta"]["python"] and data["meta"]["cpu_count"]


def test_failing_model_is_recorded_in_its_row_not_raised(report: tuple[dict[str, Any], str]) -> None:
    data, md = report
    row = next(r for r in data["rows"] if r["model"] == "no-such-model")
    assert row["parameters"] is None
    assert row["profile"]["exit_code"] == row["recommend"]["exit_code"] == 2
    assert row["recommend"]["median_s"] is None and "not a file" in row["recommend"]["error"]
    assert row["outcome"].startswith("failed: exit 2:")
    assert "| no-such-model | — | 4096 |" in md


def test_target_is_reported_as_not_measured_without_llama_2_70b(report: tuple[dict[str, Any], str]) -> None:
    data, md = report
    assert data["target"]["met"] is None and "not in --models" in data["target"]["note"]
    assert "<= 10 s on the 2-core machine: not measured" in md


@pytest.mark.parametrize(("median_s", "met"), [(8.45, True), (10.0, True), (10.01, False)])
def test_target_verdict_compares_the_llama_2_70b_recommend_median(bench: ModuleType, median_s: float,
                                                                   met: bool) -> None:
    args = argparse.Namespace(hardware="dgx-h100", nodes=4, seq_len=4096)
    rows = [{"model": "llama-2-70b", "outcome": "x", "recommend": {"median_s": median_s}}]
    assert bench.target_verdict(rows, args)["met"] is met
    assert bench.target_verdict(rows, argparse.Namespace(hardware="dgx-h100", nodes=2, seq_len=4096))["met"] is None


@pytest.fixture(scope="module")  # about 30 s on a quiet machine: ten fresh processes, four of them planning
def speed(bench: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str]:
    out = tmp_path_factory.mktemp("recommend_speed_cache")
    assert bench.main(["--sections", "speed", "--cache-model", "tiny-gpt2", "--seq-len", "32", "--hf-size", "tiny",
                       "--repeat", "2", "--out", str(out)]) == 0
    return (json.loads((out / "recommend_speed.json").read_text(encoding="utf-8")),
            (out / "recommend_speed.md").read_text(encoding="utf-8"))


@pytest.mark.slow
def test_speed_section_times_the_floor_cold_cached_hf_and_help_runs(speed: tuple[dict[str, Any], str]) -> None:
    data, md = speed
    rows = {row["what"]: row for row in data["speed"]}
    assert list(rows) == ["torch import (floor)", "tiny-gpt2 recommend, cold",
                          "tiny-gpt2 recommend, cold, tracing in one process",
                          "tiny-gpt2 recommend, workload cached (2 nodes)",
                          "llama-3.1-8b config.json (tiny) recommend, cold", "autoshard --help"]
    for row in rows.values():
        assert row["error"] is None, row["error"]
        assert len(row["seconds"]) == 2 and row["min_s"] <= row["median_s"] <= row["max_s"]
        assert len(row["cpu_seconds"]) == 2 and all(s > 0 for s in row["cpu_seconds"])
    assert rows["torch import (floor)"]["command"] == "python -c 'import torch'"
    assert rows["tiny-gpt2 recommend, workload cached (2 nodes)"]["command"].endswith(
        "recommend tiny-gpt2 --hardware dgx-h100 --nodes 2 --seq-len 32 --json")
    # Targets are judged for the issue's setup only; --help is judged everywhere.
    cold = rows["tiny-gpt2 recommend, cold"]
    assert cold["met"] is None and "not judged" in cold["note"]
    assert rows["autoshard --help"]["limit_s"] == 0.3 and rows["autoshard --help"]["met"] in (True, False)
    assert "## Workload cache and start-up" in md and "| torch import (floor) | `python -c 'import torch'` |" in md
    assert data["rows"] == [] and "## Per model" not in md


def test_a_cached_run_that_traced_is_a_failure_not_a_time(bench: ModuleType) -> None:
    runs = bench.Runs(command="c", seconds=[1.0], foreign_cores=[None], exit_code=0,
                      stdout='{"cached_workload": "/x.json"}', error=None)
    assert bench._used_the_cache(runs) is runs
    traced = bench.Runs(command="c", seconds=[1.0], foreign_cores=[None], exit_code=0,
                        stdout='{"cached_workload": null}', error=None)
    assert bench._used_the_cache(traced).error == "the workload cache was not used"
    assert bench._used_the_cache(traced).median_s is None


@pytest.mark.parametrize(("median_s", "target", "applies", "met"), [
    (2.4, "cached", True, True),
    (2.5, "cached", True, True),
    (2.51, "cached", True, False),
    (4.0, "cold", False, None),  # another model or setup than the issue's: shown, not judged
    (0.2, None, None, None),  # the torch floor has no target
])
def test_speed_rows_are_judged_on_the_median_against_the_issues_limits(bench: ModuleType, median_s: float,
                                                                      target: str | None, applies: bool | None,
                                                                      met: bool | None) -> None:
    runs = bench.Runs(command="c", seconds=[median_s - 1, median_s, median_s + 5], foreign_cores=[None] * 3,
                      exit_code=0, stdout="{}", error=None)
    row = bench.speed_row("w", runs, target, applies=applies)
    assert row["met"] is met and (row["min_s"], row["median_s"], row["max_s"]) == (
        round(median_s - 1, 3), median_s, round(median_s + 5, 3))
    assert row["limit_s"] == (None if target is None else bench.SPEED_TARGETS_S[target])
