"""The training loop every backend shares: micro-batches, accumulation, the learning-rate schedule, metrics,
checkpoints."""

from __future__ import annotations

import itertools
import math
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.optim.lr_scheduler import LRScheduler, ReduceLROnPlateau

from autoshard.errors import UsageError, UserCodeError
from autoshard.models.source import batch_token_length
from autoshard.models.step import StepFunctions
from autoshard.runtime import checkpoint
from autoshard.runtime.backends import Backend, to_device
from autoshard.runtime.checkpoint import Position
from autoshard.runtime.data import DataFeed, batch_rows
from autoshard.runtime.distributed import (
    RunContext,
    all_true,
    communication_failure,
    mean_over_ranks,
)
from autoshard.runtime.result import EvalMetrics, StepMetrics


@dataclass(frozen=True, kw_only=True, slots=True)
class LoopConfig:
    """How long to train and when to save."""

    accumulation: int
    max_steps: int | None
    """Stop after this many optimizer steps in total (``None``: run the epochs)."""
    epochs: int | None
    """Stop after this many passes over the data (``None``: until ``max_steps``)."""
    samples_per_step: int
    """Samples per optimizer step over all ranks, as planned; a step's metrics count the rows its batches held
    (:func:`autoshard.models.source.batch_rows`), this where a batch does not say."""
    tokens_per_sample: int | None
    """The plan's sequence length (``None``: none planned): what a step's tokens count where its batches hold no
    token ids (:func:`autoshard.models.source.batch_token_length`), and what longer batches are warned of."""
    log_every: int = 10
    """Steps between the all-reduces that turn per-rank losses into reported ones."""
    checkpoint_dir: Path | None = None
    checkpoint_every: int | None = None
    """Save every this many steps (and always at the end when ``checkpoint_dir`` is set)."""
    keep_last_checkpoints: int | None = None
    """Keep only this many newest checkpoints (``None``: all)."""
    on_step: Callable[[int, float], None] | None = None
    """Called on every rank after each optimizer step with the step number and its wall-clock seconds."""
    on_log: Callable[[list[StepMetrics]], None] | None = None
    """Called with the steps whose losses were just averaged over the ranks (every ``log_every`` steps)."""
    evaluate: Callable[[int], EvalMetrics] | None = None
    """Scores the held-out data at a step (collective): every ``eval_every`` steps and at the end."""
    eval_every: int | None = None
    on_eval: Callable[[EvalMetrics], None] | None = None
    on_checkpoint: Callable[[int, Path], None] | None = None
    """Called with the step and the directory of each checkpoint written."""
    epoch_rng: dict[str, torch.Tensor] | None = None
    """Resuming inside an epoch: this rank's RNG state when that epoch's data iterator was first made
    (:func:`autoshard.runtime.checkpoint.epoch_rng`). The iterator is made again under it, so a loader shuffling
    with torch's global generator (one rank keeps the user's ``DataLoader``) draws the same order, then the RNG
    continues from the checkpoint's state."""


@dataclass(kw_only=True, slots=True)
class LoopOutcome:
    """What the loop did."""

    steps: list[StepMetrics]
    position: Position
    last_checkpoint: Path | None
    evals: list[EvalMetrics]
    unstepped: tuple[int, int] = (0, 0)
    """The micro-batches and samples (on this rank) of an incomplete last accumulation the data's end left: their
    gradients were computed and not stepped."""


def plateau_refusal() -> UsageError:
    """Why a ``ReduceLROnPlateau`` (built, or given as the class) cannot be fit()'s schedule."""
    return UsageError("fit() steps the learning-rate scheduler once per optimizer step without a metric, and "
                      "ReduceLROnPlateau needs one.", hint="Use a schedule over steps (LambdaLR, OneCycleLR, ...).")


