"""``autoshard.fit``: train a model with the plan's backend, in one process, under a launcher, or by starting
one worker per device itself."""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from autoshard.errors import AutoshardError, UsageError, in_arguments
from autoshard.models.source import ModelSource, is_compiled
from autoshard.planner import plan_file
from autoshard.planner.plan_file import ExportedPlan
from autoshard.profiler.checkpointing import parse_checkpointing
from autoshard.profiler.options import OptimizerImpl
from autoshard.runtime import calls, planning, supervisor, workers
from autoshard.runtime.callbacks import check_callbacks
from autoshard.runtime.data import SampleList, unbatched_samples
from autoshard.runtime.distributed import LaunchInfo, broadcast_json, check_not_a_launcher_copy, destroy_group, join
from autoshard.runtime.fit_arguments import check_arguments, check_run_options
from autoshard.runtime.optimizer_choice import optimizer_impl_for
from autoshard.runtime.options import FIT_ARGUMENTS, Checkpointing, DataSpec, LrSchedulerFactory, OptimizerSpec
from autoshard.runtime.result import FitResult
from autoshard.runtime.train import TrainJob, check_optimizer_instance, check_resume, train

if TYPE_CHECKING:
    from autoshard.hardware.specs import HardwareSpec
    from autoshard.planner.machine import ReduceDtype
    from autoshard.planner.plan import Plan
    from autoshard.profiler.options import PrecisionName
    from autoshard.strategies.base import StrategyName


