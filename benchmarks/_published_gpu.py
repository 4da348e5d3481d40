"""The published points that fit one GPU, trained on this one: ``python benchmarks/published.py --measure-on-gpu``.

A published single-GPU run (torchtune's full fine-tune of Llama 3.2 3B on one A100, ...) is rebuilt from the points
file (its model's config class, sequence, micro-batch, precision, optimizer, checkpointing) and trained for a few
real steps on the GPU here, the way ``benchmarks/memory_accuracy.py`` measures its one-device cases
(:func:`memory_accuracy.measure_peak`: the model built on the device, the last step's
``torch.cuda.max_memory_allocated()`` and ``max_memory_reserved()``, every step timed). Three figures per point:

* **measured here** against **the published figure**: peak memory does not depend on the GPU model (the same
  tensors are allocated on an A100 and an H100, but for cuBLAS's workspace), so this checks that the points file
  describes the published run; throughput does depend on it and is shown, not compared, when the GPUs differ;
* **predicted here** (autoshard's planner for this GPU's profile, as ``benchmarks/published.py`` predicts the
  published GPU) against **measured here**: the error on real hardware.

Writes ``gpu_published.{md,json}``. ``--dry-run`` checks the plumbing on CPU: each model shrunk to two layers of
width 64, sequences of 64 tokens (its figures mean nothing).
"""

from __future__ import annotations

import copy
import gc
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

MEASURED_STEPS = 4
"""Optimizer steps trained per point; the peak is the last one's, the time the median of all but the first."""

DRY_RUN_CONFIG = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
                  "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 1000}
"""The dry run's model shape: these keys, where the model's config has them."""
DRY_RUN_SEQ_LEN = 64


