"""Turning ``fit()``'s ``plan`` argument into the :class:`ExportedPlan` every rank trains with.

``plan="auto"`` plans here (rank 0 only; the others receive it), a :class:`~autoshard.planner.plan.Plan` is
exported, and a ``plan.json`` path is read and checked against the model and the run by fingerprint.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_map

from autoshard.errors import UsageError
from autoshard.models.source import ModelSource
from autoshard.models.step import step_functions
from autoshard.planner.plan_file import (
    ExportedPlan,
    ModelFingerprint,
    from_plan,
    layout_hash,
    read,
)
from autoshard.strategies.workload import parameter_layout


def module_source(module: nn.Module, example_batch: Any, *, loss_fn: Any = None, training_step: Any = None
                  ) -> ModelSource:
    """A :class:`ModelSource` over a module the user already built, for profiling and planning.

    ``build_fn`` never copies the weights: under ``FakeTensorMode`` it returns a fake copy, on the ``meta``
    device a meta copy; ``batch_fn(n)`` repeats the example batch's first sample ``n`` times. Under a 16-bit
    default dtype (the profiler builds ``bf16-true`` models that way, as Lightning does) the fake / meta copy's
    floating tensors are made in that dtype: the profiler cannot cast them afterwards, because
    ``Module.to`` swaps fake tensors and the fake-tensor converter keeps weak references to the ones it made.
    """

    def build() -> nn.Module:
        from torch._guards import detect_fake_mode

        fake = detect_fake_mode()
        default = torch.get_default_dtype()
        half = default if default in (torch.float16, torch.bfloat16) else None

        def dtype_of(t: torch.Tensor) -> torch.dtype:
            return half if half is not None and t.is_floating_point() else t.dtype

        if fake is not None:
            def convert(t: torch.Tensor) -> torch.Tensor:
                copied = fake.from_tensor(t)
                return copied if copied.dtype == dtype_of(t) else copied.to(dtype_of(t))
        elif torch.get_default_device().type == "meta":
            def convert(t: torch.Tensor) -> torch.Tensor:
                return torch.empty_like(t, device="meta", dtype=dtype_of(t))
        else:
            return copy.deepcopy(module)
        memo: dict[int, Any] = {}
        for t in (*module.parameters(), *module.buffers()):
            if id(t) not in memo:
                copied = convert(t.detach())
                memo[id(t)] = nn.Parameter(copied, requires_grad=t.requires_grad) if isinstance(
                    t, nn.Parameter) else copied
        return copy.deepcopy(module, memo)

    def batch(batch_size: int) -> Any:
        def repeat(t: Any) -> Any:
            if not isinstance(t, torch.Tensor) or t.dim() == 0:
                return t
            return t[:1].repeat(batch_size, *([1] * (t.dim() - 1)))

        return tree_map(repeat, example_batch)

    steps = step_functions(module, loss_fn=loss_fn, training_step=training_step)
    return ModelSource(name=type(module).__name__, kind="module", origin=f"module:{type(module).__qualname__}",
                       build_fn=build, batch_fn=batch, loss_fn=steps.loss, call_fn=steps.call)


def model_fingerprint(module: nn.Module, name: str) -> ModelFingerprint:
    """The fingerprint a plan for ``module`` carries (works on real, meta and fake modules)."""
    numels, blocks, block_counts = parameter_layout(module)
    unique = {id(p): p.numel() for p in module.parameters()}
    return ModelFingerprint(name=name, parameter_count=sum(unique.values()),
                            block_class=None if blocks is None else ",".join(blocks.class_names),
                            layout_hash=layout_hash(numels, block_counts))


@dataclass(frozen=True, kw_only=True, slots=True)
class RunShape:
    """The run a plan must fit: how many ranks, on what."""

    world_size: int
    device_type: str
    gpu: str | None
    """This machine's GPU model name, when known."""


def check(exported: ExportedPlan, fingerprint: ModelFingerprint, run: RunShape, *, source: str,
          force: bool) -> list[str]:
    """Compare a plan with the model and run; returns the differences ``force`` let through.

    Raises:
        UsageError: a difference, unless ``force``; a world-size or device mismatch is refused even then
            (the batch sizes and shardings in the plan cannot work).
    """
    hard, soft = [], []
    if exported.hardware.world_size != run.world_size:
        hard.append(f"it is for {exported.hardware.world_size} ranks and this run has {run.world_size}")
    if exported.hardware.device_type != run.device_type:
        hard.append(f"it is for {exported.hardware.device_type} and this run is on {run.device_type}")
    m = exported.model
    if m.layout_hash != fingerprint.layout_hash:
        soft.append(f"it is for model {m.name} ({m.parameter_count:,} parameters, layout {m.layout_hash}) and this "
                    f"model is {fingerprint.name} ({fingerprint.parameter_count:,} parameters, layout "
                    f"{fingerprint.layout_hash})")
    if run.gpu is not None and exported.hardware.gpu is not None and run.gpu != exported.hardware.gpu:
        soft.append(f"it is for {exported.hardware.gpu} GPUs and this machine has {run.gpu}")
    if hard:
        raise UsageError(f"{source} does not fit this run: {'; '.join(hard + soft)}.",
                         hint="Plan again for this run (plan='auto').")
    if soft and not force:
        raise UsageError(f"{source} was made for something else: {'; '.join(soft)}.",
                         hint="Plan again (plan='auto'), or pass force=True to train with it anyway.")
    return soft


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
        return read(path), str(path)
    raise UsageError(f"plan must be 'auto', a Plan, or a plan.json path, but got {type(plan).__name__}.")
