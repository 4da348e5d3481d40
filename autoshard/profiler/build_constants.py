"""Let a constructor read the values of the schedules it computes, while the model is built on fake tensors.

Some constructors compute Python numbers with tensor ops: transformers 5.24's ConvNeXt, ConvNeXt V2 and
others take their stochastic-depth rates from ``torch.linspace(0, drop_path_rate, sum(depths)).split(depths)``
and read them back with ``.tolist()`` (modeling_convnext.py, ``ConvNextEncoder.__init__``). Under the profiler's
``FakeTensorMode`` the linspace is fake and has no values, so the read fails (``DataDependentOutputException``)
and the model cannot be built. :func:`real_schedules` runs ``torch.linspace`` / ``torch.logspace`` for real, as
the small tensors of numbers they are, and keeps whatever is computed from those real tensors alone real, so the
constructor gets its numbers; everything else (parameters, buffers made by other factories) stays fake. It also
makes ``nn.init.trunc_normal_`` leave a fake tensor as it is, as torch's does a meta tensor: torch 2.13's
rejection sampler asks ``mask.any()`` of the samples (``torch/nn/init.py``, ``_no_grad_trunc_normal_``), which a
fake tensor cannot answer, so torchvision's ViT, ConvNeXt and Swin could not be built (a fake tensor's values are
never read: nothing is lost).
:func:`fake_leftovers` turns any real tensor the constructor kept in the model into a fake one, so that the
trace counts it like the rest.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode, unset_fake_temporarily
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_iter

__all__ = ["fake_leftovers", "real_schedules"]

_SCHEDULES = (torch.linspace, torch.logspace)
"""Factories of evenly spaced numbers: what constructors compute schedules with."""


class _RealSchedules(TorchFunctionMode):
    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        tensors = [t for t in tree_iter((args, kwargs)) if isinstance(t, torch.Tensor)]
        if func in _SCHEDULES or (tensors and not any(isinstance(t, FakeTensor) for t in tensors)):
            with unset_fake_temporarily():
                return func(*args, **kwargs)
        return func(*args, **kwargs)


@contextlib.contextmanager
def real_schedules() -> Iterator[None]:
    """While it lasts, ``torch.linspace`` / ``torch.logspace`` make real tensors under a fake mode, and
    functions of real tensors only stay real (``.split``, ``.tolist()``, arithmetic), so that a constructor
    can read the numbers it computed.

    Example:
        >>> with FakeTensorMode(), real_schedules():
        ...     rates = [x.tolist() for x in torch.linspace(0, 0.5, 6).split([2, 4])]
        ...     weight = torch.empty(3)
        >>> rates[0], isinstance(weight, FakeTensor)
        ([0.0, 0.10000000149011612], True)
    """
    with _RealSchedules(), _fake_trunc_normal():
        yield


@contextlib.contextmanager
def _fake_trunc_normal() -> Iterator[None]:
    """``nn.init.trunc_normal_`` (and every alias of it: it calls the module's ``_no_grad_trunc_normal_``)
    returns a fake tensor untouched while it lasts."""
    inner = getattr(torch.nn.init, "_no_grad_trunc_normal_", None)
    if inner is None:
        yield
        return

    def sample(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        return tensor if isinstance(tensor, FakeTensor) else inner(tensor, *args, **kwargs)

    torch.nn.init._no_grad_trunc_normal_ = sample
    try:
        yield
    finally:
        torch.nn.init._no_grad_trunc_normal_ = inner


def fake_leftovers(module: nn.Module, mode: FakeTensorMode) -> int:
    """Replace every real parameter or buffer of ``module`` (recursively) by a fake one of ``mode`` (a
    parameter stays a parameter with its ``requires_grad``); returns how many were replaced.

    Example:
        >>> mode = FakeTensorMode()
        >>> norm = nn.LayerNorm(4)
        >>> fake_leftovers(norm, mode), isinstance(norm.weight, FakeTensor), isinstance(norm.weight, nn.Parameter)
        (2, True, True)
    """
    replaced = 0
    for sub in module.modules():
        for name, param in sub._parameters.items():
            if param is not None and not isinstance(param, FakeTensor):
                sub._parameters[name] = nn.Parameter(mode.from_tensor(param.detach()),
                                                     requires_grad=param.requires_grad)
                replaced += 1
        for name, buffer in sub._buffers.items():
            if buffer is not None and not isinstance(buffer, FakeTensor):
                sub._buffers[name] = mode.from_tensor(buffer)
                replaced += 1
    return replaced