@calls.identified
@in_arguments(FIT_ARGUMENTS)
def fit(
    model: nn.Module | str | os.PathLike[str] | ModelSource,
    data: DataSpec = None,
    *,
    eval_data: DataSpec = None,
    eval_every: int | None = None,
    loss_fn: Callable[[Any, Any], torch.Tensor] | None = None,
    training_step: Callable[[Any, Any], torch.Tensor] | None = None,
    optimizer: OptimizerSpec = None,
    max_steps: int | None = None,
    epochs: int | None = None,
    plan: Plan | ExportedPlan | str | os.PathLike[str] = "auto",
    strategy: StrategyName | None = None,
    hardware: HardwareSpec | str | os.PathLike[str] | None = None,
    processes: int | None = None,
    precision: PrecisionName | None = None,
    batch_size: int | None = None,
    global_batch_size: int | None = None,
    seq_len: int | None = None,
    checkpointing: Checkpointing | None = None,
    consolidate: bool = True,
    grad_clip_norm: float | None = None,
    seed: int = 0,
    log_every: int = 10,
    progress: bool = True,
    callbacks: Sequence[Any] | None = None,
    force: bool = False,
    timeout_s: float | None = None,
    lr_scheduler: LrSchedulerFactory | None = None,
    optimizer_impl: OptimizerImpl | None = None,
    activation_checkpointing: str | bool | None = None,
    reduce_dtype: ReduceDtype | None = None,
    cache: bool = True,
) -> FitResult:
    """Train ``model`` with the recommended (or given) strategy, on this process, the launcher's ranks, or
    worker processes it starts itself.

    Args:
        model: an ``nn.Module``, or a model source as ``recommend`` takes (``model.py``, ``config.json``, a
            catalog name). A source under FSDP2 / ZeRO-3 is built sharded when it can re-initialise itself
            (the catalog); a module is used as built; a ``torch.compile``'d module is trained as the module it
            wraps, uncompiled (noted).
        data: a map-style ``Dataset`` (batched at the plan's micro-batch, sharded with a ``DistributedSampler``),
            a ``DataLoader`` (its batch size kept, re-sharded), any iterable of batches (dealt out to the ranks
            in turn), or ``None`` to train on the model source's example batches (needs ``max_steps``).
        eval_data: held-out data (any kind ``data`` takes), scored every ``eval_every`` optimizer steps (default:
            only at the end) and when training ends, with the training step's forward and loss under
            ``torch.no_grad()`` and the module in eval mode; each rank scores its share. The losses are
            :attr:`FitResult.evals` (:mod:`autoshard.runtime.evaluation`).
        eval_every: optimizer steps between scorings of ``eval_data``.
        training_step: ``training_step(model, batch) -> loss`` in place of forward + loss, for anything the batch
            conventions do not cover (:mod:`autoshard.models.step`); ``model`` is the module as the backend wraps it.
        loss_fn: how the output is scored. For a module, by the batch's shape (:mod:`autoshard.models.step`):
            ``(inputs, targets)`` tuples whose forward takes only the inputs give ``loss_fn(output, targets)``
            (a plain loop's ``F.mse_loss`` works as is); otherwise ``loss_fn(output, batch)``. Default: the
            source's loss, else ``output.loss`` / the mean of the output.
        optimizer: a factory ``params -> Optimizer``, an optimizer class or instance (its hyper-parameters are
            reused over the sharded parameters), a name (``adamw``, ``adam``, ``sgd``, ``adafactor``,
            ``adamw8bit``: bitsandbytes' ``AdamW8bit``), or ``None`` for the source's or the plan's.
        max_steps: optimizer steps to train in total (counting steps before a resume).
        epochs: passes over ``data`` (default 1 when ``max_steps`` is not given).
        plan: ``"auto"`` (plan for this machine now), a :class:`~autoshard.planner.plan.Plan`, an
            :class:`~autoshard.planner.plan_file.ExportedPlan`, or a ``plan.json`` path (or its directory).
            ``strategy``, ``hardware``, ``precision``, ``batch_size`` and ``seq_len`` given with a plan must be
            its values (:mod:`autoshard.runtime.plan_checks`).
        strategy: with ``plan="auto"``, plan only this strategy (one name, e.g. ``"deepspeed_stage_2"``).
        hardware: with ``plan="auto"``, a hardware profile name / path / ``HardwareSpec`` describing this
            machine (its CUDA GPUs must be this process's); default: detected.
        processes: with ``plan="auto"``, GPUs to use, or on a CPU machine the number of gloo processes.
        precision: ``32-true``, ``16-mixed``, ``bf16-mixed`` or ``bf16-true``; default ``bf16-mixed`` on GPUs
            that support it, ``16-mixed`` on those without (V100, T4), ``32-true`` without a GPU; a module whose
            parameters are already bf16 trains as ``bf16-true`` (noted), one in fp16 is refused unless
            ``bf16-true`` (pure fp16 has no loss scaling; ``16-mixed`` wants fp32 weights).
        batch_size: micro-batch per device (default: the loader's, else the planner's choice).
        global_batch_size: samples per optimizer step over all ranks (micro-batch × gradient accumulation ×
            ranks): with ``plan="auto"`` the planner chooses the micro-batch that fits and accumulates the rest;
            a given plan must train this many (default: one micro-batch per rank, no accumulation).
        seq_len: sequence length of a source's example batches (a module given with ``plan="auto"`` trains on
            ``data``, whose batches set it: refused there).
        checkpointing: where to save checkpoints, how often, how many to keep, and where to resume
            (:class:`~autoshard.runtime.options.Checkpointing`; ``None``: no checkpoints).
        consolidate: gather the whole model's weights into :attr:`FitResult.state_dict` at the end.
        grad_clip_norm: clip the gradients' global 2-norm before each step, the same way in every backend
            (``None``: no clipping — also for DeepSpeed, whose own default clips at 1.0 — unless a plan file
            given as ``plan`` says to clip). ``plan="auto"`` prices it.
        seed: seeds torch on every rank and the data sampler.
        log_every: steps between the all-reduces that average the loss over ranks, and between progress lines.
        progress: rank 0 writes the plan it trains and, every ``log_every`` steps, the step, loss, learning rate
            and throughput to standard error (:mod:`autoshard.runtime.progress`); ``False``: nothing.
        callbacks: objects told of the run on rank 0, each defining any of ``on_log(steps)`` (every ``log_every``
            steps, the :class:`StepMetrics` just averaged over the ranks), ``on_eval(metrics)`` and
            ``on_checkpoint(step, path)`` (:mod:`autoshard.runtime.callbacks`): to log to TensorBoard or Weights &
            Biases as it trains. In the workers ``fit()`` starts they are the script's own objects, made again there.
        force: train with a ``plan.json`` whose model or GPU fingerprint differs from this run's.
        timeout_s: stop worker processes this starts after this long.
        lr_scheduler: a factory ``optimizer -> torch.optim.lr_scheduler.LRScheduler``, called once the backend
            has built its optimizer, with the torch optimizer that backend steps (DeepSpeed's: the one inside
            the engine). Stepped once per optimizer step (not per micro-batch), saved in checkpoints and
            restored on resume; each step's learning rate is in :attr:`StepMetrics.lr`. ``ReduceLROnPlateau``
            (it needs a metric) is refused.
        optimizer_impl: ``"foreach"``, ``"for-loop"`` or ``"fused"``: how an optimizer given by name (or the
            plan's) steps; planned with it under ``plan="auto"``, and it replaces a given plan's. ``None``: the
            plan's, else torch's default (foreach on CUDA). DeepSpeed with optimizer offload steps its own
            ``DeepSpeedCPUAdam`` whatever this says.
        activation_checkpointing: what to recompute in backward: ``"none"`` (or ``False``), ``"full"`` (or
            ``True``: every repeated block), ``"every-N"`` (every N-th block) or ``"op"`` (torchtitan's
            op-selective policy in every block). Planned with under ``plan="auto"`` (``None``: the planner weighs
            none against full, and op-selective against full when full wins) and replaces a given plan's. Not
            ``checkpointing``, which saves state.
        reduce_dtype: FSDP2's gradient reduce-scatter dtype, ``"fp32"`` or ``"bf16"``: planned with under
            ``plan="auto"`` and replaces a given FSDP plan's (``None``: the plan's, else fp32).
        cache: with ``plan="auto"``, reuse the model's traced step from the workload cache and keep it there
            (:mod:`autoshard.planner.workload_cache`; a note says when it was used); ``False`` traces again and
            writes nothing.

    Returns:
        A :class:`FitResult`: per-step metrics, the plan, the trained module and its consolidated weights.

    Raises:
        UsageError: bad arguments, a plan for another model or run (without ``force``), a missing dependency.
        UserCodeError: the model, loss or optimizer raised on the first batch (the message says what arrived).
        WorkerError: a worker process failed; the others were stopped.
        NoFeasiblePlan: nothing fits this machine.
    """
    module, source = check_arguments(
        model, data, loss_fn=loss_fn, max_steps=max_steps, epochs=epochs, checkpointing=checkpointing,
        log_every=log_every, processes=processes, batch_size=batch_size, global_batch_size=global_batch_size,
        lr_scheduler=lr_scheduler, grad_clip_norm=grad_clip_norm, eval_data=eval_data, eval_every=eval_every,
        strategy=strategy)
    check_optimizer_instance(optimizer, module)  # before planning and the workers
    told = check_callbacks(callbacks)
    if seq_len is not None and source is None and isinstance(plan, str) and plan == "auto":  # data= sets it
        raise UsageError(f"seq_len={seq_len} sizes a model source's own example batches (a catalog name, a config, "
                         f"a model.py), and {type(module).__name__} trains on data=, whose batches have their own "
                         "length.", hint="Drop seq_len=; pad or truncate the batches to the length to train on.")
    check_run_options(seed=seed, timeout_s=timeout_s, consolidate=consolidate, progress=progress, loss_fn=loss_fn,
                       checkpointing=checkpointing)
    if isinstance(data, Iterator) and epochs is not None and epochs > 1:  # a generator: one pass
        raise UsageError(f"data is a one-pass iterator (a generator), and epochs={epochs} asks for more than one pass.",
                         hint="Pass a list, a Dataset or a DataLoader, or train one epoch (or max_steps within it).")
    from autoshard.planner.machine import parse_reduce_dtype

    # The caller's random state is left as it was: planning draws from it, and training seeds it (fit.md).
    with one_call_at_a_time(), torch.random.fork_rng(devices=cuda_devices_in_use()):
        environ = os.environ  # the edge: the launcher's variables are read here only
        launch = LaunchInfo.from_environ(environ)
        ckpt = checkpointing or Checkpointing()
        module, arrival = _uncompiled(module)
        data, unbatched = unbatched_samples(data)
        eval_data, unbatched_eval = unbatched_samples(eval_data, "eval_data")
        arrival += unbatched + unbatched_eval
        job = TrainJob(module=module, source=source, data=data, eval_data=eval_data, eval_every=eval_every,
                       loss_fn=loss_fn, training_step=training_step,
                       optimizer=optimizer, notes=arrival,
                       max_steps=max_steps, epochs=epochs, seed=seed,
                       checkpoint_dir=None if ckpt.dir is None else Path(ckpt.dir),
                       checkpoint_every=ckpt.every,
                       resume=ckpt.resume if isinstance(ckpt.resume, bool) else Path(ckpt.resume),
                       consolidate=consolidate, log_every=log_every, progress=progress,
                       grad_clip_norm=grad_clip_norm,
                       lr_scheduler=lr_scheduler, keep_last_checkpoints=ckpt.keep_last, callbacks=told)
        options = planning.PlanOptions(
            plan=plan, strategy=strategy, hardware=hardware, processes=processes, precision=precision,
            batch_size=batch_size, global_batch_size=global_batch_size, seq_len=seq_len, force=force,
            optimizer_impl=optimizer_impl_for(optimizer_impl, optimizer),
            checkpointing=None if activation_checkpointing is None else parse_checkpointing(activation_checkpointing),
            reduce_dtype=None if reduce_dtype is None else parse_reduce_dtype(reduce_dtype), cache=cache,
            progress=progress, before_tracing=lambda: workers.check_startable(job, model))
        run_dir = environ.get(supervisor.RUN_DIR_VAR)
        if launch is not None and run_dir is not None:
            supervisor.leave_with_launcher(environ)  # no worker outlives the process that started it
            supervisor.dump_stacks_when_stopped(environ)  # a run stopped at its time limit says where it was
            workers.run(job, launch, Path(run_dir))  # never returns
        if launch is not None:
            return _launched(job, options, launch)
        check_not_a_launcher_copy(environ)  # before planning: srun -n 2 python train.py would train twice
        exported, notes, job = planning.resolve(job, options, world_size=None)
        check_resume(job, exported, exported.hardware.world_size)  # before any worker starts
        if exported.hardware.nodes > 1:
            raise UsageError(f"the plan spans {exported.hardware.nodes} nodes; fit() starts processes on this machine "
                             "only.", hint="Start torchrun on every node (srun --ntasks-per-node=1 torchrun ... "
                                           "train.py, as launch.sh and slurm.sbatch from `autoshard export` do): "
                                           "fit() joins its ranks.")
        if exported.hardware.world_size == 1:
            return _single(job, exported, notes)
        return workers.spawn(job, exported, notes, model, timeout_s)


