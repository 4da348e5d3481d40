"""Host time DeepSpeed ZeRO spends per module (ZeRO-3) or per parameter (ZeRO-1/2) each step: the real engine on CPU.

ZeRO-3 registers forward and backward hooks on every module (``parameter_offload.py``, deepspeed 0.19.8): before a
module runs, ``fetch_sub_module`` all-gathers its parameters (and prefetches the next ones); after it,
``release_sub_module`` frees them; each parameter's gradient is then reduced and partitioned. All of it is Python
on the thread that launches the kernels, once per module and pass, whatever the module's size: with small modules
or small micro-batches the host, not the GPU, sets the pace.

Measured here as the slope of one training step's forward + ``engine.backward`` time over the number of layers of
a stack of ``nn.Linear(width, width)`` layers (``width`` just above ``stage3_param_persistence_threshold``'s 1e5
elements, so each weight is gathered and each bias persistent, as in a transformer's linear layers), for plain
torch and ZeRO-1, -2 and -3, world size 1 (gloo, ``DS_ACCELERATOR=cpu``), micro-batch 1 so the arithmetic is
negligible. ZeRO-3's slope less plain torch's is its host time per module with a gathered weight (forward and
backward); ZeRO-1's and ZeRO-2's, halved, per parameter tensor (a layer holds a weight and a bias): their gradient
bookkeeping, ``reduce_ready_partitions_and_remove_grads`` once per parameter. Each configuration runs in a fresh
process, one intra-op thread, the configurations interleaved and repeated.

Usage::

    python benchmarks/zero_hooks.py [--layers 16 32 64 128] [--width 320] [--steps 20] [--warmup 5]
                                    [--repeats 3] [--step-width 8] [--passes hooks step]
                                    [--accelerator cpu|cuda] [--name NAME] [--out docs/benchmarks]

Writes ``zero_hooks.{md,json}`` under ``--out`` (``gpu_zero_hooks`` with ``--accelerator cuda``: the engines on one
GPU with NCCL, the device synchronized before each clock stop, as the GPU campaign runs it). On CPU the figures
are deepspeed's CPU accelerator; on a GPU the same Python runs, plus CUDA event and stream calls.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the shared module beside this script, however it is loaded
from _common import accelerator_device, cpu_model, one_rank_worker, positive, slope

SCRIPT = Path(__file__).resolve()
KINDS = ("torch", "zero1", "zero2", "zero3")
STAGES = {"zero1": 1, "zero2": 2, "zero3": 3}
TENSORS_PER_LAYER = 2
"""An ``nn.Linear`` owns a weight and a bias."""
STEP_KINDS = ("torch", "zero1", "zero2")
"""Kinds whose ``step()`` is timed again on a narrow stack (``--step-width``), where the optimizer's arithmetic is
negligible and what is left is host time: ZeRO-1/2's ``engine.step()`` loops over the parameter tensors
(``free_grad_in_param_list``, the flattening of the partition's gradients, the norms, the copy back into the
16-bit parameters), once per step. ZeRO-3's narrow stack would hold only persistent parameters (below
``stage3_param_persistence_threshold``), not the path its step takes on a real model: not timed."""


def worker(kind: str, layers: int, width: int, steps: int, warmup: int, accelerator: str = "cpu") -> dict[str, Any]:
    """One configuration in this process: the median forward + backward seconds of ``steps`` timed steps (on
    CUDA, the device synchronized before the clock stops)."""
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    device = torch.device(accelerator)
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)]).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(1, width, device=device)
    sync = torch.cuda.synchronize if accelerator == "cuda" else (lambda: None)
    if kind == "torch":
        def forward_backward() -> None:
            model(x).square().mean().backward()

        def step() -> None:
            optimizer.step()
            optimizer.zero_grad()
    else:
        import deepspeed

        config = {"train_micro_batch_size_per_gpu": 1, "steps_per_print": 10**9,
                  "zero_optimization": {"stage": STAGES[kind]}}
        engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)

        def forward_backward() -> None:
            engine.backward(engine(x).square().mean())

        def step() -> None:
            engine.step()
    times, step_times = [], []
    for i in range(warmup + steps):
        sync()
        start = time.perf_counter()
        forward_backward()
        sync()
        middle = time.perf_counter()
        step()
        sync()
        if i >= warmup:
            times.append(middle - start)
            step_times.append(time.perf_counter() - middle)
    return {"kind": kind, "layers": layers, "width": width, "median_s": statistics.median(times),
            "step_median_s": statistics.median(step_times)}


def run_worker(kind: str, layers: int, width: int, steps: int, warmup: int, port: int,
               accelerator: str = "cpu") -> dict[str, Any]:
    """:func:`worker` in a fresh interpreter (one rank of a world of one; gloo on CPU, NCCL on CUDA)."""
    args = [kind, str(layers), str(width), str(steps), str(warmup), accelerator]
    return one_rank_worker(SCRIPT, args, port, f"{kind} x {layers}", {"DS_ACCELERATOR": accelerator})


def _line(points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares slope and intercept of ``y`` over ``x``.

    Example:
        >>> _line([(1, 3.0), (2, 5.0), (4, 9.0)])
        (2.0, 1.0)
    """
    s = slope(points)
    return s, statistics.fmean(p[1] for p in points) - s * statistics.fmean(p[0] for p in points)


