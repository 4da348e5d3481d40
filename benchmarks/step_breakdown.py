"""Where one training step's GPU time goes, measured kernel by kernel, beside the step-time model's parts.

Usage:
    python benchmarks/step_breakdown.py [--cases gpt2-bf16,...] [--steps 5] [--out docs/benchmarks] [--dry-run]

The step-time model (``autoshard/strategies/step_time.py``) prices a step as matmuls + attention + memory-bound
kernels on the GPU (their sum: one stream), the optimizer step after them, and a host floor (every kernel's
launch). On the two lent H200 sessions of 2026-11-28 a whole step of GPT-2 (bf16-mixed, batch 8, one GPU) measured
0.0487 s against 0.0435 predicted, and the published DDP runs under torch autocast are predicted 10-25 % fast
(``docs/benchmarks/published.md``): the total alone cannot say which part is off. This script trains the step
on the GPU under ``torch.profiler`` and sums each kernel's own time by the op that launched it:

* **matmul**: GEMMs and convolutions (``aten::mm``, ``addmm``, ``bmm``, ``baddbmm``, ``_scaled_mm``,
  ``_grouped_mm``, cuDNN convolutions and their backward);
* **attention**: the fused SDPA kernels (flash, memory-efficient, cuDNN) and their backward;
* **memory**: every other kernel of forward and backward (elementwise, norms, softmax, casts, copies, the loss);
* **optimizer**: every kernel launched inside ``optimizer.step()``;
* **communication**: NCCL kernels (none at one rank without DDP);

with, per step, the wall time (the device synchronized), the GPU's busy time (the union of its kernels'
intervals: wall less busy is the time the GPU waited for the host) and the kernel count, beside autoshard's
figures for the same case (:func:`autoshard.strategies.step_time.estimate` on the traced census at micro-batches
1 and 2, :func:`autoshard.strategies.costs.optimizer_step_seconds`, the census's kernel counts) and the ten ops
with the most kernel time. The step is the one ``benchmarks/memory_accuracy.py`` measures (the model built on the
device, ``autoshard``'s optimizer, autocast as ``fit()`` runs it), without DDP: at one rank DDP adds its bucket
copies only. Writes ``step_breakdown.{md,json}`` under ``--out``, again after every case (a time limit keeps the
cases done).

``--dry-run`` checks the plumbing on the CPU: tiny models, each op's own CPU time in place of its kernels', the
H100 profile's prediction beside it (its figures mean nothing).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import platform
import statistics
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile, record_function
from torch.utils._pytree import tree_map

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the helpers beside this script
from _common import package_version, positive, write_report
from gpu_strategies import TINYLLAMA_1B, ModelCase, model_spec
from memory_accuracy import machine

import autoshard

CATEGORIES = ("matmul", "attention", "memory", "optimizer", "communication")
MATMUL_OPS = frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::addbmm", "aten::_scaled_mm",
                        "aten::_grouped_mm", "aten::cudnn_convolution", "aten::cudnn_convolution_transpose",
                        "aten::convolution_backward", "aten::_convolution", "aten::mkldnn_convolution"})
ATTENTION_MARKS = ("flash_attention", "efficient_attention", "cudnn_attention")
OPTIMIZER_LABEL = "autoshard.breakdown.optimizer"
STEP_LABEL = "autoshard.breakdown.forward_backward"
DRY_RUN_GPU = "h100-sxm-80gb"
WARMUP_STEPS = 3
SCALER_NOTE = " (fp16: GradScaler's unscale and inf checks are in the optimizer part)"


Case = ModelCase
"""One model at one shape and precision, as ``benchmarks/gpu_strategies.py`` trains its cases."""
GPU_CASES = (
    Case("gpt2-bf16", "gpt2", 8, 1024, "bf16-mixed"),  # gpu_strategies' DDP run: 0.0487 s measured, 0.0435 predicted
    Case("gpt2-fp16", "gpt2", 8, 1024, "16-mixed"),  # the DeepSpeedExamples DDP baselines' autocast (fp16)
    Case("bert-large-fp16", "bert-large-uncased", 4, 512, "16-mixed"),  # transformers' single-GPU guide's fp16 run
    Case("llama-1.1b-bf16", "llama:" + json.dumps(TINYLLAMA_1B), 4, 2048, "bf16-mixed"),
)
DRY_CASES = (
    Case("tiny-gpt2", "tiny-gpt2", 2, 64, "32-true"),
    Case("tiny-bert", "tiny-bert", 2, 64, "32-true"),
)


def category(name: str, in_optimizer: bool) -> str:
    """The part of the step an op's kernels belong to, by the op's name and whether ``optimizer.step()`` ran it.

    Example:
        >>> category("aten::addmm", False), category("aten::_flash_attention_backward", False)
        ('matmul', 'attention')
        >>> category("aten::mul_", True), category("nccl:all_reduce", False), category("aten::add", False)
        ('optimizer', 'communication', 'memory')
    """
    if in_optimizer:
        return "optimizer"
    if name.startswith(("nccl", "c10d::")) or "nccl" in name.lower():
        return "communication"
    if name in MATMUL_OPS:
        return "matmul"
    if any(mark in name for mark in ATTENTION_MARKS):
        return "attention"
    return "memory"


def _union_us(intervals: Iterable[tuple[float, float]]) -> float:
    """Length of the union of ``(start, end)`` intervals.

    Example:
        >>> _union_us([(0, 2), (1, 3), (5, 6)])
        4.0
    """
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if a > end:
            total, end = total + (b - a), b
        elif b > end:
            total, end = total + (b - end), b
    return float(total)


def breakdown(events: Sequence[Any], *, steps: int, on_gpu: bool) -> dict[str, Any]:
    """Per-step kernel time by category, kernel count, the GPU's busy time and the top ops, from the profiler's
    events of ``steps`` steps. On the CPU (the dry run) each op's own CPU time stands in for its kernels'."""
    cpu_ops = [e for e in events if e.device_type == torch.autograd.DeviceType.CPU and not e.is_async]
    windows = [(e.time_range.start, e.time_range.end) for e in cpu_ops if e.name == OPTIMIZER_LABEL]
    seconds = dict.fromkeys(CATEGORIES, 0.0)
    kernels = dict.fromkeys(CATEGORIES, 0)
    per_op: dict[str, list[Any]] = {}
    per_shape: dict[tuple[str, str], list[float]] = {}  # matmul-class ops by their inputs' shapes
    for e in cpu_ops:
        if e.name in (OPTIMIZER_LABEL, STEP_LABEL):
            continue
        if on_gpu:
            own_us, count = sum(k.duration for k in e.kernels), len(e.kernels)
        else:
            own_us, count = e.self_cpu_time_total, 0 if e.cpu_children else 1
        if not own_us and not count:
            continue
        start = e.time_range.start
        part = category(e.name, any(a <= start <= b for a, b in windows))
        seconds[part] += own_us / 1e6
        kernels[part] += count
        row = per_op.setdefault(e.name, [0.0, 0, part])  # type: ignore[list-item]
        row[0] += own_us / 1e6
        row[1] += count
        if part in ("matmul", "attention"):
            shape = per_shape.setdefault((e.name, str(e.input_shapes)), [0.0, 0])
            shape[0] += own_us / 1e6
            shape[1] += count
    if on_gpu:
        device = [e for e in events if e.device_type != torch.autograd.DeviceType.CPU]
        busy_s = _union_us((e.time_range.start, e.time_range.end) for e in device) / 1e6
        total_kernels = len(device)
        total_s = sum(e.time_range.elapsed_us() for e in device) / 1e6
    else:
        busy_s = total_s = sum(seconds.values())
        total_kernels = sum(kernels.values())
    top = sorted(per_op.items(), key=lambda kv: -kv[1][0])[:10]
    shapes = sorted(per_shape.items(), key=lambda kv: -kv[1][0])[:10]
    return {
        "seconds": {k: v / steps for k, v in seconds.items()},
        "kernels": {k: v / steps for k, v in kernels.items()},
        "unattributed_s": max(0.0, total_s - sum(seconds.values())) / steps,
        "busy_s": busy_s / steps,
        "kernels_total": total_kernels / steps,
        "top_ops": [{"op": name, "seconds": s / steps, "kernels": n / steps, "category": part}
                    for name, (s, n, part) in top],
        "top_matmul_shapes": [{"op": name, "input_shapes": shape, "seconds": s / steps, "kernels": n / steps}
                              for (name, shape), (s, n) in shapes],
    }


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(fn: Any, device: torch.device) -> float:
    """Wall seconds of ``fn()``, the device synchronized before and after."""
    _sync(device)
    started = time.perf_counter()
    fn()
    _sync(device)
    return time.perf_counter() - started


def measure(source: Any, options: Any, device: torch.device, *, steps: int) -> dict[str, Any]:
    """Train ``WARMUP_STEPS`` steps, then ``steps`` under the profiler; each step's wall time and the breakdown."""
    from autoshard.models.source import call_model, default_loss
    from autoshard.profiler.optimizers import make_optimizer
    from autoshard.profiler.trace import _build

    model = _build(source, options).to(device)
    model.train()
    batch = tree_map(lambda x: x.to(device) if torch.is_tensor(x) else x,
                     source.batch(options.batch_size, seq_len=options.seq_len))
    optimizer = make_optimizer(source, options, model)
    loss_fn = source.loss_fn or default_loss
    dtype = options.precision.autocast_dtype
    scaler = torch.amp.GradScaler(device.type) if dtype == torch.float16 and device.type == "cuda" else None

    def one_step() -> None:
        with record_function(STEP_LABEL):
            with torch.autocast(device.type, dtype=dtype) if dtype is not None else contextlib.nullcontext():
                loss = loss_fn(call_model(model, batch), batch)
            (loss if scaler is None else scaler.scale(loss)).backward()
        with record_function(OPTIMIZER_LABEL):
            if scaler is None:
                optimizer.step()
            else:
                scaler.step(optimizer)
                scaler.update()
            optimizer.zero_grad(set_to_none=True)

    for _ in range(WARMUP_STEPS):
        one_step()
    _sync(device)
    walls = [_timed(one_step, device) for _ in range(steps)]  # not profiled: the profiler adds host time
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities, record_shapes=True) as prof:
        profiled = [_timed(one_step, device) for _ in range(steps)]
    out = breakdown(prof.events(), steps=steps, on_gpu=device.type == "cuda")
    out["wall_s"] = statistics.median(walls)
    out["profiled_wall_s"] = statistics.median(profiled)
    out["grad_scaler"] = scaler is not None
    return out


