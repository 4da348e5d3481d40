"""Training in this process, once the run's plan is known and the process group joined."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

from autoshard.errors import UsageError, UserCodeError
from autoshard.models.source import ModelSource, call_model
from autoshard.models.step import StepFunctions, output_loss, step_functions
from autoshard.planner.plan_file import ExportedPlan
from autoshard.profiler.blocks import find_repeated_blocks
from autoshard.runtime import backends, checkpoint, data_notes, loop
from autoshard.runtime.activation_checkpointing import restore_blocks
from autoshard.runtime.backends import ModelInit
from autoshard.runtime.callbacks import listeners
from autoshard.runtime.checkpoint import Position
from autoshard.runtime.data import DataFeed
from autoshard.runtime.distributed import RunContext
from autoshard.runtime.evaluation import Evaluator
from autoshard.runtime.progress import Reporter
from autoshard.runtime.result import FitResult


@dataclass(frozen=True, kw_only=True)
class TrainJob:
    """Everything :func:`train` needs besides the plan and the process group."""

    module: nn.Module | None
    source: ModelSource | None
    data: Any
    loss_fn: Callable[[Any, Any], torch.Tensor] | None
    optimizer: Any
    max_steps: int | None
    epochs: int | None
    seed: int
    checkpoint_dir: Path | None
    checkpoint_every: int | None
    resume: bool | Path
    consolidate: bool
    log_every: int
    grad_clip_norm: float | None = None
    lr_scheduler: Callable[[torch.optim.Optimizer], torch.optim.lr_scheduler.LRScheduler] | None = None
    """Builds the learning-rate scheduler over the optimizer the backend steps; stepped once per optimizer step."""
    keep_last_checkpoints: int | None = None
    """Keep only this many newest checkpoints (``None``: all)."""
    on_step: Callable[[int, float], None] | None = None
    """Called on every rank after each optimizer step (step number, seconds): the tuner's progress channel."""
    training_step: Callable[[Any, Any], torch.Tensor] | None = None
    """``training_step(model, batch) -> loss`` in place of forward + loss (:mod:`autoshard.models.step`)."""
    notes: tuple[str, ...] = ()
    """What checking the arguments decided (a ``torch.compile``'d module trained uncompiled): the first notes."""
    progress: bool = False
    """Rank 0 writes the plan and a line every ``log_every`` steps to standard error (:mod:`.progress`)."""
    eval_data: Any = None
    """Held-out data scored every ``eval_every`` steps and at the end (:mod:`.evaluation`)."""
    eval_every: int | None = None
    callbacks: tuple[Any, ...] = ()
    """The user's callbacks, told of the run on rank 0 (:mod:`.callbacks`)."""

    @property
    def epoch_limit(self) -> int | None:
        """The epochs the run may take: ``epochs``, else 1 when no ``max_steps`` ends it, else none (``None``)."""
        return self.epochs if self.epochs is not None or self.max_steps is not None else 1


