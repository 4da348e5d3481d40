"""Turning ``fit()``'s ``plan`` argument into the :class:`ExportedPlan` every rank trains with.

``plan="auto"`` plans here (rank 0 only; the others receive it), a :class:`~autoshard.planner.plan.Plan` is
exported, and a ``plan.json`` path is read and checked against the model and the run by fingerprint.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.utils.data import IterableDataset

from autoshard.errors import PLANNER_ARGUMENTS, UsageError, UserCodeError, reworded
from autoshard.hardware.environment import launch_environment
from autoshard.models.scope import scope_lines
from autoshard.models.source import ModelSource, batch_token_length
from autoshard.models.step import defaulted_bindings, unused_keys
from autoshard.planner.caveats import RENORMED, WRITTEN
from autoshard.planner.plan_file import (
    ExportedPlan,
    ModelFingerprint,
    from_plan,
    layout_hash,
    read,
)
from autoshard.profiler.checkpointing import ActivationCheckpointing
from autoshard.profiler.options import OptimizerImpl, parse_precision
from autoshard.runtime import plan_checks
from autoshard.runtime.data import as_samples, fixed_batch_size, loader_batch_size, peek
from autoshard.runtime.data_checks import (
    batched_as_it_comes,
    check_batch_fits_data,
    check_global_batch,
    check_loader_fits_ranks,
    samples_per_rank,
    size_as_it_comes,
)
from autoshard.runtime.module_source import module_source
from autoshard.runtime.optimizer_choice import able_strategies, check_optimizer, optimizer_name
from autoshard.runtime.plan_checks import RunShape, check, check_arguments, check_cuda_devices
from autoshard.runtime.precision import for_module
from autoshard.strategies.workload import parameter_layout

if TYPE_CHECKING:
    from autoshard.runtime.train import TrainJob


CPU_EXAMPLE_BATCH = 8
"""The largest micro-batch ``fit()`` plans on a CPU for a model source's own example batches (no ``data``, no
``batch_size=``): the planner's choice is the largest that fits memory, which on a CPU's host memory was 1,024
samples of tiny-gpt2 (12 s a step) and 333 of the example GPT (over 5 minutes a step), where per-sample speed
does not grow with the batch."""

def model_fingerprint(module: nn.Module, name: str) -> ModelFingerprint:
    """The fingerprint a plan for ``module`` carries (works on real, meta and fake modules)."""
    numels, blocks, block_counts = parameter_layout(module)
    unique = {id(p): p.numel() for p in module.parameters()}
    return ModelFingerprint(name=name, parameter_count=sum(unique.values()),
                            block_class=None if blocks is None else ",".join(blocks.class_names),
                            layout_hash=layout_hash(numels, block_counts))


def load_plan(plan: Any) -> tuple[ExportedPlan, str] | None:
    """An explicit plan as ``(exported, where it came from)``; ``None`` for ``"auto"``.

    Raises:
        UsageError: neither ``"auto"``, a Plan, an ExportedPlan, nor a readable ``plan.json``.
    """
    from autoshard.planner.plan import Plan

    if isinstance(plan, str) and plan == "auto":
        return None
    if isinstance(plan, ExportedPlan):
        return plan, "the given plan"
    if isinstance(plan, Plan):
        return from_plan(plan), "the given plan"
    if isinstance(plan, (str, os.PathLike)):
        path = Path(plan)
        if path.is_dir():
            path = path / "plan.json"
        from autoshard.strategies import names

        if isinstance(plan, str) and plan in names() and not path.exists():  # a strategy, not a file
            raise UsageError(f"plan={plan!r} names a strategy, and plan= takes 'auto', a Plan or a plan.json path.",
                             hint=f"Pass strategy={plan!r} to plan with that strategy.")
        return read(path), str(path)
    raise UsageError(f"plan must be 'auto', a Plan, or a plan.json path, but got {type(plan).__name__}.")


# -- fit()'s plan argument resolved ---------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class PlanOptions:
    """fit()'s arguments that choose the plan."""

    plan: Any
    strategy: str | None
    hardware: Any
    processes: int | None
    precision: str | None
    batch_size: int | None
    seq_len: int | None
    force: bool
    global_batch_size: int | None = None
    optimizer_impl: OptimizerImpl | None = None
    checkpointing: ActivationCheckpointing | None = None
    reduce_dtype: str | None = None
    cache: bool = True
    progress: bool = False
    """Say that planning starts (tracing a step takes from seconds to minutes)."""
    before_tracing: Callable[[], None] | None = None
    """Called before a plan for several ranks this process will start is traced: what it raises (workers cannot be
    started from a notebook) is said before minutes of tracing, not after."""


