"""``fit()``'s checks of its arguments, made before anything slow (planning, tracing, starting workers): each
refusal names the argument as the user wrote it."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import torch
from torch import nn

from autoshard.errors import UsageError
from autoshard.models import load_source
from autoshard.models.source import ModelSource
from autoshard.profiler.checkpointing import parse_checkpointing
from autoshard.profiler.options import parse_grad_clip_norm
from autoshard.runtime import supervisor
from autoshard.runtime.data_checks import check as check_data
from autoshard.runtime.data_checks import check_not_columns
from autoshard.runtime.distributed import LaunchInfo
from autoshard.runtime.options import Checkpointing


def under_launcher() -> bool:
    """Whether this process is a rank of a launcher (torchrun, srun) or a worker :func:`fit` started."""
    return LaunchInfo.from_environ(os.environ) is not None or os.environ.get(supervisor.RUN_DIR_VAR) is not None


def check_arguments(model: Any, data: Any, *, loss_fn: Any, max_steps: int | None, epochs: int | None,
                    checkpointing: Any, log_every: int, processes: int | None, batch_size: int | None,
                    lr_scheduler: Any, grad_clip_norm: float | None, global_batch_size: int | None = None,
                    eval_data: Any = None, eval_every: int | None = None, strategy: Any = None
                    ) -> tuple[nn.Module | None, ModelSource | None]:
    """:func:`fit`'s checks of its arguments, before anything slow: the module or the loaded source.

    Raises:
        UsageError: a bad argument or model source.
    """
    _check_counts(max_steps=max_steps, epochs=epochs, log_every=log_every, processes=processes,
                  batch_size=batch_size, global_batch_size=global_batch_size, eval_every=eval_every)
    if strategy is not None and not isinstance(strategy, str):
        raise UsageError(f"strategy= takes one strategy name, but got {type(strategy).__name__} {strategy!r}: "
                         "recommend() and tune() take strategies=[...].",
                         hint="Pass e.g. strategy='fsdp', or to measure several fit(..., tune={'strategies': [...]}).")
    if strategy is not None:  # a misspelt name was refused after planning had traced the model
        from autoshard.strategies import get

        try:
            get(strategy)
        except UsageError as e:
            raise UsageError(f"strategy={strategy!r}: {e.message[0].lower()}{e.message[1:]}", hint=e.hint) from None
    if eval_every is not None and eval_data is None:
        raise UsageError("eval_every= says how often to score eval_data, and no eval_data was given.",
                         hint="Pass eval_data= (a Dataset, DataLoader or list of batches), or drop eval_every.")
    _check_checkpointing(checkpointing)
    if isinstance(lr_scheduler, type) and issubclass(lr_scheduler, (torch.optim.lr_scheduler.LRScheduler,
                                                                    torch.optim.lr_scheduler.ReduceLROnPlateau)):
        name = lr_scheduler.__name__  # called with the optimizer alone it failed in each worker, after planning
        if issubclass(lr_scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
            from autoshard.runtime.loop import plateau_refusal

            raise plateau_refusal()
        raise UsageError(f"lr_scheduler is the class {name}: fit() takes a factory optimizer -> LRScheduler, "
                         "which it calls with the optimizer alone.",
                         hint=f"Pass e.g. lr_scheduler=lambda opt: torch.optim.lr_scheduler.{name}(opt, ...) with its "
                              "other arguments.")
    if lr_scheduler is not None and not callable(lr_scheduler):
        raise UsageError(f"lr_scheduler must be a factory optimizer -> LRScheduler, but got "
                         f"{type(lr_scheduler).__name__}.",
                         hint="Pass e.g. lr_scheduler=lambda opt: torch.optim.lr_scheduler.LinearLR(opt, ...).")
    parse_grad_clip_norm(grad_clip_norm)
    if data is None and isinstance(model, nn.Module):
        raise UsageError("fit(module) with no data has nothing to train on.",
                         hint="Pass data=, or a model source (a model.py / catalog name) whose batch() is used.")
    if max_steps is None and epochs is None and data is None:
        raise UsageError("with no data, fit() trains on the model source's example batches: pass max_steps.")
    module, source = _model(model, loss_fn)
    if module is not None:
        _check_unsharded(module)
    for name, given in (("data", data), ("eval_data", eval_data)):
        if given is not None:
            check_data(given, name)
            check_not_columns(given, name)
    return module, source



def _model(model: Any, loss_fn: Any) -> tuple[nn.Module | None, ModelSource | None]:
    if isinstance(model, nn.Module):
        return model, None
    if isinstance(model, (str, os.PathLike, ModelSource)):
        return None, load_source(model)
    raise UsageError(f"model must be a torch.nn.Module or a model source (a model.py path, a config.json path or "
                     f"a catalog name), but got {type(model).__name__}.")


def _check_checkpointing(checkpointing: Any) -> None:
    """Refuse ``checkpointing`` that is not a :class:`Checkpointing`, or whose values cannot work."""
    if checkpointing is None:
        return
    if isinstance(checkpointing, (str, bool)):
        raise UsageError(f"checkpointing= saves training state; got {checkpointing!r}.",
                         hint=_checkpointing_hint(checkpointing))
    if not isinstance(checkpointing, Checkpointing):
        raise UsageError(f"checkpointing must be an autoshard.Checkpointing, but got {type(checkpointing).__name__}.",
                         hint="Pass e.g. checkpointing=autoshard.Checkpointing(dir=\"runs/1\", every=200).")
    _check_counts(**{"checkpointing.every": checkpointing.every, "checkpointing.keep_last": checkpointing.keep_last})
    for field in ("every", "keep_last"):
        if getattr(checkpointing, field) is not None and checkpointing.dir is None:
            raise UsageError(f"checkpointing.{field} needs checkpointing.dir: without it nothing is saved.",
                             hint=f"Pass Checkpointing(dir=..., {field}=...).")
    if checkpointing.resume is True and checkpointing.dir is None:
        raise UsageError("checkpointing.resume=True needs checkpointing.dir.",
                         hint="Pass Checkpointing(dir=the run's directory, resume=True), or resume= a checkpoint path.")
    for field in ("dir", "resume"):
        value = getattr(checkpointing, field)
        if isinstance(value, (str, os.PathLike)) and not os.fspath(value).strip():  # Path("") is the current dir
            raise UsageError(f"checkpointing.{field} is an empty path.",
                             hint=f"Pass Checkpointing({field}=a directory), or leave {field} out.")
    if isinstance(checkpointing.dir, (str, os.PathLike)):
        _check_writable_dir(Path(checkpointing.dir))


def _check_writable_dir(directory: Path) -> None:
    """Refuse a checkpoint directory that could not be written, before training: the first save (at the end, or
    after ``every`` steps) would otherwise raise after the steps it was to keep. Nothing is created here."""
    if directory.exists() and not directory.is_dir():
        raise UsageError(f"checkpointing.dir {directory} is a file, not a directory.",
                         hint="Pass a directory (it is made if it does not exist).")
    parent = directory
    while not parent.exists():  # the nearest existing directory it would be made in
        parent = parent.parent
    if not parent.is_dir():
        raise UsageError(f"checkpointing.dir {directory} cannot be made: {parent} is a file.")
    try:  # a real try: permissions, read-only mounts and root's rights answer as they will at the save
        with tempfile.TemporaryFile(dir=parent):
            pass
    except OSError as exc:
        raise UsageError(f"checkpointing.dir {directory} cannot be written: {parent}: "
                         f"{exc.strerror or exc}.") from None


def _checkpointing_hint(value: str | bool) -> str:
    """What ``checkpointing=value`` may have meant: recomputing activations, with ``value`` where it names a way to
    (a bool, ``"full"``), else saving state in the directory it names."""
    try:
        parse_checkpointing(value)
    except UsageError:  # not a way to recompute: a directory, most likely
        return (f"Saving is checkpointing=autoshard.Checkpointing(dir={value!r}); recomputing activations in "
                "backward is activation_checkpointing= ('full', 'op', 'every-N').")
    return (f"Recomputing activations in backward is activation_checkpointing={value!r}; saving is "
            "checkpointing=autoshard.Checkpointing(dir=...).")


def check_run_options(*, seed: Any, timeout_s: Any, consolidate: Any, progress: Any, loss_fn: Any,
                       checkpointing: Checkpointing | None) -> None:
    """Refuse the run's other arguments before planning: they were met only inside a worker (``seed=None``: a
    ``TypeError`` from ``torch.manual_seed`` on rank 0; ``timeout_s=0``: the workers stopped after they started)
    or not at all (``progress="no"`` was true)."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**32:  # as tune() takes it
        raise UsageError(f"seed must be a whole number from 0 to 2**32 - 1, but got {seed!r}.")
    if timeout_s is not None and (isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float))
                                  or not timeout_s > 0):
        raise UsageError(f"timeout_s must be a positive number of seconds (or None: no limit), but got {timeout_s!r}.")
    for name, value in (("consolidate", consolidate), ("progress", progress)):
        if not isinstance(value, bool):
            raise UsageError(f"{name} must be True or False, but got {value!r}.")
    if loss_fn is not None and not callable(loss_fn):
        raise UsageError(f"loss_fn must be a function loss_fn(output, batch) returning a scalar tensor, but got "
                         f"{loss_fn!r}.", hint="E.g. loss_fn=lambda out, batch: F.mse_loss(out, batch[1]).")
    if checkpointing is not None and checkpointing.dir is not None and not isinstance(checkpointing.dir,
                                                                                      (str, os.PathLike)):
        raise UsageError(f"checkpointing.dir must be a path, but got {checkpointing.dir!r}.")