def build_scheduler(factory: Any, optimizer: torch.optim.Optimizer, *, checkpointed: bool) -> LRScheduler:
    """``factory(optimizer)``, checked: a scheduler :func:`run` can step once per optimizer step, and whose
    state a checkpoint can hold (tensors and plain values: checkpoints load with ``weights_only=True``).

    Raises:
        UsageError: it built a ``ReduceLROnPlateau`` (which needs a metric). ``fit()`` has already checked that
            ``factory`` is callable.
        UserCodeError: it raised, returned something that is not an ``LRScheduler``, or (with ``checkpointed``)
            one whose ``state_dict()`` holds other objects.
    """
    try:
        scheduler = factory(optimizer)
    except Exception as e:
        raise UserCodeError(f"the lr_scheduler factory raised {type(e).__name__}: {e}") from e
    if isinstance(scheduler, ReduceLROnPlateau):
        raise plateau_refusal()
    if not isinstance(scheduler, LRScheduler):
        raise UserCodeError(f"the lr_scheduler factory returned {type(scheduler).__name__}, not a "
                            "torch.optim.lr_scheduler.LRScheduler.")
    if checkpointed and not _plain(scheduler.state_dict()):
        raise UserCodeError(f"{type(scheduler).__name__}.state_dict() holds objects other than tensors and plain "
                            "values, which a checkpoint does not store (they would need a pickle).",
                            hint="Use a function or a lambda for the schedule, or checkpoint without a scheduler.")
    return scheduler


