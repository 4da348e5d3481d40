"""One configuration, two clocks: where a source timed the same configuration end to end and by the engine's timers.

DeepSpeedExamples' autotuning READMEs publish, for the configuration the autotuner chose, both DeepSpeed's
autotuning metric (its synchronized forward + backward + step timers over a few early steps) and the HF Trainer's
``train_samples_per_second`` of the training it then launched with that configuration (200 steps, the whole run).
The step-time model prices the engine's span, so the gap between a source's two clocks is what an end-to-end
figure holds that autoshard does not price. A **pair** is a throughput point timed end to end (``samples_per_s``)
and one timed by the engine (``engine_samples_per_s``) of one source with every setting the same
(:func:`pairs`); the report shows the source's own gap beside autoshard's error against each clock.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from typing import Any

import _published_ranking

END_TO_END, ENGINE = "samples_per_s", "engine_samples_per_s"


def _key(point: dict[str, Any]) -> str:
    """Everything that makes two points the same run, the metric aside: what the user gave, what was chosen
    (as the ranking groups them), and the optimizer's implementation."""
    return json.dumps([_published_ranking.given(point), _published_ranking.configuration(point),
                       point["optimizer"].get("impl")], sort_keys=True)


def pairs(points: Sequence[dict[str, Any]], rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each end-to-end point with the engine-timed point of the same run, both compared.

    The gap is the source's own: ``engine / end-to-end - 1`` in %, and per optimizer step in seconds
    (``global_batch / end-to-end - global_batch / engine``).

    Example:
        >>> pt = lambda i, metric: {"id": i, "source": "s", "hardware": {"gpu": "g", "gpus_per_node": 8, "nodes": 1},
        ...     "model": {"hf": "m"},
        ...     "seq_len": 8, "micro_batch": 1, "global_batch": 16, "grad_accumulation": 1, "precision": "16-mixed",
        ...     "optimizer": {"name": "adamw"}, "strategy": {"autoshard": "ddp", "activation_checkpointing": "none"},
        ...     "published": {"metric": metric}}
        >>> row = lambda i, pub: {"id": i, "status": "compared", "published": pub, "predicted": 36.0}
        >>> (p,) = pairs([pt("e2e", END_TO_END), pt("eng", ENGINE)], [row("e2e", 30.0), row("eng", 40.0)])
        >>> p["engine"], round(p["gap_pct"], 1), round(p["gap_s_per_step"], 3), p["error_end_to_end_pct"]
        ('eng', 33.3, 0.133, 20.0)
    """
    compared = {r["id"]: r for r in rows if r["status"] == "compared"}
    engines: dict[str, dict[str, Any]] = {}
    for point in points:
        if point["published"]["metric"] == ENGINE and point["id"] in compared:
            engines.setdefault(_key(point), point)
    out = []
    for point in points:
        engine = engines.get(_key(point))
        if point["published"]["metric"] != END_TO_END or point["id"] not in compared or engine is None:
            continue
        e2e_row, engine_row = compared[point["id"]], compared[engine["id"]]
        e2e, timed, predicted = e2e_row["published"], engine_row["published"], e2e_row["predicted"]
        batch = point["global_batch"]
        out.append({"end_to_end": point["id"], "engine": engine["id"], "half": point.get("half"),
                    "published_end_to_end": e2e, "published_engine": timed,
                    "gap_pct": (timed / e2e - 1) * 100, "gap_s_per_step": batch / e2e - batch / timed,
                    "predicted": predicted, "predicted_engine": engine_row["predicted"],
                    "error_end_to_end_pct": (predicted - e2e) / e2e * 100,
                    "error_engine_pct": (engine_row["predicted"] - timed) / timed * 100})
    return out


def summary(found: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Medians over the pairs: the source's own gap, and autoshard's |error| against each clock."""
    if not found:
        return {"pairs": 0}

    def median(key: str, absolute: bool = False) -> float:
        return statistics.median(abs(p[key]) if absolute else p[key] for p in found)

    return {"pairs": len(found), "gap_median_pct": median("gap_pct"), "gap_max_pct": max(p["gap_pct"] for p in found),
            "end_to_end_median_abs_error_pct": median("error_end_to_end_pct", absolute=True),
            "engine_median_abs_error_pct": median("error_engine_pct", absolute=True)}


def markdown(found: Sequence[dict[str, Any]]) -> list[str]:
    """The report's section, ending in a blank line (no lines when no source published both clocks)."""
    if not found:
        return []
    s = summary(found)
    lines = [
        "## One configuration, two clocks", "",
        "Where a source published one configuration timed end to end (`samples_per_s`: the HF Trainer's "
        "`train_samples_per_second` over the whole run) and by the engine's own timers (`engine_samples_per_s`: "
        "DeepSpeed's forward + backward + step, a few early steps), the gap between the two is the source's own: "
        "time the end-to-end clock holds that the engine's does not (the training loop, data loading, warm-up, "
        "and whatever differs between the early steps the engine timed and the rest; the DeepSpeed points' "
        "`loose` notes say what is known). autoshard prices the engine's span, so its error against the "
        "end-to-end clock carries the gap. Both rows are in the table above and in the summary.", "",
        f"**{s['pairs']} pair{'' if s['pairs'] == 1 else 's'}**: the source's clocks differ by a median "
        f"{s['gap_median_pct']:.1f} % (at most "
        f"{s['gap_max_pct']:.1f} %); autoshard's median |error| is {s['engine_median_abs_error_pct']:.1f} % "
        f"against the engine clock and {s['end_to_end_median_abs_error_pct']:.1f} % against the end-to-end "
        "clock.", "",
        "| end to end | engine | published end to end | published engine | source's gap | gap per step (s) "
        "| predicted (end to end) | error vs end to end | predicted (engine) | error vs engine |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for p in found:
        lines.append(f"| {p['end_to_end']} | {p['engine']} | {p['published_end_to_end']:,.1f} | "
                     f"{p['published_engine']:,.1f} | {p['gap_pct']:+.1f} % | {p['gap_s_per_step']:.3f} | "
                     f"{p['predicted']:,.1f} | {p['error_end_to_end_pct']:+.1f} % | {p['predicted_engine']:,.1f} | "
                     f"{p['error_engine_pct']:+.1f} % |")
    return [*lines, ""]
