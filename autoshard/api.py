"""The public functions, kept apart from ``__init__`` so the package imports cheaply."""

from __future__ import annotations

import contextlib
import dataclasses
import os
from typing import TYPE_CHECKING

from autoshard.errors import HARDWARE_ARGUMENTS, PLANNER_ARGUMENTS, UsageError, in_arguments, rewording
from autoshard.models import ModelSource, load_source
from autoshard.profiler.checkpointing import parse_checkpointing
from autoshard.profiler.options import OWN_KERNEL_OPTIMIZERS, OptimizerImpl, Precision, PrecisionName, ProfileOptions
from autoshard.profiler.result import ModelProfile

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from autoshard.hardware.specs import HardwareSpec
    from autoshard.planner.machine import Goal, ReduceDtype
    from autoshard.planner.plan import Plan
    from autoshard.strategies.base import StrategyName


def _check_source(source: object, function: str) -> None:
    """``source`` is something :func:`load_source` takes; a module instance gets a hint, not a ``TypeError``."""
    if isinstance(source, (str, os.PathLike, ModelSource)):
        return
    from torch import nn

    if isinstance(source, nn.Module):
        raise UsageError(f"{function}() takes a model source, not a built {type(source).__name__} module: it builds "
                         "the model itself, without allocating it.",
                         hint="Pass a model.py path (docs/models.md), a config.json path or a catalog name, or a "
                              "ModelSource whose build_fn makes the module.")
    raise UsageError(f"{function}() takes a model.py path, a config.json path, a catalog name or a ModelSource, "
                     f"but got {type(source).__name__}.")


@in_arguments(PLANNER_ARGUMENTS)
def profile(
    source: str | os.PathLike[str] | ModelSource,
    *,
    batch_size: int = 1,
    seq_len: int | None = None,
    precision: PrecisionName | Precision = Precision.BF16_MIXED,
    optimizer: str = "adamw",
    activation_checkpointing: bool | str = False,
    grad_accumulation: int = 1,
    target: str = "cuda",
    extrapolate: bool | None = None,
    optimizer_impl: OptimizerImpl | None = None,
    reserved: bool = False,
    set_grads_to_none: bool = True,
) -> ModelProfile:
    """Profile one training step of a model on one device holding the whole model, without allocating it.

    Args:
        source: a ``model.py`` path, a Hugging Face ``config.json`` path, a catalog name, or a loaded source.
        batch_size: micro-batch size (default 1, as ``autoshard profile``'s).
        seq_len: sequence length for token models (default: the model's own).
        precision: ``"32-true"``, ``"16-mixed"``, ``"bf16-mixed"`` (default) or ``"bf16-true"``.
        optimizer: ``"adamw"`` (default), ``"adam"``, ``"sgd"``, ``"adafactor"`` or ``"adamw8bit"``
            (bitsandbytes' ``AdamW8bit``, which needs bitsandbytes >= 0.47); ignored when the model file defines
            ``optimizer(params)``.
        activation_checkpointing: what to recompute in backward: ``False`` / ``"none"``, ``True`` / ``"full"``
            (every repeated block), ``"every-N"`` (every N-th block) or ``"op"`` (torchtitan's op-selective
            policy in every block); the trace runs the real checkpoint wrappers, so memory and recomputed FLOPs
            are measured.
        grad_accumulation: micro-batches per optimizer step.
        target: ``"cuda"`` (default) answers for a CUDA GPU; ``"cpu"`` for a CPU run.
        extrapolate: trace fewer repeated blocks and extrapolate linearly (``None``: automatically for deep
            catalog / HF models, where this is exact — see ``docs/profile.md``).
        optimizer_impl: ``"foreach"``, ``"for-loop"`` or ``"fused"``: how the optimizer steps, which sets the
            optimizer step's temporaries (``None``: torch's default on ``target``, foreach on CUDA).
        reserved: also predict ``torch.cuda.max_memory_reserved`` (``target="cuda"`` only): the model is traced
            whole once more and the step's allocations replayed through the CUDA caching allocator's rules
            (:mod:`autoshard.profiler.cuda_reserve`); the result's ``reserved``, and its ``reserve_bytes`` and
            ``device_total_bytes`` then include fragmentation.
        set_grads_to_none: ``zero_grad(set_to_none=True)`` between steps (torch >= 2.0's default); ``False``
            keeps the gradients allocated, zeroed, through the next forward (``set_to_none=False``, and
            ``Module.zero_grad()`` before torch 2.0), which raises the peak by up to the gradients' size.

    Returns:
        A frozen, JSON-serialisable :class:`ModelProfile`.

    Raises:
        UsageError: ``source`` is not a model source (e.g. a built ``nn.Module``), or out-of-range options.
        AutoshardError: bad input (see :mod:`autoshard.errors`).

    Example:
        >>> import autoshard
        >>> p = autoshard.profile("tiny-gpt2", batch_size=2, seq_len=64)
        >>> p.peak_bytes > p.parameter_bytes
        True
    """
    from autoshard.models.scope import scope_lines
    from autoshard.profiler.checkpointable import check_checkpointable
    from autoshard.profiler.optimizers import declared_optimizer, require_optimizer
    from autoshard.profiler.scaling import profile_source

    _check_source(source, "profile")
    if reserved and target != "cuda":
        raise UsageError(f"reserved=True predicts the CUDA caching allocator's reserve: it needs target='cuda', "
                         f"but got {target=}.")
    options = ProfileOptions(
        batch_size=batch_size,
        seq_len=seq_len,
        precision=precision,  # type: ignore[arg-type]  # ProfileOptions.__post_init__ parses a name
        optimizer=optimizer,
        checkpointing=parse_checkpointing(activation_checkpointing),
        grad_accumulation=grad_accumulation,
        target=target,
        optimizer_impl=optimizer_impl,
        set_grads_to_none=set_grads_to_none,
    )
    loaded = load_source(source)
    declared = declared_optimizer(loaded)  # a model file's optimizer() wins: what is traced is named
    if declared is not None and declared != options.optimizer:
        options = dataclasses.replace(options, optimizer=declared, optimizer_impl=None if declared in
                                      OWN_KERNEL_OPTIMIZERS else options.optimizer_impl)
    require_optimizer(options.optimizer)
    check_checkpointable(loaded, parse_checkpointing(options.checkpointing))
    result = profile_source(loaded, options, extrapolate=extrapolate)
    result = dataclasses.replace(result, scope=tuple(scope_lines(loaded, seq_len=result.seq_len)))
    if reserved:
        from autoshard.profiler.cuda_reserve import trace_reserved

        result = dataclasses.replace(result, reserved=trace_reserved(loaded, options))
    return result


