"""``autoshard.fit``: training composed with tuning, above both.

:func:`autoshard.runtime.fit.fit` trains with a plan (planned now, given, or read from ``plan.json``);
:func:`autoshard.tune` measures candidates with short real trials, which train through the runtime.
``fit(tune=...)`` is the two in sequence, so it lives here, above both: the runtime never imports the tuner.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from autoshard.errors import UsageError, in_arguments

if TYPE_CHECKING:
    import torch
    from torch import nn

    from autoshard.hardware.specs import HardwareSpec
    from autoshard.models.source import ModelSource
    from autoshard.planner.machine import ReduceDtype
    from autoshard.planner.plan import Plan
    from autoshard.planner.plan_file import ExportedPlan
    from autoshard.profiler.options import OptimizerImpl, PrecisionName
    from autoshard.runtime.options import Checkpointing, DataSpec, LrSchedulerFactory, OptimizerSpec
    from autoshard.runtime.result import FitResult
    from autoshard.strategies.base import StrategyName


@in_arguments(())  # names checked (a guessed keyword is answered with the one meant); the runtime's fit() rewords
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
    tune: bool | Mapping[str, Any] = False,
    lr_scheduler: LrSchedulerFactory | None = None,
    optimizer_impl: OptimizerImpl | None = None,
    activation_checkpointing: str | bool | None = None,
    reduce_dtype: ReduceDtype | None = None,
    cache: bool = True,
) -> FitResult:
    """Train ``model`` with the recommended (or given) strategy; with ``tune``, measure candidates first.

    Every argument but ``tune`` is :func:`autoshard.runtime.fit.fit`'s (see there).

    Args:
        tune: tune first (:func:`autoshard.tune`: short real trials on this machine) and train with the fastest
            configuration; a dict gives ``tune()``'s arguments (e.g. ``{"trials": 8, "output_dir": "tune"}``).
            Needs a model source (trials rebuild the model in their own processes) and ``plan="auto"``.
        cache: ``False`` uses no cache: the model is traced again (the workload cache) and, with ``tune``, every
            trial is measured again (``tune(use_cache=False)`` unless the ``tune`` dict says otherwise).

    Raises:
        UsageError: bad arguments (checked before any trial), ``tune`` under a launcher, with ``plan=`` or with a
            module; and see :func:`autoshard.runtime.fit.fit`.
    """
    from autoshard.runtime.fit import fit as train
    from autoshard.runtime.fit_arguments import check_arguments, under_launcher
    from autoshard.runtime.supervisor import is_worker

    given: dict[str, Any] = dict(
        eval_data=eval_data, eval_every=eval_every, loss_fn=loss_fn, training_step=training_step,
        optimizer=optimizer, max_steps=max_steps, epochs=epochs,
        strategy=strategy, hardware=hardware, processes=processes, precision=precision, batch_size=batch_size,
        global_batch_size=global_batch_size, seq_len=seq_len, checkpointing=checkpointing, consolidate=consolidate,
        grad_clip_norm=grad_clip_norm, seed=seed, log_every=log_every, progress=progress, callbacks=callbacks,
        force=force,
        timeout_s=timeout_s, lr_scheduler=lr_scheduler, optimizer_impl=optimizer_impl,
        activation_checkpointing=activation_checkpointing, reduce_dtype=reduce_dtype, cache=cache)
    if not isinstance(tune, (bool, Mapping)):  # a truthy "yes" ran a whole study as if True
        raise UsageError(f"tune must be True, False or a dict of autoshard.tune()'s arguments, but got {tune!r}.",
                         hint='E.g. tune=True, or tune={"trials": 8}.')
    if not tune or is_worker():  # a worker fit() started trains with the plan the launching process tuned
        return train(model, data, plan=plan, **given)
    _, source = check_arguments(
        model, data, loss_fn=loss_fn, max_steps=max_steps, epochs=epochs, checkpointing=checkpointing,
        log_every=log_every, processes=processes, batch_size=batch_size, lr_scheduler=lr_scheduler,
        grad_clip_norm=grad_clip_norm, global_batch_size=global_batch_size, eval_data=eval_data,
        eval_every=eval_every, strategy=strategy)
    if loss_fn is None and training_step is None:
        _check_returns_a_loss(source)
    if under_launcher():
        raise UsageError("fit(tune=True) under a launcher would tune once per rank.",
                         hint="Run `autoshard tune MODEL` first, then fit(..., plan=\"autoshard-tune/best\").")
    from autoshard.runtime.data import fixed_batch_size

    # the trials run at the micro-batch the data holds (a DataLoader's batch size, a list's batches): a best plan
    # at another would be refused by the run it was tuned for
    batched = batch_size if batch_size is not None else fixed_batch_size(data)
    best, note = _tuned(model, plan, tune, strategy=strategy, hardware=hardware, processes=processes,
                        precision=precision, batch_size=batched, global_batch_size=global_batch_size,
                        seq_len=seq_len, optimizer=optimizer, seed=seed,
                        grad_clip_norm=grad_clip_norm, cache=cache, training_step=training_step, loss_fn=loss_fn)
    result = train(model, data, plan=best, **given)
    return dataclasses.replace(result, notes=(note, *result.notes))


def _check_returns_a_loss(source: ModelSource | None) -> None:
    """Refuse, before any trial, a model file with no ``loss()`` whose output holds none: the trials time it with
    profiling's stand-in, and the run after them refused it, a whole study later. Its forward runs on fake tensors
    (nothing allocated); a forward that fails there is left to the run, which says why."""
    if source is None or source.loss_fn is not None:
        return
    from torch._subclasses.fake_tensor import FakeTensorMode

    from autoshard.models.source import call_model
    from autoshard.runtime.train import returned_loss

    try:
        with FakeTensorMode(allow_non_fake_inputs=True):
            batch = source.batch(1)
            output = (source.call_fn or call_model)(source.build(), batch)
    except Exception:  # noqa: BLE001 - not this check's to judge: the run's own first step says it in full
        return
    returned_loss(output, batch)


def _check_tune_names(kwargs: Mapping[str, Any], tuner: Any) -> None:
    """Every key of ``fit(tune={...})`` is an argument of :func:`autoshard.tune`.

    Raises:
        UsageError: one is not, with the closest names (the Python names differ from the CLI's flags:
            ``trial_timeout_s`` for ``--trial-timeout``).
    """
    import inspect

    from autoshard._suggest import close_names

    names = [n for n in inspect.signature(tuner).parameters if n != "model"]
    for key in kwargs:
        if key not in names:
            close = close_names(str(key), names)
            raise UsageError(f"fit(tune={{...}}): {key!r} is not an argument of autoshard.tune()"
                             + (f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else "."),
                             hint=f"Its arguments: {', '.join(names)}.")


def _check_agreement(kwargs: Mapping[str, Any], given: Mapping[str, Any]) -> None:
    """Refuse, before any trial, a ``tune`` dict that contradicts ``fit()``'s own arguments: the run after the
    study trains with its best plan and refuses one made for another strategy, rank count, micro-batch or
    sequence (a probe's whole study ran first, then fit() said "the given plan was made for strategy ddp").

    Raises:
        UsageError: the first disagreement, named in both places.
    """
    def refuse(ours: str, theirs: str, tuned: Any, value: Any) -> None:
        raise UsageError(f"fit(tune={{...}}) has {theirs}={tuned!r} and fit() has {ours}={value!r}: the run after "
                         "the study would refuse the plan it tuned.",
                         hint=f"Give it once (drop {theirs!r} from the tune dict, or {ours}= from fit()), or make "
                              "them agree.")

    strategy = given.get("strategy")
    strategies = kwargs.get("strategies")
    if strategy is not None and strategies is not None and list(strategies) != [strategy]:
        refuse("strategy", "strategies", strategies, strategy)
    batch = given.get("batch_size")
    if batch is not None:
        if kwargs.get("batch_size") not in (None, batch):
            refuse("batch_size", "batch_size", kwargs["batch_size"], batch)
        sizes = kwargs.get("micro_batch_sizes")
        if sizes is not None and list(sizes) != [batch]:
            refuse("batch_size", "micro_batch_sizes", sizes, batch)
    for name in ("processes", "seq_len", "global_batch_size", "precision", "grad_clip_norm"):
        value = given.get(name)
        if value is not None and kwargs.get(name) not in (None, value):
            refuse(name, name, kwargs[name], value)


def _tuned(model: Any, plan: Any, tune: bool | Mapping[str, Any], **given: Any) -> tuple[ExportedPlan, str]:
    """Run the tuner for ``fit(tune=...)``: its best configuration and a note on what was measured."""
    from torch import nn

    from autoshard.tuner.result import TrialState
    from autoshard.tuning import tune as run_tuner

    if not (isinstance(plan, str) and plan == "auto"):
        raise UsageError("fit(tune=...) chooses the plan itself; it cannot be combined with plan=.",
                         hint="Drop plan=, or drop tune= to train with the given plan.")
    if isinstance(model, nn.Module):
        raise UsageError("fit(tune=True) needs a model source: each trial rebuilds the model in its own processes.",
                         hint="Pass the model.py path or catalog name (or run `autoshard tune` on a model.py).")
    kwargs: dict[str, Any] = dict(tune) if isinstance(tune, Mapping) else {}
    _check_tune_names(kwargs, run_tuner)
    mapping = {"strategy": "strategies", "hardware": "hardware", "processes": "processes",
               "precision": "precision", "batch_size": "batch_size", "global_batch_size": "global_batch_size",
               "seq_len": "seq_len", "seed": "seed",
               "grad_clip_norm": "grad_clip_norm",  # the trials clip as the run will
               "training_step": "training_step", "loss_fn": "loss_fn"}  # and run the step it will
    _check_agreement(kwargs, given)
    for ours, theirs in mapping.items():
        value = given[ours]
        if value is not None and theirs not in kwargs:
            kwargs[theirs] = [value] if ours == "strategy" else value
    if not given["cache"]:
        kwargs.setdefault("use_cache", False)
    optimizer = given["optimizer"]
    if isinstance(optimizer, str) and "optimizer" not in kwargs:
        kwargs["optimizer"] = optimizer
    # Every key is one of tune()'s (checked above) and fit()'s own arguments were checked before: a TypeError
    # from here on is not the tune dict's, and is not reworded as if it were.
    result = run_tuner(model, **kwargs)
    if result.best_plan is None:
        raise UsageError(f"tuning measured no configuration ({result.counts()}); nothing to train with.",
                         hint=f"See the trials' logs under {result.output_dir}/trials.")
    best = result.best
    planner = next((t for t in result.trials if t.number == result.planner_trial), None)
    # trials still waiting (queued past the trial limit) or running (another tuner's) measured nothing here
    ran = [t for t in result.trials if t.state not in (TrialState.WAITING, TrialState.RUNNING)]
    cached = sum(bool(t.cached) for t in ran)
    note = (f"Tuned with {len(ran)} trial(s)" + (f" ({cached} from the result cache)" if cached else "")
            + f" in {result.output_dir}: "
            f"best trial {best.number if best else '?'}"
            f" ({result.best_plan.strategy}, micro-batch {result.best_plan.micro_batch_size}) at "
            f"{best.samples_per_s if best and best.samples_per_s else 0:.1f} samples/s")
    if planner is not None and planner.samples_per_s:
        note += f"; the planner's choice measured {planner.samples_per_s:.1f}"
    if optimizer is not None and not isinstance(optimizer, str):  # the trials' processes rebuild it by name only
        note += (f"; the trials stepped the plan's optimizer ({result.best_plan.optimizer}), not the one given to "
                 "fit() (name it, or define optimizer() in the model file, to tune with it)")
    return result.best_plan, note + "."
