"""Is the traced step's allocation sequence the real program's? The CPU half of the reserved-memory check.

autoshard predicts ``max_memory_reserved`` by replaying the allocations and frees of a traced step, in order,
through the CUDA caching allocator's rules (``autoshard/profiler/cuda_reserve.py``). That prediction rests on two
things: the allocator's rules, which only a GPU can check (``benchmarks/memory_accuracy.py --grid full`` on CUDA
compares the replay with ``max_memory_reserved``), and the sequence itself, which this benchmark checks on the CPU.

Per case, the same model, batch, precision and checkpointing, two sequences go through the same replay:

* **traced**: autoshard's tracker under fake tensors (target ``cpu``, nothing allocated), the sequence
  ``trace_reserved`` replays;
* **real**: the model trained for real on this CPU, every allocation and free as PyTorch's CPU allocator reports
  them to the profiler (``benchmarks/_allocator.py``; not autoshard's tracker).

The real sequence has more events (CPU kernels' own scratch buffers); where the reserved peaks agree, what the
trace leaves out does not move the segments. Each case is a warm-up step and one more, as the GPU measures.

Run: ``python benchmarks/reserve_replay.py [--out docs/benchmarks] [--cases NAME ...]``
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import cpu_model, package_version
from memory_accuracy import Case, load_case, measure_peak

from autoshard.profiler.cuda_reserve import replay
from autoshard.profiler.options import ProfileOptions
from autoshard.profiler.trace import trace_timelines


def label(case: Case) -> str:
    """A short label: model, blocks, batch, sequence, precision, checkpointing."""
    blocks = f"/{case.num_layers}L" if case.num_layers else ""
    seq = f"x{case.seq_len}" if case.seq_len else ""
    return f"{case.model}{blocks} b{case.batch_size}{seq} {case.precision}" + (" ckpt" if case.checkpointing else "")


CASES = (  # memory_accuracy's cases: model, micro-batch, sequence, precision, checkpointing, blocks
    Case("gpt2", 4, 512, "32-true", False, 2),
    Case("gpt2", 4, 512, "32-true", True, 2),
    Case("gpt2", 2, 512, "bf16-mixed", False, 2),
    Case("llama-2-7b", 1, 256, "32-true", False, 1),
    Case("mistral-7b", 1, 256, "bf16-mixed", False, 1),
    Case("bert-base-uncased", 8, 128, "32-true", False),
    Case("t5-small", 8, 128, "32-true", False),
    Case("vit-b-16", 4, None, "32-true", False, 2),
    Case("resnet50", 4, None, "32-true", False),
)


_FIELDS = ("model", "batch_size", "seq_len", "precision", "checkpointing", "num_layers")


def run_case(case: Case) -> dict[str, Any]:
    """Trace and run ``case``; both sequences replayed. A failure is recorded in the row, never raised."""
    row: dict[str, Any] = {**{k: getattr(case, k) for k in _FIELDS}, "name": label(case), "error": None}
    started = time.perf_counter()
    try:
        source = load_case(case)
        options = ProfileOptions(batch_size=case.batch_size, seq_len=case.seq_len, precision=case.precision,
                                 activation_checkpointing=case.checkpointing, target="cpu")
        log: list[tuple[int, int]] = []
        trace_timelines(source, options, (case.batch_size,), count_flops=False, record=False, allocation_log=log)
        traced = replay(log)
        real_log = measure_peak(source, options, torch.device("cpu"), keep_log=True)["allocation_log"]
        real = replay(real_log)
        row.update(
            traced_events=len(log), real_events=len(real_log),
            traced_allocated_bytes=traced.peak_allocated_bytes, real_allocated_bytes=real.peak_allocated_bytes,
            traced_reserved_bytes=traced.peak_reserved_bytes, real_reserved_bytes=real.peak_reserved_bytes,
            reserved_error_pct=100.0 * (traced.peak_reserved_bytes - real.peak_reserved_bytes)
            / real.peak_reserved_bytes,
            reserve_over_allocated_pct=100.0 * (real.peak_reserved_bytes - real.peak_allocated_bytes)
            / real.peak_allocated_bytes,
        )
    except Exception as exc:  # noqa: BLE001 - a benchmark row records any failure and goes on
        row["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        gc.collect()
        row["seconds"] = round(time.perf_counter() - started, 2)
    return row


def summarize(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Median and maximum |reserved error| over the rows that ran."""
    errors = [abs(r["reserved_error_pct"]) for r in rows if r["error"] is None]
    return {"cases": len(rows), "ran": len(errors), "failed": len(rows) - len(errors),
            "median_abs_reserved_error_pct": statistics.median(errors) if errors else None,
            "max_abs_reserved_error_pct": max(errors) if errors else None}