def _plan_for_python(plan: Plan) -> Plan:
    """``plan`` with its text naming :func:`recommend`'s and :func:`load_hardware`'s arguments, not the command
    line's flags: what :func:`recommend` returns to a Python caller."""
    return plan.reworded(rewording(PLANNER_ARGUMENTS), rewording(HARDWARE_ARGUMENTS))


@in_arguments(PLANNER_ARGUMENTS, result=_plan_for_python)
def recommend(
    source: str | os.PathLike[str] | ModelSource,
    *,
    hardware: HardwareSpec | str | None = None,
    batch_size: int | None = None,
    global_batch_size: int | None = None,
    seq_len: int | None = None,
    precision: PrecisionName | Precision | None = None,
    optimizer: str = "adamw",
    goal: Goal = "pretrain",
    strategies: Sequence[StrategyName] | None = None,
    safety_margin: float = 0.10,
    progress: Callable[[int, int], None] | bool | None = None,
    optimizer_impl: OptimizerImpl | None = None,
    activation_checkpointing: str | bool | None = None,
    reduce_dtype: ReduceDtype | None = None,
    cache: bool = True,
    jobs: int | None = None,
    float32_matmul_precision: str | None = None,
    grad_clip_norm: float | None = None,
    set_grads_to_none: bool = True,
) -> Plan:
    """Recommend how to train ``source`` on ``hardware``: every candidate strategy with its numbers and reasons.

    Args:
        source: a ``model.py`` path, a Hugging Face ``config.json`` path, a catalog name, or a loaded source.
        hardware: a :class:`HardwareSpec`, a profile name or YAML path, or ``None`` to detect this machine.
        batch_size: fixed micro-batch per device; ``None`` picks the largest that fits.
        global_batch_size: samples per optimizer step across all devices (sets gradient accumulation).
        seq_len: sequence length for token models.
        precision: training precision (default ``bf16-mixed``, or ``16-mixed`` on a GPU without bf16 such as V100
            and T4, ``32-true`` without a GPU).
        optimizer: ``adamw`` (default), ``adam``, ``sgd``, ``adafactor`` or ``adamw8bit`` (bitsandbytes'
            ``AdamW8bit``: ddp and DeepSpeed ZeRO without offload can step it, FSDP2 cannot).
        goal: ``pretrain`` (throughput, least communication) or ``finetune`` (memory headroom).
        strategies: restrict to these strategy names.
        safety_margin: fraction of device memory kept free (CUDA context, fragmentation, model error).
        progress: called as ``progress(done, total)`` after each of the model's tracing sessions (one per
            precision mode and checkpointing choice; 10-60 s in all for a large model), e.g. to show a progress bar;
            ``True``: the command line's bar on standard error, where that is a terminal.
        optimizer_impl: ``"foreach"``, ``"for-loop"`` or ``"fused"`` (``None``: torch's default, foreach on
            CUDA). DeepSpeed's optimizer offload steps its own CPU Adam whatever this says.
        activation_checkpointing: ``"none"``, ``"full"``, ``"every-N"`` or ``"op"``: every candidate uses it. ``None``
            (default) weighs no checkpointing against full checkpointing and, when full wins, op-selective against
            full (:mod:`autoshard.planner.selective`: its own traces, only then).
        reduce_dtype: FSDP2's gradient reduce-scatter dtype, ``"fp32"`` (default) or ``"bf16"``
            (``MixedPrecisionPolicy.reduce_dtype``); other strategies have no such setting.
        cache: reuse the model's traced step from the workload cache when it holds one for the same model and
            options (any hardware), and keep it there after tracing (``~/.cache/autoshard/workloads``, see
            :mod:`autoshard.cache`); ``False`` neither reads nor writes it. :attr:`Plan.cached_workload` names the
            entry used.
        jobs: processes tracing the model at once, at most (``None``: one per CPU core this process may use).
            Tracing sessions run in forked processes on Linux when this process runs no other thread and has
            not initialised CUDA, else one after the other; the plan is the same either way.
        float32_matmul_precision: the run's ``torch.set_float32_matmul_precision``: ``"highest"`` (torch's default)
            prices fp32 matmuls at the fp32 rate; ``"high"`` or ``"medium"`` on TF32 tensor cores, where the
            GPU has them (fp32 convolutions use TF32 either way: cuDNN's default). ``None`` (default): this
            process's, once the model source is loaded (a model file or a script that sets it, or
            ``torch.backends.cuda.matmul.allow_tf32 = True``, is planned as it runs; ``fit()`` plans so too).
        grad_clip_norm: the norm the run clips the gradients' global 2-norm to before each optimizer step
            (``None``, default: no clipping). Priced as a norm and a scaling pass over each rank's gradients, and
            written into the exported configs (DeepSpeed's ``gradient_clipping``, the HF Trainer's
            ``--max_grad_norm``, Lightning's ``gradient_clip_val``) and the plan, which ``fit()`` and the launch
            scripts train with.
        set_grads_to_none: the run frees its gradients between steps (``zero_grad(set_to_none=True)``, torch >=
            2.0's default and ``fit()``'s); ``False``: it zeroes them in place (``set_to_none=False``, or
            ``Module.zero_grad()`` before torch 2.0), so DDP's and FSDP2's replicated or sharded gradients stay
            allocated through the next forward, which the plan's memory then counts.

    Returns:
        The :class:`~autoshard.planner.plan.Plan`.

    Raises:
        UsageError: contradictory or out-of-range arguments, or a source or hardware of the wrong kind.
        NoFeasiblePlan: nothing fits (exit code 3 in the CLI).
    """
    from autoshard.planner.machine import hardware_for, plan_for

    _check_source(source, "recommend")
    if progress is not None and not isinstance(progress, bool) and not callable(progress):
        raise UsageError(f"progress= takes a function progress(done, total), True or False, not "
                         f"{type(progress).__name__}.")
    with contextlib.ExitStack() as stack:
        if isinstance(progress, bool):
            from autoshard._progress import tracing_progress

            progress = stack.enter_context(tracing_progress(enabled=progress))
        return plan_for(source, hardware_for(hardware), batch_size=batch_size, global_batch_size=global_batch_size,
                        seq_len=seq_len, precision=precision, optimizer=optimizer, goal=goal, strategies=strategies,
                        safety_margin=safety_margin, progress=progress, optimizer_impl=optimizer_impl,
                        checkpointing=activation_checkpointing, reduce_dtype=reduce_dtype, cache=cache,
                        jobs=jobs, float32_matmul_precision=float32_matmul_precision,
                        grad_clip_norm=grad_clip_norm, set_grads_to_none=set_grads_to_none)
