"""Would autoshard's ranking have picked the fastest of the configurations a source published side by side?

Issue #16 asks, on a GPU, that the recommended strategy be the measured fastest or within 5 %. Some sources of
``published_points.yaml`` already measured several configurations of one model on one machine (DeepSpeedExamples:
DDP and each ZeRO stage; torchtitan: each activation-checkpointing mode): the same question can be put to their
figures. A **group** is the compared throughput points of one source that share the GPU, the GPU count, the
model, the sequence length, the precision, the optimizer and the metric: what a user gives ``recommend``, which
chooses the rest (strategy, micro-batch, accumulation, checkpointing), at least two configurations of it (one
configuration published twice, as DeepSpeedExamples' hand-tuned and autotuned GPT-2 XL runs, is not a choice).
Within a group autoshard's pick is the point it predicts fastest among those it predicts to fit (as ``recommend``
ranks candidates); points predicted within :data:`TIE_PCT` of the pick are ties, and the pick counts as the
slowest of them by the published figures (a user could have been given any of them). The **loss** is how much
slower the pick ran than the published fastest, in % of the fastest.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

TIE_PCT = 0.5
"""Predictions closer than this (% of the larger) are a tie: the model does not tell the two apart."""
WITHIN_PCT = 5.0
"""Issue #16's bar: the pick's published throughput at most this far (%) below the published fastest."""


def given(point: dict[str, Any]) -> list[Any]:
    """What a user gives ``recommend`` for a point's run: the source, the machine, the model, the sequence length,
    the precision and the optimizer."""
    hw = point["hardware"]
    return [point["source"], hw["gpu"], hw["gpus_per_node"], hw["nodes"], point["model"], point["seq_len"],
            point["precision"], point["optimizer"]["name"]]


def _key(point: dict[str, Any]) -> str:
    return json.dumps([*given(point), point["published"]["metric"]], sort_keys=True)


def configuration(point: dict[str, Any]) -> list[Any]:
    """What a user (or ``recommend``) would choose for a run: strategy, its settings, checkpointing, batch."""
    strategy = point.get("strategy", {})
    return [strategy.get("autoshard"), strategy.get("settings"), strategy.get("activation_checkpointing"),
            point.get("micro_batch"), point.get("global_batch"), point.get("grad_accumulation")]


def rankings(points: Sequence[dict[str, Any]], rows: Sequence[dict[str, Any]],
             throughput_metrics: Sequence[str]) -> list[dict[str, Any]]:
    """One entry per group (see the module docstring): its points, the published fastest, autoshard's pick, the
    loss and whether it is within :data:`WITHIN_PCT`.

    Args:
        points: the points file's points (for the settings a group shares).
        rows: ``published.run_point``'s rows (status, published, predicted, whether it fits).
        throughput_metrics: the metrics that are throughputs (higher is faster).

    Example:
        >>> pt = lambda i, mb: {"id": i, "source": "s", "half": "held_out", "seq_len": 1024, "model": {"hf": "m"},
        ...                     "hardware": {"gpu": "g", "gpus_per_node": 8, "nodes": 1}, "micro_batch": mb,
        ...                     "precision": "bf16-mixed", "optimizer": {"name": "adamw"},
        ...                     "published": {"metric": "samples_per_s"}}
        >>> row = lambda i, pub, pred: {"id": i, "status": "compared", "metric": "samples_per_s", "published": pub,
        ...                             "predicted": pred, "prediction": {"fits": True}}
        >>> (g,) = rankings([pt("a", 1), pt("b", 2)], [row("a", 100, 90), row("b", 80, 120)], ["samples_per_s"])
        >>> g["published_best"], g["pick"], g["loss_pct"], g["within"]
        ('a', 'b', 20.0, False)
    """
    by_id = {r["id"]: r for r in rows if r["status"] == "compared" and r["metric"] in throughput_metrics}
    groups: dict[str, list[dict[str, Any]]] = {}
    for point in points:
        if point["id"] in by_id:
            groups.setdefault(_key(point), []).append(point)
    out = []
    for members in groups.values():
        # one configuration measured twice is not a choice
        if len({json.dumps(configuration(p), sort_keys=True) for p in members}) < 2:
            continue
        got = [by_id[p["id"]] for p in members]
        best = max(got, key=lambda r: r["published"])
        fitting = [r for r in got if r["prediction"]["fits"]]
        entry: dict[str, Any] = {
            "source": members[0]["source"], "half": members[0]["half"], "metric": members[0]["published"]["metric"],
            "points": [r["id"] for r in got], "published_best": best["id"], "pick": None, "ties": [],
            "loss_pct": None, "within": False}
        if fitting:
            top = max(r["predicted"] for r in fitting)
            tied = [r for r in fitting if r["predicted"] >= top * (1 - TIE_PCT / 100)]
            pick = min(tied, key=lambda r: r["published"])
            loss = (best["published"] - pick["published"]) / best["published"] * 100
            entry.update(pick=pick["id"], ties=[r["id"] for r in tied if r is not pick], loss_pct=loss,
                         within=loss <= WITHIN_PCT)
        out.append(entry)
    return out


def summary(groups: Sequence[dict[str, Any]]) -> dict[str, int]:
    """How many groups there are, and in how many autoshard's pick is the published fastest or within 5 %."""
    return {"groups": len(groups), "within": sum(g["within"] for g in groups),
            "fastest": sum(g["pick"] == g["published_best"] for g in groups)}


def _prefix(ids: Sequence[str]) -> str:
    """The ids' longest common prefix that ends in a dash (``""`` if none).

    Example:
        >>> _prefix(["dse-gpt2-ddp-mb8", "dse-gpt2-zero1-mb8"])
        'dse-gpt2-'
    """
    common = ids[0]
    for i in ids[1:]:
        while not i.startswith(common):
            common = common[:-1]
    return common[:common.rfind("-") + 1]


def markdown(groups: Sequence[dict[str, Any]]) -> list[str]:
    """The report's section: one row per group."""
    s = summary(groups)
    lines = [
        "## Ranking: would autoshard have picked the fastest?", "",
        f"Where a source published several configurations of one model on one machine, autoshard's pick (the one it "
        f"predicts fastest among those it predicts to fit; predictions within {TIE_PCT:g} % are ties, and the pick "
        f"counts as the slowest of its ties) against the published fastest. Loss: how much slower the pick ran, in "
        f"% of the fastest; issue #16's bar is {WITHIN_PCT:g} %. **{s['within']} of {s['groups']} groups within "
        f"{WITHIN_PCT:g} %** ({s['fastest']} picked the fastest).", "",
        "| group | half | metric | configurations | published fastest | autoshard's pick | ties | loss |",
        "|---|---|---|---|---|---|---|---:|"]
    for g in groups:
        prefix = _prefix(g["points"])
        cut = len(prefix)
        loss = "—" if g["loss_pct"] is None else f"{g['loss_pct']:.1f} %"
        lines.append(f"| {prefix}… | {g['half']} | {g['metric']} | {', '.join(i[cut:] for i in g['points'])} | "
                     f"{g['published_best'][cut:]} | {g['pick'][cut:] if g['pick'] else 'none fits'} | "
                     f"{', '.join(i[cut:] for i in g['ties']) or '—'} | {loss} |")
    return lines
