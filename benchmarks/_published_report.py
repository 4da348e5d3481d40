"""The report of ``published.py``: which metrics count as memory and as throughput, the summary per half
and per source, and the Markdown page."""

from __future__ import annotations

import statistics
from typing import Any

import _published_clocks
import _published_ranking

HALVES = ("fit", "held_out")
"""The points file's halves: the step-time constants are fitted on ``fit`` and reported on ``held_out``."""
ALLOCATED_METRICS = ("peak_allocated_gib", "peak_active_gib")
"""Compared with the predicted allocated peak. Active bytes are the allocated blocks' sizes: at least the
allocated bytes, more by the unused tail of a block the caching allocator hands out unsplit (at most 1 MiB a
block in the large pool, ``should_split`` in c10/cuda/CUDACachingAllocator.cpp)."""
RESERVED_METRICS = ("peak_reserved_gib", "nvidia_smi_gib")
"""Compared, on one GPU, with the replayed reserved peak (plus the CUDA context for nvidia-smi)."""
MEMORY_METRICS = (*ALLOCATED_METRICS, *RESERVED_METRICS)
THROUGHPUT_METRICS = ("tokens_per_s_per_gpu", "samples_per_s", "engine_samples_per_s", "tflops_per_gpu")


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Median and max |error| for memory and for throughput, and micro-batches within one, per half."""
    out: dict[str, Any] = {}
    for half in (*HALVES, "all"):
        mine = [r for r in rows if half in ("all", r["half"])]
        compared = [r for r in mine if r["status"] == "compared"]
        entry: dict[str, Any] = {
            "points": len(mine),
            "compared": len(compared),
            "not_expressible": sum(r["status"] == "not expressible" for r in mine),
            "failed": sum(r["status"] == "failed" for r in mine),
            "published_run_predicted_not_to_fit": sum(not r["prediction"]["fits"] for r in compared
                                                      if r["metric"] != "max_micro_batch"),
        }
        for kind, metrics in (("memory", MEMORY_METRICS), ("throughput", THROUGHPUT_METRICS)):
            errors = [abs(r["error"]) for r in compared if r["metric"] in metrics]
            entry[kind] = {"n": len(errors),
                           "median_abs_error_pct": statistics.median(errors) if errors else None,
                           "max_abs_error_pct": max(errors) if errors else None}
        steps = [abs(r["error"]) for r in compared if r["metric"] == "max_micro_batch"]
        entry["max_micro_batch"] = {"n": len(steps), "within_one": sum(s <= 1 for s in steps)}
        out[half] = entry
    return out


def by_source(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per source: its half, its points, and the median signed and absolute throughput error of those compared
    (a source's bias shows in the signed median)."""
    out: dict[str, Any] = {}
    for source in dict.fromkeys(r["source"] for r in rows):
        mine = [r for r in rows if r["source"] == source]
        errors = [r["error"] for r in mine if r["status"] == "compared" and r["metric"] in THROUGHPUT_METRICS]
        out[source] = {"half": mine[0]["half"], "points": len(mine),
                       "not_expressible": sum(r["status"] == "not expressible" for r in mine),
                       "throughput_n": len(errors),
                       "throughput_median_error_pct": statistics.median(errors) if errors else None,
                       "throughput_median_abs_error_pct": statistics.median(map(abs, errors)) if errors else None}
    return out


def _fmt(value: Any, metric: str) -> str:
    if value is None:
        return "—"
    if metric == "max_micro_batch":
        return str(int(value))
    return f"{value:,.1f}" if abs(value) < 1000 else f"{value:,.0f}"


def _pct(value: float | None, *, signed: bool = False) -> str:
    if value is None:
        return "—"
    return f"{value:+.1f} %" if signed else f"{value:.1f} %"