def predict(source: Any, case: Case, gpu_name: str) -> dict[str, Any]:
    """autoshard's parts for the case on one GPU of profile ``gpu_name``."""
    from autoshard.hardware import load_hardware
    from autoshard.profiler.op_census import OpCensus
    from autoshard.strategies import build_workload, costs, step_time
    from autoshard.strategies.workload import tf32_matmuls

    workload = build_workload(source, precision=case.precision, optimizer="adamw", seq_len=case.seq_len,
                              checkpointing=(False,), target="cuda")
    hardware = load_hardware(gpu_name, gpus=1)
    trace = workload.trace("amp", False)
    gpu = hardware.gpu
    if gpu is None or trace.at_1.census is None:
        raise ValueError(f"{case.label}: no GPU profile or no op census to predict with")
    est = step_time.estimate(trace.at_1.census, case.batch_size, gpu, census_2=trace.at_2.census,
                             tf32_matmuls=tf32_matmuls(workload))
    if est is None:
        raise ValueError(f"{case.label}: the profile {gpu_name} has no peak for this precision")
    optimizer_s, _ = costs.optimizer_step_seconds(workload, hardware, False)
    classes = []
    for c in trace.at_1.census.matmuls:
        alone = step_time.estimate(OpCensus(matmuls=(c,)), case.batch_size, gpu, launch_s=0.0,
                                   tf32_matmuls=tf32_matmuls(workload))
        classes.append({**c.to_dict(), "seconds": None if alone is None else alone.matmul_s + alone.attention_s})
    classes.sort(key=lambda c: -(c["seconds"] or 0.0))
    optimizer_census = trace.at_1.optimizer_census
    return {
        "seconds": {"matmul": est.matmul_s, "attention": est.attention_s, "memory": est.memory_s,
                    "optimizer": optimizer_s, "communication": 0.0},
        "kernels_forward_backward": trace.at_1.census.kernels,
        "kernels_optimizer": None if optimizer_census is None else optimizer_census.kernels,
        "gpu_s": est.gpu_s + optimizer_s,
        "host_s": est.launch_s,
        "step_s": est.seconds + optimizer_s,
        "note": est.note,
        "matmul_classes": classes[:10],
    }


