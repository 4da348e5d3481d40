"""Planning for a machine: the one path ``recommend``, ``fit(plan="auto")`` and ``tune`` share.

:func:`hardware_for` turns what the user gave (nothing, a profile name or YAML path, a spec) into a
:class:`~autoshard.hardware.specs.HardwareSpec`; :func:`default_precision` is the precision used when none is given;
:func:`plan_for` checks the arguments, traces the model and ranks the candidates.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from typing import Literal

from autoshard.errors import UsageError
from autoshard.hardware import HardwareSpec, detect_hardware, load_hardware
from autoshard.models import ModelSource, load_source
from autoshard.models.scope import scope_lines
from autoshard.planner.plan import Plan, PlanRequest
from autoshard.planner.search import check_optimizer, check_request, plan
from autoshard.planner.selective import weigh_selective
from autoshard.profiler.checkpointing import FULL, ActivationCheckpointing, parse_checkpointing
from autoshard.profiler.flops import uncounted_line
from autoshard.profiler.optimizers import declared_optimizer, require_optimizer
from autoshard.profiler.options import (
    OptimizerImpl,
    Precision,
    parse_float32_matmul_precision,
    parse_grad_clip_norm,
    parse_optimizer,
    parse_optimizer_impl,
    parse_precision,
)
from autoshard.strategies.base import Strategy
from autoshard.strategies.workload import Workload

Goal = Literal["pretrain", "finetune"]
GOALS: tuple[Goal, ...] = ("pretrain", "finetune")


def hardware_for(hardware: HardwareSpec | str | os.PathLike[str] | None, *, processes: int | None = None
                 ) -> HardwareSpec:
    """The hardware to plan for: this machine detected (its first ``processes`` GPUs, or ``processes`` CPU
    processes without a GPU), a profile by name or YAML path, or the spec given.

    Raises:
        UsageError: ``hardware`` is of another kind (e.g. a dict), ``processes`` is not a positive whole number,
            or the profile is unknown.
        HardwareError: detection failed.
    """
    if processes is not None and (isinstance(processes, bool) or not isinstance(processes, int) or processes < 1):
        raise UsageError(f"processes must be a positive whole number, but got {processes!r}.")
    if hardware is None:
        return detect_hardware(gpus=processes)
    if isinstance(hardware, (str, os.PathLike)):
        return load_hardware(hardware)
    if not isinstance(hardware, HardwareSpec):
        raise UsageError(f"hardware must be a HardwareSpec, a profile name, a YAML path or None, but got "
                         f"{type(hardware).__name__}.",
                         hint="Write the fields to a YAML file (docs/hardware.md) and pass its path, or pass "
                              "autoshard.load_hardware(...) or autoshard.detect_hardware().")
    return hardware


def default_precision(hardware: HardwareSpec) -> str:
    """``bf16-mixed`` on GPUs with bf16 tensor cores, ``16-mixed`` on older GPUs, ``32-true`` without a GPU.

    Example:
        >>> from autoshard.hardware import load_hardware
        >>> default_precision(load_hardware("dgx-h100"))
        'bf16-mixed'
    """
    if hardware.gpu is None:
        return "32-true"
    return "bf16-mixed" if hardware.gpu.peak_tflops.bf16 else "16-mixed"


def check_precision(precision: Precision, hardware: HardwareSpec) -> None:
    """Refuse bf16 on a GPU without bf16 arithmetic (V100, T4): torch runs it emulated, far slower than fp16, and
    the GPU's profile has no bf16 peak to price it with.

    Raises:
        UsageError: with the precision to use instead.
    """
    gpu = hardware.gpu
    if gpu is not None and precision.value.startswith("bf16") and not gpu.peak_tflops.bf16:
        raise UsageError(f"the {gpu.display_name} has no bf16 arithmetic: {precision.value} would run emulated, far "
                         "slower than fp16.",
                         hint="Use 16-mixed (--precision 16-mixed; precision= in fit()), the default on this GPU.")


ReduceDtype = Literal["fp32", "bf16"]
"""FSDP2's gradient reduce-scatter dtype (``float32`` and ``bfloat16`` are read as these too)."""
REDUCE_DTYPES: tuple[ReduceDtype, ...] = ("fp32", "bf16")
"""FSDP2 reduce-scatter dtypes autoshard plans (``MixedPrecisionPolicy.reduce_dtype``): fp32, autoshard's default
and torchtitan's (``training.mixed_precision_reduce: Literal["float32"] = "float32"`` in
``torchtitan/config/job_config.py``), and bf16, half the reduce-scatter's bytes, for runs that reduce in bf16."""


def parse_reduce_dtype(value: str) -> str:
    """``fp32`` or ``bf16`` (``float32`` / ``bfloat16`` accepted).

    Raises:
        UsageError: anything else.

    Example:
        >>> parse_reduce_dtype("bfloat16")
        'bf16'
    """
    key = {"float32": "fp32", "bfloat16": "bf16"}.get(str(value).strip().lower(), str(value).strip().lower())
    if key not in REDUCE_DTYPES:
        raise UsageError(f"reduce dtype must be one of {', '.join(REDUCE_DTYPES)}, but got {value!r}.")
    return key


