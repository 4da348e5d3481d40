"""The grouped and typed options of :func:`autoshard.fit`.

Settings that belong together travel together, as torchtitan groups its job config into small dataclasses
(``torchtitan/config/job_config.py``: ``Checkpoint(enable, folder, interval, keep_latest_k, ...)``) and
Lightning keeps checkpointing out of ``Trainer``'s flat arguments (``ModelCheckpoint(dirpath,
every_n_train_steps, ...)``). :class:`Checkpointing` is :func:`~autoshard.runtime.fit.fit`'s
``checkpointing=``.

Example:
    >>> ckpt = Checkpointing(dir="runs/exp1", every=200, keep_last=3)
    >>> ckpt.every, ckpt.resume
    (200, False)
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeAlias

import torch
from torch import nn
from torch.utils.data import Dataset

from autoshard.errors import reworded

OptimizerSpec: TypeAlias = (
    torch.optim.Optimizer | type[torch.optim.Optimizer] | Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer]
    | str | None
)
"""What ``fit(optimizer=...)`` takes: an optimizer built over the unwrapped model (its class and
hyper-parameters are reused over the parameters the backend trains), its class, a factory ``params ->
Optimizer``, a name (``adamw``, ``adam``, ``sgd``, ``adafactor``, ``adamw8bit``), or ``None`` for the source's or
the plan's."""

DataSpec: TypeAlias = Dataset[Any] | Iterable[Any] | None
"""What ``fit(data=...)`` takes: a map-style ``Dataset``, a ``DataLoader`` or any iterable of batches, or
``None`` for the model source's example batches."""

LrSchedulerFactory: TypeAlias = Callable[[torch.optim.Optimizer], torch.optim.lr_scheduler.LRScheduler]
"""Builds a learning-rate scheduler over the torch optimizer the backend steps."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Checkpointing:
    """Where and how often :func:`~autoshard.runtime.fit.fit` saves its training state, and where it resumes.

    A checkpoint holds the model, optimizer, scheduler and data position (``dir/step-00000200/``,
    :mod:`autoshard.runtime.checkpoint`).
    """

    dir: str | os.PathLike[str] | None = None
    """Where to save checkpoints: always at the end, and every :attr:`every` steps (``None``: save none)."""
    every: int | None = None
    """Optimizer steps between checkpoints (``None``: only at the end)."""
    keep_last: int | None = None
    """Keep only the newest N checkpoints in :attr:`dir`: once a new one is complete, rank 0 removes older ones
    (``None``: keep all)."""
    resume: bool | str | os.PathLike[str] = False
    """``True``: continue from the newest complete checkpoint in :attr:`dir` (if any); a path: from that
    checkpoint; ``False``: start afresh."""


FIT_ARGUMENTS: tuple[tuple[str, str], ...] = (
    (r" \(--gpus \d+\)", ""), (r"--gpus/--nodes for (\d+)", r"hardware= with \1 GPUs"),
    (r"--nvme PATH", "an NVMe path in hardware="),
    (r"\(--nodes\)", "(hardware= with more nodes)"), (r"\(--cpu-memory\)", "(hardware= with its RAM)"),
    (r"--strategies; strategy= in fit\(\)", "strategy="), (r"--hardware", "hardware="), (r"--seq-len", "seq_len="),
    (r"--optimizer", "optimizer="),
    (r"--checkpointing ([\w-]+); activation_checkpointing= in fit\(\)", r'activation_checkpointing="\1"'),
    (r"--checkpointing ([\w-]+)", r'activation_checkpointing="\1"'),
    (r"--checkpointing", "activation_checkpointing="), (r"--batch-size", "batch_size="),
)
"""The planner's hints name ``recommend``'s flags; ``fit()`` takes these arguments in their place (patterns and
replacements for :func:`re.sub`)."""


def in_fit_arguments(hint: str | None) -> str | None:
    """A planner hint with ``recommend``'s flags named as ``fit()``'s arguments.

    Example:
        >>> in_fit_arguments("Try more GPUs (e.g. --gpus/--nodes for 16), larger GPUs (--hardware), or a shorter "
        ...                  "--seq-len.")
        'Try more GPUs (e.g. hardware= with 16 GPUs), larger GPUs (hardware=), or a shorter seq_len=.'
    """
    return None if hint is None else reworded(hint, FIT_ARGUMENTS)