def resolve(job: TrainJob, options: PlanOptions, *, world_size: int | None
            ) -> tuple[ExportedPlan, list[str], TrainJob]:
    """The plan to train with, notes on what was decided, and the job (its data may have been peeked at)."""
    explicit = load_plan(options.plan)
    notes = list(job.notes)
    if explicit is None:
        exported, job = _auto(job, options, notes, launched=world_size is not None)
        return exported, notes, job
    exported, where = explicit
    check_arguments(exported, options, where)  # before the model is built for its fingerprint
    # Launched: the launcher's world. Otherwise fit() starts the plan's world unless processes= says otherwise.
    ranks = world_size or options.processes or exported.hardware.world_size
    # GPU model names from NVML and from profiles are spelled differently: world size and device type rule.
    launched = launch_environment(os.environ) if world_size is not None else None  # the edge: torchrun's variables
    layout = None if launched is None or launched.processes_per_node is None else (
        launched.nodes, launched.processes_per_node)
    run = RunShape(world_size=ranks, device_type="cuda" if torch.cuda.is_available() else "cpu", gpu=None,
                   layout=layout)
    for difference in check(exported, _fingerprint(job), run, source=where, force=options.force):
        notes.append(f"force=True: trained although {difference}.")
    if world_size is None:
        plan_checks.check_plan_devices(exported, where)  # fit() starts a process per GPU here
    if job.module is not None and (samples := plan_checks.single_samples(job.data, exported.micro_batch_size)):
        job = replace(job, data=samples)
        notes.append(f"data is a list of single samples (each a few 1-D tensors): it is batched like a Dataset, at "
                     f"the plan's micro-batch {exported.micro_batch_size}.")
    _check_plan_data(job, exported, ranks, where, force=options.force, notes=notes)
    plan_checks.check_global_batch(options.global_batch_size, exported, ranks, where)
    check_optimizer(job, exported)
    if job.source is None and job.module is not None:
        notes.extend(note for note in [for_module(job.module, exported.precision, planned=True)[1]] if note)
    return _with_overrides(exported, options, notes), notes, job


def _check_plan_data(job: TrainJob, exported: ExportedPlan, ranks: int, where: str, *, force: bool,
                     notes: list[str]) -> None:
    """The data batches as the plan was made (a DataLoader's batch size: ``force`` lets another through, noted)
    and gives every rank a whole micro-batch.

    Raises:
        UsageError: it does not.
    """
    loader = loader_batch_size(job.data)
    rows = loader if loader is not None else (
        fixed_batch_size(job.data) if isinstance(job.data, (list, tuple)) else None)
    micro = exported.micro_batch_size
    if rows is not None and rows != micro:
        what, fix, trained = (
            ("the DataLoader batches", f"Build the DataLoader with batch_size={micro}, pass its Dataset",
             f"at the DataLoader's {rows} samples per batch") if loader is not None else
            ("the first batch of the list given as data holds", f"Batch the list at {micro}, pass the samples as a "
             "Dataset", f"on the list's batches of {rows} samples"))
        if not force:
            raise UsageError(f"{what} {rows} samples, and the plan ({where}) was made for micro-batch {micro}: its "
                             "memory and speed are not those of this run.",
                             hint=f"{fix} (autoshard batches it at the plan's micro-batch), or force=True.")
        notes.append(f"force=True: trained {trained} although the plan was made for micro-batch {micro}.")
    check_loader_fits_ranks(job.data, ranks)
    if loader is None:
        check_batch_fits_data(exported.micro_batch_size, samples_per_rank(job.data, ranks), plan=where)


def _with_overrides(exported: ExportedPlan, options: PlanOptions, notes: list[str]) -> ExportedPlan:
    """A given plan with what ``fit()``'s arguments replace: the optimizer implementation, activation
    checkpointing (noted) and FSDP2's reduce dtype."""
    if options.optimizer_impl is not None and options.optimizer_impl != exported.optimizer_impl:
        exported = replace(exported, optimizer_impl=options.optimizer_impl)
    if options.checkpointing is not None and options.checkpointing != exported.checkpointing_choice:
        exported = replace(exported, activation_checkpointing=bool(options.checkpointing),
                           checkpointing=str(options.checkpointing) if options.checkpointing else None)
        notes.append(f"Trained with {options.checkpointing.label}, as asked, in place of the plan's.")
    if options.reduce_dtype is not None and "reduce_dtype" in exported.settings:
        exported = replace(exported, settings={**exported.settings, "reduce_dtype": options.reduce_dtype})
    return exported