def _check_unsharded(module: nn.Module) -> None:
    """Refuse a module on the meta device (no values: its forward failed in planning, blamed on the user's code),
    and a module FSDP2 sharded in place: a one-process ``fit()`` with an FSDP strategy and ``consolidate=False``
    (or under a launcher) leaves it so (``FitResult.model``), and planning copies a plain module (FSDP2 refuses
    ``deepcopy``: the second call was reported as an error in the user's ``model()``)."""
    from torch.distributed.fsdp import FSDPModule

    if any(isinstance(m, FSDPModule) for m in module.modules()):
        raise UsageError(f"model is an FSDP2-sharded {type(module).__name__}: a fit() in this process sharded it in "
                         "place (with consolidate=False, or when that run failed, it stays so), and fit() plans and "
                         "wraps a plain module.",
                         hint="Build the model again and load the trained weights into it (result.state_dict of a "
                              "run with consolidate=True, the default, or a checkpoint), then pass that.")
    # one process only: under a launcher the ranks but 0 keep their partitions after a run that succeeded, and a
    # refusal on some ranks alone would leave the others waiting
    partitioned = [] if under_launcher() else [n for n, p in module.named_parameters() if hasattr(p, "ds_id")]
    if partitioned:  # its forward failed in planning ("'weight' must be 2-D"), blamed on the user's code
        raise UsageError(f"model's parameters are partitioned by DeepSpeed ZeRO-3 ({partitioned[0]} and "
                         f"{len(partitioned) - 1} more): a fit() in this process that failed left them so, and "
                         "fit() plans and trains a whole module.",
                         hint="Build the model again (and load weights from a checkpoint of that run), then pass "
                              "that.")
    on_meta = [n for n, t in (*module.named_parameters(), *module.named_buffers()) if t.is_meta]
    if on_meta:  # its forward failed in planning, blamed on the user's code (FakeTensorDeviceMismatchError)
        raise UsageError(f"model's {on_meta[0]}{f' and {len(on_meta) - 1} more' if len(on_meta) > 1 else ''} "
                         "are on the meta device: no values to train.",
                         hint="Materialise it first (model.to_empty(device='cpu'), then initialise or load the "
                              "weights), or pass a model source (a model.py / config.json) that fit() builds.")


def _check_counts(**values: int | None) -> None:
    for name, value in values.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise UsageError(f"{name} must be a positive whole number, but got {value!r}.")
