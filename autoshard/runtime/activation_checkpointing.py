"""Recompute each repeated block in backward, keeping module names (and so state-dict keys) unchanged.

Each block's class is swapped for a subclass whose ``__call__`` runs the ordinary ``nn.Module.__call__`` —
hooks included — inside non-reentrant ``torch.utils.checkpoint``. Hooks firing inside the checkpointed
function is what DeepSpeed ZeRO-3 needs: its pre-forward hook gathers the block's parameters again when the
block is recomputed in backward (the scheme of Hugging Face's ``GradientCheckpointingLayer``). FSDP2 skips its
own pre-forward work while recomputing (it unshards in its pre-backward hook), so the same swap serves it.
"""

from __future__ import annotations

from typing import Any

from torch import nn
from torch.utils.checkpoint import checkpoint


def _checkpointed_call(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
    return checkpoint(nn.Module.__call__, self, *args, use_reentrant=False, **kwargs)


def checkpoint_blocks(model: nn.Module, block_names: tuple[str, ...]) -> int:
    """Checkpoint the named submodules of ``model``; returns how many were wrapped.

    Example:
        >>> import torch
        >>> m = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
        >>> checkpoint_blocks(m, ("0", "1")), type(m[0]).__name__, list(m.state_dict())[0]
        (2, 'CheckpointedLinear', '0.weight')
        >>> m(torch.ones(1, 2, requires_grad=True)).sum().backward()
    """
    classes: dict[type, type] = {}
    for name in block_names:
        block = model.get_submodule(name)
        cls = type(block)
        if cls not in classes:
            classes[cls] = type(f"Checkpointed{cls.__name__}", (cls,), {"__call__": _checkpointed_call})
        block.__class__ = classes[cls]
    return len(block_names)
