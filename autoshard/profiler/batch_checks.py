"""A trace's micro-batch of one sample, past what refuses it in training.

autoshard traces every model at micro-batches 1, 2 and 3 (memory and FLOPs are linear in the micro-batch:
:mod:`autoshard.strategies.trace_sessions`). In training, ``F.batch_norm`` refuses an input with one value
per channel (``_verify_batch_size``: a ``BatchNorm1d`` over ``(1, C)``), ``F.instance_norm`` one with one value
per spatial plane (``_verify_spatial_size``), and under fake tensors the running variance's unbiased update
(``native_batch_norm_helper`` in ``torch/_decomp/decompositions.py``: ``n / (n - 1)``) divides by zero: the
statistics of one value are degenerate. The shapes, memory and FLOPs of that micro-batch are those of any other,
so :func:`lifted` turns both checks off while a trace runs and, at one value per channel, leaves the running
statistics (``C`` values per layer, a few kilobytes) out of the update. Without it every model with batch
normalisation (a ResNet, an MLP with ``BatchNorm1d``) failed its trace. A run that trains at micro-batch 1 still
meets the checks.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn.functional as F

_CHECKS = ("_verify_batch_size", "_verify_spatial_size")


def _allowed(*args: Any, **kwargs: Any) -> None:
    return None


def _one_value_per_channel(size: torch.Size) -> bool:
    return size[0] * math.prod(size[2:]) == 1


def _batch_norm(original: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    @functools.wraps(original)
    def batch_norm(input: torch.Tensor, running_mean: torch.Tensor | None, running_var: torch.Tensor | None,
                   *args: Any, **kwargs: Any) -> torch.Tensor:
        training = args[2] if len(args) > 2 else kwargs.get("training", False)
        if training and _one_value_per_channel(input.size()):
            running_mean = running_var = None
        return original(input, running_mean, running_var, *args, **kwargs)

    return batch_norm


@contextlib.contextmanager
def lifted() -> Iterator[None]:
    """Inside the block, ``F.batch_norm`` and ``F.instance_norm`` take one value per channel in training.

    Example:
        >>> import torch
        >>> from torch._subclasses.fake_tensor import FakeTensorMode
        >>> with lifted(), FakeTensorMode():
        ...     torch.nn.BatchNorm1d(4).train()(torch.randn(1, 4)).shape
        torch.Size([1, 4])
    """
    saved = {name: getattr(F, name) for name in (*_CHECKS, "batch_norm") if hasattr(F, name)}
    for name, original in saved.items():
        setattr(F, name, _batch_norm(original) if name == "batch_norm" else _allowed)
    try:
        yield
    finally:
        for name, original in saved.items():
            setattr(F, name, original)
