"""Checkpoints: one directory per saved step, written under a temporary name and renamed when complete.

Layout (``checkpoint_dir/step-00000010/``): ``autoshard_checkpoint.json`` (the step, data position, strategy,
world size and plan fingerprint, JSON), ``rng-rank<N>.pt`` (each rank's RNG state, loaded with
``weights_only=True``), ``epoch-rng-rank<N>.pt`` (its state when the epoch's data iterator was made),
``lr_scheduler.pt`` (the learning-rate scheduler's ``state_dict()``, when there is one; also ``weights_only``)
and the backend's own files: ``ddp_state.pt``, an FSDP2 DCP directory, or DeepSpeed's checkpoint. A directory
without the JSON file is incomplete and never resumed from.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from torch.optim.lr_scheduler import LRScheduler

from autoshard.errors import UsageError
from autoshard.planner.plan_file import ExportedPlan
from autoshard.runtime import resumed_optimizer
from autoshard.runtime.backends.base import Backend

META_FILE = "autoshard_checkpoint.json"
SCHEDULER_FILE = "lr_scheduler.pt"
EPOCH_RNG_PREFIX = "epoch-rng-rank"
"""Each rank's RNG state at the start of the checkpoint's epoch: ``epoch-rng-rank<N>.pt``."""
PREFIX = "step-"


@dataclass(frozen=True, kw_only=True, slots=True)
class Position:
    """Where training stands."""

    step: int = 0
    """Optimizer steps completed."""
    epoch: int = 0
    batch_in_epoch: int = 0
    """This rank's micro-batches consumed in ``epoch``."""


@dataclass(frozen=True, kw_only=True, slots=True)
class CheckpointMeta:
    """``autoshard_checkpoint.json``."""

    position: Position
    strategy: str
    family: str
    world_size: int
    layout_hash: str
    """The model fingerprint of the plan (:func:`autoshard.planner.plan_file.layout_hash`)."""
    micro_batch_size: int | None = None
    """The run's micro-batch (``None`` in checkpoints written before 2026-11-28): with ``world_size``, how many
    samples of the epoch ``position.batch_in_epoch`` stands for."""
    gradient_accumulation: int | None = None
    """Micro-batches per optimizer step (``None`` in checkpoints written before 2026-12-03)."""
    optimizer: str | None = None
    """The optimizer's algorithm (:func:`autoshard.runtime.resumed_optimizer.algorithm`, e.g. ``"AdamW"``;
    ``None`` in checkpoints written before 2026-12-03): its state is that algorithm's."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Restored:
    """What :func:`restore` loaded."""

    position: Position
    """Where training stands, in this run's micro-batches per rank."""
    notes: tuple[str, ...] = ()
    """What the checkpoint changed about the run as it was given: settings of the optimizer it replaced, another
    global batch."""


def step_dir(root: Path, step: int) -> Path:
    """``root/step-<step, 8 digits>``."""
    return root / f"{PREFIX}{step:08d}"


def save(backend: Backend, root: Path, position: Position, *, scheduler: LRScheduler | None = None,
         keep_last: int | None = None, epoch_rng: dict[str, torch.Tensor] | None = None) -> Path:
    """Write a checkpoint of ``position`` (collective); returns its directory.

    Args:
        backend: the backend whose state is saved.
        root: the checkpoint directory (``step-*`` directories go there).
        position: where training stands.
        scheduler: the learning-rate scheduler, whose ``state_dict()`` is saved with the checkpoint.
        keep_last: once this checkpoint is complete, rank 0 removes older ones beyond the newest ``keep_last``
            (``None``: keep all); see :func:`prune`.
        epoch_rng: this rank's RNG state when the epoch's data iterator was made (:func:`rng_state`): a loader
            that shuffles with torch's global generator drew its order from it, and a resumed run draws it again.
    """
    ctx = backend.ctx
    final = step_dir(root, position.step)
    partial = root / f".{final.name}.partial"
    if ctx.is_main:
        root.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir()
    dist.barrier()
    backend.save(partial)
    torch.save(rng_state(), partial / f"rng-rank{ctx.rank}.pt")
    if epoch_rng is not None:
        torch.save(epoch_rng, partial / f"{EPOCH_RNG_PREFIX}{ctx.rank}.pt")
    if scheduler is not None and ctx.is_main:  # stepped alike on every rank: one copy
        torch.save(scheduler.state_dict(), partial / SCHEDULER_FILE)
    dist.barrier()
    if ctx.is_main:
        meta = CheckpointMeta(position=position, strategy=backend.plan.strategy, family=backend.plan.family,
                              world_size=ctx.world_size, layout_hash=backend.plan.model.layout_hash,
                              micro_batch_size=backend.plan.micro_batch_size,
                              gradient_accumulation=backend.plan.gradient_accumulation,
                              optimizer=resumed_optimizer.algorithm(backend.torch_optimizer))
        (partial / META_FILE).write_text(json.dumps(asdict(meta), indent=2) + "\n", encoding="utf-8")
        shutil.rmtree(final, ignore_errors=True)
        partial.rename(final)
        if keep_last is not None:
            prune(root, final, keep_last)
    dist.barrier()
    return final


