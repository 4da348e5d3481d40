"""Whether the activation checkpointing a user asks for recomputes anything in their model, checked on the meta
build before any trace (:func:`check_checkpointable`)."""

from __future__ import annotations

from torch import nn

from autoshard.errors import UsageError
from autoshard.models.source import ModelSource
from autoshard.profiler.checkpointing import ActivationCheckpointing
from autoshard.profiler.depth_checkpointing import repeated_block_names
from autoshard.profiler.depth_plan import meta_model

__all__ = ["check_checkpointable"]


def check_checkpointable(source: ModelSource, choice: ActivationCheckpointing) -> None:
    """``choice`` (asked for by the user) checkpoints at least one block of ``source``.

    autoshard checkpoints a model's repeated blocks (:func:`autoshard.profiler.blocks.find_repeated_blocks`): the
    modules held in an ``nn.ModuleList`` / ``nn.Sequential`` that are of a class with two or more such instances,
    not containers themselves. A model without them, or an ``every-N`` wider than its blocks, would otherwise be
    profiled and planned as if checkpointed while nothing is recomputed.

    Raises:
        UsageError: nothing would be checkpointed.
    """
    if not choice:
        return
    model = meta_model(source)
    names = repeated_block_names(model)
    shared = None if names else _shared_in_a_list(model)
    if shared is not None:
        where, cls, times = shared
        raise UsageError(
            f"--checkpointing {choice}: {source.name}'s {where} holds one {cls} instance {times} times (its weights "
            "shared, as ALBERT's layers are), and autoshard checkpoints repeated blocks that are instances of their "
            "own: a block applied several times is not checkpointed.",
            hint=f"Drop --checkpointing, or call torch.utils.checkpoint.checkpoint around the shared {cls} in your "
                 "forward (autoshard traces and counts what your own checkpointing recomputes).")
    if not names:
        raise UsageError(
            f"--checkpointing {choice}: {source.name} has no repeated blocks to checkpoint. autoshard recomputes "
            "the modules an nn.ModuleList or nn.Sequential holds two or more of, each an instance of a class of its "
            "own (a transformer layer, a ResNet block); containers such as nn.Sequential are not blocks.",
            hint="Write a block as a module class (`class Block(nn.Module)`) held in an nn.ModuleList, or drop "
                 "--checkpointing.")
    if not choice.checkpointed(names):
        raise UsageError(f"--checkpointing {choice} checkpoints none of {source.name}'s {len(names)} blocks.",
                         hint=f"Use every-N with N at most {len(names)}, or full.")


def _shared_in_a_list(model: nn.Module) -> tuple[str, str, int] | None:
    """An ``nn.ModuleList`` / ``nn.Sequential`` holding one module more than once: its name, the module's class
    and how many times (a probe's ``nn.ModuleList([block] * 6)`` was told it held no repeated blocks).

    Example:
        >>> block = nn.Linear(2, 2)
        >>> _shared_in_a_list(nn.Sequential(nn.ModuleList([block] * 3)))
        ('0', 'Linear', 3)
    """
    for name, module in model.named_modules():
        if isinstance(module, (nn.ModuleList, nn.Sequential)):
            children = list(module._modules.values())
            for child in children:
                times = sum(c is child for c in children)
                if child is not None and times > 1:
                    return name or type(model).__name__, type(child).__name__, times
    return None