def train(job: TrainJob, plan: ExportedPlan, ctx: RunContext, notes: list[str]) -> FitResult:
    """Build the backend, train, consolidate; returns this rank's result (seeded with ``job.seed``; ``fit()``
    puts its caller's random state back afterwards)."""
    torch.manual_seed(job.seed)
    if plan.float32_matmul_precision != "highest":
        # The plan priced fp32 matmuls on TF32 tensor cores; at "highest" (torch's default, and plans written
        # before the setting) the process keeps what the user's script set.
        torch.set_float32_matmul_precision(plan.float32_matmul_precision)
    init = _model_init(job, plan, notes)
    if init.module is not None and not init.module.training:
        # from_pretrained returns a model in eval mode: trained so, its dropout would be off (and the plan, traced
        # in train mode, not what runs). The HF Trainer and Lightning put it in train mode too. A module in train
        # mode keeps the modes the user gave its submodules (a frozen BatchNorm in eval).
        init.module.train()
        notes.append(f"{type(init.module).__name__} was in eval mode (as from_pretrained returns a model): fit() "
                     "trains it in train mode (dropout on), as the HF Trainer and Lightning do.")
    make_optimizer = _steppable(optimizer_factory(job.optimizer, plan, job.source), plan.strategy)
    clip = job.grad_clip_norm
    if clip is None and plan.grad_clip_norm is not None:
        clip = plan.grad_clip_norm
        notes.append(f"clipping the gradients' norm to {clip:g}, as the plan says (its grad_clip_norm)")
    backend = backends.create(plan, ctx, grad_clip_norm=clip)
    given = None if init.module is None else _dtypes(init.module)
    try:
        backend.setup(init, make_optimizer)
        scheduler = None
        if job.lr_scheduler is not None:
            scheduler = loop.build_scheduler(job.lr_scheduler, backend.torch_optimizer,
                                             checkpointed=job.checkpoint_dir is not None)
        source = job.source
        synthetic = None
        if job.data is None and source is not None:
            synthetic = functools.partial(source.batch, plan.micro_batch_size, seq_len=plan.seq_len)
        feed = DataFeed(job.data, micro_batch_size=plan.micro_batch_size, ctx=ctx, seed=job.seed, synthetic=synthetic)
        if job.max_steps is None and feed.endless:
            raise UsageError("with no data, fit() trains on the model source's example batches: pass max_steps.")
        if feed.batches_per_epoch == 0:
            raise UsageError(f"each rank's share of the data holds no whole micro-batch of {plan.micro_batch_size} "
                             "samples: nothing would train.",
                             hint="Pass more data, a plan with a smaller micro-batch, or fewer processes.")
        epochs = job.epoch_limit
        per_epoch = feed.batches_per_epoch
        notes.extend(data_notes.before_training(feed, plan.micro_batch_size,
                                                loader_given=isinstance(job.data, DataLoader)))
        if epochs is not None and per_epoch is not None and per_epoch * epochs < plan.gradient_accumulation:
            raise UsageError(f"each rank's share of the data holds {per_epoch * epochs} micro-batch(es) of "
                             f"{plan.micro_batch_size} in {epochs} epoch(s), and an optimizer step accumulates "
                             f"{plan.gradient_accumulation}: nothing would train.",
                             hint="Pass more data or epochs, max_steps= (steps then run on over the epochs), or a "
                                  "smaller global batch.")
        if job.max_steps is not None and job.epochs is not None and per_epoch is not None:
            reachable = per_epoch * job.epochs // plan.gradient_accumulation
            if reachable < job.max_steps:
                notes.append(f"epochs={job.epochs} ends the run after {reachable} optimizer step(s), before "
                             f"max_steps={job.max_steps}: the first limit reached stops it (pass max_steps alone to "
                             "run on over the epochs).")
        start, resumed, epoch_rng = Position(), None, None
        where = _resume_from(job)
        if where is not None:
            restored = checkpoint.restore(backend, where, scheduler=scheduler)
            start = restored.position
            epoch_rng = checkpoint.epoch_rng(where, ctx.rank)
            resumed = str(where)
            notes.append(f"Resumed from {where} (step {start.step}).")
            notes.extend(restored.notes)
            if job.max_steps is not None and start.step >= job.max_steps:
                notes.append(f"The checkpoint is at step {start.step} and max_steps is {job.max_steps}: nothing "
                             "left to train. Raise max_steps to train on, or start afresh "
                             "(Checkpointing(resume=False)).")
            if scheduler is None and (where / checkpoint.SCHEDULER_FILE).is_file():
                notes.append("The checkpoint holds a learning-rate schedule and this run has no lr_scheduler: the "
                             "optimizer's learning rate is not scheduled from here on.")
        elif job.resume is True:
            notes.append(f"No checkpoint in {job.checkpoint_dir} to resume from: started afresh.")
        elif job.checkpoint_dir is not None and (earlier := checkpoint.latest(job.checkpoint_dir)) is not None:
            notes.append(f"{job.checkpoint_dir} holds an earlier run's checkpoints (the newest {earlier.name}): "
                         "this run starts from step 0 and saves beside them, replacing any of the same step, and "
                         "a later resume=True takes the newest of either run. Pass Checkpointing(dir=..., "
                         "resume=True) to continue that run, or another dir to keep the two apart.")
        fns = step_functions_for(job, backend.module)
        evaluator = None if job.eval_data is None else Evaluator(
            job.eval_data, backend=backend, fns=fns, micro_batch_size=plan.micro_batch_size, seed=job.seed,
            seq_len=plan.seq_len)
        if evaluator is not None:
            evaluator.check()  # a batch the model cannot take is refused now, not after training
            notes.extend([*evaluator.notes, *data_notes.eval_left_out(evaluator.feed),
                          *data_notes.stream_found(evaluator.feed, "eval_data")])
        reporter = None
        if job.progress and ctx.is_main:
            total = job.max_steps
            if total is None and per_epoch is not None and epochs is not None:
                total = per_epoch * epochs // plan.gradient_accumulation
            reporter = Reporter(total)
            reporter.start(plan, ctx.world_size, ctx.device.type, start.step, notes)
        told = listeners(reporter, job.callbacks if ctx.is_main else ())
        config = loop.LoopConfig(
            accumulation=plan.gradient_accumulation, max_steps=job.max_steps,
            epochs=epochs,
            samples_per_step=plan.micro_batch_size * plan.gradient_accumulation * ctx.world_size,
            tokens_per_sample=plan.seq_len, log_every=job.log_every, checkpoint_dir=job.checkpoint_dir,
            checkpoint_every=job.checkpoint_every, keep_last_checkpoints=job.keep_last_checkpoints,
            on_step=job.on_step, on_log=None if told is None else told.on_log, evaluate=evaluator,
            eval_every=job.eval_every, on_eval=None if told is None else told.on_eval, epoch_rng=epoch_rng,
            on_checkpoint=None if told is None else told.on_checkpoint)
        outcome = loop.run(backend, feed, fns, config, start, scheduler)
        if reporter is not None:
            reporter.finished(outcome.steps, outcome.last_checkpoint)
        if told is not None:
            told.on_train_end(outcome.steps)
        notes.extend(data_notes.stream_found(feed, "data"))  # a stream's kind is known from its first batch on
        notes.extend(data_notes.unstepped(*outcome.unstepped, plan.gradient_accumulation))
        state = backend.full_state_dict() if job.consolidate else None
        module = backend.module
    finally:
        backend.close()  # also after an error: a backend may hold process-wide state (DeepSpeed's linear)
        if init.module is not None:
            restore_blocks(init.module)  # the user's classes and KV cache, after an error too
    if state is not None:
        backend.hand_back(state)
    restore_blocks(module)  # a module built from a source; one FSDP2 sharded has its own classes only now
    if given is not None and module is init.module:
        _cast_back(module, given)
    return FitResult(plan=plan, steps=tuple(outcome.steps), model=module, state_dict=state, rank=ctx.rank,
                     world_size=ctx.world_size, resumed_from=resumed,
                     last_checkpoint=None if outcome.last_checkpoint is None else str(outcome.last_checkpoint),
                     notes=tuple(notes), evals=tuple(outcome.evals))