def _mib(n: int | None) -> str:
    return "—" if n is None else f"{n / 2**20:,.1f}"


def markdown(meta: dict[str, Any], summary: dict[str, Any], rows: Sequence[dict[str, Any]]) -> str:
    """The report."""
    def pct(x: float | None, sign: str = "") -> str:
        return "—" if x is None else f"{x:{sign}.2f} %"

    lines = [
        "# Reserved memory: the traced allocation sequence against the real program's",
        "",
        f"{meta['date']}, {meta['cpu']}, Python {meta['python']}, torch {meta['torch']}, transformers "
        f"{meta['transformers']}, autoshard {meta['autoshard']}. Took {meta['seconds']:.0f} s.",
        "",
        f"Command: `{meta['command']}`",
        "",
        "Both sequences replayed through the CUDA caching allocator's rules (`autoshard/profiler/cuda_reserve.py`): "
        "**traced**, autoshard's tracker under fake tensors (target `cpu`); **real**, the same configuration trained "
        "on this CPU, every allocation and free as PyTorch's CPU allocator reports them (`benchmarks/_allocator.py`). "
        "A warm-up step and one more. This checks the sequence, not the allocator's rules: those only a GPU can "
        "check (`benchmarks/memory_accuracy.py --grid full` on CUDA holds the replay to `max_memory_reserved`). "
        "Error = (traced − real) / real, on the reserved peak.",
        "",
        f"**{summary['ran']} of {summary['cases']} cases ran: reserved median |error| "
        f"{pct(summary['median_abs_reserved_error_pct'])}, maximum {pct(summary['max_abs_reserved_error_pct'])}.**",
        "",
        "| case | events traced / real | allocated traced (MiB) | allocated real (MiB) | reserved traced (MiB) "
        "| reserved real (MiB) | reserved error | reserve over allocated (real) | s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        if r["error"] is not None:
            lines.append(f"| {r['name']} | failed: {r['error']} | | | | | | | {r['seconds']} |")
            continue
        lines.append(
            f"| {r['name']} | {r['traced_events']:,} / {r['real_events']:,} | {_mib(r['traced_allocated_bytes'])} "
            f"| {_mib(r['real_allocated_bytes'])} | {_mib(r['traced_reserved_bytes'])} "
            f"| {_mib(r['real_reserved_bytes'])} | {pct(r['reserved_error_pct'], '+')} "
            f"| {pct(r['reserve_over_allocated_pct'], '+')} | {r['seconds']} |")
    return "\n".join(lines) + "\n"



def main(argv: Sequence[str] | None = None) -> int:
    """Run the cases and write ``reserve_replay.{md,json}``; the exit status is 1 if a case failed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks"))
    parser.add_argument("--cases", nargs="+", default=None, metavar="MODEL",
                        help=f"only the cases of these models (of {', '.join(dict.fromkeys(c.model for c in CASES))})")
    args = parser.parse_args(argv)
    known = {c.model for c in CASES}
    if args.cases is not None and not set(args.cases) <= known:
        unknown = ", ".join(sorted(set(args.cases) - known))
        parser.error(f"--cases: unknown {unknown}; known: {', '.join(sorted(known))}")
    cases = [c for c in CASES if args.cases is None or c.model in args.cases]
    started = time.perf_counter()
    rows = []
    for case in cases:
        rows.append(run_case(case))
        print(json.dumps({k: rows[-1].get(k) for k in ("name", "reserved_error_pct", "seconds", "error")}), flush=True)
    summary = summarize(rows)
    meta = {"date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "cpu": f"{cpu_model()}, {os.cpu_count()} cores", "python": platform.python_version(),
            "torch": torch.__version__, "transformers": package_version("transformers") or "not installed",
            "autoshard": package_version("autoshard") or "not installed",
            "command": "python benchmarks/reserve_replay.py" + ("" if argv is None and len(sys.argv) == 1
                                                               else " " + " ".join(argv or sys.argv[1:])),
            "seconds": time.perf_counter() - started}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "reserve_replay.json").write_text(json.dumps({"meta": meta, "summary": summary, "rows": rows},
                                                             indent=2) + "\n")
    (args.out / "reserve_replay.md").write_text(markdown(meta, summary, rows))
    print(markdown(meta, summary, rows))
    return 1 if summary["failed"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