def _step_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per kind of :data:`STEP_KINDS`: the median ``step()`` seconds per layer count of the narrow stack, and their
    line per parameter tensor (slope) and per step (intercept)."""
    out: dict[str, Any] = {}
    for kind in STEP_KINDS:
        mine = [r for r in rows if r["kind"] == kind]
        if not mine:
            continue
        layers = sorted({r["layers"] for r in mine})
        medians = {n: statistics.median(r["step_median_s"] for r in mine if r["layers"] == n) for n in layers}
        per_tensor, intercept = _line([(n * TENSORS_PER_LAYER, t) for n, t in medians.items()])
        out[kind] = {"median_s_by_layers": medians, "slope_s_per_tensor": per_tensor, "intercept_s": intercept}
    return out


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per kind: median seconds per layer count (over repeats) and the slope per layer; ZeRO's over torch's. The
    rows of the narrow stack (``"pass": "step"``), when there are any: :func:`_step_summary` under ``"step"``."""
    step_rows = [r for r in rows if r.get("pass") == "step"]
    rows = [r for r in rows if r.get("pass", "hooks") == "hooks"]
    out: dict[str, Any] = {"step": _step_summary(step_rows)} if step_rows else {}
    for kind in KINDS if rows else ():
        mine = [r for r in rows if r["kind"] == kind]
        layers = sorted({r["layers"] for r in mine})
        medians = {n: statistics.median(r["median_s"] for r in mine if r["layers"] == n) for n in layers}
        out[kind] = {"median_s_by_layers": medians, "slope_s_per_layer": slope(list(medians.items()))}
    for kind in STAGES if rows else ():
        out[kind]["over_torch_s_per_layer"] = out[kind]["slope_s_per_layer"] - out["torch"]["slope_s_per_layer"]
        if kind != "zero3":  # ZeRO-3's unit is the module it gathers, one per layer
            out[kind]["over_torch_s_per_tensor"] = out[kind]["over_torch_s_per_layer"] / TENSORS_PER_LAYER
    return out


def markdown(report: dict[str, Any]) -> str:
    """The report as a page."""
    meta, summary = report["meta"], report["summary"]
    lines = [
        "# DeepSpeed ZeRO's host time per module and per parameter",
        "",
        f"{meta['date']}, {meta['cpu']}, {meta['cores']} cores, {meta['device']}, Python {meta['python']}, "
        f"torch {meta['torch']}, DeepSpeed {meta['deepspeed']}.",
        "",
        f"Benchmark: `{meta['command']}`",
        "",
    ]
    if "torch" in summary:
        lines += _hooks_markdown(meta, summary)
    if "step" in summary:
        lines += _step_markdown(meta, summary["step"])
    return "\n".join(lines)