def _auto(job: TrainJob, options: PlanOptions, notes: list[str], *, launched: bool
          ) -> tuple[ExportedPlan, TrainJob]:
    from autoshard.planner.machine import default_precision, hardware_for, plan_for
    from autoshard.runtime.train import returned_loss

    loader = loader_batch_size(job.data)
    if options.batch_size is not None and loader is not None and options.batch_size != loader:
        raise UsageError(f"batch_size={options.batch_size}, and the DataLoader batches {loader} samples: fit() "
                         "trains on the DataLoader's batches as they come.",
                         hint="Pass one of them: the DataLoader's batch size is the micro-batch when batch_size is "
                              "not given; or pass its Dataset, which autoshard batches at batch_size.")
    hw = hardware_for(options.hardware, processes=options.processes)
    check_cuda_devices(hw, options.hardware, launched=launched)  # before tracing, and a worker for each GPU
    # Named as the plan names it (fit(precision="fp16") planned 16-mixed, and its note said "fp16").
    precision = parse_precision(options.precision).value if options.precision else None
    if job.source is None and job.module is not None:  # a bf16 module trains as bf16-true; fp16 is refused
        precision, dtype_note = for_module(job.module, precision)
        notes.extend([dtype_note] if dtype_note else [])
    precision = precision or default_precision(hw)
    source = job.source
    if source is not None and source.loss_fn is None and job.loss_fn is None and job.training_step is None:
        source = replace(source, loss_fn=returned_loss)  # traced as it trains: an output with no loss is refused
    example = None
    if source is None:
        if job.data is None:
            raise UsageError("fit(module) with no data has nothing to train on.",
                             hint="Pass data=, or a model source (a model.py / catalog name) whose batch() is used.")
        example, data = peek(job.data)
        job = replace(job, data=data)  # a generator's first batch was put back in front
    batch_size = options.batch_size or fixed_batch_size(job.data)
    if example is not None and batched_as_it_comes(job.data):
        batch_size = size_as_it_comes(job.data, example, options.batch_size, notes) or batch_size
    per_rank = samples_per_rank(job.data, hw.world_size)
    check_batch_fits_data(options.batch_size, per_rank)
    synthetic_on_cpu = hw.gpu is None and job.data is None and options.batch_size is None
    if synthetic_on_cpu:  # the largest that fits host memory: 1,024 samples, 12 s a step for tiny-gpt2
        per_rank = CPU_EXAMPLE_BATCH
    check_loader_fits_ranks(job.data, hw.world_size)
    # A list's first element may be a batch or one sample: only a batch's first dimension is a micro-batch.
    maybe_samples = (options.batch_size is None and job.source is None and job.module is not None
                     and as_samples(job.data) is not None)
    check_global_batch(options.global_batch_size, hw.world_size, None if maybe_samples else batch_size, job.data,
                       epochs=job.epoch_limit)
    bound_note: str | None = None  # how a tuple batch binds to a forward whose arguments all have defaults
    if source is None:
        source = module_source(job.module, example, loss_fn=job.loss_fn,  # type: ignore[arg-type]
                                        training_step=job.training_step)
        unused = [] if job.training_step is not None else unused_keys(job.module, example)  # type: ignore[arg-type]
        if unused:
            notes.append(f"The batches' {', '.join(unused)} reach the loss only: {type(job.module).__name__}.forward "
                         "does not take them (as the Hugging Face Trainer drops unused columns).")
        defaulted = [] if job.training_step is not None else defaulted_bindings(job.module,  # type: ignore[arg-type]
                                                                                example)
        if len(defaulted) > 1:
            bound = ", ".join(f"{name}=batch[{i}]" for i, name in enumerate(defaulted))
            bound_note = (f"Each batch is a tuple of {len(defaulted)} and {type(job.module).__name__}.forward "
                          f"requires none of the arguments they fill, so all of them go in by position: {bound}. If "
                          "one is the targets, pass dict batches naming each (e.g. {'input_ids': ..., 'labels': "
                          "...}), or training_step=.")
            notes.append(bound_note)
    strategies = able_strategies(job.optimizer, options.strategy, notes)

    def planned(source: ModelSource, global_batch: int | None = options.global_batch_size) -> Any:
        # Priced as this process runs fp32 matmuls (torch.set_float32_matmul_precision, set by the user's script).
        # Its errors name recommend's flags; fit() (errors.in_arguments) rewrites them as its own arguments.
        return plan_for(source, hw, batch_size=batch_size, global_batch_size=global_batch,
                        seq_len=options.seq_len, precision=precision,
                        optimizer=optimizer_name(job.optimizer) or "adamw",
                        optimizer_impl=options.optimizer_impl, checkpointing=options.checkpointing,
                        reduce_dtype=options.reduce_dtype,
                        float32_matmul_precision=torch.get_float32_matmul_precision(),
                        grad_clip_norm=job.grad_clip_norm, strategies=strategies, cache=options.cache,
                        max_batch_size=per_rank, before_tracing=starting)

    said: list[bool] = []
    name = source.name

    def starting() -> None:
        """Once the planner's checks have passed, before the trace: whether the workers can be started, then that
        planning starts (a refusal of the optimizer or the batch keeps coming first)."""
        if said:
            return
        said.append(True)
        if options.before_tracing is not None and not launched and hw.world_size > 1:
            options.before_tracing()
        if options.progress:
            from autoshard.runtime.progress import say

            say(f"planning {name} for {hw.world_size} {hw.gpu.name if hw.gpu else 'cpu'} rank(s) (tracing "
                "a training step on fake tensors)")

    clash: UsageError | None = None  # the global batch against a list's first dimension, read as batches
    try:  # a clash stands if the first element runs as a batch; else the list is of samples (below)
        if maybe_samples:
            try:
                check_global_batch(options.global_batch_size, hw.world_size, batch_size, job.data,
                                   epochs=job.epoch_limit)
            except UsageError as e:
                clash = e
                planned(source, None)
                raise
        plan = planned(source)
        _check_list_batches(job.data, options.batch_size)
    except UserCodeError as first:
        # A list given as data is read as a list of batches. If its first element fails as a batch and works as
        # a batch of one sample, the list holds single samples (a Hugging Face-style list of dicts): use it as
        # a dataset, batched at the planned micro-batch.
        samples = as_samples(job.data) if job.module is not None and job.source is None else None
        if samples is None and isinstance(job.data, IterableDataset):
            batching = ("An IterableDataset is trained on as it yields: if it yields single samples, batch them with "
                        "DataLoader(dataset, batch_size=...).")
            raise UserCodeError(first.message, hint=f"{first.hint or ''} {batching}".strip(),
                                location=first.location) from first
        if samples is None and bound_note is not None:  # the loss met what forward did not take: say how it was fed
            raise UserCodeError(first.message, hint=f"{first.hint or ''} {bound_note}".strip(),
                                location=first.location) from first
        if samples is None:
            raise
        from torch.utils.data import default_collate

        example = default_collate([samples[0]])
        source = module_source(job.module, example, loss_fn=job.loss_fn,  # type: ignore[arg-type]
                               training_step=job.training_step)
        # A sample's first dimension is not a batch size (a token sequence's length, a feature vector's width):
        # the micro-batch is the planner's choice, at most each rank's share of the samples, or batch_size=.
        batch_size = options.batch_size
        per_rank = samples_per_rank(samples, hw.world_size)
        try:  # read as samples, the list must make whole batches too; else what it did as batches is the answer
            check_batch_fits_data(options.batch_size, per_rank)
            check_global_batch(options.global_batch_size, hw.world_size, batch_size, samples,
                               epochs=job.epoch_limit)
            plan = planned(source)
        except (UserCodeError, UsageError):  # a batch_size= larger than the list's samples was said instead, after
            raise (clash or first) from None  # the trace's traceback (a GNN probe)
        job = replace(job, data=samples)
        why = (f"read as batches, {clash.message.rstrip('.')}" if clash is not None else
               "the first did not run through the model as a batch, and ran as a batch of one sample")
        notes.append(f"data is a list whose elements are single samples ({why}): it is batched like a Dataset. "
                     "Pass a DataLoader to batch it yourself, or a list of batches.")
    exported = from_plan(plan)
    fed = None if example is None else _fed(job, example)  # what the forward gets of the data's first batch
    if exported.seq_len is None and fed is not None and (length := batch_token_length(fed)):
        exported = replace(exported, seq_len=length)  # planned on the data's first batch: its sequences' length
    if fed is not None and (cast := _float_targets_cast(exported, fed)):
        notes.append(cast)
    # what the plan's figures leave out or assume about the model, as recommend and profile say it
    notes.extend(reworded(line, PLANNER_ARGUMENTS) for line in scope_lines(source, hw.world_size, exported.seq_len))
    if plan.workload.checkpoints_itself:  # recommend says so in its explanation; fit() had no word of it
        notes.append(f"{source.name} checkpoints its own blocks (gradient checkpointing enabled in its code, e.g. "
                     "gradient_checkpointing_enable()): every step recomputes them whatever activation_checkpointing "
                     "says, and the plan's memory and time count that.")
    # what the plan trains differently from the optimizer named (recommend's explanation says it too)
    notes.extend(line for line in plan.explanation if line.startswith(("Adafactor under ZeRO",
                                                                       "Unused parameters under ZeRO", RENORMED,
                                                                       WRITTEN)))
    if plan.cached_workload is not None:
        notes.append(f"Planned from the traced step cached in {plan.cached_workload} (cache=False traces again).")
    accumulating = (f" × {exported.gradient_accumulation} accumulated (global batch "
                    f"{exported.micro_batch_size * exported.gradient_accumulation * hw.world_size})"
                    if exported.gradient_accumulation > 1 else "")
    notes.append(f"Planned {exported.strategy} for {hw.world_size} rank(s), micro-batch "
                 f"{exported.micro_batch_size}{accumulating}, {precision}.")
    if synthetic_on_cpu:
        notes.append(f"Micro-batch {exported.micro_batch_size}: on a CPU, the model source's example batches are "
                     f"planned at {CPU_EXAMPLE_BATCH} samples at most (a larger batch trains no faster per sample "
                     "there, and its steps take long); pass batch_size= to choose.")
    if batch_size is None and job.data is not None:
        capped = " (each rank's whole share of the data)" if exported.micro_batch_size == per_rank else ""
        notes.append(f"Micro-batch {exported.micro_batch_size} is the planner's choice{capped}: the fastest that fits "
                     "memory. The batch size also changes what training learns: pass batch_size= (or a DataLoader) "
                     "to choose it, global_batch_size= to accumulate.")
    return exported, job


