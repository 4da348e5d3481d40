"""Whether the activation checkpointing a user asks for recomputes anything in their model, checked on the meta
build before any trace (:func:`check_checkpointable`)."""

from __future__ import annotations

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
    names = repeated_block_names(meta_model(source))
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
