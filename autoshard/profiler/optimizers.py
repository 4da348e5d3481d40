"""Building an optimizer by name, the way the target device's defaults would."""

from __future__ import annotations

import inspect
from collections.abc import Iterable

import torch
from torch import nn

from autoshard.profiler.options import parse_optimizer

# Learning rates do not change memory; these are the usual fine-tuning defaults.
_LR = 1e-4


def build_optimizer(name: str, params: Iterable[nn.Parameter], *, foreach: bool | None) -> torch.optim.Optimizer:
    """Build ``name`` over ``params``.

    Args:
        name: one of :data:`autoshard.profiler.options.OPTIMIZERS`.
        params: the parameters to optimise.
        foreach: force the multi-tensor (``foreach``) implementation on or off; ``None`` keeps torch's default
            for the parameters' device. On CUDA, torch defaults to ``foreach=True``
            (``torch/optim/optimizer.py::_default_to_fused_or_foreach``, torch 2.x), which allocates list-sized
            temporaries during ``step()`` — a GPU trace must force it to be faithful.

    Returns:
        The optimizer.
    """
    key = parse_optimizer(name)
    params = [p for p in params if p.requires_grad]
    if key == "adamw":
        return torch.optim.AdamW(params, lr=_LR, foreach=foreach)
    if key == "adam":
        return torch.optim.Adam(params, lr=_LR, foreach=foreach)
    if key == "sgd":
        return torch.optim.SGD(params, lr=_LR, momentum=0.9, foreach=foreach)
    # Adafactor (torch.optim.Adafactor, torch >= 2.5): factored second moments, no first moment.
    return torch.optim.Adafactor(params, lr=1e-2, foreach=foreach)


def force_foreach_default(optimizer: torch.optim.Optimizer) -> None:
    """Make an optimizer built on CPU tensors behave as it would on CUDA: ``foreach=None`` → ``True``.

    Only groups that left ``foreach`` to the default and do not use ``fused`` are changed, and only for
    optimizers whose constructor has a ``foreach`` argument.
    """
    if "foreach" not in inspect.signature(type(optimizer).__init__).parameters:
        return
    for group in optimizer.param_groups:
        if group.get("foreach") is None and not group.get("fused"):
            group["foreach"] = True
