"""How close autoshard's predicted per-rank training-step peak is to a measured one.

Usage:
    python benchmarks/memory_accuracy.py [--device cpu|cuda|auto] [--grid cpu|single|distributed|full|hf]
                                         [--out docs/benchmarks] [--models NAME ...] [--strategies NAME ...]

Two kinds of case, one table:

* **single** (one device, no wrapper): the prediction is ``autoshard.profile(..., target=T).peak_bytes``; the
  measurement runs the same steps on real tensors the way ``autoshard/profiler/trace.py`` traces them (same
  build, batch, loss, optimizer, autocast, checkpointing of the repeated block, outputs freed after backward).
* **distributed** (DDP, FSDP2, DeepSpeed ZeRO-1/2/3): the prediction is the per-rank device peak the planner
  ranks by (``planner.search.evaluate(...).memory.gpu.total``); the measurement exports that configuration as
  ``plan.json`` and trains it with the backend ``fit()`` uses, in ``world_size`` real processes joined by gloo
  (CPU) or NCCL (one GPU each), or — for larger worlds — as rank 0 of a fake process group with real
  allocations (``benchmarks/_memory_worker.py``). The higher rank's peak is compared.

Every case trains warm-up steps first and measures the steps after them (``benchmarks/_allocator.py``):

* CUDA: ``torch.cuda.max_memory_allocated()`` after ``reset_peak_memory_stats()`` (compared) and
  ``max_memory_reserved()`` (shown);
* CPU: PyTorch's CPU allocator as the profiler sees it (``profile_memory=True``): every allocation and free,
  replayed in order. Independent of autoshard's own tracker, which the prediction uses.

Writes ``memory_accuracy.{md,json}`` under ``--out`` with the date, machine, versions and the command. Exits
non-zero only on a crash: a failed case is recorded in its row, a large error is a result.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import functools
import gc
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch.utils._pytree import tree_map

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the probe beside this script, however it is loaded
from _allocator import RELEASE_WAIT_S, PeakProbe, allocation_log
from _common import cpu_model, package_version
from _hf_architectures import ARCHITECTURES, resolve

import autoshard
from autoshard.models.source import ModelSource, call_model, default_loss
from autoshard.profiler.blocks import find_repeated_blocks
from autoshard.profiler.collection import gc_paused, warm_up_checkpoint
from autoshard.profiler.optimizers import make_optimizer
from autoshard.profiler.options import Precision, ProfileOptions
from autoshard.profiler.trace import STEPS, _build
from autoshard.runtime.activation_checkpointing import checkpoint_blocks

SKIP_ABOVE_FRACTION = 0.90
"""A case whose prediction exceeds this fraction of the device's memory is skipped, not run."""
WORKER = Path(__file__).resolve().parent / "_memory_worker.py"
WARM_STEPS = 1
"""Optimizer steps before the measured window: optimizer state exists, ZeRO-3 has traced its module order."""
MEASURED_STEPS = 2
MAX_RUNS = 5
"""Runs at most per case in real CPU processes (see :func:`measure_distributed`)."""
AGREE_FRACTION = 0.002
CASE_TIMEOUT_S = 600.0
ZERO_SMALL_BUCKETS = {
    1: (("reduce_bucket_size", 50_000),),
    2: (("reduce_bucket_size", 50_000),),
    3: (("reduce_bucket_size", 50_000), ("stage3_prefetch_bucket_size", 50_000),
        ("stage3_param_persistence_threshold", 1_000)),
}
"""ZeRO buckets sized for tiny models: at DeepSpeed's defaults (5e8 elements) the reduce bucket alone is 2 GB in
fp32 and hides every other term."""