def summary_lines(summary: dict[str, Any]) -> list[str]:
    lines = ["| half | points | compared | not expressible | failed | memory n | memory median \\|err\\| | "
             "memory max \\|err\\| | throughput n | throughput median \\|err\\| | throughput max \\|err\\| | "
             "largest micro-batch within one | published run predicted not to fit |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for half, s in summary.items():
        pct = [_pct(v) for v in (
            s["memory"]["median_abs_error_pct"], s["memory"]["max_abs_error_pct"],
            s["throughput"]["median_abs_error_pct"], s["throughput"]["max_abs_error_pct"])]
        mb = s["max_micro_batch"]
        lines.append(f"| {half} | {s['points']} | {s['compared']} | {s['not_expressible']} | {s['failed']} | "
                     f"{s['memory']['n']} | {pct[0]} | {pct[1]} | {s['throughput']['n']} | {pct[2]} | {pct[3]} | "
                     f"{mb['within_one']} of {mb['n']} | {s['published_run_predicted_not_to_fit']} |")
    return lines


def markdown(report: dict[str, Any]) -> str:
    """The report: header, summary, one row per point."""
    meta = report["meta"]
    lines = [
        "# autoshard against published GPU measurements", "",
        f"{meta['date']}, {meta['machine']}, {meta['cpu_count']} cores, Python {meta['python']}, torch "
        f"{meta['torch']}, transformers {meta['transformers']}, DeepSpeed {meta['deepspeed']}, autoshard "
        f"{meta['autoshard']}.", "",
        f"Benchmark: `{meta['command']}`", "",
        "**What is compared.** Each published figure (`benchmarks/published_points.yaml`: source, settings, quote, "
        "and what the source leaves open) against autoshard's prediction for the same configuration: the traced "
        "workload (`autoshard.strategies.build_workload`) evaluated as one candidate (`planner.search.evaluate`: "
        "strategy, micro-batch, checkpointing, global batch) on the GPU profile, with no safety margin. "
        "Throughput figures are compared with the step-time model's `tokens_per_s / GPUs` (tokens/s per GPU), "
        "`samples_per_s` (samples/s, end to end as the source timed it; `engine_samples_per_s`: DeepSpeed's "
        "autotuning metric, its own forward + backward + step timers, no data loading or training loop, the span "
        "the step-time model prices) or autoshard's traced FLOPs of the step (recomputation included) times "
        "samples/s per GPU (TFLOP/s); memory figures with the per-GPU peak `memory.gpu.total` (allocated bytes); "
        "the largest micro-batch by bisection over `evaluate(...).fits`. Error = (predicted − published) / "
        "published; for the largest micro-batch, predicted − published micro-batches. A point autoshard cannot "
        "express is listed with what it lacks and not compared. \"Fits\" is autoshard's verdict on the published "
        "configuration, which ran: \"no\" is a memory over-prediction even where no memory figure was published.",
        "", "## Summary", "", *summary_lines(report["summary"]), "",
        "By source (throughput only; the signed median shows a source's bias):", "",
        "| source | half | points | not expressible | throughput n | median error | median \\|error\\| |",
        "|---|---|---:|---:|---:|---:|---:|",
        *[f"| {k} | {s['half']} | {s['points']} | {s['not_expressible']} | {s['throughput_n']} | "
          f"{_pct(s['throughput_median_error_pct'], signed=True)} | {_pct(s['throughput_median_abs_error_pct'])} |"
          for k, s in report["by_source"].items()], "",
        *_published_ranking.markdown(report.get("rankings", [])), "",
        *_published_clocks.markdown(report.get("clocks", [])),
        "## Points", "",
        "| id | half | metric | published | predicted | error | fits | parameters | note |",
        "|---|---|---|---:|---:|---:|---|---:|---|",
    ]
    for r in report["rows"]:
        unit = "" if r["metric"] == "max_micro_batch" else " %"
        error = "—" if r["error"] is None else f"{r['error']:+.1f}{unit}"
        fits = "—" if r["prediction"] is None else ("yes" if r["prediction"]["fits"] else "no")
        parameters = "—" if r["prediction"] is None else f"{r['prediction']['parameters'] / 1e9:.2f}B"
        note = "" if r["status"] == "compared" else f"{r['status']}: {r['reason']}"
        lines.append(f"| {r['id']} | {r['half']} | {r['metric']} | {_fmt(r['published'], r['metric'])} | "
                     f"{_fmt(r['predicted'], r['metric'])} | {error} | {fits} | {parameters} | {note} |")
    alternatives = [r for r in report["rows"] if r.get("alternative")]
    if alternatives:
        lines += ["", "## The same runs modelled another way (not counted above)", "",
                  "Points whose run autoshard can express in two ways (`strategy.alternative` in the points file): "
                  "the row above uses the first; this is the other, and why it is shown.", "",
                  "| id | published | predicted | error | modelled as | why |", "|---|---:|---:|---:|---|---|"]
        for r in alternatives:
            a = r["alternative"]
            lines.append(f"| {r['id']} | {_fmt(r['published'], r['metric'])} | {_fmt(a['predicted'], r['metric'])} "
                         f"| {a['error']:+.1f} % | {a['strategy']} | {a['why']} |")
    lines += ["", "## Sources", "", *[f"- **{k}**: {v['title']}, {v['url']}" for k, v in report["sources"].items()],
              "", "Each point's settings, the source's own words (`quote`) and what the source leaves open (`loose`) "
              "are in `benchmarks/published_points.yaml`.", ""]
    return "\n".join(lines)