_RUNNING = threading.Lock()


@contextlib.contextmanager
def one_call_at_a_time() -> Iterator[None]:
    """Refuse a :func:`fit` call while another thread of this process runs one: two at once share torch's random
    state, and two starting workers each read the other's calls, so one returned the other's training (80 steps
    for a call of 5) or its rank aborted in gloo (a concurrency probe).

    Raises:
        UsageError: another thread's fit() is running.
    """
    if not _RUNNING.acquire(blocking=False):
        raise UsageError("fit() is already running in another thread of this process; two calls at once share "
                         "torch's random state and their workers' hand-over, and one can return the other's "
                         "training.", hint="Call fit() from one thread at a time (wait for the other call to "
                                           "return), or train each model in its own process.")
    try:
        yield
    finally:
        _RUNNING.release()


def cuda_devices_in_use() -> list[int]:
    """The CUDA devices whose random state this process already holds: every visible one once CUDA is initialized,
    none before (asking would initialize CUDA in a process that trains nothing itself: a context on GPU 0)."""
    return list(range(torch.cuda.device_count())) if torch.cuda.is_initialized() else []


# -- modes ---------------------------------------------------------------------------------------------------


def _single(job: TrainJob, exported: ExportedPlan, notes: list[str]) -> FitResult:
    """One process: a one-rank group, described in the environment as a launcher would (DeepSpeed reads
    ``LOCAL_RANK``) and removed again afterwards, so that nothing of this run leaks into the next."""
    import torch.distributed as dist

    values = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1",
              "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(supervisor.free_port())}
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    ctx = None
    try:
        launch = LaunchInfo(rank=0, world_size=1, local_rank=0, local_world_size=1, master_addr="127.0.0.1",
                            master_port=int(values["MASTER_PORT"]))
        ctx = join(launch, device_type=exported.hardware.device_type)
        return train(job, exported, ctx, notes)
    finally:
        if ctx is not None and ctx.owns_group and dist.is_initialized():
            destroy_group()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _launched(job: TrainJob, options: planning.PlanOptions, launch: LaunchInfo) -> FitResult:
    """Under torchrun / deepspeed: rank 0 plans, every rank trains with what it broadcasts."""
    explicit = planning.load_plan(options.plan)
    device_type = explicit[0].hardware.device_type if explicit else ("cuda" if torch.cuda.is_available() else "cpu")
    ctx = join(launch, device_type=device_type)
    payload: dict[str, Any] = {}
    if ctx.is_main:
        try:
            exported, notes, job = planning.resolve(job, options, world_size=ctx.world_size)
            payload = {"plan": exported.to_dict(), "notes": notes, "samples": isinstance(job.data, SampleList)}
        except AutoshardError as e:
            payload = {"error": {"type": type(e).__name__, "message": e.message, "hint": e.hint}}
    payload = broadcast_json(payload, ctx)
    if "error" in payload:
        err = payload["error"]
        message = err["message"] if ctx.is_main else f"rank 0 could not plan: {err['message']}"
        raise supervisor.rebuild_error(err["type"], message, err.get("hint"))
    exported = plan_file.loads(json.dumps(payload["plan"]), source="rank 0's plan")
    job = workers.as_rank_0_read_it(job, samples=bool(payload.get("samples")))
    result = train(job, exported, ctx, list(payload["notes"]))
    if ctx.owns_group:
        # A gloo group left for interpreter teardown can abort the process after the script's work is done
        # ("terminate called without an active exception": its threads are destructed unjoined, pytorch#65231).
        # Only after success: destroying while another rank is still in a collective can hang (torchtitan#1342).
        import torch.distributed as dist

        dist.barrier()
        destroy_group()
    return result


# -- arguments (the checks: fit_arguments.py) ----------------------------------------------------------------


def _uncompiled(module: nn.Module | None) -> tuple[nn.Module | None, tuple[str, ...]]:
    """The module a ``torch.compile``'d one wraps (``_orig_mod``), with a note; any other as given. DDP, FSDP2 and
    DeepSpeed wrap the user's module, and its ``forward`` says how a batch is fed: torch.compile's wrapper
    (``forward(*args, **kwargs)``) hid both."""
    if module is None or not is_compiled(module):
        return module, ()
    inner = module._orig_mod
    if not isinstance(inner, nn.Module):  # pragma: no cover - torch.compile wraps modules in OptimizedModule only
        return module, ()
    return inner, (f"model is torch.compile'd: fit() plans and trains the {type(inner).__name__} it wraps, "
                   "uncompiled (autoshard neither models nor applies torch.compile).",)
