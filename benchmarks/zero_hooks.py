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

ZeRO-3 hooks every module, not only those whose parameters it gathers (``_register_deepspeed_module`` recurses
over all children): a module with only persistent parameters (a norm) and one with none (an activation, a
dropout, a block that only calls its children) run the same hooks, and each module's outputs are wrapped for the
backward hook. Two more passes price them: ``step`` times a narrow stack (``--step-width``), whose forward +
backward under ZeRO-3 with every parameter persistent (the default threshold) gives the persistent module, and
``modules`` a stack of ``nn.ReLU`` behind one narrow linear layer, the module without parameters. The ``step``
pass also times ``step()`` itself (below).

Under activation checkpointing the recomputation runs each checkpointed module's forward again, hooks and all
(torch's ``checkpoint`` calls the module, not its kernels): the ``recompute`` pass wraps each layer of the narrow
stacks (a gathered and a persistent linear layer, a ``nn.ReLU``) in a module that calls it through
``torch.utils.checkpoint.checkpoint(..., use_reentrant=False)``, as ``fit()`` and the Hugging Face models do, or
directly: ZeRO-3 over torch checkpointed, less ZeRO-3 over torch uncheckpointed, is what a module's hooks cost
again in the recomputation (the wrapper's own hooks, run once either way, cancel).

Usage::

    python benchmarks/zero_hooks.py [--layers 16 32 64 128] [--width 320] [--steps 20] [--warmup 5]
                                    [--repeats 3] [--step-width 8] [--passes hooks step modules recompute]
                                    [--accelerator cpu|cuda] [--name NAME] [--out docs/benchmarks]

Writes ``zero_hooks.{md,json}`` under ``--out`` (``gpu_zero_hooks`` with ``--accelerator cuda``: the engines on one
GPU with NCCL, the device synchronized before each clock stop, as the GPU campaign runs it). On CPU the figures
are deepspeed's CPU accelerator; on a GPU the same Python runs, plus CUDA event and stream calls.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the shared module beside this script, however it is loaded
from _common import accelerator_device, line, one_rank_worker, package_version, positive, run_meta, slope, write_report

SCRIPT = Path(__file__).resolve()
KINDS = ("torch", "zero1", "zero2", "zero3")
ZERO_CONFIGS: dict[str, dict[str, int]] = {
    "zero1": {"stage": 1}, "zero2": {"stage": 2}, "zero3": {"stage": 3},
    "zero3-gathered": {"stage": 3, "stage3_param_persistence_threshold": 0},
    "zero2-offload": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
    "zero3-gathered-offload": {"stage": 3, "stage3_param_persistence_threshold": 0,
                               "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}},
    "zero3-offload": {"stage": 3, "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}},
}
"""Each DeepSpeed kind's ``zero_optimization``. ``zero3-gathered``: every parameter partitioned and gathered
(``stage3_param_persistence_threshold`` 0), the path a real model's weights take; plain ``zero3`` on the narrow
stack keeps every parameter persistent (each is below the default threshold's 1e5 elements), the path of a real
model's biases and norms."""
STAGES = {kind: ZERO_CONFIGS[kind]["stage"] for kind in KINDS if kind in ZERO_CONFIGS}
"""The hooks pass's DeepSpeed kinds and their stages."""
TENSORS_PER_LAYER = 2
"""An ``nn.Linear`` owns a weight and a bias."""
STEP_KINDS = ("torch", "zero1", "zero2", "zero3-gathered", "zero3")
"""Kinds whose ``step()`` is timed again on a narrow stack (``--step-width``), where the optimizer's arithmetic is
negligible and what is left is host time: ZeRO-1/2's ``engine.step()`` loops over the parameter tensors
(``free_grad_in_param_list``, the flattening of the partition's gradients, the norms, the copy back into the
16-bit parameters); ZeRO-3's over the partitioned ones (``_partition_all_parameters``, ``zero_grad``, the norm,
flattening the gradients and unflattening the updated partition) and the persistent ones (their all-gather after
the step, ``_post_step``), once per step. ``zero3-gathered`` and ``zero3`` take those two paths; their forward +
backward, less torch's, is ZeRO-3's hooks per module with a gathered and with a persistent parameter."""
OFFLOAD_KINDS = ("torch", "zero2-offload", "zero3-gathered-offload", "zero3-offload")
"""Kinds of the ``offload`` pass: the narrow stack's ``step()`` and forward + backward under autoshard's offload
presets (``deepspeed_stage_2_offload``: the optimizer on the CPU; ``deepspeed_stage_3_offload``: the parameters
too), stepped by ``DeepSpeedCPUAdam`` as ``fit()`` steps them. The step's Python differs from the GPU-resident
one: the gradients are copied into the CPU's fp32 partition during backward
(``async_inplace_copy_grad_to_fp32_buffer_from_gpu``, ``stage_1_and_2.py``; ``partition_grads``, ``stage3.py``),
the norm is taken per parameter on the host (``complete_grad_norm_calculation_for_cpu_offload``) and the updated
fp32 partition is copied back into the 16-bit parameters; the arithmetic of ``DeepSpeedCPUAdam`` on this stack's
few elements is negligible, so the line is the engine's host time around it."""
MODULE_KINDS = ("torch", "zero3")
"""Kinds timed on a stack of parameterless modules (the ``modules`` pass)."""
RECOMPUTE_MODULES = {"gathered": ("zero3-gathered", "linear"), "persistent": ("zero3", "linear"),
                     "parameterless": ("zero3", "relu")}
"""The ``recompute`` pass: for each kind of module ZeRO-3 prices, the DeepSpeed kind and the narrow stack's unit
that isolate it. Each is timed wrapped and checkpointed, beside plain torch on the same unit."""
RECOMPUTE_RUNS = tuple(dict.fromkeys(
    (kind, f"{how}-{unit}") for zero, unit in RECOMPUTE_MODULES.values() for kind in ("torch", zero)
    for how in ("wrapped", "checkpointed")))
"""(kind, unit) of every configuration the ``recompute`` pass runs."""
PASSES = ("hooks", "step", "modules", "recompute", "offload")


def worker(kind: str, layers: int, width: int, steps: int, warmup: int, accelerator: str = "cpu",
           unit: str = "linear") -> dict[str, Any]:
    """One configuration in this process: the median forward + backward seconds of ``steps`` timed steps, and of
    ``step()`` (on CUDA, the device synchronized before the clock stops). ``unit``: the stack's layers,
    ``nn.Linear(width, width)`` or ``nn.ReLU`` (behind one such linear layer, so that a gradient flows), each
    alone, or prefixed ``wrapped-`` / ``checkpointed-``: inside a module that calls it directly or through
    ``torch.utils.checkpoint.checkpoint`` (the ``recompute`` pass)."""
    import torch
    from torch.utils.checkpoint import checkpoint

    class _Wrapped(torch.nn.Module):
        """Calls ``inner`` directly, or through non-reentrant checkpointing (which runs it again in backward)."""

        def __init__(self, inner: torch.nn.Module, checkpointed: bool) -> None:
            super().__init__()
            self.inner, self.checkpointed = inner, checkpointed

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return checkpoint(self.inner, x, use_reentrant=False) if self.checkpointed else self.inner(x)

    torch.set_num_threads(1)
    torch.manual_seed(0)
    device = torch.device(accelerator)
    how, _, base = unit.rpartition("-")
    make = (lambda: torch.nn.Linear(width, width)) if base == "linear" else torch.nn.ReLU
    layer = (lambda: _Wrapped(make(), how == "checkpointed")) if how else make
    stack = [layer() for _ in range(layers)]
    model = torch.nn.Sequential(*stack if base == "linear" else [torch.nn.Linear(width, width), *stack]).to(device)
    if kind.endswith("-offload"):  # DeepSpeed refuses a torch optimizer under offload unless forced
        from deepspeed.ops.adam import DeepSpeedCPUAdam

        optimizer: torch.optim.Optimizer = DeepSpeedCPUAdam(model.parameters(), lr=1e-3)
    else:
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
                  "zero_optimization": ZERO_CONFIGS[kind]}
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
    return {"kind": kind, "layers": layers, "width": width, "unit": unit, "median_s": statistics.median(times),
            "step_median_s": statistics.median(step_times)}


def run_worker(kind: str, layers: int, width: int, steps: int, warmup: int, port: int,
               accelerator: str = "cpu", unit: str = "linear") -> dict[str, Any]:
    """:func:`worker` in a fresh interpreter (one rank of a world of one; gloo on CPU, NCCL on CUDA)."""
    args = [kind, str(layers), str(width), str(steps), str(warmup), accelerator, unit]
    return one_rank_worker(SCRIPT, args, port, f"{kind} x {layers} {unit}", {"DS_ACCELERATOR": accelerator})


def _slopes(rows: list[dict[str, Any]], kinds: Sequence[str], key: str = "median_s") -> dict[str, Any]:
    """Per kind of ``kinds`` with rows: the median ``key`` seconds per layer count (over repeats) and their slope
    per layer."""
    out: dict[str, Any] = {}
    for kind in kinds:
        mine = [r for r in rows if r["kind"] == kind]
        if mine:
            layers = sorted({r["layers"] for r in mine})
            medians = {n: statistics.median(r[key] for r in mine if r["layers"] == n) for n in layers}
            out[kind] = {"median_s_by_layers": medians, "slope_s_per_layer": slope(list(medians.items()))}
    return out


def _step_summary(rows: list[dict[str, Any]], kinds: Sequence[str] = STEP_KINDS) -> dict[str, Any]:
    """Per kind of ``kinds``: the median ``step()`` seconds per layer count of the narrow stack, their line per
    parameter tensor (slope) and per step (intercept), and forward + backward's slope per layer."""
    out = _slopes(rows, kinds, "step_median_s")
    for kind, passes in _slopes(rows, kinds).items():
        per_tensor, intercept = line([(n * TENSORS_PER_LAYER, t) for n, t in out[kind]["median_s_by_layers"].items()])
        del out[kind]["slope_s_per_layer"]
        out[kind].update(slope_s_per_tensor=per_tensor, intercept_s=intercept,
                         forward_backward_s_per_layer=passes["slope_s_per_layer"])
    return out


def _zero3_modules(summary: dict[str, Any]) -> dict[str, float]:
    """ZeRO-3's forward + backward host time per module, over plain torch's, by what the module owns: a gathered
    weight (the wide stack; and the narrow one with every parameter gathered), only persistent parameters, or no
    parameter at all — the figures the passes run give."""
    out: dict[str, float] = {}
    if "zero3" in summary and "torch" in summary:
        out["gathered"] = summary["zero3"]["slope_s_per_layer"] - summary["torch"]["slope_s_per_layer"]
    step = summary.get("step", {})
    if "torch" in step:
        base = step["torch"]["forward_backward_s_per_layer"]
        for kind, name in (("zero3-gathered", "gathered_narrow"), ("zero3", "persistent")):
            if kind in step:
                out[name] = step[kind]["forward_backward_s_per_layer"] - base
    modules = summary.get("modules", {})
    if {"torch", "zero3"} <= modules.keys():
        out["parameterless"] = modules["zero3"]["slope_s_per_layer"] - modules["torch"]["slope_s_per_layer"]
    return out


def _recompute_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``recompute`` pass: each run's slope per layer (keyed ``"kind unit"``) and, per kind of module
    (:data:`RECOMPUTE_MODULES`), ZeRO-3 over torch wrapped and checkpointed, and their difference: what the
    module's hooks cost again when checkpointing recomputes it."""
    runs = [f"{kind} {unit}" for kind, unit in RECOMPUTE_RUNS]
    slopes = _slopes([{**r, "kind": f"{r['kind']} {r['unit']}"} for r in rows], runs)
    modules: dict[str, dict[str, float]] = {}
    for name, (zero, unit) in RECOMPUTE_MODULES.items():
        over = {how: slopes[f"{zero} {how}-{unit}"]["slope_s_per_layer"]
                - slopes[f"torch {how}-{unit}"]["slope_s_per_layer"]
                for how in ("wrapped", "checkpointed") if {f"{zero} {how}-{unit}", f"torch {how}-{unit}"} <= slopes.keys()}
        if len(over) == 2:
            modules[name] = {"wrapped_over_torch_s": over["wrapped"], "checkpointed_over_torch_s": over["checkpointed"],
                             "recompute_s": over["checkpointed"] - over["wrapped"]}
    return {"runs": slopes, "modules": modules}


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per kind: median seconds per layer count (over repeats) and the slope per layer; ZeRO's over torch's. The
    rows of the narrow stack (``"pass": "step"``), when there are any: :func:`_step_summary` under ``"step"``; of
    the parameterless stack (``"modules"``): their slopes under ``"modules"``; of the ``recompute`` pass: under
    ``"recompute"`` (:func:`_recompute_summary`); ZeRO-3's host time by module under ``"zero3_modules"``
    (:func:`_zero3_modules`)."""
    by_pass = {name: [r for r in rows if r.get("pass", "hooks") == name] for name in PASSES}
    out: dict[str, Any] = _slopes(by_pass["hooks"], KINDS)
    for kind in STAGES if "torch" in out else ():
        out[kind]["over_torch_s_per_layer"] = out[kind]["slope_s_per_layer"] - out["torch"]["slope_s_per_layer"]
        if kind != "zero3":  # ZeRO-3's unit is the module it gathers, one per layer
            out[kind]["over_torch_s_per_tensor"] = out[kind]["over_torch_s_per_layer"] / TENSORS_PER_LAYER
    if by_pass["step"]:
        out["step"] = _step_summary(by_pass["step"])
    if by_pass["modules"]:
        out["modules"] = _slopes(by_pass["modules"], MODULE_KINDS)
    if by_pass["recompute"]:
        out["recompute"] = _recompute_summary(by_pass["recompute"])
    if by_pass["offload"]:
        out["offload"] = _step_summary(by_pass["offload"], OFFLOAD_KINDS)
    modules = _zero3_modules(out)
    return {**out, "zero3_modules": modules} if modules else out


def markdown(report: dict[str, Any]) -> str:
    """The report as a page."""
    meta, summary = report["meta"], report["summary"]
    lines = [
        "# DeepSpeed ZeRO's host time per module and per parameter",
        "",
        f"{meta['date']}, {meta['machine']}, {meta['cores']} cores, {meta['device']}, Python {meta['python']}, "
        f"torch {meta['torch']}, DeepSpeed {meta['deepspeed']}.",
        "",
        f"Benchmark: `{meta['command']}`",
        "",
    ]
    if "torch" in summary:
        lines += _hooks_markdown(meta, summary)
    if "step" in summary:
        lines += _step_markdown(meta, summary["step"])
    if "zero3_modules" in summary:
        lines += _modules_markdown(meta, summary)
    if summary.get("recompute", {}).get("modules"):
        lines += _recompute_markdown(meta, summary["recompute"])
    if "offload" in summary:
        lines += _offload_markdown(meta, summary)
    return "\n".join(lines)


def _offload_markdown(meta: dict[str, Any], summary: dict[str, Any]) -> list[str]:
    """The section on the engines' ``step()`` and forward + backward under CPU offload, beside the same stack's
    GPU-resident figures when the ``step`` pass ran too."""
    offload, step = summary["offload"], summary.get("step", {})
    kinds = [k for k in offload if k != "torch"]
    twin = {k: k.removesuffix("-offload") for k in kinds}
    base = offload.get("torch", step.get("torch", {})).get("forward_backward_s_per_layer")

    def over(k: str, figures: dict[str, Any]) -> str:
        if base is None or k not in figures:
            return "—"
        return f"{(figures[k]['forward_backward_s_per_layer'] - base) * 1e3:.4f}"

    lines = [
        "## Under CPU offload",
        "",
        f"The same narrow stack (`nn.Linear({meta['step_width']}, {meta['step_width']})`) under autoshard's offload "
        "presets, stepped by `DeepSpeedCPUAdam` as `fit()` steps them: `zero2-offload` is `deepspeed_stage_2_offload` "
        "(the optimizer on the CPU), `zero3-offload` and `zero3-gathered-offload` are `deepspeed_stage_3_offload` "
        "(the parameters too) with the default persistence threshold and with 0. The arithmetic of CPU Adam on this "
        "stack's few elements is negligible: the line is the engine's host time around it, once per step. Beside "
        "each, the same stage without offload where the `step` pass ran in the same run.",
        "",
        *_medians_table({f"{k} step": offload[k]["median_s_by_layers"] for k in offload}),
        *_line_table(offload, kinds, "step(): "),
        "| without offload: ms per parameter tensor | " + " | ".join(
            f"{step[twin[k]]['slope_s_per_tensor'] * 1e3:.4f}" if twin[k] in step else "—" for k in kinds) + " |",
        "| without offload: ms per step (intercept) | " + " | ".join(
            f"{step[twin[k]]['intercept_s'] * 1e3:.3f}" if twin[k] in step else "—" for k in kinds) + " |",
        "| forward + backward over torch: ms per layer | " + " | ".join(over(k, offload) for k in kinds) + " |",
        "| without offload: ms per layer | " + " | ".join(over(twin[k], step) for k in kinds) + " |",
        "",
        "`autoshard.strategies.deepspeed.cost.ENGINE_OFFLOAD_STEP_HOST_S` prices the offloaded `step()`'s line, "
        "added to `DeepSpeedCPUAdam`'s arithmetic on the rank's partition (both on the host, one after the other).",
        "",
    ]
    return lines


def _line_table(lines: dict[str, dict[str, Any]], kinds: Sequence[str], label: str = "") -> list[str]:
    """A table head and the two rows of each kind's line (:func:`_step_summary`): per parameter tensor, per step."""
    def row(name: str, key: str, digits: int) -> str:
        return f"| {label}{name} | " + " | ".join(f"{lines[k][key] * 1e3:.{digits}f}" for k in kinds) + " |"

    return ["| | " + " | ".join(kinds) + " |", "|---|" + "---:|" * len(kinds),
            row("ms per parameter tensor", "slope_s_per_tensor", 4), row("ms per step (intercept)", "intercept_s", 3)]


def _medians_table(columns: dict[str, dict[Any, float]]) -> list[str]:
    """A table of milliseconds: a row per layer count, a column per ``columns`` entry (its medians by layers)."""
    layers = sorted({int(n) for medians in columns.values() for n in medians})
    rows = [f"| {n} | " + " | ".join(f"{_at(medians, n) * 1e3:.2f}" for medians in columns.values()) + " |"
            for n in layers]
    return ["| layers | " + " | ".join(f"{name} (ms)" for name in columns) + " |",
            "|---:|" + "---:|" * len(columns), *rows, ""]


def _at(medians: dict[Any, float], layers: int) -> float:
    """The median at ``layers``, whether the keys are numbers (a fresh summary) or strings (one read from JSON)."""
    return medians[layers] if layers in medians else medians[str(layers)]


def _hooks_markdown(meta: dict[str, Any], summary: dict[str, Any]) -> list[str]:
    """The section on forward + backward of the wide stack, every kind."""
    lines = [
        "One training step's forward + `engine.backward` (plain torch: forward + `backward()`) of a stack of "
        f"`nn.Linear({meta['width']}, {meta['width']})` layers at micro-batch 1, world size 1, on "
        f"{meta['accelerator'].upper()}: the median "
        f"of {meta['steps']} steps after {meta['warmup']}, then the median over {meta['repeats']} interleaved "
        "repeats, each in a fresh process. Each weight is above `stage3_param_persistence_threshold` (1e5 "
        "elements): ZeRO-3 gathers and releases it around the module, in forward and in backward.",
        "",
        *_medians_table({k: summary[k]["median_s_by_layers"] for k in KINDS}),
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
        "(`reduce_ready_partitions_and_remove_grads`): what `autoshard.strategies.deepspeed.cost.ENGINE_HOST_S` "
        "prices (its docstring names the run it takes)"
        + (". It is this CPU running deepspeed's CPU accelerator; on a GPU host the same Python runs, plus CUDA "
           "event and stream calls (measured with `--accelerator cuda`)." if meta["accelerator"] == "cpu"
           else " (its CPU figures; these are the same engines on the GPU, synchronized before each clock stop)."),
        "",
    ]
    return lines


def _step_markdown(meta: dict[str, Any], step: dict[str, Any]) -> list[str]:
    """The section on the engines' ``step()``, from :func:`_step_summary`."""
    kinds = list(step)
    lines = [
        "## The engine's step",
        "",
        f"`step()` (plain torch: `optimizer.step()` and `zero_grad()`, AdamW for-loop) of a narrow stack, "
        f"`nn.Linear({meta['step_width']}, {meta['step_width']})` layers, where the optimizer's arithmetic is "
        "negligible: what is left is host time, once per step. Median of the same steps and repeats; the line is "
        "fitted over the parameter tensors (two per layer). `zero3-gathered` runs ZeRO-3 with "
        "`stage3_param_persistence_threshold` 0, every parameter partitioned and gathered; `zero3` with the "
        "default, every parameter of this stack persistent.",
        "",
        *_medians_table({f"{k} step": step[k]["median_s_by_layers"] for k in kinds}),
        *_line_table(step, kinds),
        "",
        "The engines' line is the host time of `engine.step()` outside the optimizer's kernels, what "
        "`autoshard.strategies.deepspeed.cost.ENGINE_STEP_HOST_S` prices (ZeRO-3: `zero3-gathered`'s line, and "
        "`zero3`'s slope for each persistent tensor, whose all-gather `_post_step` issues). Plain torch's "
        "for-loop AdamW is shown for scale (the step-time model prices torch's optimizer by its kernels, "
        "`step_time.OPTIMIZER_LAUNCH_S`).",
        "",
    ]
    return lines


def _modules_markdown(meta: dict[str, Any], summary: dict[str, Any]) -> list[str]:
    """The section on ZeRO-3's hooks by what a module owns (:func:`_zero3_modules`)."""
    names = {"gathered": f"a gathered weight (`nn.Linear({meta['width']}, {meta['width']})`, the first table)",
             "gathered_narrow": f"a gathered weight, narrow (`nn.Linear({meta['step_width']}, "
                                f"{meta['step_width']})`, `zero3-gathered`)",
             "persistent": f"persistent parameters only (`nn.Linear({meta['step_width']}, {meta['step_width']})`, "
                           "`zero3`)",
             "parameterless": "no parameter (`nn.ReLU`)"}
    lines = ["## ZeRO-3's hooks by module", ""]
    if "modules" in summary:
        lines += [f"Forward + backward of a stack of `nn.ReLU` behind one `nn.Linear({meta['step_width']}, "
                  f"{meta['step_width']})`, the same steps and repeats:", "",
                  *_medians_table({k: v["median_s_by_layers"] for k, v in summary["modules"].items()})]
    lines += ["| the module owns | ZeRO-3 over torch, ms per module |", "|---|---:|"]
    lines += [f"| {names[k]} | {v * 1e3:.3f} |" for k, v in summary["zero3_modules"].items()]
    lines += ["", "ZeRO-3 hooks every module (`_register_deepspeed_module` recurses over all children), with or "
              "without parameters to gather, and wraps each module's outputs for its backward hook: "
              "`autoshard.strategies.deepspeed.cost` prices each module by what it owns (`ENGINE_HOST_S`, "
              "`ZERO3_MODULE_HOST_S`). The narrow stacks' figures are the hooks' Python alone; the wide stack's "
              "also hold the CPU's own copies of its 102,400-element weights and gradients, which on a GPU are "
              "kernels.", ""]
    return lines


def _recompute_markdown(meta: dict[str, Any], recompute: dict[str, Any]) -> list[str]:
    """The section on the hooks a checkpointed module runs again (:func:`_recompute_summary`)."""
    w = meta["step_width"]
    names = {"gathered": f"a gathered weight (`nn.Linear({w}, {w})`, `zero3-gathered`)",
             "persistent": f"persistent parameters only (`nn.Linear({w}, {w})`, `zero3`)",
             "parameterless": "no parameter (`nn.ReLU`)"}
    runs = recompute["runs"]
    lines = ["## ZeRO-3's hooks again in the recomputation", "",
             "Forward + backward of the narrow stacks with each layer inside a wrapper module that calls it directly "
             "(`wrapped`) or through `torch.utils.checkpoint.checkpoint(..., use_reentrant=False)` (`checkpointed`, "
             "as `fit()` and the Hugging Face models checkpoint a block), the same steps and repeats:", "",
             *_medians_table({k: v["median_s_by_layers"] for k, v in runs.items()}),
             "| the module owns | ZeRO-3 over torch, wrapped (ms per layer) | checkpointed (ms per layer) | "
             "again in the recomputation (ms per module) |", "|---|---:|---:|---:|"]
    lines += [f"| {names[k]} | {v['wrapped_over_torch_s'] * 1e3:.3f} | {v['checkpointed_over_torch_s'] * 1e3:.3f} | "
              f"{v['recompute_s'] * 1e3:.3f} |" for k, v in recompute["modules"].items()]
    lines += ["", "A layer here is the wrapper and the module: the wrapper's hooks run once either way and cancel in "
              "the difference, which is what ZeRO-3's hooks cost again for a module whose forward checkpointing "
              "runs a second time (`autoshard.strategies.deepspeed.cost.ZERO3_RECOMPUTE_HOST_S` prices it for every "
              "module inside a checkpointed block).", ""]
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
    parser.add_argument("--passes", nargs="+", choices=PASSES, default=list(PASSES),
                        help="hooks: forward + backward of the wide stack, every kind; step: step() and forward + "
                        "backward of the narrow stack, torch, ZeRO-1, -2 and -3; modules: a stack of parameterless "
                        "modules, torch and ZeRO-3; recompute: the narrow stacks checkpointed, torch and ZeRO-3 "
                        "(default all four)")
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
        print("RESULT " + json.dumps(worker(kind, layers, width, steps, warmup, *argv[6:8])), flush=True)
        os._exit(0)  # no interpreter teardown of a gloo group (pytorch#65231)
    args = parse_args(argv)
    if len(set(args.layers)) < 2:
        print("error: --layers needs at least two different counts (the figure is a slope).", file=sys.stderr)
        return 2
    device = accelerator_device(args.accelerator)
    if device is None:
        return 2
    rows, port = [], 29500 + os.getpid() % 1000
    plans = {"hooks": ([(k, "linear") for k in KINDS], args.width),
             "step": ([(k, "linear") for k in STEP_KINDS], args.step_width),
             "modules": ([(k, "relu") for k in MODULE_KINDS], args.step_width),
             "recompute": (list(RECOMPUTE_RUNS), args.step_width),
             "offload": ([(k, "linear") for k in OFFLOAD_KINDS], args.step_width)}
    for name in (p for p in PASSES if p in args.passes):
        runs, width = plans[name]
        for repeat in range(args.repeats):
            order = [(k, u, n) for n in args.layers for k, u in runs]
            for kind, unit, layers in order if repeat % 2 == 0 else order[::-1]:
                rows.append({**run_worker(kind, layers, width, args.steps, args.warmup, port, args.accelerator,
                                          unit), "repeat": repeat, "pass": name})
                print(f"{name}: {kind} x {layers} (width {width}, {unit}): forward + backward "
                      f"{rows[-1]['median_s'] * 1e3:.2f} ms, step {rows[-1]['step_median_s'] * 1e3:.2f} ms",
                      flush=True)
    meta = run_meta("zero_hooks.py", argv, cores=os.cpu_count(), deepspeed=package_version("deepspeed"),
                    width=args.width, steps=args.steps, warmup=args.warmup, repeats=args.repeats,
                    accelerator=args.accelerator, device=device, step_width=args.step_width)
    report = {"meta": meta, "summary": summarise(rows), "rows": rows}
    write_report(args.out, args.name or ("gpu_zero_hooks" if args.accelerator == "cuda" else "zero_hooks"), report,
                 markdown(report))
    return 0

if __name__ == "__main__":
    raise SystemExit(main())
