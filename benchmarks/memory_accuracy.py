"""How close autoshard's predicted single-device training-step peak is to a measured one.

Usage:
    python benchmarks/memory_accuracy.py [--device cpu|cuda|auto] [--grid small|full] [--out docs/benchmarks]
                                         [--models NAME ...]

For every case the prediction is ``autoshard.profile(..., target=T).peak_bytes`` (``T`` = the device type) and
the measurement runs the same two training steps on real tensors, the way ``autoshard/profiler/trace.py``
does (same build, batch, loss, optimizer, autocast, checkpointing of the repeated block, outputs freed after
backward, Python's cyclic GC paused), and takes the peak of the second step only:

* CUDA: ``torch.cuda.reset_peak_memory_stats()`` before step 2, then ``max_memory_allocated()`` (compared)
  and ``max_memory_reserved()`` (shown);
* CPU: autoshard's own ``MemoryTracker`` on the real tensors (CPU has no allocator statistics). Prediction
  and measurement then count with the same tracker, so any difference is a difference between the fake-tensor
  trace and the real step.

Writes ``memory_accuracy.{md,json}`` under ``--out`` with the date, machine, versions and the command. Exits
non-zero only on a crash: a failed case is recorded in its row, a large error is a result.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import gc
import importlib.metadata
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch.utils._pytree import tree_iter, tree_map

import autoshard
from autoshard.models.source import ModelSource, call_model, default_loss
from autoshard.profiler.blocks import find_repeated_blocks
from autoshard.profiler.options import Precision, ProfileOptions
from autoshard.profiler.trace import STEPS, _build, _checkpoint_blocks, _gc_paused, _make_optimizer
from autoshard.profiler.tracker import Category, MemoryTracker

SKIP_ABOVE_FRACTION = 0.90
"""Full grid: a case whose prediction exceeds this fraction of the device's memory is skipped, not run."""


@dataclass(frozen=True, slots=True)
class Case:
    """One training step to predict and measure."""

    model: str
    """Catalog name or model file."""
    batch_size: int
    seq_len: int | None
    precision: str
    checkpointing: bool
    num_layers: int | None = None
    """Rebuild the model with this many repeated blocks (``source.with_num_layers``); ``None``: as published."""


def small_grid() -> list[Case]:
    """Tiny models: runs in a minute or two on a 2-core CPU."""
    token = ["tiny-gpt2", "tiny-llama", "tiny-bert", "tiny-t5", "examples/gpt/model.py"]
    vision = ["tiny-vit", "tiny-resnet"]
    cases = []
    for precision in ("32-true", "bf16-mixed"):
        for ckpt in (False, True):
            for model in token:
                cases += [Case(model, b, 64, precision, ckpt) for b in (1, 4)]
            for model in vision:
                cases += [Case(model, b, None, precision, ckpt) for b in (2, 8)]
    return cases


def full_grid() -> list[Case]:
    """Published models (llama-style decoders with fewer blocks so they fit one GPU); meant for a CUDA GPU."""
    models: list[tuple[str, tuple[int, ...], int | None, int | None]] = [
        ("gpt2", (4, 8), 1024, None),
        ("gpt2-medium", (4,), 1024, None),
        ("bert-base-uncased", (8, 32), 512, None),
        ("t5-small", (8, 32), 512, None),
        ("vit-b-16", (32, 128), None, None),
        ("resnet50", (32, 128), None, None),
        ("llama-2-7b", (1, 4), 2048, 4),
        ("mistral-7b", (1, 4), 2048, 4),
        ("llama-3-8b", (1, 2), 2048, 2),
    ]
    return [
        Case(name, b, seq, precision, ckpt, layers)
        for name, batches, seq, layers in models
        for precision in ("32-true", "bf16-mixed")
        for ckpt in (False, True)
        for b in batches
    ]


GRIDS = {"small": small_grid, "full": full_grid}