def _dtypes(module: nn.Module) -> dict[str, torch.dtype]:
    return {name: t.dtype for name, t in (*module.named_parameters(), *module.named_buffers())}


def _cast_back(module: nn.Module, given: dict[str, torch.dtype]) -> None:
    """The user's module in the dtypes it came in: ``bf16-true`` casts it in place under DDP and FSDP2 (DeepSpeed's
    hand-back and a worker run's loaded weights keep its dtypes already), so that what ``fit()`` returns does not
    depend on the backend or the number of processes. Trained bf16 values are exact in fp32; in fp16 they are
    rounded, as DeepSpeed rounds its fp32 master weights. A module still sharded (FSDP2 with
    ``consolidate=False``) is left as it is."""
    from torch.distributed.tensor import DTensor

    tensors = (*module.named_parameters(), *module.named_buffers())
    if any(isinstance(t, DTensor) for _, t in tensors):
        return
    for name, tensor in tensors:
        dtype = given.get(name)
        if dtype is not None and tensor.dtype != dtype:
            tensor.data = tensor.data.to(dtype)  # in place on the Parameter: ties stay ties


def step_functions_for(job: TrainJob, module: nn.Module) -> StepFunctions:
    """How each batch reaches the model and the loss. A module given to ``fit()`` follows the conventions of
    :mod:`autoshard.models.step`; a model source keeps its own: ``call_fn`` / ``call_model`` and
    ``loss(output, batch)``, which a ``loss_fn`` given to ``fit()`` replaces."""
    if job.module is not None or job.training_step is not None:
        return step_functions(job.module or module, loss_fn=job.loss_fn, training_step=job.training_step)
    source = job.source
    own = source.loss_fn if source is not None else None
    return StepFunctions(call=(source.call_fn if source is not None else None) or call_model,
                         loss=job.loss_fn or own or returned_loss)