def prune(root: Path, newest: Path, keep_last: int) -> list[Path]:
    """Remove complete checkpoints older than ``newest`` beyond the newest ``keep_last`` (``newest`` counted).

    Only complete ``step-*`` directories with a lower step than ``newest`` are candidates: ``newest`` itself, a
    later step left by a run resumed from an earlier checkpoint, and anything incomplete are never removed.

    Returns:
        The directories removed, oldest first.
    """
    if keep_last < 1:
        raise ValueError(f"keep_last must be at least 1, but got {keep_last!r}.")
    older = sorted(p for p in _complete(root) if p.name < newest.name)
    removed = older[:max(len(older) - (keep_last - 1), 0)]
    for directory in removed:
        shutil.rmtree(directory)
    return removed


def _complete(root: Path) -> list[Path]:
    return [p for p in root.iterdir() if p.name.startswith(PREFIX) and (p / META_FILE).is_file()]


def latest(root: Path) -> Path | None:
    """The newest complete checkpoint under ``root``, or ``None``."""
    if not root.is_dir():
        return None
    done = sorted(_complete(root))
    return done[-1] if done else None


def read_meta(directory: Path) -> CheckpointMeta:
    """Parse ``autoshard_checkpoint.json``.

    Raises:
        UsageError: missing or malformed.
    """
    path = directory / META_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return CheckpointMeta(position=Position(**data.pop("position")), **data)
    except FileNotFoundError:
        held = latest(directory)
        raise UsageError(f"{directory} is not an autoshard checkpoint (no {META_FILE}).",
                         hint=None if held is None else
                         f"It holds a run's checkpoints: pass resume={str(held)!r} (its newest), or "
                         f"Checkpointing(dir={str(directory)!r}, resume=True).") from None
    except (json.JSONDecodeError, TypeError, KeyError) as e:
        raise UsageError(f"{path} is malformed: {e}.") from e


def refusal(meta: CheckpointMeta, directory: Path, plan: ExportedPlan, world_size: int) -> UsageError | None:
    """Why a run of ``plan`` over ``world_size`` ranks cannot load the checkpoint ``meta`` describes, or ``None``:
    written for another model; by another strategy family; by DeepSpeed at another ZeRO layout (stages 1 and 2
    write the same flat fp32 partitions, stage 3 its own, and DeepSpeed's loader fails on the other's with a bare
    ``AssertionError``); or, for a family whose checkpoint is partitioned per rank (DeepSpeed), by another number
    of ranks. Checked in the launching process before any worker starts, and again by each rank as it loads."""
    from autoshard.strategies import backend_class

    if meta.layout_hash != plan.model.layout_hash:
        return UsageError(f"checkpoint {directory} was written for another model (layout {meta.layout_hash}, this "
                          f"model {plan.model.layout_hash}).", hint="Point Checkpointing(dir=...) at this model's run.")
    if meta.family != plan.family:
        return UsageError(f"checkpoint {directory} was written by {meta.strategy}, and this run uses "
                          f"{plan.strategy}.",
                          hint="Resume with the same strategy family, or start afresh from its weights: load them "
                               "into the model as docs/fit.md shows (a checkpoint's weights outside autoshard); the "
                               "optimizer's state is not carried over.")
    if plan.family == "deepspeed" and _zero3(meta.strategy) != (plan.strategy_traits.zero_stage == 3):
        return UsageError(f"checkpoint {directory} was written by {meta.strategy}, and this run uses "
                          f"{plan.strategy}: ZeRO-3 partitions its checkpoint differently from ZeRO-1 and -2.",
                          hint=f"Resume with {'a ZeRO-3 strategy' if _zero3(meta.strategy) else 'ZeRO-1 or -2'}, "
                               "or start afresh.")
    if meta.world_size != world_size and not backend_class(plan.family).reshards_checkpoints:
        ranks = f"{meta.world_size} rank{'s' if meta.world_size != 1 else ''}"
        return UsageError(f"checkpoint {directory} was written by {ranks}, and this run has "
                          f"{world_size}: {plan.strategy}'s checkpoint is partitioned per rank.",
                          hint="Resume with the same number of processes.")
    return None