def single_gpu_points(points: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The points measured on one GPU: one published GPU, a memory or throughput figure, expressible."""
    from _published_report import MEMORY_METRICS, THROUGHPUT_METRICS
    from published import not_expressible

    return [p for p in points
            if p["hardware"]["nodes"] * p["hardware"]["gpus_per_node"] == 1
            and p["published"]["metric"] in (*MEMORY_METRICS, *THROUGHPUT_METRICS)
            and p["strategy"]["autoshard"] == "ddp" and not not_expressible(p)]


def shrunk(data: dict[str, Any], points: Sequence[dict[str, Any]]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The dry run's copies: every model at :data:`DRY_RUN_CONFIG`'s shape, every point at
    :data:`DRY_RUN_SEQ_LEN` tokens and one sample per micro-batch."""
    data = copy.deepcopy(data)
    for spec in data["models"].values():
        spec["config"] = {**spec["config"], **{k: v for k, v in DRY_RUN_CONFIG.items() if k in spec["config"]}}
    return data, [{**p, "seq_len": DRY_RUN_SEQ_LEN, "micro_batch": 1, "global_batch": p["grad_accumulation"]}
                  for p in points]


def on_this_gpu(point: dict[str, Any], gpu_profile: str) -> dict[str, Any]:
    """``point`` as run on one GPU of profile ``gpu_profile``."""
    return {**point, "hardware": {**point["hardware"], "gpu": gpu_profile}}


def measure(point: dict[str, Any], predictor: Any, device: torch.device, *, steps: int = MEASURED_STEPS) -> dict:
    """Train ``point``'s configuration on ``device``: peak allocated and reserved bytes, tokens/s."""
    from memory_accuracy import measure_peak
    from published import profile_options

    from autoshard.models import load_source

    options = profile_options(point, device.type)
    source = load_source(predictor.model_source(point))
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(point.get("float32_matmul_precision", "highest"))  # as the run (and the
    try:                                                                                  # prediction) had it
        peak = measure_peak(source, options, device, steps=steps)
    finally:
        torch.set_float32_matmul_precision(before)
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    replayed = None
    if device.type == "cuda":  # the reserved peak, replayed from the traced step (autoshard/profiler/cuda_reserve.py)
        from autoshard.profiler.cuda_reserve import trace_reserved

        replayed = trace_reserved(source, options, compute_capability=torch.cuda.get_device_capability(device))
    step_s = statistics.median(peak["step_seconds"][1:])
    tokens_per_step = point["micro_batch"] * point["grad_accumulation"] * point["seq_len"]  # one optimizer step
    return {"peak_allocated_gib": peak["allocated"] / 2**30,
            "peak_reserved_gib": None if peak["reserved"] is None else peak["reserved"] / 2**30,
            "peak_reserved_replayed_gib": None if replayed is None else replayed.peak_reserved_bytes / 2**30,
            "step_time_s": step_s, "tokens_per_s_per_gpu": tokens_per_step / step_s,
            "step_seconds": peak["step_seconds"]}


def _error(predicted: float | None, measured: float | None) -> float | None:
    if predicted is None or measured is None or measured == 0:
        return None
    return 100.0 * (predicted - measured) / measured


def configuration(point: dict[str, Any]) -> str:
    """What a run trains: points equal here are one run measured for two figures."""
    import json

    return json.dumps([point[k] for k in ("model", "seq_len", "micro_batch", "precision", "optimizer")]
                      + [point["strategy"]["activation_checkpointing"],
                         point.get("float32_matmul_precision", "highest")], sort_keys=True)


def run(point: dict[str, Any], predictor: Any, device: torch.device, gpu_profile: str | None,
        measured: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """One point's row: published, measured here (once per :func:`configuration`, kept in ``measured``),
    predicted here; a failure is recorded, never raised."""
    from _published_report import ALLOCATED_METRICS

    metric = point["published"]["metric"]
    row: dict[str, Any] = {"id": point["id"], "metric": metric, "published": point["published"]["value"],
                           "published_gpu": point["hardware"]["gpu"], "gpu_profile": gpu_profile,
                           "measured": None, "predicted": None, "error": None}
    started = time.perf_counter()
    try:
        key = configuration(point)
        if key not in measured:
            measured[key] = measure(point, predictor, device)
        row["measured"] = measured[key]
        if gpu_profile is not None:
            row["predicted"] = predictor.predict(on_this_gpu(point, gpu_profile))
        here, predicted = row["measured"], row["predicted"] or {}
        row["memory_error_percent"] = _error(predicted.get("peak_allocated_gib"), here["peak_allocated_gib"])
        row["throughput_error_percent"] = _error(predicted.get("tokens_per_s_per_gpu"), here["tokens_per_s_per_gpu"])
        row["reproduction_percent"] = (_error(here["peak_allocated_gib"], point["published"]["value"])
                                       if metric in ALLOCATED_METRICS else None)
    except Exception as exc:  # noqa: BLE001 - a benchmark row records any failure and goes on
        row["error"] = f"{type(exc).__name__}: {exc}"
    row["seconds"] = round(time.perf_counter() - started, 1)
    return row


def _fmt(x: float | None, spec: str, unit: str = "") -> str:
    return "—" if x is None else f"{format(x, spec)}{unit}"


def markdown(report: dict[str, Any]) -> str:
    """The report as a table."""
    meta = report["meta"]
    lines = [
        "# Published single-GPU runs, trained on this GPU" + (" — DRY RUN (CPU, shrunk models: no figure here "
                                                              "means anything)" if meta["dry_run"] else ""),
        "",
        f"{meta['date']}, {', '.join(f'{k} {v}' for k, v in meta['machine'].items())}, profile "
        f"`{meta['gpu_profile']}`, torch {meta['torch']}, transformers {meta['transformers']}, "
        f"autoshard {meta['autoshard']}.",
        "",
        f"Command: `{meta['command']}`. Each point trained {MEASURED_STEPS} steps; memory: the last step's "
        "`max_memory_allocated()` / `max_memory_reserved()`; time: the median step after the first. Predicted: "
        "autoshard's planner for this GPU's profile; reserved replayed: the traced step's allocations (a warm-up "
        "step and one more) through the caching allocator's rules. Reproduction: the allocated peak measured here "
        "against a published allocated or active figure (memory does not depend on the GPU model; throughput does, "
        "and is not compared across GPUs; a published nvidia-smi or reserved figure is held against the replay in "
        "published.md, and the replay against the measured reserved peak here).",
        "",
        "| point | published | published on | measured peak (GiB) | reserved (GiB) | reserved replayed (GiB) "
        "| predicted peak (GiB) | memory error | reproduction | measured tokens/s | predicted tokens/s "
        "| throughput error | note |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in report["rows"]:
        m, p = r["measured"] or {}, r["predicted"] or {}
        lines.append(
            f"| {r['id']} | {r['published']:g} ({r['metric']}) | {r['published_gpu']} "
            f"| {_fmt(m.get('peak_allocated_gib'), '.2f')} | {_fmt(m.get('peak_reserved_gib'), '.2f')} "
            f"| {_fmt(m.get('peak_reserved_replayed_gib'), '.2f')} | {_fmt(p.get('peak_allocated_gib'), '.2f')} "
            f"| {_fmt(r.get('memory_error_percent'), '+.1f', ' %')} "
            f"| {_fmt(r.get('reproduction_percent'), '+.1f', ' %')} | {_fmt(m.get('tokens_per_s_per_gpu'), ',.0f')} "
            f"| {_fmt(p.get('tokens_per_s_per_gpu'), ',.0f')} "
            f"| {_fmt(r.get('throughput_error_percent'), '+.1f', ' %')} | {r['error'] or ''} |")
    return "\n".join(lines) + "\n"


def main(data: dict[str, Any], points: Sequence[dict[str, Any]], *, out: Path, dry_run: bool, command: str) -> int:
    """Measure every single-GPU point here and write ``gpu_published.{md,json}`` under ``out``."""
    import datetime
    import json
    import platform
    import sys
    import tempfile

    from _common import package_version
    from memory_accuracy import machine
    from published import Predictor

    import autoshard
    from autoshard.hardware.profiles import gpu_profile_for

    if not dry_run and not torch.cuda.is_available():
        print("error: --measure-on-gpu needs a CUDA GPU (torch.cuda.is_available() is False); add --dry-run to "
              "check the plumbing on CPU.", file=sys.stderr)
        return 2
    chosen = single_gpu_points(points)
    if dry_run:
        data, chosen = shrunk(data, chosen)
    device = torch.device("cpu" if dry_run else "cuda")
    gpu = None if dry_run else gpu_profile_for(torch.cuda.get_device_name(device))
    gpu_profile = "h100-sxm-80gb" if dry_run else (None if gpu is None else gpu.name)
    meta = {"date": datetime.date.today().isoformat(), "machine": machine(device),
            "gpu_profile": gpu_profile or "none (this GPU has no profile)", "dry_run": dry_run,
            "python": platform.python_version(), "torch": torch.__version__,
            "transformers": package_version("transformers") or "not installed", "autoshard": autoshard.__version__,
            "command": command}
    rows: list[dict[str, Any]] = []
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="published-gpu-") as tmp:
        predictor = Predictor(data, Path(tmp))
        measured: dict[str, dict[str, Any]] = {}  # points that share a configuration (memory, tokens/s) train once
        for point in chosen:
            row = run(point, predictor, device, gpu_profile, measured)
            rows.append(row)
            print(f"{row['id']}: {'failed: ' + row['error'] if row['error'] else 'measured'} ({row['seconds']} s)",
                  flush=True)
            # Written after every point: a run stopped by its time limit keeps the rows before.
            report = {"meta": meta, "rows": rows}
            (out / "gpu_published.json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
            (out / "gpu_published.md").write_text(markdown(report), encoding="utf-8")
    return 1 if any(r["error"] for r in rows) else 0