def returned_loss(output: Any, batch: Any) -> torch.Tensor:
    """The loss a model source with no ``loss`` trains on: the one its model returns (:func:`output_loss`: a
    Hugging Face output's ``loss``, a scalar). Profiling may reduce any output as a stand-in
    (:func:`~autoshard.models.source.default_loss`, the mean of the logits): the memory is the same, but training
    on it would lower the logits, not fit the data.

    Raises:
        UsageError: the output holds no loss; the hint names the model file's ``loss``.
    """
    try:
        return output_loss(output, batch)
    except UsageError as exc:
        raise UsageError(exc.message, hint="Define `def loss(output, batch):` in the model file (docs/models.md), "
                                           "or pass loss_fn=(output, batch) -> scalar or training_step= to fit()."
                         ) from None


def _resume_from(job: TrainJob) -> Path | None:
    if job.resume is False:
        return None
    if job.resume is True:
        if job.checkpoint_dir is None:
            raise UsageError("checkpointing.resume=True needs checkpointing.dir.",
                             hint="Pass Checkpointing(dir=the run's directory, resume=True).")
        return checkpoint.latest(job.checkpoint_dir)
    path = Path(job.resume)
    if path.is_file():
        raise UsageError(f"cannot resume from {path}: it is a file, and a checkpoint is a directory.",
                         hint=f"Pass resume= the step-* directory holding it ({path.parent}), or "
                              "Checkpointing(dir=the run's directory, resume=True) for its newest.")
    if not path.is_dir():
        raise UsageError(f"cannot resume from {path}: no such directory.")
    return path


def check_resume(job: TrainJob, plan: ExportedPlan, world_size: int) -> None:
    """Refuse, in the launching process before any worker starts, a checkpoint this run cannot load
    (:func:`autoshard.runtime.checkpoint.refusal`); each rank checks it again as it loads.

    Raises:
        UsageError: no such checkpoint, or one written for another model, strategy or number of ranks.
    """
    where = _resume_from(job)
    if where is not None:
        refused = checkpoint.refusal(checkpoint.read_meta(where), where, plan, world_size)
        if refused is not None:
            raise refused


def _model_init(job: TrainJob, plan: ExportedPlan, notes: list[str]) -> ModelInit:
    """The module, or — for a catalog model under FSDP2 / ZeRO-3 — a builder, so it is built sharded."""
    if job.module is not None:
        blocks = find_repeated_blocks(job.module)
        return ModelInit(module=job.module, block_names=() if blocks is None else blocks.names)
    source = job.source
    if source is None:
        raise ValueError("TrainJob needs a module or a source")
    with torch.device("meta"):
        meta = source.build()
    blocks = find_repeated_blocks(meta)
    names = () if blocks is None else blocks.names
    if not plan.strategy_traits.sharded_at_rest:
        return ModelInit(module=source.build(), block_names=names)
    # Catalog models re-create every parameter and computed buffer in init_weights(), on meta-built DTensor
    # shards (FSDP2) and on zero.Init partitions (ZeRO-3) alike; other sources may keep state a meta build loses
    # or initialise weights after construction without gathering them, so they are built whole on the CPU first.
    if source.kind == "catalog" and callable(getattr(meta, "init_weights", None)):
        return ModelInit(build=source.build, block_names=names)
    notes.append(f"{source.name} was built whole on the CPU before {plan.strategy} sharded it (only catalog models, "
                 "which re-initialise themselves with init_weights(), are built sharded).")
    return ModelInit(module=source.build(), block_names=names)


