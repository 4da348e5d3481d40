"""Parameters FSDP2 and DeepSpeed cannot shard, found on the built model: their names, and the words
:attr:`~autoshard.strategies.workload.Workload.shard_refused` says of each kind, which the planner reads to tell the
model's refusal from the hardware's (:mod:`autoshard.planner.no_fit`)."""

from __future__ import annotations

from torch import nn

__all__ = ["COMPLEX_FAILS", "SCALAR_FAILS", "STRIDED_FAILS", "complex_parameters", "scalar_parameters", "some",
           "strided_parameters"]


STRIDED_FAILS = "cannot take non-contiguous parameters"
"""What ``Workload.shard_refused`` says of non-contiguous parameters, as :data:`SCALAR_FAILS` of 0-d ones."""


def strided_parameters(module: nn.Module) -> tuple[str, ...]:
    """Names of the module's non-contiguous parameters, each tensor once.

    Example:
        >>> import torch
        >>> from torch import nn
        >>> net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.Linear(2, 2)).to(memory_format=torch.channels_last)
        >>> strided_parameters(net)
        ('0.weight',)
    """
    return tuple(name for name, p in module.named_parameters() if not p.is_contiguous())


COMPLEX_FAILS = "cannot train complex parameters beside real ones"
"""What ``Workload.shard_refused`` says of complex parameters, as :data:`SCALAR_FAILS` of 0-d ones."""


def some(names: tuple[str, ...]) -> str:
    """The first three names, and "..." when there are more."""
    return ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")


SCALAR_FAILS = "cannot shard a 0-d parameter"
"""What ``Workload.shard_refused`` says of 0-d parameters, for the planner to tell the model's refusal from the
hardware's."""


def complex_parameters(module: nn.Module) -> tuple[str, ...]:
    """Names of the module's complex parameters when it holds real floating-point ones too, each tensor once.

    Example:
        >>> import torch
        >>> from torch import nn
        >>> net = nn.Linear(2, 2)
        >>> net.spectral = nn.Parameter(torch.zeros(4, dtype=torch.complex64))
        >>> complex_parameters(net), complex_parameters(nn.Linear(2, 2))
        (('spectral',), ())
    """
    named = list(module.named_parameters())  # each tensor once
    names = tuple(name for name, p in named if p.is_complex())
    return names if any(p.is_floating_point() for _, p in named) else ()


def scalar_parameters(module: nn.Module) -> tuple[str, ...]:
    """Names of the module's 0-d parameters, each tensor once.

    Example:
        >>> import torch
        >>> from torch import nn
        >>> net = nn.Linear(2, 2)
        >>> net.scale = nn.Parameter(torch.tensor(2.0))
        >>> scalar_parameters(net)
        ('scale',)
    """
    seen: set[int] = set()
    names = []
    for name, p in module.named_parameters():
        if id(p) not in seen and p.dim() == 0:
            names.append(name)
        seen.add(id(p))
    return tuple(names)