def _zero3(strategy: str) -> bool:
    from autoshard.strategies import get

    try:
        return get(strategy).traits.zero_stage == 3
    except UsageError:  # a strategy this version does not know: its name says the stage
        return strategy.startswith("deepspeed_stage_3")


def restore(backend: Backend, directory: Path, *, scheduler: LRScheduler | None = None) -> Restored:
    """Load a checkpoint into ``backend`` (collective) after checking it belongs to this run; with
    ``scheduler``, restore its state too and set the optimizer's learning rates to the schedule's. The position
    returned is in this run's micro-batches per rank (:func:`rescaled`); the notes say which of the optimizer's
    settings the checkpoint's replaced (torch's ``load_state_dict`` keeps the saved ones) and whether the global
    batch differs from the checkpoint's run.

    Raises:
        UsageError: written for another model, strategy family, optimizer algorithm, or (DeepSpeed: its ZeRO state
            is partitioned per rank) world size; a mid-epoch position this run's batches cannot reach; or a
            ``scheduler`` is given and the checkpoint holds none.
    """
    meta = read_meta(directory)
    plan, ctx = backend.plan, backend.ctx
    refused = refusal(meta, directory, plan, ctx.world_size)
    if refused is not None:
        raise refused
    position = rescaled(meta, ctx.world_size, backend.plan.micro_batch_size, directory)
    if scheduler is not None and not (directory / SCHEDULER_FILE).is_file():
        raise UsageError(f"checkpoint {directory} was saved without a learning-rate scheduler, and this run has "
                         "one: its schedule cannot be continued.",
                         hint="Resume without lr_scheduler=, or start afresh in another checkpoint_dir.")
    optimizer = backend.torch_optimizer
    ours = resumed_optimizer.algorithm(optimizer)
    if meta.optimizer is not None and meta.optimizer != ours:
        raise UsageError(f"checkpoint {directory} holds {meta.optimizer}'s optimizer state, and this run's optimizer "
                         f"is {ours}: it cannot continue that state.",
                         hint=f"Resume with {meta.optimizer}, or load only the checkpoint's weights into the model "
                              "(docs/fit.md, loading a checkpoint without autoshard) and start afresh.")
    given = resumed_optimizer.hyperparameters(optimizer)
    try:
        backend.load(directory)
    except Exception as exc:
        if not _damaged(exc):
            raise
        raise UsageError(f"cannot load checkpoint {directory}: a file in it is damaged or incomplete "
                         f"({type(exc).__name__}: {_first_line(exc)}).", hint=_earlier_hint(directory)) from exc
    resumed_optimizer.fill_missing(optimizer, given)  # DeepSpeed's CPU Adam reads settings torch's AdamW has not
    changed = resumed_optimizer.replaced(given, resumed_optimizer.hyperparameters(optimizer),
                                         scheduled=scheduler is not None)
    notes = []
    if changed:
        notes.append("The optimizer's settings are the checkpoint's, not those it was built with "
                     f"({', '.join(changed)}): loading an optimizer's state restores its parameter groups, as "
                     "torch's load_state_dict does. To train on with other settings, load the checkpoint's weights "
                     "into the model and start afresh (docs/fit.md: a checkpoint's weights outside autoshard).")
    if meta.micro_batch_size is not None and meta.gradient_accumulation is not None:
        before = meta.micro_batch_size * meta.gradient_accumulation * meta.world_size
        now = plan.micro_batch_size * plan.gradient_accumulation * ctx.world_size
        if before != now:
            notes.append(f"The global batch is {now} samples per optimizer step ({plan.micro_batch_size} x "
                         f"{plan.gradient_accumulation} x {ctx.world_size} ranks), and the checkpoint's run took "
                         f"{before} ({meta.micro_batch_size} x {meta.gradient_accumulation} x {meta.world_size}): "
                         "training goes on from the same samples, with another batch size (and the same learning "
                         f"rate). Pass batch_size= or global_batch_size={before} to keep it.")
    rng = directory / f"rng-rank{ctx.rank}.pt"
    if rng.is_file():
        set_rng_state(torch.load(rng, weights_only=True))
    if scheduler is not None:
        scheduler.load_state_dict(torch.load(directory / SCHEDULER_FILE, weights_only=True))
        # The learning rates the schedule had reached, whatever the backend's optimizer state restored.
        for group, lr in zip(backend.torch_optimizer.param_groups, scheduler.get_last_lr(), strict=True):
            if isinstance(group["lr"], torch.Tensor):
                group["lr"].fill_(lr)
            else:
                group["lr"] = lr
    return Restored(position=position, notes=tuple(notes))