def optimizer_factory(optimizer: Any, plan: ExportedPlan, source: ModelSource | None
                      ) -> Callable[[Any], torch.optim.Optimizer]:
    """How to build the optimizer over the parameters the backend trains.

    ``optimizer`` may be ``None`` (the model source's, else the plan's optimizer by name at its default learning
    rate), a name, a factory ``params -> Optimizer``, an optimizer class, or an optimizer instance built over the
    unwrapped model (its class and hyper-parameters are reused; one parameter group only).

    Raises:
        UsageError: an instance with several parameter groups, or something that is not an optimizer.
    """
    from autoshard.profiler.optimizers import build_optimizer

    foreach = plan.settings.get("foreach")  # an FSDP knob; other families leave torch's default
    # The plan's implementation, where it names one; FSDP's own foreach knob (which follows it) wins but for fused.
    impl = plan.optimizer_impl if foreach is None or plan.optimizer_impl == "fused" else None
    if optimizer is None and source is not None and source.optimizer_fn is not None:
        return _checked(source.optimizer_fn)
    if optimizer is None or isinstance(optimizer, str):
        name = optimizer or plan.optimizer
        return lambda params: build_optimizer(name, params, foreach=foreach, impl=impl)  # type: ignore[arg-type]
    if isinstance(optimizer, torch.optim.Optimizer):
        check_optimizer_instance(optimizer)
        cls, defaults = type(optimizer), _accepted(type(optimizer), optimizer.defaults)
        return lambda params: cls(params, **defaults)
    if inspect.isclass(optimizer) and issubclass(optimizer, torch.optim.Optimizer):
        factory: Callable[..., torch.optim.Optimizer] = optimizer  # a subclass's __init__ need not take defaults
        return lambda params: factory(params)
    if callable(optimizer):
        return _checked(optimizer)
    raise UsageError(f"optimizer must be a name, an optimizer, its class or a factory, but got "
                     f"{type(optimizer).__name__}.")


def check_optimizer_instance(optimizer: Any, module: nn.Module | None = None) -> None:
    """An optimizer instance is rebuilt in each process over the parameters the backend trains (DDP's, FSDP2's
    shards, DeepSpeed's), from its class and hyper-parameters: one group only, its per-group settings would be lost;
    and over ``module``'s every trainable parameter, so an instance over some of them (the plain loop's way to train
    only a head) would train them all, which it did without a word (a fine-tuning probe).

    Raises:
        UsageError: it has several groups, with the factory that keeps them; it holds only some of ``module``'s
            trainable parameters, with how to freeze the others.
    """
    if optimizer is not None and not isinstance(optimizer, (str, torch.optim.Optimizer)) and not callable(optimizer):
        raise UsageError(f"optimizer must be a name (e.g. 'adamw'), a torch optimizer (class or instance) or a "
                         f"factory optimizer(params), but got {optimizer!r}.")
    if not isinstance(optimizer, torch.optim.Optimizer):
        return
    if len(optimizer.param_groups) != 1:
        raise UsageError(
            f"the optimizer instance has {len(optimizer.param_groups)} parameter groups, and fit() rebuilds an "
            "instance in each process from its class and hyper-parameters over the parameters it trains (wrapped, "
            "or sharded): the groups would be lost.",
            hint="Pass a factory that builds the groups when it is called, after the model is wrapped: e.g. "
                 "optimizer=lambda params: torch.optim.AdamW([{'params': [p for n, p in model.named_parameters() if "
                 "p.requires_grad and 'bias' not in n]}, {'params': [...], 'weight_decay': 0.0}], lr=...).")
    if module is None:
        return
    held = {id(p) for p in optimizer.param_groups[0]["params"]}
    trainable = [n for n, p in module.named_parameters() if p.requires_grad]
    left = [n for n, p in module.named_parameters() if p.requires_grad and id(p) not in held]
    if held and left:
        raise UsageError(
            f"the optimizer instance holds {len(trainable) - len(left)} of the model's {len(trainable)} trainable "
            f"parameter tensors, and fit() trains every parameter that requires grad (it rebuilds the optimizer "
            f"over them): {', '.join(left[:3])}{' and others' if len(left) > 3 else ''} would train too.",
            hint="Freeze what should not train before fit() (p.requires_grad_(False)); the plan then counts no "
                 "gradients or optimizer state for them.")