@dataclass(frozen=True, slots=True)
class Case:
    """One training step to predict and measure."""

    model: str
    """Catalog name or model file."""
    batch_size: int
    """Micro-batch per rank."""
    seq_len: int | None
    precision: str
    checkpointing: bool
    num_layers: int | None = None
    """Rebuild the model with this many repeated blocks (``source.with_num_layers``); ``None``: as published."""
    strategy: str = "single"
    """``single`` (one device, no wrapper) or a strategy name (``ddp``, ``fsdp``, ``deepspeed_stage_2``, ...)."""
    world_size: int = 1
    process_group: str = "none"
    """``none`` (single), ``real`` (one process per rank) or ``fake`` (rank 0 of a fake process group)."""
    settings: tuple[tuple[str, Any], ...] = ()
    """Strategy knobs, as ``(name, value)`` pairs."""
    grad_accumulation: int = 1
    """Micro-batches per optimizer step (distributed cases: the plan's ``gradient_accumulation``)."""


def _token(models: Sequence[str], batches: Sequence[int], precisions: Sequence[str], **kw: Any) -> list[Case]:
    return [Case(m, b, 64, p, ckpt, **kw) for p in precisions for ckpt in (False, True) for m in models
            for b in batches]


def single_grid() -> list[Case]:
    """Tiny models on one device: a minute or two on a 2-core CPU."""
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


def distributed_grid() -> list[Case]:
    """DDP, FSDP2 and ZeRO-1/2/3 in 2 real processes (DDP and FSDP2 also in 16-mixed), FSDP2 as rank 0 of 4 and
    8 (fake process group)."""
    models = ["tiny-gpt2", "tiny-llama"]
    precisions = ("32-true", "bf16-mixed")
    cases: list[Case] = []
    for name in ("ddp", "fsdp", "fsdp_shard_grad_op"):
        cases += _token(models, (1, 4), precisions, strategy=name, world_size=2, process_group="real")
    for name in ("ddp", "fsdp"):  # 16-mixed: DDP under autocast + GradScaler, FSDP2 with an fp32 root output
        cases += _token(models, (1, 4), ("16-mixed",), strategy=name, world_size=2, process_group="real")
    for stage in (1, 2, 3):
        cases += _token(models, (1, 4), precisions, strategy=f"deepspeed_stage_{stage}", world_size=2,
                        process_group="real", settings=ZERO_SMALL_BUCKETS[stage])
        cases.append(Case("tiny-gpt2", 4, 64, "32-true", False, strategy=f"deepspeed_stage_{stage}", world_size=2,
                          process_group="real"))  # DeepSpeed's default buckets
    for world in (4, 8):
        for name in ("fsdp", "fsdp_shard_grad_op"):
            cases += _token(models, (4,), precisions, strategy=name, world_size=world, process_group="fake")
    # Gradient accumulation: 2 micro-batches per step, what each strategy keeps between them as fit() runs it.
    accumulating = [("ddp", ()), ("fsdp", ()), *((f"deepspeed_stage_{s}", ZERO_SMALL_BUCKETS[s]) for s in (1, 2, 3))]
    for name, settings in accumulating:
        cases += [Case(m, 4, 64, p, False, strategy=name, world_size=2, process_group="real", settings=settings,
                       grad_accumulation=2) for p in precisions for m in models]
    cases += [Case("tiny-gpt2", 4, 64, p, False, strategy="ddp", world_size=1, process_group="real",
                   grad_accumulation=2) for p in precisions]  # one device: the module unwrapped, .grad kept
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
    cases = [
        Case(name, b, seq, precision, ckpt, layers)
        for name, batches, seq, layers in models
        for precision in ("32-true", "bf16-mixed")
        for ckpt in (False, True)
        for b in batches
    ]
    for name in ("fsdp", "fsdp_shard_grad_op"):  # rank 0 of 8 (fake process group), real allocations
        for precision in ("32-true", "bf16-mixed"):
            for ckpt in (False, True):
                cases.append(Case("gpt2", 8, 1024, precision, ckpt, strategy=name, world_size=8,
                                  process_group="fake"))
                cases.append(Case("llama-2-7b", 2, 2048, precision, ckpt, 4, strategy=name, world_size=8,
                                  process_group="fake"))
    return cases


