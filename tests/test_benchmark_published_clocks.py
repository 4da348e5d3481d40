"""benchmarks/_published_clocks.py: which published points are one configuration timed end to end and by the
engine's timers, the source's own gap between them, and autoshard's error against each clock."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest

from tests.benchmark_scripts import load


@pytest.fixture(scope="module")
def clocks() -> ModuleType:
    load("_published_ranking")  # what it imports, as benchmarks/published.py's folder on sys.path gives it
    return load("_published_clocks")


def point(pid: str, metric: str, *, micro_batch: int = 3, settings: dict[str, Any] | None = None,
          source: str = "dse", strategy: str = "deepspeed_stage_1") -> dict[str, Any]:
    return {"id": pid, "source": source, "half": "held_out",
            "hardware": {"gpu": "v100-sxm-32gb", "gpus_per_node": 16, "nodes": 1},
            "model": {"hf": "gpt2-large"}, "seq_len": 1024, "micro_batch": micro_batch,
            "global_batch": 16 * micro_batch,
            "grad_accumulation": 1, "precision": "16-mixed", "optimizer": {"name": "adamw", "impl": "for-loop"},
            "strategy": {"autoshard": strategy, "activation_checkpointing": "none", "settings": settings or {}},
            "published": {"metric": metric}}


def row(pid: str, published: float, predicted: float, status: str = "compared") -> dict[str, Any]:
    return {"id": pid, "status": status, "published": published, "predicted": predicted}


def test_the_gap_is_the_sources_own_and_the_errors_are_against_each_clock(clocks: ModuleType) -> None:
    points = [point("e2e", clocks.END_TO_END), point("engine", clocks.ENGINE)]
    (pair,) = clocks.pairs(points, [row("e2e", 69.061, 83.2), row("engine", 87.3017, 83.2)])
    assert (pair["end_to_end"], pair["engine"]) == ("e2e", "engine")
    assert pair["gap_pct"] == pytest.approx((87.3017 / 69.061 - 1) * 100)
    assert pair["gap_s_per_step"] == pytest.approx(48 / 69.061 - 48 / 87.3017)  # 16 GPUs x micro-batch 3
    assert pair["error_end_to_end_pct"] == pytest.approx((83.2 - 69.061) / 69.061 * 100)
    assert pair["error_engine_pct"] == pytest.approx((83.2 - 87.3017) / 87.3017 * 100)


@pytest.mark.parametrize("other", [{"micro_batch": 2}, {"settings": {"reduce_bucket_size": 5e8}}, {"source": "x"},
                                   {"strategy": "deepspeed_stage_2"}])
def test_points_of_different_runs_are_not_paired(clocks: ModuleType, other: dict[str, Any]) -> None:
    points = [point("e2e", clocks.END_TO_END, **other), point("engine", clocks.ENGINE)]
    assert clocks.pairs(points, [row("e2e", 60.0, 80.0), row("engine", 80.0, 80.0)]) == []


def test_uncompared_points_and_other_metrics_are_not_paired(clocks: ModuleType) -> None:
    points = [point("e2e", clocks.END_TO_END), point("engine", clocks.ENGINE), point("tps", "tokens_per_s_per_gpu")]
    assert clocks.pairs(points, [row("e2e", 60.0, 80.0), row("engine", 80.0, 80.0, status="not expressible"),
                                 row("tps", 1.0, 1.0)]) == []
    assert clocks.pairs(points[1:], [row("engine", 80.0, 80.0), row("tps", 1.0, 1.0)]) == []


def test_the_section_summarises_the_pairs_and_is_absent_without_any(clocks: ModuleType) -> None:
    assert clocks.markdown([]) == []
    points = [point("e2e", clocks.END_TO_END), point("engine", clocks.ENGINE)]
    found = clocks.pairs(points, [row("e2e", 60.0, 75.0), row("engine", 80.0, 75.0)])
    lines = clocks.markdown(found)
    assert lines[0] == "## One configuration, two clocks" and lines[-1] == ""
    text = "\n".join(lines)
    assert "**1 pair**: the source's clocks differ by a median 33.3 %" in text
    assert "| e2e | engine | 60.0 | 80.0 | +33.3 % |" in text and "| +25.0 % | 75.0 | -6.2 % |" in text


def test_the_points_file_pairs_each_autotuned_run_with_its_engine_timing(clocks: ModuleType) -> None:
    points = load("published").load_points()["points"]
    rows = [row(p["id"], p["published"]["value"], 1.0) for p in points]
    found = {(p["end_to_end"], p["engine"]) for p in clocks.pairs(points, rows)}
    autotuned = [p["id"] for p in points if "-autotuned-" in p["id"]]
    assert len(autotuned) == 5
    assert {(i, i.replace("-autotuned-", "-autotuning-")) for i in autotuned} <= found
    # DeepSpeedExamples' hand-tuned GPT-2 XL ZeRO-1 run is the configuration the autotuner chose too
    assert found - {(i, i.replace("-autotuned-", "-autotuning-")) for i in autotuned} == {
        ("dse-gpt2-xl-zero1-mb1", "dse-gpt2-xl-autotuning-z1-mb1")}
