"""Which optimizer ``fit(optimizer=...)`` names, and which strategies can step it.

An optimizer is given as a name, a class, an instance or a factory; the planner knows names
(:data:`~autoshard.profiler.options.OPTIMIZERS`), the strategies refuse some (bitsandbytes' kernels under FSDP2,
anything but Adam under ZeRO-Offload). These turn what was given into what the planner and the strategies are asked.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from autoshard.errors import UsageError
from autoshard.profiler.options import OptimizerImpl, parse_optimizer_impl

if TYPE_CHECKING:
    from autoshard.planner.plan_file import ExportedPlan
    from autoshard.runtime.train import TrainJob


def optimizer_impl_for(impl: OptimizerImpl | str | None, optimizer: Any) -> OptimizerImpl | None:
    """``impl`` checked against the optimizer named (AdamW when it is not a name)."""
    if impl is None:
        return None
    return parse_optimizer_impl(impl, optimizer if isinstance(optimizer, str) else "adamw")


def optimizer_name(optimizer: Any) -> str | None:
    """The name (of :data:`~autoshard.profiler.options.OPTIMIZERS`) to plan ``fit(optimizer=...)`` with: a name
    as given; torch's AdamW, Adam, SGD and Adafactor (and transformers' Adafactor) given as a class or an instance by
    their names (an SGD class was planned, labelled and exported as AdamW, and refused by ZeRO-Offload only in the
    workers); ``adamw8bit`` for bitsandbytes' 8-bit Adam / AdamW (its state is what the plan must hold, and FSDP2
    cannot step it); ``None`` for anything else (planned as ``adamw``, which a note says).

    Example:
        >>> optimizer_name("AdamW"), optimizer_name(torch.optim.SGD), optimizer_name(torch.optim.Adagrad)
        ('adamw', 'sgd', None)
    """
    from autoshard.profiler.optimizers import optimizer_key
    from autoshard.profiler.options import parse_optimizer

    if isinstance(optimizer, str):
        return parse_optimizer(optimizer)
    cls = optimizer if isinstance(optimizer, type) else type(optimizer)
    if not cls.__module__.startswith("bitsandbytes"):
        return optimizer_key(cls)
    if not cls.__name__.lower().startswith(("adam", "pagedadam")):
        return None
    bits = getattr(getattr(optimizer, "args", None), "optim_bits", 8 if "8bit" in cls.__name__ else 32)
    return "adamw8bit" if bits == 8 else None


def optimizer_label(optimizer: Any) -> str | None:
    """What a strategy's :meth:`~autoshard.strategies.base.Strategy.refuses` is asked about for ``fit(optimizer=
    ...)``: :func:`optimizer_name`'s name, else ``bitsandbytes.<Class>`` for any other bitsandbytes optimizer given
    as a class or an instance (Lion8bit, 32-bit AdamW: kernels of their own, which FSDP2 cannot run), else ``None``.

    Example:
        >>> optimizer_label("adamw"), optimizer_label(torch.optim.SGD), optimizer_label(torch.optim.Adagrad)
        ('adamw', 'sgd', None)
    """
    from autoshard.profiler.options import BITSANDBYTES_OBJECT

    name = optimizer_name(optimizer)
    if name is not None or optimizer is None or isinstance(optimizer, str):
        return name
    cls = optimizer if isinstance(optimizer, type) else type(optimizer)
    return f"{BITSANDBYTES_OBJECT}{cls.__name__}" if cls.__module__.startswith("bitsandbytes") else None


def check_optimizer(job: TrainJob, exported: ExportedPlan) -> None:
    """The plan's strategy can step the optimizer named (by ``optimizer=`` or the plan), before any process starts.

    Raises:
        UsageError: it cannot (bitsandbytes' optimizers under FSDP2 or ZeRO-Offload).
    """
    from autoshard.strategies import get

    if job.optimizer is None and job.source is not None and job.source.optimizer_fn is not None:
        return
    name = exported.optimizer if job.optimizer is None else optimizer_label(job.optimizer)
    if name is None:
        return
    reason = get(exported.strategy).refuses(name)
    if reason is not None:
        raise UsageError(f"the plan's strategy {exported.strategy} cannot step optimizer {name}: {reason}",
                         hint="Pass a plan for another strategy, or plan='auto' to plan for this optimizer.")


def able_strategies(optimizer: Any, strategy: str | None, notes: list[str]) -> list[str] | None:
    """The strategies to plan over (``None``: all): ``strategy`` if named, less those that cannot step an optimizer
    given as a class or an instance that autoshard does not plan by name (a bitsandbytes one other than AdamW8bit,
    torch's Adagrad, a user's Lion: planned with AdamW's two 32-bit states per parameter, which a note says, and
    refused by ZeRO-Offload before any process starts, not by its workers). An instance holding state is told it is
    not carried over.

    Raises:
        UsageError: none of them can step it.
    """
    from autoshard.planner.search import check_optimizer
    from autoshard.strategies import get, names

    label = optimizer_label(optimizer)
    asked = None if strategy is None else [strategy]
    if isinstance(optimizer, torch.optim.Optimizer) and optimizer.state:
        notes.append(f"optimizer: the {type(optimizer).__name__} instance given holds state ({len(optimizer.state)} "
                     "parameters' worth, from steps it took or a state_dict loaded into it), which is not carried "
                     "over: fit() builds a fresh one with its hyper-parameters over the parameters it trains. "
                     "Checkpointing(resume=True) continues a fit() run with its optimizer state.")
    cls = optimizer if isinstance(optimizer, type) else type(optimizer)
    if not issubclass(cls, torch.optim.Optimizer) or (label is not None and label == optimizer_name(optimizer)):
        return asked  # a name, None, a factory (what it builds is known once built), or one planned by its name
    label = label or cls.__name__
    check_optimizer(label, [get(n) for n in asked or names()])
    able = [n for n in asked or names() if get(n).refuses(label) is None]
    notes.append(f"optimizer {label} is planned with AdamW's memory (two 32-bit states per parameter; one holding "
                 "less, as 8-bit states or a single momentum, needs less, and one holding more, as AdEMAMix's three, "
                 f"more), over the strategies that can step it: {', '.join(able)}.")
    return able