def hf_grid() -> list[Case]:
    """Hugging Face architectures from transformers' config classes (``_hf_architectures.py``), their forward
    computing the loss from the batch's labels: every one on one device, and DDP, FSDP2 and ZeRO-2/3 in 2 real
    processes for grouped-query attention (Llama), a tied head (Qwen2) and a mixture of experts (Mixtral);
    bf16-mixed."""
    models = [f"hf:{name}" for name in ARCHITECTURES]
    cases = [Case(m, b, 64, "bf16-mixed", ckpt) for m in models for ckpt in (False, True) for b in (1, 4)]
    distributed = [("ddp", ()), ("fsdp", ()), *((f"deepspeed_stage_{s}", ZERO_SMALL_BUCKETS[s]) for s in (2, 3))]
    for model in ("hf:llama", "hf:qwen2-tied", "hf:mixtral"):
        for name, settings in distributed:
            cases += [Case(model, b, 64, "bf16-mixed", ckpt, strategy=name, world_size=2, process_group="real",
                           settings=settings) for b, ckpt in ((2, False), (1, True))]
    return cases


GRIDS = {"cpu": lambda: single_grid() + distributed_grid(), "single": single_grid,
         "distributed": distributed_grid, "full": full_grid, "hf": hf_grid}


def load_case(case: Case) -> ModelSource:
    """The case's model source, with its block count when the case sets one."""
    source = autoshard.load_source(resolve(case.model))
    if case.num_layers is not None:
        if source.with_num_layers is None:
            raise ValueError(f"{case.model} cannot change its block count, but got {case.num_layers=}.")
        source = source.with_num_layers(case.num_layers)
    return source


def measure_peak(source: ModelSource, options: ProfileOptions, device: torch.device, *,
                 steps: int = STEPS, keep_log: bool = False) -> dict[str, Any]:
    """Train ``steps`` (default :data:`~autoshard.profiler.trace.STEPS`) real steps as the profiler traces them;
    the last one's peak, and every step's time.

    Mirrors ``autoshard.profiler.trace._run_steps`` without its bookkeeping hooks (which only classify bytes).

    Args:
        source: the model source.
        options: batch size, sequence, precision, optimizer, checkpointing (``target`` must match ``device``).
        device: where to run.
        steps: optimizer steps to train (at least 2: the peak is the last one's, after the optimizer state exists).
        keep_log: on CPU, also return the run's allocations and frees in order from the built model on, as a GPU
            sees them (``"allocation_log"``, :func:`_allocator.allocation_log` with ``after_build``).

    Returns:
        ``{"allocated": bytes, "reserved": bytes | None, "drift": bytes, "step_seconds": [s, ...]}``: the peak from
        a :class:`PeakProbe` started before the model is built and marked before the last step, and each step's
        wall time (the device synchronized at its start and end).
    """
    if steps < 2:
        raise ValueError(f"measure_peak needs at least 2 steps (the last one with optimizer state), but got {steps=}.")
    step_seconds: list[float] = []
    with PeakProbe(device) as probe:
        model = _build(source, options).to(device)
        probe.built()
        model.train()
        blocks = find_repeated_blocks(model)
        batch = source.batch(options.batch_size, seq_len=options.seq_len)
        if options.precision is Precision.BF16_TRUE:
            batch = tree_map(lambda x: x.to(torch.bfloat16) if torch.is_tensor(x) and x.is_floating_point() else x,
                             batch)
        batch = tree_map(lambda x: x.to(device) if torch.is_tensor(x) else x, batch)
        optimizer = make_optimizer(source, options, model)
        if options.activation_checkpointing and blocks is not None:  # as fit() does: all, every N-th, or op
            warm_up_checkpoint()
            checkpoint_blocks(model, blocks.names, options.checkpointing)
        loss_fn = source.loss_fn or default_loss
        autocast_dtype = options.precision.autocast_dtype
        with gc_paused():
            for step in range(steps):
                if step == steps - 1:
                    probe.mark()
                _synchronize(device)
                started = time.perf_counter()
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
                optimizer.zero_grad(set_to_none=options.set_grads_to_none)
                _synchronize(device)
                step_seconds.append(time.perf_counter() - started)
        probe.step_end()
        del model, optimizer, batch
    peak = probe.result()
    out = {"allocated": peak.peak_bytes, "reserved": peak.reserved_bytes, "drift": peak.drift_bytes,
           "step_seconds": step_seconds}
    if keep_log and probe.timeline is not None:
        out["allocation_log"] = allocation_log(probe.timeline, after_build=True)
    return out


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _hardware(case: Case, device: torch.device) -> Any:
    """The hardware the case is planned for: ``world_size`` CPU processes, or ``world_size`` of this GPU."""
    from autoshard.hardware import detect_hardware

    if device.type == "cpu":
        return detect_hardware(gpus=case.world_size, environ={"CUDA_VISIBLE_DEVICES": ""})
    if case.process_group == "real":
        return detect_hardware(gpus=case.world_size)  # UsageError when this machine has fewer GPUs
    return dataclasses.replace(detect_hardware(gpus=1), processes_per_node=case.world_size)


