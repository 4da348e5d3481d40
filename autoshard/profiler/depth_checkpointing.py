"""Checkpointing every N-th block in a model profiled from shallow copies (:mod:`autoshard.profiler.scaling`).

``every-N`` (torchtitan's layer-selective checkpointing) wraps blocks by their place in the whole model:
blocks 2, 4, ... for N = 2. A shallow copy that counted its own blocks would checkpoint other ones, and the
block a 3-block copy adds would stand for every interior block, checkpointed or not (a 40-block model then came
out with one block's recomputation instead of twenty's). So the model's blocks are told apart by whether they
are checkpointed as well as by kind (:func:`split_by_checkpointing`), the copies are made of the unit of blocks
that repeats (``_periodic`` in :mod:`autoshard.profiler.depth_plan`), and each copy checkpoints the blocks that
stand for checkpointed ones (:func:`copy_block_positions`).
"""

from __future__ import annotations

import dataclasses

from torch import nn

from autoshard.models.hf_layers import LayerKinds
from autoshard.profiler.blocks import find_repeated_blocks
from autoshard.profiler.depth_names import remap_module

__all__ = ["copy_block_positions", "repeated_block_names", "split_by_checkpointing"]


def repeated_block_names(model: nn.Module) -> tuple[str, ...]:
    """The names of ``model``'s repeated blocks, stack after stack: what checkpointing counts."""
    blocks = find_repeated_blocks(model)
    return () if blocks is None else blocks.names


def split_by_checkpointing(kinds: LayerKinds, checkpointed: frozenset[str]) -> LayerKinds:
    """``kinds`` with each kind split in two where some of its blocks are among ``checkpointed`` (full-depth
    block names) and some not; labels of checkpointed kinds end in ``", checkpointed"``.

    Example:
        >>> kinds = LayerKinds(stacks=("h",), kinds=((0, 0, 0, 0),), labels=("Block",), signatures=((),),
        ...                    varying=frozenset())
        >>> split = split_by_checkpointing(kinds, frozenset({"h.1", "h.3"}))
        >>> split.kinds, split.labels
        (((0, 1, 0, 1),), ('Block', 'Block, checkpointed'))
    """
    keys = [[(kind, f"{stack}.{j}" in checkpointed) for j, kind in enumerate(stack_kinds)]
            for stack, stack_kinds in zip(kinds.stacks, kinds.kinds, strict=True)]
    order = list(dict.fromkeys(key for stack in keys for key in stack))
    return dataclasses.replace(
        kinds,
        kinds=tuple(tuple(order.index(key) for key in stack) for stack in keys),
        labels=tuple(kinds.labels[kind] + (", checkpointed" if flag else "") for kind, flag in order),
        signatures=tuple((kinds.signatures[kind], flag) for kind, flag in order),
    )


def copy_block_positions(copy: nn.Module, kinds: LayerKinds, kept: tuple[int, ...],
                         full_names: tuple[str, ...]) -> tuple[int, ...] | None:
    """For each repeated block of ``copy`` (a shallow copy keeping the blocks at full-depth positions ``kept``
    of each stack of ``kinds``), its index among the full model's repeated blocks ``full_names``; blocks
    outside the stacks keep their names. ``None`` when a block has no counterpart in the full model.

    Example:
        >>> kinds = LayerKinds(stacks=("h",), kinds=((0,) * 8,), labels=("Block",), signatures=((),),
        ...                    varying=frozenset())
        >>> class Block(nn.Module):
        ...     def __init__(self) -> None:
        ...         super().__init__()
        ...         self.attention, self.mlp = nn.Linear(2, 2), nn.Linear(2, 2)
        >>> copy = nn.Module()
        >>> copy.h, copy.head = nn.ModuleList(Block() for _ in range(3)), nn.Linear(2, 2)
        >>> copy_block_positions(copy, kinds, (0, 1, 7), tuple(f"h.{i}" for i in range(8)))
        (0, 1, 7)
    """
    index = {name: i for i, name in enumerate(full_names)}
    full = [remap_module(name, kept, len(kinds.flat()), kinds.stacks) for name in repeated_block_names(copy)]
    return tuple(index[name] for name in full) if all(name in index for name in full) else None
