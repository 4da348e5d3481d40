"""The host optimizer step under CPU offload: measured per optimizer and dtype, against what autoshard prices.

Usage:
    python benchmarks/cpu_optimizer.py [--params 16777216] [--tensors 8] [--steps 5] [--repeats 3]
                                       [--out docs/benchmarks]

FSDP's CPU offload steps the optimizer on the host, one thread per rank (torchrun's ``OMP_NUM_THREADS=1``).
autoshard prices that step at fp32 AdamW's measured rate per *traced byte*
(:func:`autoshard.strategies.costs.cpu_optimizer_seconds`): each optimizer and dtype by the bytes its traced step
reads and writes per parameter. This script checks that rule on this machine: it times torch's for-loop step
(``foreach=False``, torch's choice on CPU tensors) of AdamW, SGD with momentum 0.9 (as autoshard traces it) and
Adafactor on fp32 and bf16 parameters with gradients, ``--params`` elements in ``--tensors`` tensors, one thread,
the median of ``--steps`` steps after one warm-up, each case ``--repeats`` times in turn (A B C, B C A, ...), and
reports each case's speed relative to fp32 AdamW measured in the same run (the VM drifts: only ratios are
compared) beside the ratio autoshard prices: AdamW fp32's traced bytes per parameter over the case's, both from
``build_workload`` on a small GPT-2 config (AdamW's and SGD's bytes per parameter do not depend on the model;
Adafactor's factored state does, on the shapes: 68 bytes here, 76 with four layers).

Writes ``cpu_optimizer.{md,json}`` under ``--out`` and prints the table.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the shared module beside this script, however it is loaded
from _common import positive, run_meta, write_report

CASES: tuple[tuple[str, torch.dtype], ...] = (
    ("adamw", torch.float32), ("sgd", torch.float32), ("adafactor", torch.float32),
    ("adamw", torch.bfloat16), ("sgd", torch.bfloat16), ("adafactor", torch.bfloat16),
)
"""(autoshard's optimizer name, parameter dtype); the first is the reference the rate was measured on."""

PRECISION = {torch.float32: "32-true", torch.bfloat16: "bf16-true"}
"""The precision whose traced optimizer step holds parameters of that dtype."""


def make_optimizer(name: str, params: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
    """torch's for-loop step of ``name``, configured as autoshard traces it (``profiler/optimizers.py``)."""
    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-3, foreach=False)
    if name == "sgd":
        return torch.optim.SGD(params, lr=1e-3, momentum=0.9, foreach=False)
    return torch.optim.Adafactor(params, lr=1e-2, foreach=False)


def step_seconds(name: str, dtype: torch.dtype, elements: int, tensors: int, steps: int) -> float:
    """Median seconds of one optimizer step over ``elements`` parameters in ``tensors`` tensors."""
    size = max(1, elements // tensors)
    params = [torch.nn.Parameter(torch.randn(size, dtype=dtype)) for _ in range(tensors)]
    for p in params:
        p.grad = torch.randn_like(p)
    optimizer = make_optimizer(name, params)
    optimizer.step()  # warm-up: the state is allocated here
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        optimizer.step()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def traced_bytes_per_parameter(name: str, dtype: torch.dtype) -> float:
    """Bytes per parameter the traced optimizer step reads and writes (autoshard's census of it)."""
    import transformers

    from autoshard.models import load_source
    from autoshard.strategies import build_workload
    from autoshard.strategies.costs import optimizer_step_bytes_per_parameter

    with tempfile.TemporaryDirectory() as folder:
        transformers.GPT2Config(n_embd=256, n_head=4, n_layer=2, vocab_size=1000, n_positions=64,
                                architectures=["GPT2LMHeadModel"]).save_pretrained(folder)
        workload = build_workload(load_source(folder), precision=PRECISION[dtype], optimizer=name, seq_len=64,
                                  checkpointing=(False,), target="cuda", optimizer_impl="for-loop", jobs=1)
    per = optimizer_step_bytes_per_parameter(workload, False)
    if per is None:
        raise RuntimeError(f"no traced optimizer step for {name}")
    return per


def measure(elements: int, tensors: int, steps: int, repeats: int,
            timer: Callable[[str, torch.dtype, int, int, int], float] = step_seconds) -> list[dict[str, Any]]:
    """Every case ``repeats`` times, the order rotated each repeat; one row per case and repeat."""
    torch.set_num_threads(1)
    rows = []
    for r in range(repeats):
        order = CASES[r % len(CASES):] + CASES[:r % len(CASES)]
        for name, dtype in order:
            rows.append({"optimizer": name, "dtype": str(dtype).removeprefix("torch."), "repeat": r,
                         "seconds": timer(name, dtype, elements, tensors, steps)})
    return rows


def summarise(rows: Sequence[dict[str, Any]], traced: dict[tuple[str, str], float]) -> list[dict[str, Any]]:
    """Per case: median seconds over the repeats, the speed-up over fp32 AdamW measured (per repeat, then the
    median) and priced (AdamW fp32's traced bytes over the case's)."""
    ref = ("adamw", "float32")
    by_repeat = {(r["optimizer"], r["dtype"], r["repeat"]): r["seconds"] for r in rows}
    out = []
    for name, dtype in dict.fromkeys((r["optimizer"], r["dtype"]) for r in rows):
        repeats = sorted({r["repeat"] for r in rows if (r["optimizer"], r["dtype"]) == (name, dtype)})
        measured = statistics.median(by_repeat[(*ref, k)] / by_repeat[(name, dtype, k)] for k in repeats)
        priced = traced[ref] / traced[(name, dtype)]
        out.append({"optimizer": name, "dtype": dtype,
                    "median_s": statistics.median(by_repeat[(name, dtype, k)] for k in repeats),
                    "traced_bytes_per_parameter": traced[(name, dtype)],
                    "measured_speedup": measured, "priced_speedup": priced,
                    "priced_over_measured_pct": 100 * (priced / measured - 1)})
    return out


def markdown(report: dict[str, Any]) -> str:
    """The table with its header."""
    meta, s = report["meta"], report["settings"]
    lines = ["# The host optimizer step under CPU offload: measured against autoshard's pricing", "",
             f"{meta['date']}, {meta['machine']}, Python {meta['python']}, torch {meta['torch']}; one thread.", "",
             f"Benchmark: `{meta['command']}` ({s['params']:,} parameters in {s['tensors']} tensors, median of "
             f"{s['steps']} steps after one warm-up, {s['repeats']} repeats in rotated order).", "",
             "Speed-up = fp32 AdamW's step time over the case's (measured in the same repeat; the median over the "
             "repeats). Priced = what autoshard assumes: fp32 AdamW's traced bytes per parameter over the case's "
             "(`costs.cpu_optimizer_seconds`).", "",
             "| optimizer | dtype | median step | traced bytes / parameter | measured speed-up | priced | "
             "priced vs measured |", "|---|---|---:|---:|---:|---:|---:|"]
    for r in report["summary"]:
        lines.append(f"| {r['optimizer']} | {r['dtype']} | {r['median_s'] * 1e3:.1f} ms | "
                     f"{r['traced_bytes_per_parameter']:.0f} | {r['measured_speedup']:.2f} × | "
                     f"{r['priced_speedup']:.2f} × | {r['priced_over_measured_pct']:+.0f} % |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Run, write, print; 2 on bad arguments."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--params", type=positive, default=16 * 2**20, help="parameters stepped (default 16M)")
    parser.add_argument("--tensors", type=positive, default=8, help="tensors they are split into (default 8)")
    parser.add_argument("--steps", type=positive, default=5, help="timed steps per case (default 5)")
    parser.add_argument("--repeats", type=positive, default=3, help="rounds over the cases (default 3)")
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks"), help="where to write the report")
    args = parser.parse_args(argv)
    if args.tensors > args.params:
        print("error: --tensors must not exceed --params.", file=sys.stderr)
        return 2
    traced = {(n, str(d).removeprefix("torch.")): traced_bytes_per_parameter(n, d) for n, d in CASES}
    rows = measure(args.params, args.tensors, args.steps, args.repeats)
    report = {"meta": run_meta("cpu_optimizer.py", argv),
              "settings": {"params": args.params, "tensors": args.tensors, "steps": args.steps,
                           "repeats": args.repeats},
              "summary": summarise(rows, traced), "rows": rows}
    write_report(args.out, "cpu_optimizer", report, markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