def _load(case: Case) -> ModelSource:
    source = autoshard.load_source(case.model)
    if case.num_layers is not None:
        if source.with_num_layers is None:
            raise ValueError(f"{case.model} cannot change its block count, but got {case.num_layers=}.")
        source = source.with_num_layers(case.num_layers)
    return source


def measure_peak(source: ModelSource, options: ProfileOptions, device: torch.device) -> dict[str, int]:
    """Run :data:`~autoshard.profiler.trace.STEPS` real training steps and measure the last one's peak.

    Mirrors ``autoshard.profiler.trace._run_steps`` without its bookkeeping hooks (which only classify bytes).

    Args:
        source: the model source.
        options: batch size, sequence, precision, optimizer, checkpointing (``target`` must match ``device``).
        device: where to run.

    Returns:
        ``{"allocated": bytes}`` (the tracker's peak on CPU, ``max_memory_allocated`` on CUDA), plus
        ``"reserved"`` on CUDA.
    """
    cuda = device.type == "cuda"
    model = _build(source, options).to(device)
    model.train()
    blocks = find_repeated_blocks(model)
    batch = source.batch(options.batch_size, seq_len=options.seq_len)
    if options.precision is Precision.BF16_TRUE:
        batch = tree_map(lambda x: x.to(torch.bfloat16) if torch.is_tensor(x) and x.is_floating_point() else x,
                         batch)
    batch = tree_map(lambda x: x.to(device) if torch.is_tensor(x) else x, batch)
    optimizer = _make_optimizer(source, options, model)
    if options.activation_checkpointing and blocks is not None:
        _checkpoint_blocks(model, blocks, None)
    loss_fn = source.loss_fn or default_loss
    autocast_dtype = options.precision.autocast_dtype
    tracker = None if cuda else MemoryTracker()
    if tracker is not None:
        tracker.track_all(model.parameters(), Category.PARAMETERS)
        tracker.track_all(model.buffers(), Category.BUFFERS)
        tracker.track_all((t for t in tree_iter(batch) if isinstance(t, torch.Tensor)), Category.INPUTS)
    result: dict[str, int] = {}
    gc.collect()
    with _gc_paused(), tracker or contextlib.nullcontext():
        for step in range(STEPS):
            last = step == STEPS - 1
            if tracker is not None:
                tracker.measuring = last
            elif last:
                torch.cuda.synchronize(device)
                torch.cuda.reset_peak_memory_stats(device)
            context = (torch.autocast(device.type, dtype=autocast_dtype) if autocast_dtype is not None
                       else contextlib.nullcontext())
            for _ in range(options.grad_accumulation):
                with context:
                    output = call_model(model, batch)
                    loss = loss_fn(output, batch)
                del output
                if options.grad_accumulation > 1:
                    loss = loss / options.grad_accumulation
                loss.backward()
                del loss
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    if tracker is not None:
        result["allocated"] = tracker.peak.total_bytes
    else:
        torch.cuda.synchronize(device)
        result["allocated"] = torch.cuda.max_memory_allocated(device)
        result["reserved"] = torch.cuda.max_memory_reserved(device)
    del model, optimizer, batch, tracker
    return result