def _planned_for(case: Case, hardware: Any) -> Any:
    """A fake process group's collectives move nothing and copy nothing: plan for it as for a backend that
    reduces in place (the strategies model gloo's own copies only when ``backend == "gloo"``)."""
    return dataclasses.replace(hardware, backend="fake") if case.process_group == "fake" else hardware


def predict_distributed(case: Case, device: torch.device) -> tuple[int, Any]:
    """The per-rank peak the planner predicts for the case, and the case's plan as ``plan.json`` holds it."""
    from autoshard.planner import plan_file
    from autoshard.planner.search import evaluate
    from autoshard.strategies import get
    from autoshard.strategies.base import Candidate

    plan = _plan(case.model, case.num_layers, case.precision, case.seq_len, case.world_size, case.process_group,
                 case.strategy, device.type)
    request = dataclasses.replace(plan.request, micro_batch_size=case.batch_size,
                                  global_batch_size=case.batch_size * case.world_size * case.grad_accumulation)
    candidate = Candidate(strategy=case.strategy, micro_batch_size=case.batch_size,
                          activation_checkpointing=case.checkpointing, settings=dict(case.settings))
    evaluation = evaluate(get(case.strategy), plan.workload, plan.hardware, request, candidate)
    exported = plan_file.from_plan(dataclasses.replace(plan, request=request, recommended=evaluation))
    return evaluation.memory.gpu.total, exported


@functools.cache
def _plan(model: str, num_layers: int | None, precision: str, seq_len: int | None, world_size: int,
          process_group: str, strategy: str, device_type: str) -> Any:
    """One plan (and so one trace of the model, with ``num_layers`` blocks where the case sets it) for every case
    that differs only in micro-batch, checkpointing and knobs: the workload traces both checkpointing variants."""
    case = Case(model, 1, seq_len, precision, False, num_layers, strategy=strategy, world_size=world_size,
                process_group=process_group)
    hardware = _planned_for(case, _hardware(case, torch.device(device_type)))
    return autoshard.recommend(load_case(case), hardware=hardware, batch_size=1, global_batch_size=world_size,
                               seq_len=seq_len, precision=precision, strategies=[strategy])


def measure_distributed(case: Case, exported: Any) -> dict[str, Any]:
    """Train the exported plan in the case's processes; each rank's lowest peak over runs, the highest rank.

    A CPU run can overstate a rank's peak, never understate it: a block the rank allocated and gloo's thread
    freed is never seen freed (``benchmarks/_allocator.py``). Which rank, and whether at all, varies from run to
    run, so a case in real processes on CPU runs until every rank's lowest peak has been seen twice (within
    :data:`AGREE_FRACTION`), at most :data:`MAX_RUNS` times; each rank's lowest is its peak. A fake process group
    has no communication thread, and CUDA's allocator statistics see every thread: one run each.
    """
    runs: list[dict[str, Any]] = []
    repeat = case.process_group == "real" and exported.hardware.device_type == "cpu"
    while not runs or (repeat and len(runs) < MAX_RUNS and not _confirmed(runs)):
        runs.append(_run_once(case, exported))
    per_rank = [min(run["ranks"][r] for run in runs) for r in range(len(runs[0]["ranks"]))]
    top = max(range(len(per_rank)), key=per_rank.__getitem__)
    return {"allocated": per_rank[top], "reserved": min(run["reserved"] or 0 for run in runs) or None,
            "drift": min(run["drift"] for run in runs), "ranks": per_rank,
            "runs": [run["ranks"] for run in runs], "timeouts": sum(run["timeouts"] for run in runs)}