def _accepted(cls: type[torch.optim.Optimizer], defaults: dict[str, Any]) -> dict[str, Any]:
    """The hyper-parameters of an optimizer instance that its class's constructor takes: torch's ``AdamW`` keeps
    ``decoupled_weight_decay`` in its defaults (it is an ``Adam`` that always decouples) and refuses it as an
    argument (torch 2.13)."""
    parameters = inspect.signature(cls.__init__).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return dict(defaults)
    names = {p.name for p in parameters}
    return {k: v for k, v in defaults.items() if k in names}


def _steppable(factory: Callable[[Any], torch.optim.Optimizer], strategy: str
               ) -> Callable[[Any], torch.optim.Optimizer]:
    """``factory``, refusing an optimizer ``strategy`` cannot step (a bitsandbytes one under FSDP2) as soon as it
    is built, in the strategy's words: a factory's class is known only then (classes and instances are refused
    before any process starts)."""
    from autoshard.runtime.optimizer_choice import optimizer_label
    from autoshard.strategies import get

    def build(params: Any) -> torch.optim.Optimizer:
        opt = factory(params)
        label = optimizer_label(opt)
        reason = None if label is None else get(strategy).refuses(label)
        if reason is not None:
            raise UsageError(f"strategy {strategy} cannot step the optimizer the factory built ({label}): {reason}",
                             hint="Plan another strategy (strategy= in fit()), or another optimizer.")
        return opt

    return build


def _checked(factory: Callable[[Any], Any]) -> Callable[[Any], torch.optim.Optimizer]:
    from autoshard.errors import AutoshardError, InternalError
    from autoshard.models.source import own_frame

    def build(params: Any) -> torch.optim.Optimizer:
        try:
            opt = factory(params)
        except (AutoshardError, InternalError):  # a model file's optimizer() names its file and line already
            raise
        except Exception as exc:  # the user's factory: said as theirs, not as an error of the run
            location = own_frame(exc)
            raise UserCodeError(
                f"the optimizer factory (optimizer=) raised {type(exc).__name__}"
                f"{f' at {location}' if location else ''}: {exc}", location=location,
                hint="It is called in each process with the parameters that process steps (its shard under FSDP2 "
                     "and ZeRO-3): fix it, or pass an optimizer name, class or instance.") from exc
        if isinstance(opt, (list, tuple)) and any(isinstance(o, torch.optim.Optimizer) for o in opt):
            raise UserCodeError(
                f"the optimizer factory returned {len(opt)} optimizers: fit() steps one optimizer on one loss.",
                hint="Give one optimizer (parameter groups may set each part's learning rate); training that "
                     "alternates optimizers and losses (a GAN's generator and discriminator) needs a loop of your "
                     "own, which the exported configs (autoshard recommend --output-dir) can launch.")
        if not isinstance(opt, torch.optim.Optimizer):
            raise UserCodeError(f"the optimizer factory returned {type(opt).__name__}, not a torch.optim.Optimizer.")
        return opt

    return build
