"""Cast a module's floating parameters and buffers to one dtype without ``Module.to``.

``bf16-true`` trains a module whose every floating tensor is bf16: Lightning's
``HalfPrecision.convert_module`` calls ``module.to(dtype=torch.bfloat16)``
(lightning/fabric/plugins/precision/half.py, Lightning 2.x), which converts floating parameters *and* floating
buffers alike (``Module.to`` in torch/nn/modules/module.py, torch 2.13). Models keep some buffers in fp32 even
when built under a bf16 default dtype (transformers' RoPE ``inv_freq``), so the profiler must cast after
building. ``Module.to`` cannot do it under ``FakeTensorMode``: torch 2.13's ``Module._apply`` swaps every fake
parameter in place (``torch.utils.swap_tensors``), which refuses a tensor that has a weak reference to it
(fake tensors do: "Cannot swap t1 because it has weakref associated with it"). This module replaces each
tensor in its owning module's ``_parameters`` / ``_buffers`` instead, which works on fake, meta and real
tensors alike.

Models call ``Module.to`` in their own constructors too (transformers 5.24's DeepSeek-V4 keeps its attention
norms in fp32: ``DeepseekV4RMSNorm(...).to(dtype=torch.float32)``, modeling_deepseek_v4.py; HY-V4 and Inkling
likewise), and that failed the same way under the profiler's fake build, even where the conversion changes
nothing. :func:`fake_module_conversions` lets those calls convert by replacing slots as well.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensor

__all__ = ["cast_floating_tensors", "fake_module_conversions"]


def cast_floating_tensors(module: nn.Module, dtype: torch.dtype) -> int:
    """Cast every floating parameter and buffer of ``module`` (recursively) to ``dtype``, in place.

    As ``module.to(dtype)`` would: parameters stay parameters with their ``requires_grad``, non-floating
    tensors (integer position ids, bool masks) are left alone, and so are complex buffers (``Module.to``
    would drop their imaginary part). A tensor shared by several modules (tied embeddings) is converted
    once and stays shared.

    Args:
        module: the module to convert in place.
        dtype: a floating dtype, e.g. ``torch.bfloat16``.

    Returns:
        How many distinct tensors were converted.

    Raises:
        ValueError: ``dtype`` is not a floating dtype.

    Example:
        >>> import torch
        >>> from torch import nn
        >>> m = nn.Linear(2, 2)
        >>> cast_floating_tensors(m, torch.bfloat16), m.weight.dtype
        (2, torch.bfloat16)
    """
    if not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating dtype, but got {dtype=}.")
    # Keyed by id, holding the original so that no id is reused while the walk lasts.
    converted: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    with torch.no_grad():
        for owner in module.modules():
            slot_dicts: tuple[dict[str, Any], ...] = (owner._parameters, owner._buffers)  # _converted keeps Parameters
            for slots in slot_dicts:
                for name, tensor in slots.items():
                    if tensor is None or not tensor.is_floating_point() or tensor.dtype == dtype:
                        continue
                    if id(tensor) not in converted:
                        converted[id(tensor)] = (tensor, _converted(tensor, dtype))
                    slots[name] = converted[id(tensor)][1]
    return len(converted)


def _converted(tensor: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    data = tensor.detach().to(dtype)
    if isinstance(tensor, nn.Parameter):
        return nn.Parameter(data, requires_grad=tensor.requires_grad)
    return data


@contextlib.contextmanager
def fake_module_conversions() -> Iterator[None]:
    """While it lasts, ``Module.to`` / ``.float()`` / ``.half()`` / ... on a module holding fake tensors convert
    them without swapping them in place, which torch 2.13 refuses for fake tensors: a parameter gets the
    converted data (``param.data = ...``, as torch converts plain tensors: the same parameter object, so weights
    tied to it and an optimizer holding it keep it), or, where that fails, is replaced by a parameter with its
    ``requires_grad``; a buffer is replaced; a conversion that returns the tensor itself leaves it as it is.
    Modules without fake tensors convert as torch does. For building a model under ``FakeTensorMode`` and for
    tracing its steps (transformers' Switch Transformers router calls ``self.classifier.to(self.dtype)`` in its
    forward).

    Example:
        >>> from torch._subclasses.fake_tensor import FakeTensorMode
        >>> with FakeTensorMode(), fake_module_conversions():
        ...     norm = nn.LayerNorm(4).to(dtype=torch.bfloat16)
        >>> norm.weight.dtype, isinstance(norm.weight, nn.Parameter)
        (torch.bfloat16, True)
    """
    original = nn.Module._apply

    def _apply(module: nn.Module, fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True) -> nn.Module:
        own = [*module._parameters.values(), *module._buffers.values()]
        if not any(isinstance(t, FakeTensor) for t in own):
            return original(module, fn, recurse)
        if recurse:
            for child in module.children():
                child._apply(fn)
        with torch.no_grad():
            for name, param in module._parameters.items():
                if param is not None:
                    applied = fn(param)
                    if applied is param:
                        continue
                    try:  # as torch converts a plain tensor: the same parameter, new data (ties and optimizers keep it)
                        param.data = applied
                    except (RuntimeError, TypeError):
                        module._parameters[name] = nn.Parameter(applied, requires_grad=param.requires_grad)
            for name, buffer in module._buffers.items():
                if buffer is not None:
                    module._buffers[name] = fn(buffer)
        return module

    nn.Module._apply = _apply  # type: ignore[method-assign]
    try:
        yield
    finally:
        nn.Module._apply = original  # type: ignore[method-assign]