def _confirmed(runs: list[dict[str, Any]]) -> bool:
    """Whether every rank's lowest peak so far was measured in at least two runs."""
    if len(runs) < 2:
        return False
    for r in range(len(runs[0]["ranks"])):
        values = sorted(run["ranks"][r] for run in runs)
        if values[1] - values[0] > AGREE_FRACTION * values[0]:
            return False
    return True


def _run_once(case: Case, exported: Any) -> dict[str, Any]:
    from autoshard.planner import plan_file
    from autoshard.runtime.supervisor import run_workers

    processes = case.world_size if case.process_group == "real" else 1
    environ = dict(os.environ, OMP_NUM_THREADS="1")
    environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(Path.cwd()), environ.get("PYTHONPATH", "")) if p)
    with tempfile.TemporaryDirectory(prefix="autoshard-memory-") as tmp:
        run_dir = Path(tmp)
        plan_file.write(exported, run_dir / "plan.json")
        (run_dir / "case.json").write_text(json.dumps({
            "model": resolve(case.model), "num_layers": case.num_layers, "steps": WARM_STEPS + MEASURED_STEPS,
            "warm_steps": WARM_STEPS, "process_group": case.process_group, "optimizer": "adamw"}), encoding="utf-8")
        run_workers([sys.executable, str(WORKER)], world_size=processes, run_dir=run_dir, environ=environ,
                    timeout_s=CASE_TIMEOUT_S, grace_s=5.0, log_rank0=True)
        ranks = [json.loads((run_dir / f"rank{r}.json").read_text()) for r in range(processes)]
    return {"reserved": max(r["reserved_bytes"] or 0 for r in ranks) or None,
            "drift": max(r["drift_bytes"] for r in ranks), "ranks": [r["peak_bytes"] for r in ranks],
            "timeouts": sum(r.get("timeouts", 0) for r in ranks)}