def _hooks_markdown(meta: dict[str, Any], summary: dict[str, Any]) -> list[str]:
    """The section on forward + backward of the wide stack, every kind."""
    layers = sorted({int(n) for n in summary["torch"]["median_s_by_layers"]})
    lines = [
        "One training step's forward + `engine.backward` (plain torch: forward + `backward()`) of a stack of "
        f"`nn.Linear({meta['width']}, {meta['width']})` layers at micro-batch 1, world size 1, on "
        f"{meta['accelerator'].upper()}: the median "
        f"of {meta['steps']} steps after {meta['warmup']}, then the median over {meta['repeats']} interleaved "
        "repeats, each in a fresh process. Each weight is above `stage3_param_persistence_threshold` (1e5 "
        "elements): ZeRO-3 gathers and releases it around the module, in forward and in backward.",
        "",
        "| layers | " + " | ".join(f"{k} (ms)" for k in KINDS) + " |",
        "|---:|" + "---:|" * len(KINDS),
    ]
    for n in layers:
        cells = [f"{summary[k]['median_s_by_layers'][n] * 1e3:.2f}" for k in KINDS]
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "| | " + " | ".join(KINDS) + " |",
        "|---|" + "---:|" * len(KINDS),
        "| slope, ms per layer | " + " | ".join(f"{summary[k]['slope_s_per_layer'] * 1e3:.3f}" for k in KINDS) + " |",
        "| over torch, ms per layer | — | " + " | ".join(
            f"{summary[k]['over_torch_s_per_layer'] * 1e3:.3f}" for k in STAGES) + " |",
        "| over torch, ms per parameter tensor (ZeRO-1/2) | — | " + " | ".join(
            f"{summary[k]['over_torch_s_per_tensor'] * 1e3:.3f}" for k in ("zero1", "zero2")) + " | — |",
        "",
        "ZeRO-3's slope over torch's is the host time its hooks add per module with a gathered parameter (here a "
        "linear layer: its weight gathered, its bias persistent), forward and backward together; ZeRO-1's and "
        "ZeRO-2's, per parameter tensor, the host time of their per-parameter gradient bookkeeping "
        "(`reduce_ready_partitions_and_remove_grads`). `autoshard.strategies.deepspeed.cost.ENGINE_HOST_S` cites "
        "this page" + (". It is this CPU running deepspeed's CPU accelerator; on a GPU host the same Python runs, "
                       "plus CUDA event and stream calls (measured with `--accelerator cuda`)."
                       if meta["accelerator"] == "cpu" else " (its CPU figures; these are the same engines on the "
                       "GPU, synchronized before each clock stop)."),
        "",
    ]
    return lines


