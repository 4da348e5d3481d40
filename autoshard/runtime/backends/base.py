"""One small base class per training backend: build the wrapped model and optimizer from a plan, run the
micro-step, step the optimizer, save / load / consolidate state.

A backend is built for one :class:`~autoshard.planner.plan_file.ExportedPlan` in one process of the run. The
training loop (:mod:`autoshard.runtime.loop`) only calls the methods below, so the loop is the same for DDP,
FSDP2 and DeepSpeed, and ``benchmarks/fit_overhead.py`` can compare it with a hand-written loop per backend.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import nn

from autoshard.models.source import CallFn, call_model
from autoshard.planner.plan_file import ExportedPlan
from autoshard.runtime.distributed import RunContext
from autoshard.runtime.precision import PrecisionRecipe, recipe

OptimizerFactory = Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer]


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelInit:
    """The model to train: a module the user built, or a way to build it (so big models can be built sharded)."""

    module: nn.Module | None = None
    """A module already built on the CPU (or its device)."""
    build: Callable[[], nn.Module] | None = None
    """Builds the module on the current default device (``meta`` for sharded construction)."""
    block_names: tuple[str, ...] = ()
    """The repeated blocks (the FSDP unit and the checkpointing unit), by module name, stack after stack
    (:func:`autoshard.profiler.blocks.find_repeated_blocks`); they may be of several classes."""

    def materialise(self) -> nn.Module:
        """The module itself: the one given, or a fresh build."""
        if self.module is not None:
            return self.module
        if self.build is None:
            raise ValueError("ModelInit needs a module or a build function")
        return self.build()


class Backend(abc.ABC):
    """Training with one family of strategies (``ddp``, ``fsdp``, ``deepspeed``)."""

    family: ClassVar[str] = ""
    scaler: torch.amp.GradScaler | None = None
    """The loss scaler of a backend that trains ``16-mixed`` with a torch optimizer (:meth:`grad_scaler`)."""
    reshards_checkpoints: ClassVar[bool] = False
    """Its checkpoints load into a run with another number of ranks (FSDP2's DCP reshards them)."""

    def __init__(self, plan: ExportedPlan, ctx: RunContext, *, grad_clip_norm: float | None = None) -> None:
        self.plan = plan
        self.ctx = ctx
        self.grad_clip_norm = grad_clip_norm
        """Clip the gradients' global 2-norm to this before each optimizer step (``None``: no clipping)."""
        self.settings = dict(plan.settings)
        self.precision: PrecisionRecipe = recipe(plan.precision)
        self.traits = plan.strategy_traits
        """What the plan's strategy does (sharding stage, offload, hybrid): what the backend asks, never the name."""

    @classmethod  # noqa: B027 — an optional hook
    def check_dependencies(cls, device_type: str) -> None:
        """Raise a :class:`~autoshard.errors.UsageError` with an install hint when the backend's dependency is
        missing for ``device_type`` (nothing to check by default)."""

    @abc.abstractmethod
    def setup(self, model: ModelInit, make_optimizer: OptimizerFactory) -> None:
        """Build the wrapped model and the optimizer over the parameters it trains."""

    @property
    @abc.abstractmethod
    def module(self) -> nn.Module:
        """The user's module (unwrapped; sharded in place where the backend shards)."""

    @abc.abstractmethod
    def forward(self, batch: Any, *, sync: bool, call: CallFn = call_model) -> Any:
        """The model's output for one micro-batch (the caller holds :meth:`autocast`); ``sync`` is false on all
        but the last micro-batch of an optimizer step (gradients accumulate locally). ``call(model, batch)``
        feeds the wrapped model (:mod:`autoshard.models.step`)."""

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """The context forward *and* loss run in: ``torch.autocast`` where the backend trains mixed precision
        through autocast (DDP), else nothing (FSDP2's policy and DeepSpeed cast the parameters themselves).

        The loss belongs inside it, as in PyTorch's AMP recipe and Lightning's training step: autocast runs
        ``cross_entropy`` and other reductions in fp32 on 16-bit logits; outside it they run in 16 bits.
        """
        return contextlib.nullcontext()

    @abc.abstractmethod
    def backward(self, loss: torch.Tensor, *, sync: bool) -> None:
        """Backward of one micro-batch's loss (``sync`` as in :meth:`forward`)."""

    @abc.abstractmethod
    def step(self) -> None:
        """Optimizer step and zero the gradients."""

    @abc.abstractmethod
    def save(self, directory: Path) -> None:
        """Write this backend's training state into ``directory`` (collective: every rank calls it)."""

    @abc.abstractmethod
    def load(self, directory: Path) -> None:
        """Restore what :meth:`save` wrote (collective)."""

    @abc.abstractmethod
    def full_state_dict(self) -> dict[str, torch.Tensor] | None:
        """The whole model's state dict on CPU, fp32 where the backend keeps fp32 master weights, on rank 0;
        ``None`` on other ranks (collective)."""

    def evaluated(self) -> None:  # noqa: B027 — an optional hook, a no-op unless overridden
        """After forwards without gradients (``eval_data`` scored): undo what they left for the next training step."""

    def close(self) -> None:  # noqa: B027 — an optional hook, a no-op unless overridden
        """Release what the backend holds outside the module (engines, hooks)."""

    def hand_back(self, state: dict[str, torch.Tensor]) -> None:  # noqa: B027 — optional, a no-op unless overridden
        """After :meth:`close`, on the rank holding the consolidated ``state``: leave a module the user gave as a
        plain module holding ``state``, in the dtypes it came in (a backend that cast or partitioned it in place
        undoes that here)."""

    @property
    def torch_optimizer(self) -> torch.optim.Optimizer:
        """The ``torch.optim.Optimizer`` whose parameter groups' ``lr`` the optimizer step uses: what a
        learning-rate scheduler drives (valid after :meth:`setup`).

        The backend's ``optimizer`` itself, or the torch optimizer it wraps: DeepSpeed's ZeRO and fp16 / bf16
        wrappers keep it as ``.optimizer`` (the engine's ``basic_optimizer``, which is what DeepSpeed builds a
        client scheduler over: ``runtime/engine.py``, 0.19.8).
        """
        opt = getattr(self, "optimizer", None)
        while opt is not None and not isinstance(opt, torch.optim.Optimizer):
            opt = getattr(opt, "optimizer", None)
        if opt is None:
            raise TypeError(f"{type(self).__name__} has no torch optimizer (is it set up?)")
        return opt

    # -- shared helpers ---------------------------------------------------------------------------------------
    def loss_scale_for(self, accumulation: int) -> float:
        """Factor applied to each micro-batch loss before backward so accumulated gradients are a mean."""
        return 1.0 / accumulation

    def grad_scaler(self) -> torch.amp.GradScaler | None:
        """A ``GradScaler`` on this rank's device where the precision scales the loss (``16-mixed``), else
        ``None``: what a backend with a torch optimizer keeps as :attr:`scaler`."""
        return torch.amp.GradScaler(self.ctx.device.type) if self.precision.loss_scaling else None

    def scaled_backward(self, loss: torch.Tensor) -> None:
        """Backward of ``loss``, multiplied by the scale first when there is a :attr:`scaler`."""
        (loss if self.scaler is None else self.scaler.scale(loss)).backward()

    def scaled_step(self, optimizer: torch.optim.Optimizer, parameters: Iterable[nn.Parameter]) -> None:
        """Step ``optimizer`` through the :attr:`scaler`, then zero the gradients.

        As PyTorch's AMP recipe ("Working with unscaled gradients", ``docs/source/notes/amp_examples.rst``):
        with ``grad_clip_norm``, the gradients are unscaled first and their global 2-norm over ``parameters``
        clipped (``clip_grad_norm_`` handles DTensor shards); ``scaler.step`` skips a step whose gradients
        overflowed, and ``scaler.update`` adjusts the scale.
        """
        if self.grad_clip_norm is not None:
            if self.scaler is not None:
                self.scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(parameters, self.grad_clip_norm)
        if self.scaler is None:
            optimizer.step()
        else:
            self.scaler.step(optimizer)
            self.scaler.update()
        optimizer.zero_grad(set_to_none=True)


def to_device(batch: Any, device: torch.device) -> Any:
    """``batch`` with every tensor on ``device`` (non-blocking from pinned memory)."""
    from autoshard.models.source import map_tensors

    def move(t: Any) -> Any:
        return t.to(device, non_blocking=True) if isinstance(t, torch.Tensor) else t

    return map_tensors(move, batch)
