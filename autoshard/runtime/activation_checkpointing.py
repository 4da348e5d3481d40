"""Recompute repeated blocks in backward, keeping module names (and so state-dict keys) unchanged.

Each checkpointed block's class is swapped for a subclass of the same name whose ``__call__`` runs the ordinary
``nn.Module.__call__`` — hooks included — inside non-reentrant ``torch.utils.checkpoint``. Hooks firing inside
the checkpointed function is what DeepSpeed ZeRO-3 needs: its pre-forward hook gathers the block's parameters
again when the block is recomputed in backward (the scheme of Hugging Face's ``GradientCheckpointingLayer``).
FSDP2 skips its own pre-forward work while recomputing (it unshards in its pre-backward hook), so the same swap
serves it. The subclass keeps the block's class name (and module), as the names of its parameters are kept:
what finds blocks by class name after checkpointing — accelerate's ``transformer_layer_cls_to_wrap``, an exported
Lightning ``shard()`` — still finds them (an export probe: renamed ``OpCheckpointedBlock``, no block got an FSDP
unit of its own). :func:`checkpointed_mode` tells a checkpointed block.

Which blocks, and what is recomputed inside them, follows a
:class:`~autoshard.profiler.checkpointing.ActivationCheckpointing`: every block (``full``), every N-th (``every-N``), or
every block under torchtitan's op-selective policy (``op``) — the same choice and policy the profiler traces.

A block's BatchNorm keeps its running statistics as one training forward leaves them: the recomputation in
backward runs it in training mode again, and its update is undone (:func:`_restored_stats`).

A Hugging Face model's KV cache is turned off in its config when any block is checkpointed
(:func:`autoshard.models.hf_build.kv_cache_off`): a recomputed block would otherwise append its keys and values to
the cache a second time (with eager attention, backward then fails on the mask's shape).

:func:`restore_blocks` undoes both once training is done: ``fit()`` gives the user's module back with its own
classes (a block left checkpointed would recompute under a later trainer too) and its KV cache as it was (with the
cache off, ``generate()`` recomputes every earlier position at each new token).
"""

from __future__ import annotations

import contextlib
import functools
import weakref
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint, noop_context_fn

from autoshard.models.hf_build import kv_cache_off
from autoshard.profiler.checkpointing import FULL, ActivationCheckpointing, op_selective_context, parse_checkpointing