def _source(case: Case, folder: Path) -> Any:
    from autoshard.models import load_source

    return load_source(model_spec(case, folder))


def run_case(case: Case, device: torch.device, gpu_name: str, folder: Path, *, steps: int) -> dict[str, Any]:
    """Measured and predicted figures of one case, or its error."""
    from autoshard.profiler.options import ProfileOptions

    row: dict[str, Any] = {"case": case.label, "model": case.source.split(":")[0], "batch_size": case.batch_size,
                           "seq_len": case.seq_len, "precision": case.precision}
    try:
        source = _source(case, folder)
        options = ProfileOptions(batch_size=case.batch_size, seq_len=case.seq_len, precision=case.precision,
                                 optimizer="adamw", target=device.type)
        row["predicted"] = predict(source, case, gpu_name)
        row["measured"] = measure(source, options, device, steps=steps)
    except Exception as exc:  # noqa: BLE001 — one case's failure is recorded; the others still run
        row["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return row


def _ms(x: float | None) -> str:
    return "—" if x is None else f"{x * 1e3:.2f}"


def _err(predicted: float | None, measured: float | None) -> str:
    if predicted is None or not measured:
        return "—"
    return f"{(predicted - measured) / measured * 100:+.1f} %"


def markdown(report: dict[str, Any]) -> str:
    """The report as Markdown: per case, each part measured against predicted, then the top ops."""
    meta = report["meta"]
    lines = ["# One step's GPU time by part, measured against the step-time model", "",
             f"{meta['date']}, {', '.join(f'{k} {v}' for k, v in meta['machine'].items())}, profile "
             f"`{meta['gpu_profile']}`, Python {meta['python']}, torch {meta['torch']}, autoshard {meta['autoshard']}.",
             "", f"Command: `{meta['command']}` ({meta['seconds']} s)", "",
             "Measured, per step: the wall time (median of steps run without the profiler, the device synchronized "
             "around each), and under `torch.profiler` (as many steps again) each kernel's time summed by the op "
             "that launched it (inside `optimizer.step()`: optimizer). Predicted: "
             "`step_time.estimate` (matmul, attention, memory) and `costs.optimizer_step_seconds` for the same "
             "case on the profile. Busy: the union of the GPU's kernel intervals; wall − busy is the time the GPU "
             "waited. Error = (predicted − measured) / measured.", ""]
    if meta["dry_run"]:
        lines += ["**Dry run**: on the CPU, each op's own CPU time stands in for its kernels'; the figures mean "
                  "nothing.", ""]
    for row in report["cases"]:
        lines += [f"## {row['case']}: {row['model']}, batch {row['batch_size']}, sequence {row['seq_len']}, "
                  f"{row['precision']}", ""]
        if "error" in row:
            lines += [f"Failed: {row['error']}", ""]
            continue
        m, p = row["measured"], row["predicted"]
        lines += ["| part | measured (ms) | predicted (ms) | error | kernels measured |", "|---|---:|---:|---:|---:|"]
        for part in CATEGORIES:
            lines.append(f"| {part} | {_ms(m['seconds'][part])} | {_ms(p['seconds'][part])} | "
                         f"{_err(p['seconds'][part], m['seconds'][part])} | {m['kernels'][part]:,.0f} |")
        lines += [f"| unattributed kernels | {_ms(m['unattributed_s'])} | — | — | — |",
                  f"| GPU busy | {_ms(m['busy_s'])} | {_ms(p['gpu_s'])} | {_err(p['gpu_s'], m['busy_s'])} | "
                  f"{m['kernels_total']:,.0f} |",
                  f"| step (wall) | {_ms(m['wall_s'])} | {_ms(p['step_s'])} | {_err(p['step_s'], m['wall_s'])} | — |",
                  "", f"Kernels counted by autoshard's census: {p['kernels_forward_backward']:,} in forward + "
                  f"backward, {p['kernels_optimizer'] or 0:,} in the optimizer step; predicted host time "
                  f"{_ms(p['host_s'])} ms. GPU idle in the measured step: {_ms(m['wall_s'] - m['busy_s'])} ms "
                  f"(a profiled step took {_ms(m['profiled_wall_s'])} ms)"
                  f"{SCALER_NOTE if m['grad_scaler'] else ''}.",
                  "", "| op | category | ms | kernels |", "|---|---|---:|---:|"]
        lines += [f"| `{t['op']}` | {t['category']} | {_ms(t['seconds'])} | {t['kernels']:,.0f} |"
                  for t in m["top_ops"]]
        lines += ["", "Matmul-class ops by their inputs' shapes, measured (the ten with the most kernel time):", "",
                  "| op | input shapes | ms | kernels |", "|---|---|---:|---:|"]
        lines += [f"| `{t['op']}` | `{t['input_shapes']}` | {_ms(t['seconds'])} | {t['kernels']:,.0f} |"
                  for t in m["top_matmul_shapes"]]
        lines += ["", f"The census's matmul classes, predicted at batch {row['batch_size']} (the ten slowest; "
                  "smallest dimension and alignment in elements at micro-batch 1):", "",
                  "| kind | dtype | smallest dimension | alignment | kernels | GFLOP | ms |",
                  "|---|---|---:|---:|---:|---:|---:|"]
        lines += [f"| {c['kind']} | {c['dtype']} | {c['min_dim']:,} | {c['alignment']} | {c['kernels']:,} | "
                  f"{c['flops'] * row['batch_size'] / 1e9:,.1f} | {_ms(c['seconds'])} |" for c in p["matmul_classes"]]
        lines += ["", f"Model's note: {p['note']}", ""]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Measure and predict every case; write the report. Exit status 0 unless every case failed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="tiny models on the CPU, to check the plumbing")
    parser.add_argument("--cases", default=None, help="comma-separated case labels (default: all)")
    parser.add_argument("--steps", type=positive, default=5, help="profiled steps per case (default 5)")
    parser.add_argument("--gpu", default=None, help="the GPU profile to predict with (default: this GPU's)")
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks"))
    args = parser.parse_args(argv)
    if not args.dry_run and not torch.cuda.is_available():
        parser.error("no CUDA GPU here (torch.cuda.is_available() is False); --dry-run checks the plumbing on CPU.")
    cases = DRY_CASES if args.dry_run else GPU_CASES
    if args.cases:
        wanted = args.cases.split(",")
        unknown = sorted(set(wanted) - {c.label for c in cases})
        if unknown:
            parser.error(f"--cases: unknown {', '.join(unknown)}; known: {', '.join(c.label for c in cases)}.")
        cases = tuple(c for c in cases if c.label in wanted)
    from autoshard.hardware.profiles import gpu_profile_for

    device = torch.device("cpu" if args.dry_run else "cuda")
    gpu_name = args.gpu or (DRY_RUN_GPU if args.dry_run else None)
    if gpu_name is None:
        found = gpu_profile_for(torch.cuda.get_device_name(device))
        if found is None:
            parser.error(f"no GPU profile for {torch.cuda.get_device_name(device)}: name one with --gpu.")
        gpu_name = found.name
    started = time.monotonic()
    import tempfile

    shown = list(sys.argv[1:] if argv is None else argv)

    def report(rows: list[dict[str, Any]]) -> dict[str, Any]:
        return {"meta": {"date": datetime.date.today().isoformat(), "machine": machine(device),
                         "gpu_profile": gpu_name, "python": platform.python_version(), "torch": torch.__version__,
                         "transformers": package_version("transformers") or "not installed",
                         "autoshard": autoshard.__version__, "dry_run": args.dry_run, "steps": args.steps,
                         "command": " ".join(["python", "benchmarks/step_breakdown.py", *shown]),
                         "seconds": round(time.monotonic() - started, 1)},
                "cases": rows}

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as folder:
        for case in cases:
            rows.append(run_case(case, device, gpu_name, Path(folder), steps=args.steps))
            print(json.dumps({k: rows[-1].get(k) for k in ("case", "error")} |
                             {"wall_s": rows[-1].get("measured", {}).get("wall_s"),
                              "predicted_s": rows[-1].get("predicted", {}).get("step_s")}), flush=True)
            # a time limit then keeps the cases done so far
            write_report(args.out, "step_breakdown", report(rows), markdown(report(rows)), echo=False)
    write_report(args.out, "step_breakdown", report(rows), markdown(report(rows)))
    return 0 if any("error" not in r for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