def _check_list_batches(data: Any, batch_size: int | None) -> None:
    """A list of batches (its first element trained as a batch) trains at its own batches' size.

    Checked once the first element has traced as a batch: before, a list of single samples whose first element
    also has a first dimension (a token sequence) could not be told from it.

    Raises:
        UsageError: ``batch_size=`` says otherwise.
    """
    rows = fixed_batch_size(data) if isinstance(data, (list, tuple)) else None
    if batch_size is not None and rows is not None and rows != batch_size:
        raise UsageError(f"batch_size={batch_size}, and the first batch of the list given as data holds {rows} "
                         "samples: fit() trains on a list's batches as they are.",
                         hint="Drop batch_size= (the batches' own size is the micro-batch), pass the samples as a "
                              f"Dataset (autoshard batches it at batch_size), or batch the list at {batch_size}.")


def _fingerprint(job: TrainJob) -> ModelFingerprint:
    if job.module is not None:
        return model_fingerprint(job.module, type(job.module).__name__)
    source = job.source
    if source is None:
        raise ValueError("TrainJob needs a module or a source")
    with torch.device("meta"):
        return model_fingerprint(source.build(), source.name)


def _fed(job: TrainJob, example: Any) -> Any:
    """What the forward gets of a batch of the data (a module's targets left out: their classes are not tokens)."""
    if job.module is None:
        return example
    from autoshard.models.step import step_functions

    return step_functions(job.module, loss_fn=job.loss_fn, training_step=job.training_step).fed(example)