def run(backend: Backend, feed: DataFeed, steps_fns: StepFunctions, config: LoopConfig, start: Position,
        scheduler: LRScheduler | None = None) -> LoopOutcome:
    """Train from ``start`` until ``max_steps`` or ``epochs`` is reached or the data runs out on any rank;
    ``scheduler`` (over :attr:`Backend.torch_optimizer`) steps after each optimizer step."""
    ctx = backend.ctx
    optimizer = backend.torch_optimizer
    cuda = ctx.device.type == "cuda"
    scale = backend.loss_scale_for(config.accumulation)
    position = start
    steps: list[StepMetrics] = []
    evals: list[EvalMetrics] = []
    pending: list[tuple[int, int, torch.Tensor, float, int | None, float | None, int, float]] = []
    planned_rows = max(1, config.samples_per_step // (config.accumulation * ctx.world_size))
    last_ckpt: Path | None = None
    # Lengths unknown (a generator, an IterableDataset): agree with the other ranks on every micro-batch.
    check_each_step = feed.batches_per_epoch is None and not feed.endless and ctx.world_size > 1
    epoch, consumed = start.epoch, start.batch_in_epoch
    # A fresh epoch's iterator draws from torch's generator and leaves it advanced, as a plain loop's does (put
    # back, the next epoch drew the same order); one resumed inside an epoch is made again under the RNG state
    # that epoch started from, then the checkpoint's state is put back.
    batches: Iterator[Any]
    if config.epoch_rng is not None and consumed > 0:
        epoch_rng = config.epoch_rng
        batches = _epoch_under(feed, epoch, consumed, epoch_rng)
    else:
        epoch_rng = checkpoint.rng_state()
        batches = feed.epoch(epoch, skip=consumed)
    first = True
    sizes = _SampleSizes(config.tokens_per_sample)
    nonfinite: list[int] = []  # the first step whose loss was NaN or infinite: warned once
    unstepped = (0, 0)

    def flush() -> None:
        if not pending:
            return
        logged = len(steps)
        # one all-reduce: each step's loss (averaged over the ranks) and its rows (summed: the mean × ranks)
        step_losses = torch.stack([p[2] for p in pending]).double()
        # and its tokens (summed; NaN where a rank's batches did not say)
        counts = torch.tensor([*(float(p[6]) for p in pending), *(p[7] for p in pending)], dtype=torch.float64,
                              device=step_losses.device)
        means = mean_over_ranks(torch.cat([step_losses, counts]), ctx)
        n = len(pending)
        losses = means[:n]
        rows = [round(m * ctx.world_size) for m in means[n:2 * n]]
        step_tokens = [None if math.isnan(m) else round(m * ctx.world_size) for m in means[2 * n:]]
        peaks = _max_over_ranks([p[4] for p in pending], backend) if cuda else [None] * len(pending)
        for (step, ep, _, seconds, _, lr, _, _), loss, samples, tokens, peak in zip(
                pending, losses, rows, step_tokens, peaks, strict=True):
            steps.append(StepMetrics(step=step, epoch=ep, loss=loss, step_time_s=seconds,
                                     samples_per_s=samples / seconds,
                                     tokens_per_s=None if tokens is None else tokens / seconds,
                                     peak_memory_bytes=peak, lr=lr))
        pending.clear()
        bad = next((m for m in steps[logged:] if not math.isfinite(m.loss)), None)
        if bad is not None and not nonfinite:
            nonfinite.append(bad.step)
            if ctx.is_main:
                warnings.warn(f"step {bad.step}: the loss is {bad.loss} (averaged over the ranks): training goes on, "
                              "but the weights may be ruined from here. Check the data and the learning rate (a "
                              "lower one, grad_clip_norm=, or bf16 in place of fp16 usually helps).", stacklevel=2)
        if config.on_log is not None:
            config.on_log(steps[logged:])

    while not _done(position, config):
        if cuda:
            torch.cuda.reset_peak_memory_stats(ctx.device)
        started = time.perf_counter()
        micro_losses = []
        rows, tokens = 0, 0.0
        for micro in range(config.accumulation):
            # Streams of unknown length: the ranks agree on the end of an epoch before any rolls over (rank 0's
            # epoch-0 tail was paired with rank 1's epoch 1), what the longer ones had left of it dropped.
            batch = _agreed(next(batches, _END), check_each_step, ctx)
            if batch is _END and (config.epochs is None or epoch + 1 < config.epochs):
                epoch, consumed = epoch + 1, 0
                epoch_rng = checkpoint.rng_state()  # what a loader shuffling with torch's generator draws from
                batches = feed.epoch(epoch)
                batch = _agreed(next(batches, _END), check_each_step, ctx)
            if batch is _END:
                break
            consumed += 1
            micro_rows = batch_rows(batch) or planned_rows
            rows += micro_rows
            fed_length = batch_token_length(steps_fns.fed(batch))  # a target's integer classes are not tokens
            length = fed_length or config.tokens_per_sample
            tokens += math.nan if length is None else micro_rows * length
            sizes.see(batch, position.step + 1, fed_length)
            sync = micro == config.accumulation - 1
            batch = to_device(batch, ctx.device)
            loss = _loss(backend, steps_fns, batch, sync=sync, checked=not first, planned_rows=planned_rows,
                         step=position.step + 1)
            backend.backward(loss * scale if scale != 1.0 else loss, sync=sync)
            micro_losses.append(loss.detach())
        if batch is _END:  # the data ran out: an incomplete accumulation is not stepped
            unstepped = (len(micro_losses), rows)
            break
        first = False
        lr = _group_lr(optimizer)  # what this step's update uses
        backend.step()
        if scheduler is not None:
            _schedule(scheduler, position.step + 1)
        if cuda:
            torch.cuda.synchronize(ctx.device)
        seconds = time.perf_counter() - started
        position = Position(step=position.step + 1, epoch=epoch, batch_in_epoch=consumed)
        peak = torch.cuda.max_memory_allocated(ctx.device) if cuda else None
        pending.append((position.step, epoch, torch.stack(micro_losses).float().mean(), seconds, peak, lr, rows,
                        tokens))
        if config.on_step is not None:
            config.on_step(position.step, seconds)
        if position.step % config.log_every == 0:  # not a count since the last flush: a scoring flushes too
            flush()
        if (config.checkpoint_dir is not None and config.checkpoint_every
                and position.step % config.checkpoint_every == 0 and not _done(position, config)):
            last_ckpt = checkpoint.save(backend, config.checkpoint_dir, position, scheduler=scheduler,
                                        keep_last=config.keep_last_checkpoints, epoch_rng=epoch_rng)
            if config.on_checkpoint is not None:
                config.on_checkpoint(position.step, last_ckpt)
        if (config.evaluate is not None and config.eval_every
                and position.step % config.eval_every == 0 and not _done(position, config)):
            flush()
            evals.append(_evaluated(config, position.step))
    # The end: max_steps reached, or the data ran out (the epochs asked for are done).
    flush()
    if config.checkpoint_dir is not None and (last_ckpt is None or last_ckpt != checkpoint.step_dir(
            config.checkpoint_dir, position.step)) and position.step > start.step:
        last_ckpt = checkpoint.save(backend, config.checkpoint_dir, position, scheduler=scheduler,
                                    keep_last=config.keep_last_checkpoints, epoch_rng=epoch_rng)
        if config.on_checkpoint is not None:
            config.on_checkpoint(position.step, last_ckpt)
    # A run resumed where training had ended scores the checkpoint's weights: eval_data is scored at the end.
    ended = position.step > start.step or start.step > 0
    if config.evaluate is not None and ended and (not evals or evals[-1].step != position.step):
        evals.append(_evaluated(config, position.step))
    return LoopOutcome(steps=steps, position=position, last_checkpoint=last_ckpt, evals=evals, unstepped=unstepped)


def _schedule(scheduler: LRScheduler, step: int) -> None:
    """``scheduler.step()`` after optimizer step ``step``; what it raises is the user's schedule, said so (a
    ``OneCycleLR`` whose ``total_steps`` the run outlasts raised a bare ``ValueError`` in a rank's traceback)."""
    try:
        scheduler.step()
    except Exception as exc:
        raise UserCodeError(f"lr_scheduler's step() after optimizer step {step} raised {type(exc).__name__}: {exc}",
                            hint="Build the schedule for the steps the run takes (max_steps=, or the epochs' "
                                 "steps; e.g. OneCycleLR(total_steps=...)), or end the run within it.") from exc


def _group_lr(optimizer: torch.optim.Optimizer) -> float | None:
    """The first parameter group's learning rate, ``None`` where the optimizer sets its own step size
    (transformers' ``Adafactor(lr=None, relative_step=True)``, T5's usual setting: ``float(None)`` stopped the run
    after its first step)."""
    lr = optimizer.param_groups[0].get("lr")
    return None if lr is None else float(lr)


def _agreed(batch: Any, check: bool, ctx: RunContext) -> Any:
    """``batch``, or the end of the epoch on every rank when ``check`` (lengths unknown) and any rank's has ended
    (collective then: one all-reduce)."""
    if check and not all_true(batch is not _END, ctx):
        return _END
    return batch


def _epoch_under(feed: DataFeed, epoch: int, skip: int, rng: dict[str, torch.Tensor]) -> Iterator[Any]:
    """``feed.epoch(epoch, skip=skip)``, its first batch drawn under ``rng`` (a loader's shuffled order and its
    workers' seeds come from torch's generator when its iterator starts), then torch's RNG as it was: resuming
    inside an epoch, ``rng`` the state it started from and the RNG put back the checkpoint's."""
    now = checkpoint.rng_state()
    checkpoint.set_rng_state(rng)
    try:
        batches = feed.epoch(epoch, skip=skip)
        first = next(batches, _END)
    finally:
        checkpoint.set_rng_state(now)
    return iter(()) if first is _END else itertools.chain([first], batches)


def _evaluated(config: LoopConfig, step: int) -> EvalMetrics:
    metrics = config.evaluate(step)  # type: ignore[misc]  # called only with an evaluator
    if config.on_eval is not None:
        config.on_eval(metrics)
    return metrics


_END = object()


def _done(position: Position, config: LoopConfig) -> bool:
    return config.max_steps is not None and position.step >= config.max_steps


def longer_than_planned(where: str, length: int, planned: int) -> str:
    """The warning for a batch (at ``where``: a step, ``eval_data``) of sequences of ``length`` tokens, longer than
    the plan's ``seq_len`` (``planned``)."""
    return (f"{where}: a batch holds sequences of {length} tokens, and the plan is for {planned} (its seq_len): its "
            f"memory and time are for {planned}, and on a GPU a longer batch may not fit. Plan for the longest (a "
            f"model source's seq_len=, or the longest batch first), or truncate the batches to {planned}.")


class _SampleSizes:
    """Warns once when a batch holds longer sequences than the plan's ``seq_len`` (``planned``), and once when it
    holds more elements per sample than the first: the plan's memory is for batches like the one it traced
    (images of another size, sequences padded longer), and on a GPU a larger one may not fit."""

    def __init__(self, planned: int | None = None) -> None:
        self.planned = planned
        self.first: float | None = None
        self.warned = False
        self.warned_length = False

    def see(self, batch: Any, step: int, fed_length: int | None) -> None:
        """Warn once of a batch longer than planned (``fed_length``: the token length of what the forward gets)
        and once of one larger than the first. Every rank warns: the launching process says the other ranks' lines
        (the long batch in rank 1's share went unsaid)."""
        from autoshard.models.source import batch_values

        length = None if self.warned_length or self.planned is None else fed_length
        if length is not None and self.planned is not None and length > self.planned:
            self.warned_length = True
            warnings.warn(longer_than_planned(f"step {step}", length, self.planned), stacklevel=3)
        if self.warned:
            return
        tensors = [t for t in batch_values(batch) or [] if isinstance(t, torch.Tensor) and t.dim() > 0]
        rows = batch_rows(batch)
        if not tensors or not rows:
            return
        size = sum(t.numel() for t in tensors) / rows
        if self.first is None:
            self.first = size
        elif size > self.first * 1.01 and not self.warned_length:
            self.warned = True
            warnings.warn(f"step {step}: a batch holds {size / self.first:.3g} x the elements per sample of the "
                          "first batch, which the plan's memory is for: a larger batch may not fit on a GPU. "
                          "Plan on the largest (pass it first, or pad every batch to one size).", stacklevel=3)


def _loss(backend: Backend, fns: StepFunctions, batch: Any, *, sync: bool, checked: bool, planned_rows: int = 0,
          step: int = 0) -> torch.Tensor:
    """Forward and loss, both under the backend's autocast; on the first micro-batch, a failure names what
    arrived; later, a failure on a batch smaller than the plan's (a DataLoader's last) says so."""
    with backend.autocast():
        if not checked:
            return first_loss(backend, fns, batch, sync=sync)
        try:
            return fns.loss(backend.forward(batch, sync=sync, call=fns.call), batch)
        except (torch.OutOfMemoryError, MemoryError, UserCodeError, UsageError):
            raise
        except Exception as e:
            rows = batch_rows(batch)
            if lost_peer(e) or rows is None or rows >= planned_rows:
                raise
            raise UserCodeError(
                f"the model failed at step {step} on a batch of {rows} sample(s), where the others hold "
                f"{planned_rows}: {type(e).__name__}: {e}",
                hint="A DataLoader's last batch holds what is left of the data: DataLoader(..., drop_last=True) "
                     "leaves it out (BatchNorm, for one, cannot train on a single sample).") from e


def _mixed_dtypes(module: torch.nn.Module, error: Exception) -> str | None:
    """A hint for a dtype clash inside a module whose parameters are of several floating dtypes (a frozen bf16
    body under an fp32 head): the data is not at fault, and nothing casts between them without autocast."""
    dtypes = sorted({str(p.dtype).removeprefix("torch.") for p in module.parameters() if p.is_floating_point()})
    if len(dtypes) < 2 or "dtype" not in str(error).lower():
        return None
    return (f"The model's parameters are of several dtypes ({', '.join(dtypes)}), and without autocast nothing "
            "casts between them: pass precision='bf16-mixed' (or '16-mixed'), or cast the model to one dtype.")


def _sharded_elsewhere(backend: Backend, error: Exception) -> str | None:
    """A hint when a forward under FSDP2 or ZeRO-3 fails on another module's parameters, which are sharded there
    (a DTensor shard, an empty ZeRO-3 tensor) outside their module's own forward: an EMA update or a weight shared
    by hand in forward, not the data (a multi-model probe was told to check its data)."""
    traits = backend.traits
    if not (traits.family == "fsdp" or traits.zero_stage == 3):
        return None
    text = str(error)
    if "DTensor" not in text and "(0)" not in text:
        return None
    return ("Under FSDP2 and ZeRO-3 a module's parameters are whole only during its own forward and backward "
            "(shards, or empty tensors under ZeRO-3, elsewhere): code that reads or writes another module's "
            "parameters in forward (an EMA update, a weight shared by hand) fails there. Do it after the optimizer "
            "step, outside forward, or train with ddp or ZeRO-1/2.")


def first_loss(backend: Backend, fns: StepFunctions, batch: Any, *, sync: bool) -> torch.Tensor:
    """Forward and loss of a first step's micro-batch, their errors blamed on the user's code — except running
    out of memory and a lost peer: forward (FSDP2's all-gathers, ZeRO-3's, DDP's buffer broadcast) and a loss
    that all-reduces talk to the other ranks, and another rank dying is not this rank's code's fault."""
    try:
        output = backend.forward(batch, sync=sync, call=fns.call)
    except (torch.OutOfMemoryError, MemoryError):
        raise  # the batch does not fit: not a mismatch between the data and the model
    except Exception as e:
        if lost_peer(e):
            raise
        raise UserCodeError(f"the model failed on the first batch ({_describe(batch)}): {type(e).__name__}: {e}",
                            hint=_mixed_dtypes(backend.module, e) or _sharded_elsewhere(backend, e)
                            or "Check what your data yields against what the model's forward takes.") from e
    try:
        loss = fns.loss(output, batch)
    except (UserCodeError, UsageError):
        raise
    except Exception as e:
        if lost_peer(e):
            raise
        what = "your loss_fn" if fns.users_loss else "the loss"
        hint = ("Check the targets against the model's output: loss_fn gets (output, targets) for an (inputs, "
                "targets) batch, (output, batch) for any other batch." if fns.users_loss
                else "Pass loss_fn(output, batch) returning a scalar tensor.")
        raise UserCodeError(f"{what} failed on the first batch: {type(e).__name__}: {str(e).rstrip('.')}. The model "
                            f"returned {_describe(output)}; the batch was {_describe(batch)}.", hint=hint) from e
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1 or not loss.is_floating_point():
        raise UserCodeError(f"the loss must be a floating-point scalar tensor, and it is {_describe(loss)}.",
                            hint="Return e.g. torch.nn.functional.cross_entropy(output, target).")
    return loss


def lost_peer(exc: BaseException) -> bool:
    """Whether ``exc`` is a collective failing because another rank is gone (or the transport broke): a
    ``torch.distributed.DistError`` or an error naming gloo / NCCL / a closed connection
    (:func:`~autoshard.runtime.distributed.communication_failure`, which the tuner classifies with too).

    Example:
        >>> lost_peer(RuntimeError("[gloo/transport/tcp/pair.cc:537] Read error: Connection reset by peer"))
        True
        >>> lost_peer(RuntimeError("mat1 and mat2 shapes cannot be multiplied (4x8 and 3x3)"))
        False
    """
    return isinstance(exc, dist.DistError) or communication_failure(type(exc).__name__, str(exc))


def _plain(value: Any) -> bool:
    """Whether ``value`` is made of tensors, numbers, strings, ``None`` and lists / tuples / dicts of them."""
    if value is None or isinstance(value, (bool, int, float, str, torch.Tensor)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, (str, int)) and _plain(v) for k, v in value.items())
    return False


def _describe(obj: Any, depth: int = 0) -> str:
    if isinstance(obj, torch.Tensor):
        return f"tensor{tuple(obj.shape)} {str(obj.dtype).removeprefix('torch.')}"
    if depth > 1:
        return type(obj).__name__
    if isinstance(obj, dict):
        return "{" + ", ".join(f"{k!r}: {_describe(v, depth + 1)}" for k, v in list(obj.items())[:6]) + "}"
    if isinstance(obj, (list, tuple)):
        inner = ", ".join(_describe(v, depth + 1) for v in obj[:6])
        return f"{type(obj).__name__}({inner})"
    return type(obj).__name__


def _max_over_ranks(values: list[int | None], backend: Backend) -> list[int | None]:
    import torch.distributed as dist

    t = torch.tensor([v or 0 for v in values], dtype=torch.int64, device=backend.ctx.device)
    if backend.ctx.world_size > 1:
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return [int(v) for v in t.tolist()]