def _damaged(exc: BaseException) -> bool:
    """Whether ``exc`` is what torch's and DeepSpeed's loaders raise for a truncated or corrupt file: a zip
    archive torch cannot read, a pickle cut short, or ``torch.distributed.checkpoint``'s failure on a rank (which
    wraps the reader's error)."""
    import pickle
    import zipfile

    from torch.distributed.checkpoint.api import CheckpointException

    if isinstance(exc, (EOFError, pickle.UnpicklingError, zipfile.BadZipFile, CheckpointException)):
        return True
    return isinstance(exc, RuntimeError) and "PytorchStreamReader" in str(exc)


def _first_line(exc: BaseException) -> str:
    line = next((part.strip() for part in str(exc).splitlines() if part.strip()), "")
    return line if len(line) <= 160 else line[:157] + "..."


def _earlier_hint(directory: Path) -> str:
    """Resume from the newest complete checkpoint before ``directory`` in its run, if there is one."""
    earlier = [p for p in sorted(_complete(directory.parent)) if p.name < directory.name] \
        if directory.parent.is_dir() else []
    if earlier:
        return f"Resume from the one before it: Checkpointing(resume={str(earlier[-1])!r})."
    return "Resume from another checkpoint of the run, or start afresh."


def rescaled(meta: CheckpointMeta, world_size: int, micro_batch_size: int, directory: Path) -> Position:
    """The checkpoint's position in micro-batches of ``micro_batch_size`` per rank over ``world_size`` ranks.

    Every rank's micro-batches of an epoch come from one order of the samples (the ``DistributedSampler``'s, the
    same for every world size; or the batches of an iterable, dealt out in turn), rank ``r`` taking every
    ``world_size``-th: what an epoch has consumed is its first ``batch_in_epoch × micro-batch × ranks`` samples,
    whatever the ranks. Another run continues after the same samples — but for a ``DataLoader`` at one rank, which
    keeps its own sampler (a shuffled one's order is its own, not the ``DistributedSampler``'s).

    Raises:
        UsageError: mid-epoch, this run's micro-batches over its ranks do not divide what was consumed.
    """
    pos = meta.position
    old = meta.micro_batch_size or micro_batch_size
    if (meta.world_size, old) == (world_size, micro_batch_size) or pos.batch_in_epoch == 0:
        return pos
    consumed = pos.batch_in_epoch * old * meta.world_size
    per_step = micro_batch_size * world_size
    if consumed % per_step:
        raise UsageError(f"checkpoint {directory} stands {consumed} samples into epoch {pos.epoch} "
                         f"({pos.batch_in_epoch} micro-batches of {old} on each of {meta.world_size} ranks), which "
                         f"this run's micro-batches of {micro_batch_size} on {world_size} ranks do not reach.",
                         hint=f"Resume with a micro-batch × ranks that divides {consumed}, or from an epoch's end.")
    return Position(step=pos.step, epoch=pos.epoch, batch_in_epoch=consumed // per_step)


def epoch_rng(directory: Path, rank: int) -> dict[str, torch.Tensor] | None:
    """This rank's RNG state when the checkpoint's epoch began (``None`` in checkpoints written before)."""
    path = directory / f"{EPOCH_RNG_PREFIX}{rank}.pt"
    return torch.load(path, weights_only=True) if path.is_file() else None


def rng_state() -> dict[str, torch.Tensor]:
    """torch's global RNG states (CPU, and CUDA once initialised)."""
    state = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict[str, torch.Tensor]) -> None:
    """Set what :func:`rng_state` gave."""
    torch.set_rng_state(state["cpu"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])
