"""What a Lightning precision name means for a training step: autocast, parameter dtype, loss scaling."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import torch

from autoshard.errors import UsageError
from autoshard.models.source import cast_floats


@dataclass(frozen=True, kw_only=True, slots=True)
class PrecisionRecipe:
    """How to run a precision.

    Example:
        >>> recipe("bf16-mixed").autocast_dtype, recipe("bf16-true").param_dtype, recipe("16-mixed").loss_scaling
        (torch.bfloat16, torch.bfloat16, True)
    """

    name: str
    autocast_dtype: torch.dtype | None
    """``torch.autocast`` dtype for forward and loss (``None``: no autocast)."""
    param_dtype: torch.dtype | None
    """Parameters (and floating inputs) cast to this dtype (``bf16-true``)."""
    loss_scaling: bool
    """Dynamic loss scaling (``16-mixed``)."""
    half_dtype: torch.dtype | None
    """The 16-bit dtype, for backends that keep 16-bit parameter copies (FSDP2's policy, DeepSpeed)."""

    def autocast(self, device: torch.device) -> contextlib.AbstractContextManager[Any]:
        """Autocast for ``device``, or a no-op."""
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device.type, dtype=self.autocast_dtype)

    def cast_batch(self, batch: Any) -> Any:
        """Floating inputs in ``param_dtype`` (``bf16-true``); anything else unchanged."""
        return batch if self.param_dtype is None else cast_floats(batch, self.param_dtype)


def recipe(precision: str) -> PrecisionRecipe:
    """The recipe for ``32-true``, ``16-mixed``, ``bf16-mixed`` or ``bf16-true``.

    Raises:
        UsageError: another name.
    """
    table = {
        "32-true": PrecisionRecipe(name="32-true", autocast_dtype=None, param_dtype=None, loss_scaling=False,
                                   half_dtype=None),
        "16-mixed": PrecisionRecipe(name="16-mixed", autocast_dtype=torch.float16, param_dtype=None,
                                    loss_scaling=True, half_dtype=torch.float16),
        "bf16-mixed": PrecisionRecipe(name="bf16-mixed", autocast_dtype=torch.bfloat16, param_dtype=None,
                                      loss_scaling=False, half_dtype=torch.bfloat16),
        "bf16-true": PrecisionRecipe(name="bf16-true", autocast_dtype=None, param_dtype=torch.bfloat16,
                                     loss_scaling=False, half_dtype=torch.bfloat16),
    }
    if precision not in table:
        raise UsageError(f"unknown precision {precision!r}.", hint=f"Use one of {', '.join(table)}.")
    return table[precision]
