"""Recompute repeated blocks in backward, keeping module names (and so state-dict keys) unchanged.

Each checkpointed block's class is swapped for a subclass whose ``__call__`` runs the ordinary
``nn.Module.__call__`` — hooks included — inside non-reentrant ``torch.utils.checkpoint``. Hooks firing inside
the checkpointed function is what DeepSpeed ZeRO-3 needs: its pre-forward hook gathers the block's parameters
again when the block is recomputed in backward (the scheme of Hugging Face's ``GradientCheckpointingLayer``).
FSDP2 skips its own pre-forward work while recomputing (it unshards in its pre-backward hook), so the same swap
serves it.

Which blocks, and what is recomputed inside them, follows a
:class:`~autoshard.profiler.checkpointing.ActivationCheckpointing`: every block (``full``), every N-th (``every-N``), or
every block under torchtitan's op-selective policy (``op``) — the same choice and policy the profiler traces.

A Hugging Face model's KV cache is turned off in its config when any block is checkpointed
(:func:`autoshard.models.hf_build.kv_cache_off`): a recomputed block would otherwise append its keys and values to
the cache a second time (with eager attention, backward then fails on the mask's shape).
"""

from __future__ import annotations

from typing import Any

from torch import nn
from torch.utils.checkpoint import checkpoint

from autoshard.models.hf_build import kv_cache_off
from autoshard.profiler.checkpointing import FULL, ActivationCheckpointing, op_selective_context, parse_checkpointing


def _checkpointed_call(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
    return checkpoint(nn.Module.__call__, self, *args, use_reentrant=False, **kwargs)


def _op_selective_call(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
    return checkpoint(nn.Module.__call__, self, *args, use_reentrant=False, context_fn=_OP_CONTEXT, **kwargs)


_OP_CONTEXT = op_selective_context()


def checkpoint_blocks(model: nn.Module, block_names: tuple[str, ...],
                      checkpointing: ActivationCheckpointing | str | bool = FULL) -> int:
    """Checkpoint the named submodules of ``model`` that ``checkpointing`` selects; returns how many were
    wrapped. A Hugging Face model then trains with its KV cache off (``model.config.use_cache = False``).

    Example:
        >>> import torch
        >>> m = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
        >>> checkpoint_blocks(m, ("0", "1")), type(m[0]).__name__, list(m.state_dict())[0]
        (2, 'CheckpointedLinear', '0.weight')
        >>> m(torch.ones(1, 2, requires_grad=True)).sum().backward()
        >>> checkpoint_blocks(nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2)), ("0", "1"), "every-2")
        1
    """
    choice = parse_checkpointing(checkpointing)
    if choice.checkpointed(block_names):
        kv_cache_off(model)
    call, prefix = (_op_selective_call, "OpCheckpointed") if choice.mode == "op" else (_checkpointed_call,
                                                                                       "Checkpointed")
    classes: dict[type, type] = {}
    chosen = choice.checkpointed(block_names)
    for name in chosen:
        block = model.get_submodule(name)
        cls = type(block)
        if cls not in classes:
            classes[cls] = type(f"{prefix}{cls.__name__}", (cls,), {"__call__": call})
        block.__class__ = classes[cls]
    return len(chosen)