def _step_markdown(meta: dict[str, Any], step: dict[str, Any]) -> list[str]:
    """The section on the engines' ``step()``, from :func:`_step_summary`."""
    kinds = list(step)
    layers = sorted({int(n) for k in kinds for n in step[k]["median_s_by_layers"]})
    lines = [
        "## The engine's step",
        "",
        f"`step()` (plain torch: `optimizer.step()` and `zero_grad()`, AdamW for-loop) of a narrow stack, "
        f"`nn.Linear({meta['step_width']}, {meta['step_width']})` layers, where the optimizer's arithmetic is "
        "negligible: what is left is host time, once per step. Median of the same steps and repeats; the line is "
        "fitted over the parameter tensors (two per layer).",
        "",
        "| layers | " + " | ".join(f"{k} step (ms)" for k in kinds) + " |",
        "|---:|" + "---:|" * len(kinds),
    ]
    for n in layers:
        lines.append(f"| {n} | " + " | ".join(f"{step[k]['median_s_by_layers'][n] * 1e3:.2f}" for k in kinds) + " |")
    lines += [
        "",
        "| | " + " | ".join(kinds) + " |",
        "|---|" + "---:|" * len(kinds),
        "| ms per parameter tensor | " + " | ".join(f"{step[k]['slope_s_per_tensor'] * 1e3:.4f}" for k in kinds)
        + " |",
        "| ms per step (intercept) | " + " | ".join(f"{step[k]['intercept_s'] * 1e3:.3f}" for k in kinds) + " |",
        "",
        "ZeRO-1's and ZeRO-2's line is the host time of `engine.step()` outside the optimizer's kernels: "
        "`autoshard.strategies.deepspeed.cost.ENGINE_STEP_HOST_S` cites it. Plain torch's for-loop AdamW is "
        "shown for scale (the step-time model prices torch's optimizer by its kernels, "
        "`step_time.OPTIMIZER_LAUNCH_S`).",
        "",
    ]
    return lines


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=positive, nargs="+", default=[16, 32, 64, 128])
    parser.add_argument("--width", type=positive, default=320)
    parser.add_argument("--steps", type=positive, default=20)
    parser.add_argument("--warmup", type=positive, default=5)
    parser.add_argument("--repeats", type=positive, default=3)
    parser.add_argument("--step-width", type=positive, default=8,
                        help="width of the narrow stack whose step() is timed (the step pass)")
    parser.add_argument("--passes", nargs="+", choices=("hooks", "step"), default=["hooks", "step"],
                        help="hooks: forward + backward of the wide stack, every kind; step: step() of the narrow "
                        "stack, torch, ZeRO-1 and ZeRO-2 (default both)")
    parser.add_argument("--accelerator", choices=("cpu", "cuda"), default="cpu",
                        help="where the engines run (cuda: one GPU, NCCL)")
    parser.add_argument("--name", help="report file name without suffix (default: zero_hooks on CPU, "
                        "gpu_zero_hooks on CUDA)")
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks"))
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Measure, print the table, write the report."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--worker"]:
        kind, layers, width, steps, warmup = argv[1], *map(int, argv[2:6])
        print("RESULT " + json.dumps(worker(kind, layers, width, steps, warmup, argv[6])), flush=True)
        os._exit(0)  # no interpreter teardown of a gloo group (pytorch#65231)
    args = parse_args(argv)
    if len(set(args.layers)) < 2:
        print("error: --layers needs at least two different counts (the figure is a slope).", file=sys.stderr)
        return 2
    device = accelerator_device(args.accelerator)
    if device is None:
        return 2
    rows, port = [], 29500 + os.getpid() % 1000
    for repeat in range(args.repeats if "hooks" in args.passes else 0):
        order = [(k, n) for n in args.layers for k in KINDS]
        for kind, layers in order if repeat % 2 == 0 else order[::-1]:
            rows.append({**run_worker(kind, layers, args.width, args.steps, args.warmup, port, args.accelerator),
                         "repeat": repeat})
            print(f"{kind} x {layers}: {rows[-1]['median_s'] * 1e3:.2f} ms", flush=True)
    for repeat in range(args.repeats if "step" in args.passes else 0):
        order = [(k, n) for n in args.layers for k in STEP_KINDS]
        for kind, layers in order if repeat % 2 == 0 else order[::-1]:
            rows.append({**run_worker(kind, layers, args.step_width, args.steps, args.warmup, port,
                                      args.accelerator), "repeat": repeat, "pass": "step"})
            print(f"{kind} x {layers} (width {args.step_width}): step {rows[-1]['step_median_s'] * 1e3:.2f} ms",
                  flush=True)
    meta = {"date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"), "cpu": cpu_model(),
            "cores": os.cpu_count(), "python": platform.python_version(),
            "torch": importlib.metadata.version("torch"), "deepspeed": importlib.metadata.version("deepspeed"),
            "command": " ".join(["python benchmarks/zero_hooks.py", *argv]), "width": args.width,
            "steps": args.steps, "warmup": args.warmup, "repeats": args.repeats, "accelerator": args.accelerator,
            "device": device, "step_width": args.step_width}
    report = {"meta": meta, "summary": summarise(rows), "rows": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    name = args.name or ("gpu_zero_hooks" if args.accelerator == "cuda" else "zero_hooks")
    (args.out / f"{name}.json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    text = markdown(report)
    (args.out / f"{name}.md").write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