SELF_CHECKPOINTING = ("The model checkpoints its own blocks (gradient checkpointing enabled in its code): every "
                      "candidate's step recomputes them, with or without the checkpointing in the ckpt column; turn "
                      "it off in the model to let the plan choose.")

def plan_for(
    source: str | os.PathLike[str] | ModelSource,
    hardware: HardwareSpec,
    *,
    batch_size: int | None = None,
    global_batch_size: int | None = None,
    seq_len: int | None = None,
    precision: str | Precision | None = None,
    optimizer: str = "adamw",
    goal: Goal = "pretrain",
    strategies: Sequence[str] | None = None,
    safety_margin: float = 0.10,
    progress: Callable[[int, int], None] | None = None,
    optimizer_impl: OptimizerImpl | None = None,
    float32_matmul_precision: str | None = None,
    grad_clip_norm: float | None = None,
    set_grads_to_none: bool = True,
    checkpointing: str | bool | ActivationCheckpointing | None = None,
    reduce_dtype: ReduceDtype | str | None = None,
    cache: bool = True,
    jobs: int | None = None,
    max_batch_size: int | None = None,
    before_tracing: Callable[[], None] | None = None,
) -> Plan:
    """Trace ``source`` and rank every candidate strategy on ``hardware`` (see :func:`autoshard.recommend`).

    ``precision=None`` takes :func:`default_precision` of the hardware; ``progress(done, total)`` is called after
    each tracing session. ``optimizer_impl`` names the optimizer implementation (``None``: torch's default).
    ``float32_matmul_precision`` is the run's ``torch.set_float32_matmul_precision`` (``high``/``medium``: fp32
    matmuls priced on TF32 tensor cores; ``None``: this process's once the model source is loaded, so that a model
    file setting it, or ``torch.backends.cuda.matmul.allow_tf32``, is planned as it runs, as ``fit()`` plans).
    ``grad_clip_norm``: the norm the run clips the gradients to (priced as
    a norm and a scaling pass before each optimizer step; ``None``: no clipping). ``set_grads_to_none=False``: the
    run zeroes its gradients in place between steps, so they stay allocated through forward (DDP's and FSDP2's
    memory count them).
    ``checkpointing`` (``none``, ``full``, ``op``, ``every-N``) makes every candidate use that choice; ``None``
    weighs no checkpointing against full checkpointing and, when full wins, torchtitan's op-selective policy
    against it (:mod:`autoshard.planner.selective`; its own traces, only then).
    ``reduce_dtype`` (``fp32`` or ``bf16``) sets FSDP2's gradient reduce-scatter dtype
    (``MixedPrecisionPolicy.reduce_dtype``; ``None``: fp32, as autoshard's FSDP knob defaults).
    ``cache``: read the traced step from the workload cache, and write it there after tracing
    (:mod:`autoshard.planner.workload_cache`; the directory is :func:`autoshard.cache.workloads_dir` of the
    environment); :attr:`Plan.cached_workload` says whether it was read. ``jobs``: processes tracing at once, at
    most (``None``: one per usable core; see :func:`autoshard.strategies.workload.build_workload`).
    ``max_batch_size``: the largest micro-batch to choose (``fit()``: the samples each rank's data has).
    ``before_tracing``: called once the arguments are checked, before the step is traced or read from the cache
    (``fit()`` says it is planning then, and refuses what only a trace would have come before).

    Raises:
        UsageError: contradictory or out-of-range arguments, checked before anything is traced.
        NoFeasiblePlan: nothing fits.
    """
    from autoshard.cache import workloads_dir
    from autoshard.planner.workload_cache import cached_workload
    from autoshard.profiler.checkpointable import check_checkpointable
    from autoshard.strategies import get, names

    if goal not in GOALS:
        raise UsageError(f"goal must be one of {', '.join(GOALS)}, but got {goal!r}.")
    if isinstance(safety_margin, bool) or not isinstance(safety_margin, (int, float)) or not 0 <= safety_margin < 1:
        raise UsageError(f"safety margin must be a number in [0, 1), but got {safety_margin!r}.")
    for name, value in (("batch size", batch_size), ("global batch size", global_batch_size)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise UsageError(f"{name} must be a positive integer, but got {value!r}.")
    if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1):
        raise UsageError(f"jobs must be a positive integer (processes tracing at once), but got {jobs!r}.")
    if optimizer_impl is not None:
        optimizer_impl = parse_optimizer_impl(optimizer_impl, parse_optimizer(optimizer))
    if float32_matmul_precision is not None:
        parse_float32_matmul_precision(float32_matmul_precision)  # checked before the source is loaded
    clip_norm = parse_grad_clip_norm(grad_clip_norm)
    if not isinstance(set_grads_to_none, bool):
        raise UsageError(f"set_grads_to_none must be True or False, but got {set_grads_to_none!r}.")
    choice = None if checkpointing is None else parse_checkpointing(checkpointing)
    if isinstance(strategies, str):
        raise UsageError(f"strategies must be a list of strategy names, e.g. [{strategies!r}], but got the string "
                         f"{strategies!r}.")
    if strategies is not None and not list(strategies):
        raise UsageError("--strategies names no strategy; name at least one, or leave it out to weigh them all.",
                         hint=f"The strategies: {', '.join(names())}.")
    if strategies is not None:  # each once, in the order named (a name given twice was weighed twice)
        strategies = list(dict.fromkeys(strategies))
    chosen = [get(n) for n in (strategies or names())]
    choices, mode = ((False, True), FULL) if choice is None else (traced_choices(bool(choice), chosen),
                                                                  choice if choice else FULL)
    settings = {} if reduce_dtype is None else {"reduce_dtype": parse_reduce_dtype(reduce_dtype)}
    request = PlanRequest(micro_batch_size=batch_size, global_batch_size=global_batch_size, goal=goal,
                          safety_margin=safety_margin, strategies=None if strategies is None else tuple(strategies),
                          settings=settings, max_micro_batch_size=max_batch_size,
                          checkpointing=None if choice is None else (bool(choice),))
    check_request(request, hardware.world_size)
    if precision is not None:
        check_precision(parse_precision(precision), hardware)
    loaded = load_source(source)
    import torch  # the model file is imported now: what it set is the process's

    matmul_precision = parse_float32_matmul_precision(float32_matmul_precision or torch.get_float32_matmul_precision())
    optimizer = declared_optimizer(loaded) or optimizer  # a model file's optimizer() wins: the plan names it
    check_optimizer(parse_optimizer(optimizer), chosen)
    require_optimizer(parse_optimizer(optimizer))
    if choice is not None:
        check_checkpointable(loaded, choice)
    sessions = [0, 0]  # traced before this workload, and this workload's total so far

    def counted(done: int, total: int) -> None:
        """``progress`` over every workload traced for this plan: the selective one's sessions come after."""
        sessions[1] = total
        if progress is not None:
            progress(sessions[0] + done, sessions[0] + total)

    def traced(checkpointing: tuple[bool, ...], mode: ActivationCheckpointing,
               on_miss: str | None = None) -> tuple[Workload, str | None]:
        workload, entry = cached_workload(
            loaded, directory=workloads_dir(os.environ) if cache else None,
            precision=precision or default_precision(hardware), optimizer=optimizer, seq_len=seq_len,
            target="cuda" if hardware.gpu is not None else "cpu", progress=counted,
            optimizer_impl=optimizer_impl, checkpointing=checkpointing, checkpoint_mode=mode, jobs=jobs,
            on_miss=on_miss,
        )
        sessions[0], sessions[1] = sessions[0] + sessions[1], 0
        return workload, None if entry is None else str(entry)

    if before_tracing is not None:
        before_tracing()
    workload, entry = traced(choices, mode)
    # Pricing only (the traces are the same), so it is not part of the cache key.
    workload = dataclasses.replace(workload, float32_matmul_precision=matmul_precision, grad_clip_norm=clip_norm,
                                   set_grads_to_none=set_grads_to_none)
    planned = dataclasses.replace(plan(workload, hardware, request, chosen), cached_workload=entry)
    if choice is None:  # a cached step whose plan now checkpoints traced op-selective for 47 s without a word
        missed = None if entry is None else (
            "this plan checkpoints activations, so selective checkpointing is weighed too; its step is not in the "
            "workload cache yet and is traced now (later plans read it).")
        planned = weigh_selective(planned, lambda selective: traced((True,), selective, missed), chosen)
    lines = scope_lines(loaded, hardware.world_size, workload.seq_len)
    if workload.checkpoints_itself:
        lines.append(SELF_CHECKPOINTING)
    uncounted = uncounted_line(workload.uncounted_ops)
    if uncounted:
        lines.append(uncounted)
    return dataclasses.replace(planned, explanation=(*planned.explanation, *lines)) if lines else planned


def traced_choices(checkpointed: bool, strategies: Sequence[Strategy]) -> tuple[bool, ...]:
    """The checkpointing choices to trace when the user named one (``checkpointed``: a mode that recomputes).

    FSDP2's memory under checkpointing reads what a block holds while it is recomputed from the trace without
    checkpointing (:class:`~autoshard.strategies.fsdp.memory.StepActivations`), so with an FSDP candidate that
    trace is taken too; for ``full`` the workload is the one planned without a named choice, and its cache entry
    is shared. The plan still weighs the named choice alone (:attr:`PlanRequest.checkpointing`).

    Example:
        >>> from autoshard.strategies import get
        >>> fsdp, ddp = [get("fsdp"), get("ddp")], [get("ddp")]
        >>> traced_choices(True, fsdp), traced_choices(True, ddp), traced_choices(False, fsdp)
        ((False, True), (True,), (False,))
    """
    if checkpointed and any(s.traits.family == "fsdp" for s in strategies):
        return (False, True)
    return (checkpointed,)