def run_case(case: Case, device: torch.device, *, skip_above_bytes: int | None) -> dict[str, Any]:
    """Predict and measure one case; a failure is recorded in the row's ``error``, never raised."""
    row: dict[str, Any] = {**asdict(case), "predicted_bytes": None, "measured_bytes": None,
                           "reserved_bytes": None, "error_pct": None, "note": "", "error": None}
    started = time.perf_counter()
    try:
        source = _load(case)
        options = ProfileOptions(batch_size=case.batch_size, seq_len=case.seq_len, precision=case.precision,
                                 activation_checkpointing=case.checkpointing, target=device.type)
        predicted = autoshard.profile(source, batch_size=case.batch_size, seq_len=case.seq_len,
                                      precision=case.precision, activation_checkpointing=case.checkpointing,
                                      target=device.type)
        row["predicted_bytes"] = predicted.peak_bytes
        if case.checkpointing and predicted.block_class is None:
            row["note"] = "no repeated block: checkpointing has no effect"
        if skip_above_bytes is not None and predicted.peak_bytes > skip_above_bytes:
            row["note"] = f"skipped: prediction above {SKIP_ABOVE_FRACTION:.0%} of device memory"
            return row
        measured = measure_peak(source, options, device)
        row["measured_bytes"] = measured["allocated"]
        row["reserved_bytes"] = measured.get("reserved")
        row["error_pct"] = 100.0 * (predicted.peak_bytes - measured["allocated"]) / measured["allocated"]
    except Exception as exc:  # noqa: BLE001 - a benchmark row records any failure and goes on
        row["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
        row["seconds"] = round(time.perf_counter() - started, 2)
    return row


def summarize(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Median and maximum absolute error over the measured rows."""
    errors = [abs(r["error_pct"]) for r in rows if r["error_pct"] is not None]
    return {
        "cases": len(rows),
        "measured": len(errors),
        "failed": sum(r["error"] is not None for r in rows),
        "skipped": sum(r["note"].startswith("skipped") for r in rows),
        "median_abs_error_pct": statistics.median(errors) if errors else None,
        "max_abs_error_pct": max(errors) if errors else None,
    }


def machine(device: torch.device) -> dict[str, Any]:
    """What ran the benchmark: CPU model and cores, and the GPU with torch's CUDA version on CUDA."""
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    out: dict[str, Any] = {"cpu": f"{cpu}, {os.cpu_count()} cores", "device": device.type}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        out["gpu"] = torch.cuda.get_device_name(device)
        out["gpu_memory_bytes"] = props.total_memory
        out["cuda"] = torch.version.cuda
        with contextlib.suppress(Exception):
            import pynvml

            pynvml.nvmlInit()
            out["driver"] = pynvml.nvmlSystemGetDriverVersion()
    return out


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _mib(n: int | None) -> str:
    return "—" if n is None else f"{n / 2**20:,.2f}"


def write_report(out: Path, meta: dict[str, Any], summary: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    """Write ``memory_accuracy.json`` and ``memory_accuracy.md`` into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "memory_accuracy.json").write_text(
        json.dumps({"meta": meta, "summary": summary, "rows": rows}, indent=2) + "\n")
    m = meta["machine"]
    where = f"{m['gpu']} (CUDA {m['cuda']}, driver {m.get('driver', '?')}), host {m['cpu']}" \
        if m["device"] == "cuda" else m["cpu"]
    cuda = m["device"] == "cuda"
    med, mx = summary["median_abs_error_pct"], summary["max_abs_error_pct"]
    lines = [
        "# Memory accuracy: predicted against measured single-device peak",
        "",
        f"{meta['date']}, {where}, Python {meta['python']}, torch {meta['torch']}, deepspeed {meta['deepspeed']}, "
        f"autoshard {meta['autoshard']}. Grid `{meta['grid']}`, AdamW, target `{meta['target']}`. "
        f"Took {meta['seconds']:.0f} s.",
        "",
        f"Command: `{meta['command']}`",
        "",
        "Predicted: `autoshard.profile(...).peak_bytes`. Measured: the second of two real training steps, "
        + ("`torch.cuda.max_memory_allocated()` after `reset_peak_memory_stats()` (reserved shown too)."
           if cuda else "autoshard's `MemoryTracker` on real CPU tensors (CPU has no allocator statistics)."),
        "Error = (predicted − measured) / measured.",
        "",
        f"**{summary['measured']} of {summary['cases']} cases measured "
        f"({summary['failed']} failed, {summary['skipped']} skipped): median |error| "
        f"{'—' if med is None else f'{med:.2f} %'}, maximum {'—' if mx is None else f'{mx:.2f} %'}.**",
        "",
        "| model | precision | batch | seq | ckpt | predicted (MiB) | measured (MiB) | "
        + ("reserved (MiB) | " if cuda else "") + "predicted − measured (bytes) | error | note |",
        "|---|---|---:|---:|---|---:|---:|" + ("---:|" if cuda else "") + "---:|---:|---|",
    ]
    for r in rows:
        name = r["model"] if r["num_layers"] is None else f"{r['model']} ({r['num_layers']} blocks)"
        note = r["note"] if r["error"] is None else f"failed: {r['error']}".replace("|", "\\|").replace("\n", " ")
        err = "—" if r["error_pct"] is None else f"{r['error_pct']:+.2f} %"
        diff = "—" if r["measured_bytes"] is None else f"{r['predicted_bytes'] - r['measured_bytes']:+,}"
        lines.append(
            f"| {name} | {r['precision']} | {r['batch_size']} | {r['seq_len'] or '—'} | "
            f"{'on' if r['checkpointing'] else 'off'} | {_mib(r['predicted_bytes'])} | {_mib(r['measured_bytes'])} | "
            + (f"{_mib(r['reserved_bytes'])} | " if cuda else "") + f"{diff} | {err} | {note} |"
        )
    (out / "memory_accuracy.md").write_text("\n".join(lines) + "\n")


def _device(name: str) -> torch.device:
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda, but torch.cuda.is_available() is False.")
    return torch.device(name)


def main(argv: Sequence[str] | None = None, *, cases: Sequence[Case] | None = None) -> int:
    """Run the grid (or ``cases``) and write the report; returns the exit status (0 unless it crashed).

    Args:
        argv: command-line arguments (default ``sys.argv[1:]``).
        cases: run these instead of ``--grid`` (for tests).
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "cuda", "auto"), default="auto")
    parser.add_argument("--grid", choices=sorted(GRIDS), default="small")
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks"))
    parser.add_argument("--models", nargs="+", default=None,
                        help="run only these models of the grid (e.g. to split the full grid into shorter runs)")
    args = parser.parse_args(argv)
    device = _device(args.device)
    grid = list(cases) if cases is not None else GRIDS[args.grid]()
    if args.models is not None:
        unknown = sorted(set(args.models) - {c.model for c in grid})
        if unknown:
            parser.error(f"--models {' '.join(unknown)}: not in the grid; it has {sorted({c.model for c in grid})}.")
        grid = [c for c in grid if c.model in args.models]
    skip_above = None
    if args.grid == "full" and device.type == "cuda":
        skip_above = int(SKIP_ABOVE_FRACTION * torch.cuda.get_device_properties(device).total_memory)
    started = time.perf_counter()
    rows = []
    for i, case in enumerate(grid, 1):
        row = run_case(case, device, skip_above_bytes=skip_above)
        rows.append(row)
        err = "—" if row["error_pct"] is None else f"{row['error_pct']:+.2f}%"
        print(f"[{i}/{len(grid)}] {case.model} {case.precision} b={case.batch_size} seq={case.seq_len} "
              f"ckpt={case.checkpointing}: predicted {row['predicted_bytes']} measured {row['measured_bytes']} "
              f"error {err} {row['note']} {row['error'] or ''}".rstrip(), flush=True)
    argv_shown = list(sys.argv[1:] if argv is None else argv)
    meta = {
        "date": datetime.date.today().isoformat(),
        "machine": machine(device),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "deepspeed": _version("deepspeed"),
        "autoshard": autoshard.__version__,
        "grid": args.grid if cases is None else "custom",
        "target": device.type,
        "command": " ".join(["python", "benchmarks/memory_accuracy.py", *argv_shown]),
        "seconds": round(time.perf_counter() - started, 1),
    }
    summary = summarize(rows)
    write_report(args.out, meta, summary, rows)
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
