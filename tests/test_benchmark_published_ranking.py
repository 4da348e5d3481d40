"""benchmarks/_published_ranking.py: which published configurations form a group, autoshard's pick among them
(fitting ones only, ties counted against it), and the loss against the published fastest."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest

from tests.benchmark_scripts import load

METRICS = ("samples_per_s", "tokens_per_s_per_gpu")


@pytest.fixture(scope="module")
def ranking() -> ModuleType:
    return load("_published_ranking")


def point(pid: str, *, gpu: str = "a100-sxm-80gb", nodes: int = 1, seq_len: int = 1024, model: str = "m",
          metric: str = "samples_per_s", source: str = "s", precision: str = "bf16-mixed",
          optimizer: str = "adamw", config: str | None = None) -> dict[str, Any]:
    return {"id": pid, "source": source, "half": "held_out", "seq_len": seq_len, "model": {"hf": model},
            "precision": precision, "optimizer": {"name": optimizer}, "strategy": {"autoshard": config or pid},
            "hardware": {"gpu": gpu, "gpus_per_node": 8, "nodes": nodes}, "published": {"metric": metric}}


def row(pid: str, published: float, predicted: float, *, fits: bool = True, metric: str = "samples_per_s",
        status: str = "compared") -> dict[str, Any]:
    return {"id": pid, "status": status, "metric": metric, "published": published, "predicted": predicted,
            "prediction": {"fits": fits}}


def test_the_pick_is_the_fastest_predicted_and_the_loss_is_against_the_published_fastest(ranking) -> None:
    (g,) = ranking.rankings([point("a"), point("b"), point("c")],
                            [row("a", 100.0, 50.0), row("b", 90.0, 80.0), row("c", 95.0, 60.0)], METRICS)
    assert (g["published_best"], g["pick"], g["ties"]) == ("a", "b", [])
    assert g["loss_pct"] == pytest.approx(10.0) and g["within"] is False


def test_a_pick_within_five_percent_of_the_fastest_passes(ranking) -> None:
    (g,) = ranking.rankings([point("a"), point("b")], [row("a", 100.0, 50.0), row("b", 96.0, 80.0)], METRICS)
    assert g["pick"] == "b" and g["loss_pct"] == pytest.approx(4.0) and g["within"] is True
    assert ranking.summary([g]) == {"groups": 1, "within": 1, "fastest": 0}


def test_tied_predictions_count_as_the_slowest_of_the_tie(ranking) -> None:
    (g,) = ranking.rankings([point("z1"), point("z2")], [row("z1", 100.0, 80.0), row("z2", 85.0, 80.2)], METRICS)
    # z2 is predicted 0.25 % faster: a tie, and of the two it ran slower
    assert (g["pick"], g["ties"]) == ("z2", ["z1"]) and g["loss_pct"] == pytest.approx(15.0)


def test_configurations_predicted_not_to_fit_are_never_picked(ranking) -> None:
    (g,) = ranking.rankings([point("a"), point("b")], [row("a", 100.0, 50.0), row("b", 80.0, 90.0, fits=False)],
                            METRICS)
    assert g["pick"] == "a" and g["loss_pct"] == 0.0
    (none,) = ranking.rankings([point("a"), point("b")],
                               [row("a", 100.0, 50.0, fits=False), row("b", 80.0, 90.0, fits=False)], METRICS)
    assert none["pick"] is None and none["within"] is False
    assert "none fits" in "\n".join(ranking.markdown([none]))


@pytest.mark.parametrize("other", [
    point("b", gpu="h100-sxm-80gb"), point("b", nodes=2), point("b", seq_len=2048), point("b", model="n"),
    point("b", source="t"), point("b", precision="32-true"), point("b", optimizer="adafactor"),
], ids=["gpu", "nodes", "sequence", "model", "source", "precision", "optimizer"])
def test_points_that_differ_in_machine_model_sequence_or_source_are_not_grouped(ranking, other) -> None:
    """Nor those a user set differently: recommend chooses the strategy, the micro-batch and checkpointing for
    the precision and optimizer it is given."""
    assert ranking.rankings([point("a"), other], [row("a", 100.0, 50.0), row("b", 80.0, 90.0)], METRICS) == []


def test_other_metrics_uncompared_points_and_lone_points_form_no_group(ranking) -> None:
    points = [point("a"), point("b", metric="tokens_per_s_per_gpu"), point("c"), point("d", metric="peak_active_gib")]
    rows = [row("a", 100.0, 50.0), row("b", 80.0, 90.0, metric="tokens_per_s_per_gpu"),
            row("c", 1.0, 2.0, status="not expressible"), row("d", 10.0, 11.0, metric="peak_active_gib")]
    assert ranking.rankings(points, rows, METRICS) == []


def test_the_markdown_names_each_group_by_its_common_prefix(ranking) -> None:
    groups = ranking.rankings([point("dse-gpt2-ddp-mb8"), point("dse-gpt2-zero1-mb8")],
                              [row("dse-gpt2-ddp-mb8", 284.1, 387.0), row("dse-gpt2-zero1-mb8", 397.8, 610.4)],
                              METRICS)
    text = "\n".join(ranking.markdown(groups))
    assert "| dse-gpt2-… | held_out | samples_per_s | ddp-mb8, zero1-mb8 | zero1-mb8 | zero1-mb8 | — | 0.0 % |" in text
    assert "**1 of 1 groups within 5 %**" in text


def test_one_configuration_published_twice_is_not_a_choice(ranking) -> None:
    twice = [point("hand", config="zero1"), point("tuned", config="zero1")]
    assert ranking.rankings(twice, [row("hand", 27.46, 38.0), row("tuned", 27.50, 38.0)], METRICS) == []
    (g,) = ranking.rankings([*twice, point("z2", config="zero2")],
                            [row("hand", 27.46, 38.0), row("tuned", 27.50, 38.0), row("z2", 20.0, 37.0)], METRICS)
    assert g["points"] == ["hand", "tuned", "z2"] and g["published_best"] == "tuned"