_TARGET_KEYS = ("labels", "label", "targets", "target", "y", "scores", "weights", "sample_weight")
"""Keys of a dictionary batch that hold what a loss inside ``forward`` compares with (Hugging Face's ``labels``)."""


def _float_targets_cast(plan: ExportedPlan, fed: Any) -> str | None:
    """A note when floating targets that ``forward`` takes reach it in 16 bits: FSDP2's mixed precision casts every
    floating input of the root forward to ``param_dtype`` (``cast_forward_inputs=True``) and DeepSpeed's engine
    casts them to its dtype, so regression labels near 1000 lose all but 8 significant bits (a probe's BERT
    regression stood at one loss for every step under FSDP2, where DDP's moved)."""
    from collections.abc import Mapping

    if plan.family == "ddp" or plan.precision == "32-true" or not isinstance(fed, Mapping):
        return None
    floats = [k for k in _TARGET_KEYS if isinstance(fed.get(k), torch.Tensor) and fed[k].is_floating_point()
              and fed[k].dtype == torch.float32]
    if not floats:
        return None
    half = "fp16" if plan.precision == "16-mixed" else "bf16"
    return (f"The batch's {', '.join(floats)} (fp32) go into forward, and {plan.strategy} at {plan.precision} casts "
            f"every floating input of forward to {half}: a loss computed inside forward compares {half} targets "
            f"({'11' if half == 'fp16' else '8'} significant bits). Keep them out of forward's inputs and compute "
            "the loss with loss_fn, or train with ddp or at 32-true (docs/fit.md: float targets).")