def run_case(case: Case, device: torch.device, *, skip_above_bytes: int | None) -> dict[str, Any]:
    """Predict and measure one case; a failure is recorded in the row's ``error``, never raised."""
    row: dict[str, Any] = {**asdict(case), "settings": dict(case.settings), "predicted_bytes": None,
                           "measured_bytes": None, "reserved_bytes": None, "drift_bytes": None, "error_pct": None,
                           "note": "", "error": None}
    started = time.perf_counter()
    try:
        if case.strategy == "single":
            source = load_case(case)
            options = ProfileOptions(batch_size=case.batch_size, seq_len=case.seq_len, precision=case.precision,
                                     activation_checkpointing=case.checkpointing,
                                     grad_accumulation=case.grad_accumulation, target=device.type)
            predicted = autoshard.profile(source, batch_size=case.batch_size, seq_len=case.seq_len,
                                          precision=case.precision, activation_checkpointing=case.checkpointing,
                                          grad_accumulation=case.grad_accumulation, target=device.type)
            row["predicted_bytes"] = predicted.peak_bytes
            if case.checkpointing and predicted.block_class is None:
                row["note"] = "no repeated block: checkpointing has no effect"
        else:
            if device.type == "cuda" and case.process_group == "real" and torch.cuda.device_count() < case.world_size:
                row["note"] = f"skipped: needs {case.world_size} GPUs, this machine has {torch.cuda.device_count()}"
                return row
            row["predicted_bytes"], exported = predict_distributed(case, device)
        if skip_above_bytes is not None and row["predicted_bytes"] > skip_above_bytes:
            row["note"] = f"skipped: prediction above {SKIP_ABOVE_FRACTION:.0%} of device memory"
            return row
        measured = (measure_peak(source, options, device) if case.strategy == "single"
                    else measure_distributed(case, exported))
        row["measured_bytes"] = measured["allocated"]
        row["reserved_bytes"] = measured.get("reserved")
        row["drift_bytes"] = measured["drift"]
        row["ranks_bytes"] = measured.get("ranks")
        row["runs_bytes"] = measured.get("runs")
        if measured.get("timeouts"):
            row["note"] = (f"{measured['timeouts']} collective(s) still held by gloo after "
                           f"{RELEASE_WAIT_S * 1e3:.0f} ms: frees may have gone unseen")
        row["error_pct"] = 100.0 * (row["predicted_bytes"] - measured["allocated"]) / measured["allocated"]
        if case.strategy == "single" and device.type == "cuda" and row["reserved_bytes"]:
            add_reserved_prediction(row, source, options, torch.cuda.get_device_capability(device))
    except Exception as exc:  # noqa: BLE001 - a benchmark row records any failure and goes on
        row["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
        row["seconds"] = round(time.perf_counter() - started, 2)
    return row


def add_reserved_prediction(row: dict[str, Any], source: ModelSource, options: ProfileOptions,
                            compute_capability: tuple[int, int]) -> None:
    """A one-device row's reserved peak as replayed through the CUDA caching allocator
    (:func:`autoshard.profiler.cuda_reserve.trace_reserved`: the case traced whole, its allocations in order),
    and its error against ``row["reserved_bytes"]`` (``max_memory_reserved``) when that was measured."""
    from autoshard.profiler.cuda_reserve import trace_reserved

    options = dataclasses.replace(options, target="cuda")
    row["predicted_reserved_bytes"] = trace_reserved(source, options,
                                                     compute_capability=compute_capability).peak_reserved_bytes
    measured = row.get("reserved_bytes")
    row["reserved_error_pct"] = (None if not measured
                                 else 100.0 * (row["predicted_reserved_bytes"] - measured) / measured)


def _stats(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    errors = [abs(r["error_pct"]) for r in rows if r["error_pct"] is not None]
    reserved = [abs(r["reserved_error_pct"]) for r in rows if r.get("reserved_error_pct") is not None]
    return {
        "cases": len(rows),
        "measured": len(errors),
        "failed": sum(r["error"] is not None for r in rows),
        "skipped": sum(r["note"].startswith("skipped") for r in rows),
        "median_abs_error_pct": statistics.median(errors) if errors else None,
        "max_abs_error_pct": max(errors) if errors else None,
        **({"reserved_measured": len(reserved), "reserved_median_abs_error_pct": statistics.median(reserved),
            "reserved_max_abs_error_pct": max(reserved)} if reserved else {}),
    }


def summarize(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Median and maximum absolute error over the measured rows, overall and per strategy."""
    by = {}
    for name in dict.fromkeys(r["strategy"] for r in rows):
        by[name] = _stats([r for r in rows if r["strategy"] == name])
    return {**_stats(rows), "by_strategy": by}


def machine(device: torch.device) -> dict[str, Any]:
    """What ran the benchmark: CPU model and cores, and the GPU with torch's CUDA version on CUDA."""
    out: dict[str, Any] = {"cpu": f"{cpu_model()}, {os.cpu_count()} cores", "device": device.type}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        out["gpu"] = torch.cuda.get_device_name(device)
        out["gpu_count"] = torch.cuda.device_count()
        out["gpu_memory_bytes"] = props.total_memory
        out["cuda"] = torch.version.cuda
        with contextlib.suppress(Exception):
            import pynvml

            pynvml.nvmlInit()
            out["driver"] = pynvml.nvmlSystemGetDriverVersion()
    return out



def _mib(n: int | None) -> str:
    return "—" if n is None else f"{n / 2**20:,.2f}"


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f} %"


def _signed_pct(x: float | None) -> str:
    return "—" if x is None else f"{x:+.2f} %"


def _where(row: dict[str, Any]) -> str:
    if row["strategy"] == "single":
        return "1"
    return f"{row['world_size']}" + (" (fake PG)" if row["process_group"] == "fake" else "")


def write_report(out: Path, meta: dict[str, Any], summary: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    """Write ``memory_accuracy.json`` and ``memory_accuracy.md`` into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "memory_accuracy.json").write_text(
        json.dumps({"meta": meta, "summary": summary, "rows": rows}, indent=2) + "\n")
    m = meta["machine"]
    cuda = m["device"] == "cuda"
    where = f"{m['gpu']} × {m.get('gpu_count', 1)} (CUDA {m['cuda']}, driver {m.get('driver', '?')}), host {m['cpu']}" \
        if cuda else m["cpu"]
    lines = [
        "# Memory accuracy: predicted against measured per-rank peak",
        "",
        f"{meta['date']}, {where}, Python {meta['python']}, torch {meta['torch']}, deepspeed {meta['deepspeed']}, "
        f"autoshard {meta['autoshard']}. Grid `{meta['grid']}`, AdamW, target `{meta['target']}`. "
        f"Took {meta['seconds']:.0f} s.",
        "",
        f"Command: `{meta['command']}`",
        "",
        "Predicted: one device (`single`), `autoshard.profile(...).peak_bytes`; a strategy, the per-rank device "
        "peak the planner ranks by (`evaluate(...).memory.gpu.total`). Measured: the configuration trained with "
        "the backend `fit()` uses (world 2: real processes over "
        + ("NCCL" if cuda else "gloo") + "; \"fake PG\": rank 0 of a fake process group, real allocations), "
        f"{WARM_STEPS} warm-up step, then the peak of the next {MEASURED_STEPS} steps, highest rank: "
        + ("`torch.cuda.max_memory_allocated()` after `reset_peak_memory_stats()` (reserved shown too)."
           if cuda else "every CPU allocation and free as the PyTorch profiler records them (`profile_memory=True`), "
           "replayed — not autoshard's tracker."),
        "Error = (predicted − measured) / measured. How it is measured: `benchmarks/_allocator.py`.",
        "",
        f"**{summary['measured']} of {summary['cases']} cases measured ({summary['failed']} failed, "
        f"{summary['skipped']} skipped): median |error| {_pct(summary['median_abs_error_pct'])}, maximum "
        f"{_pct(summary['max_abs_error_pct'])}.**",
        "",
    ]
    if summary.get("reserved_measured"):
        lines += [
            f"Reserved (`max_memory_reserved`), one-device cases: predicted by replaying the traced step's allocations "
            f"through the caching allocator's rules (`autoshard/profiler/cuda_reserve.py`), "
            f"{summary['reserved_measured']} cases: median |error| {_pct(summary['reserved_median_abs_error_pct'])}, "
            f"maximum {_pct(summary['reserved_max_abs_error_pct'])}.",
            "",
        ]
    lines += [
        "| strategy | cases | measured | median \\|error\\| | max \\|error\\| |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, st in summary["by_strategy"].items():
        lines.append(f"| {name} | {st['cases']} | {st['measured']} | {_pct(st['median_abs_error_pct'])} | "
                     f"{_pct(st['max_abs_error_pct'])} |")
    lines += [
        "",
        "| model | strategy | world | precision | batch (× micro-batches) | seq | ckpt | settings | predicted (MiB) | "
        "measured (MiB) | "
        + ("reserved (MiB) | reserved predicted (MiB) | reserved error | " if cuda else "")
        + "predicted − measured (bytes) | error | note |",
        "|---|---|---|---|---:|---:|---|---|---:|---:|" + ("---:|---:|---:|" if cuda else "") + "---:|---:|---|",
    ]
    for r in rows:
        name = r["model"] if r["num_layers"] is None else f"{r['model']} ({r['num_layers']} blocks)"
        note = r["note"] if r["error"] is None else f"failed: {r['error']}".replace("|", "\\|").replace("\n", " ")
        if r["error"] is None and r.get("drift_bytes") and r["drift_bytes"] > AGREE_FRACTION * r["measured_bytes"]:
            note = (note + "; " if note else "") + f"unseen frees: up to {r['drift_bytes']:,} B overstated"
        err = "—" if r["error_pct"] is None else f"{r['error_pct']:+.2f} %"
        diff = "—" if r["measured_bytes"] is None else f"{r['predicted_bytes'] - r['measured_bytes']:+,}"
        settings = ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in r["settings"].items())
        lines.append(
            f"| {name} | {r['strategy']} | {_where(r)} | {r['precision']} | {_batch(r)} | "
            f"{r['seq_len'] or '—'} | {'on' if r['checkpointing'] else 'off'} | {settings or 'defaults'} | "
            f"{_mib(r['predicted_bytes'])} | {_mib(r['measured_bytes'])} | "
            + (f"{_mib(r['reserved_bytes'])} | {_mib(r.get('predicted_reserved_bytes'))} | "
               f"{_signed_pct(r.get('reserved_error_pct'))} | " if cuda else "") + f"{diff} | {err} | {note} |"
        )
    (out / "memory_accuracy.md").write_text("\n".join(lines) + "\n")


def _batch(row: dict[str, Any]) -> str:
    """The micro-batch, and ``× N`` when N micro-batches make a step."""
    accumulation = row.get("grad_accumulation", 1)
    return f"{row['batch_size']}" + (f" × {accumulation}" if accumulation > 1 else "")


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
    parser.add_argument("--grid", choices=sorted(GRIDS), default="cpu",
                        help="cpu: single + distributed (tiny models; default); full: published models, for a GPU; "
                             "hf: Hugging Face architectures from transformers' config classes")
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks"))
    parser.add_argument("--models", nargs="+", default=None,
                        help="run only these models of the grid (e.g. to split the full grid into shorter runs)")
    parser.add_argument("--strategies", nargs="+", default=None,
                        help="run only these strategies of the grid ('single' for the one-device cases)")
    args = parser.parse_args(argv)
    device = _device(args.device)
    grid = list(cases) if cases is not None else GRIDS[args.grid]()
    for flag, values, field in (("--models", args.models, "model"), ("--strategies", args.strategies, "strategy")):
        if values is None:
            continue
        present = {getattr(c, field) for c in grid}
        unknown = sorted(set(values) - present)
        if unknown:
            parser.error(f"{flag} {' '.join(unknown)}: not in the grid; it has {sorted(present)}.")
        grid = [c for c in grid if getattr(c, field) in values]
    skip_above = None
    if device.type == "cuda":
        skip_above = int(SKIP_ABOVE_FRACTION * torch.cuda.get_device_properties(device).total_memory)
    started = time.perf_counter()
    rows = []
    for i, case in enumerate(grid, 1):
        row = run_case(case, device, skip_above_bytes=skip_above)
        rows.append(row)
        err = "—" if row["error_pct"] is None else f"{row['error_pct']:+.2f}%"
        print(f"[{i}/{len(grid)}] {case.model} {case.strategy}×{case.world_size} {case.precision} "
              f"b={case.batch_size} seq={case.seq_len} ckpt={case.checkpointing}: predicted {row['predicted_bytes']} "
              f"measured {row['measured_bytes']} error {err} ({row['seconds']} s) {row['note']} "
              f"{row['error'] or ''}".rstrip(), flush=True)
    argv_shown = list(sys.argv[1:] if argv is None else argv)
    meta = {
        "date": datetime.date.today().isoformat(),
        "machine": machine(device),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "deepspeed": package_version("deepspeed") or "not installed",
        "autoshard": autoshard.__version__,
        "grid": args.grid if cases is None else "custom",
        "target": device.type,
        "command": " ".join(["python", "benchmarks/memory_accuracy.py", *argv_shown]),
        "seconds": round(time.perf_counter() - started, 1),
    }
    summary = summarize(rows)
    write_report(args.out, meta, summary, rows)
    print(json.dumps({k: v for k, v in summary.items() if k != "by_strategy"}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
