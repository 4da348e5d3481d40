"""The model's modules as ZeRO-3's hooks see them: what each owns, which repeated block it lies in, and which blocks
activation checkpointing recomputes — taken from the meta build :func:`autoshard.strategies.build_workload` makes,
for :attr:`Workload.module_largest_parameters <autoshard.strategies.workload.Workload.module_largest_parameters>`
and :attr:`~autoshard.strategies.workload.Workload.module_blocks`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from autoshard.profiler.checkpointing import ActivationCheckpointing

if TYPE_CHECKING:
    from torch import nn


def module_census(module: nn.Module) -> tuple[int, ...]:
    """:attr:`Workload.module_largest_parameters` of ``module``: per module in module order, its largest own
    parameter's element count (0: none), the containers that have no forward left out.

    Example:
        >>> from torch import nn
        >>> module_census(nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.ModuleList([nn.LayerNorm(3)])))
        (0, 12, 0, 3)
    """
    return tuple(max((p.numel() for p in m.parameters(recurse=False)), default=0) for _, m in _runnable(module))


def _runnable(module: nn.Module) -> list[tuple[str, nn.Module]]:
    """``module``'s modules by name, in module order, less the containers that have no forward
    (``ModuleList``, ``ModuleDict``, ``ParameterList``, ``ParameterDict``)."""
    from torch import nn

    containers = (nn.ModuleList, nn.ModuleDict, nn.ParameterList, nn.ParameterDict)
    return [(name, m) for name, m in module.named_modules() if not isinstance(m, containers)]


def module_blocks(module: nn.Module, block_names: Sequence[str]) -> tuple[int, ...]:
    """:attr:`Workload.module_blocks` of ``module``: for each module :func:`module_census` lists, in its order, the
    index in ``block_names`` of the block it lies in (a block counts as lying in itself), -1 outside them all.

    Example:
        >>> from torch import nn
        >>> m = nn.Sequential(nn.Linear(4, 4), nn.ModuleList([nn.Sequential(nn.Linear(4, 4), nn.ReLU())]))
        >>> module_census(m), module_blocks(m, ["1.0"])
        ((0, 16, 0, 16, 0), (-1, -1, 0, 0, 0))
    """
    index = {name: i for i, name in enumerate(block_names)}
    out = []
    for name, _ in _runnable(module):
        parts = name.split(".") if name else []
        prefixes = (".".join(parts[:k]) for k in range(len(parts), 0, -1))
        out.append(next((index[p] for p in prefixes if p in index), -1))
    return tuple(out)


def checkpointed_block_indices(checkpointing: ActivationCheckpointing, blocks: int) -> frozenset[int]:
    """The indices of the ``blocks`` repeated blocks that ``checkpointing`` wraps (:meth:`ActivationCheckpointing.
    checkpointed`, by position).

    Example:
        >>> from autoshard.profiler.checkpointing import ActivationCheckpointing
        >>> sorted(checkpointed_block_indices(ActivationCheckpointing("every", 2), 5))
        [1, 3]
    """
    names = [str(i) for i in range(blocks)]
    return frozenset(int(n) for n in checkpointing.checkpointed(names))