def _checkpointed_call(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
    # as Hugging Face's GradientCheckpointingLayer: only a training forward that builds a graph is checkpointed
    if not (self.training and torch.is_grad_enabled()):  # scoring eval_data: nothing to recompute
        return nn.Module.__call__(self, *args, **kwargs)
    context_fn = getattr(self, _CONTEXT)
    norms = _running_norms(self)
    if norms:
        context_fn = functools.partial(_stats_kept, context_fn, norms)
    return checkpoint(nn.Module.__call__, self, *args, use_reentrant=False, context_fn=context_fn, **kwargs)


def _running_norms(block: nn.Module) -> tuple[nn.Module, ...]:
    """The block's normalisations that update running statistics in a training forward (BatchNorm, and
    InstanceNorm with ``track_running_stats``)."""
    return tuple(m for m in block.modules()
                 if isinstance(m, nn.modules.batchnorm._NormBase) and m.track_running_stats and m.training)


@contextlib.contextmanager
def _restored_stats(norms: tuple[nn.Module, ...]) -> Iterator[None]:
    """Put the running statistics back as they were before the recomputation: recomputing a block's forward in
    backward runs its BatchNorm in training mode again, which updated them twice a step (num_batches_tracked 4
    after 2 steps, the momentum applied twice; torch.utils.checkpoint leaves it to the caller)."""
    saved = [{n: b.detach().clone() for n, b in m.named_buffers(recurse=False) if b is not None} for m in norms]
    try:
        yield
    finally:
        with torch.no_grad():
            for m, kept in zip(norms, saved, strict=True):
                for name, value in kept.items():
                    getattr(m, name).copy_(value)


def _stats_kept(context_fn: Any, norms: tuple[nn.Module, ...]) -> tuple[Any, Any]:
    """``context_fn``'s forward and recomputation contexts, the running statistics kept across the latter."""
    forward, recompute = context_fn()

    @contextlib.contextmanager
    def both() -> Iterator[None]:
        with _restored_stats(norms), recompute:
            yield

    return forward, both()


_CONTEXT = "_autoshard_checkpoint_context"
"""Set on each class :func:`checkpoint_blocks` makes: what the recomputation keeps (torchtitan's op-selective
policy for ``op``, nothing for the others)."""

_ORIGINAL = "_autoshard_checkpointed_from"
"""Set on each class :func:`checkpoint_blocks` makes: the block's own class, which :func:`restore_blocks` puts
back."""

_MODE = "_autoshard_checkpoint_mode"
"""Set on each class :func:`checkpoint_blocks` makes: ``"op"`` or ``"full"`` (what :func:`checkpointed_mode`
says)."""

_CACHES_TURNED_OFF: weakref.WeakKeyDictionary[nn.Module, list[Any]] = weakref.WeakKeyDictionary()
"""The transformers configs whose KV cache :func:`checkpoint_blocks` turned off, by the model given to it."""


def checkpoint_blocks(model: nn.Module, block_names: tuple[str, ...],
                      checkpointing: ActivationCheckpointing | str | bool = FULL) -> int:
    """Checkpoint the named submodules of ``model`` that ``checkpointing`` selects; returns how many were
    wrapped. A Hugging Face model then trains with its KV cache off (``model.config.use_cache = False``).

    Example:
        >>> import torch
        >>> m = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
        >>> checkpoint_blocks(m, ("0", "1")), type(m[0]).__name__, checkpointed_mode(m[0]), list(m.state_dict())[0]
        (2, 'Linear', 'full', '0.weight')
        >>> m(torch.ones(1, 2, requires_grad=True)).sum().backward()
        >>> checkpoint_blocks(nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2)), ("0", "1"), "every-2")
        1
    """
    choice = parse_checkpointing(checkpointing)
    if choice.checkpointed(block_names):
        _CACHES_TURNED_OFF.setdefault(model, []).extend(kv_cache_off(model))
    context, mode = (op_selective_context(), "op") if choice.mode == "op" else (noop_context_fn, "full")
    classes: dict[type, type] = {}
    chosen = choice.checkpointed(block_names)
    for name in chosen:
        block = model.get_submodule(name)
        cls = type(block)
        if cls not in classes:
            classes[cls] = type(cls.__name__, (cls,), {
                "__call__": _checkpointed_call, _ORIGINAL: cls, _CONTEXT: staticmethod(context), _MODE: mode,
                "__qualname__": cls.__qualname__, "__module__": cls.__module__})
        block.__class__ = classes[cls]
    return len(chosen)


def checkpointed_mode(module: nn.Module) -> str | None:
    """``"op"`` for a block :func:`checkpoint_blocks` checkpointed under torchtitan's op-selective policy,
    ``"full"`` for one recomputed whole, ``None`` for any other module (a class ``fully_shard`` made of a
    checkpointed block's, ``FSDP<Class>``, is still checkpointed).

    Example:
        >>> m = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
        >>> checkpoint_blocks(m, ("0", "1"), "op"), [checkpointed_mode(b) for b in m], checkpointed_mode(m)
        (2, ['op', 'op'], None)
    """
    return next((c.__dict__[_MODE] for c in type(module).__mro__ if _MODE in c.__dict__), None)


def restore_blocks(model: nn.Module) -> int:
    """Undo :func:`checkpoint_blocks` on ``model``: each checkpointed block gets its own class back and each config
    whose KV cache it turned off has it on again; returns how many blocks. A block whose class was changed again
    since (``fully_shard``'s ``FSDP<Class>``, a module still sharded) is left as it is.

    Example:
        >>> m = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
        >>> checkpoint_blocks(m, ("0", "1")), restore_blocks(m), type(m[0]).__name__
        (2, 2, 'Linear')
    """
    restored = 0
    for block in model.modules():
        original = type(block).__dict__.get(_ORIGINAL)
        if original is not None:
            block.__class__ = original
            restored += 1
    for config in _CACHES_TURNED_OFF.pop(model, []):
        config.use_cache = True
    return restored
