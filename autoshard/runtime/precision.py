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


_HALF_NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16"}


def _dtype_elements(module: torch.nn.Module) -> dict[torch.dtype, int]:
    """Elements per dtype of ``module``'s trainable floating parameters, or of all its floating parameters when
    none is trainable. What trains decides: peft keeps LoRA adapters in fp32 on a bf16 or fp16 base, as a fine-tune
    may keep an fp32 head on a frozen 16-bit body."""
    counts: dict[torch.dtype, int] = {}
    trained: dict[torch.dtype, int] = {}
    for p in module.parameters():
        if p.is_floating_point():
            counts[p.dtype] = counts.get(p.dtype, 0) + p.numel()
            if p.requires_grad:
                trained[p.dtype] = trained.get(p.dtype, 0) + p.numel()
    return trained or counts


def module_dtype(module: torch.nn.Module) -> torch.dtype | None:
    """The dtype holding most of ``module``'s trainable floating parameter elements, or of all its floating
    parameters when none is trainable (``None``: no floating parameters; :func:`_dtype_elements`)."""
    elements = _dtype_elements(module)
    return max(elements, key=lambda d: elements[d]) if elements else None


def for_module(module: torch.nn.Module, precision: str | None, *, argument: str = "precision",
               planned: bool = False) -> tuple[str | None, str | None]:
    """The precision to train an already-built ``module`` with, and a note on why, from its parameters' dtype.

    ``fit()`` casts parameters only under ``bf16-true``; every other precision trains them in the dtype they come
    in. A module in bf16 with no precision given is planned ``bf16-true`` (what it trains as); given a precision that
    keeps fp32 weights, it trains in bf16 all the same under DDP and FSDP2, which the note says (DeepSpeed's bf16
    mode keeps fp32 master weights whatever the module's dtype). A module in fp16 is refused unless
    ``bf16-true`` casts it: pure fp16 has no loss scaling (AdamW's ``eps`` of 1e-8 is 0 in fp16, and the loss turns
    to NaN within steps), and ``16-mixed``'s scaler refuses fp16 gradients.

    Example:
        >>> m = torch.nn.Linear(2, 2).to(torch.bfloat16)
        >>> for_module(m, None)[0], for_module(torch.nn.Linear(2, 2), None)
        ('bf16-true', (None, None))

    ``planned``: ``precision`` is a given plan's, which ``fit()``'s arguments cannot change (the hint says so).

    Raises:
        UsageError: an fp16 module under any precision but ``bf16-true``.
    """
    elements = _dtype_elements(module)
    dtype = max(elements, key=lambda d: elements[d]) if elements else None
    half = _HALF_NAMES.get(dtype) if dtype is not None else None
    if half is None or precision == "bf16-true":
        return precision, None
    kind = type(module).__name__
    if half == "fp16":
        asked = f"with no {argument}=" if precision is None else f"under {precision}"
        why = ("16-mixed's loss scaler refuses fp16 gradients (it is meant for fp32 weights)" if precision ==
               "16-mixed" else f"{asked} they would train in pure fp16 with no loss scaling (AdamW's eps of 1e-8 is "
               "0 in fp16: the loss turns NaN within steps)")
        cast = "Cast the module to fp32 first (model.float())"
        raise UsageError(f"{kind}'s parameters are fp16: {why}.",
                         hint=f"{cast}: the plan trains {precision}." if planned else
                         f"{cast} and pass {argument}='16-mixed' (fp16 autocast, fp32 weights, loss scaling), or "
                         f"pass {argument}='bf16-true'.")
    if precision is None:
        others = set(elements) - {dtype}
        if others:  # bf16 for the most part: bf16-true casts the rest
            return "bf16-true", (f"{kind}'s parameters are bf16 for the most part: planned bf16-true, which casts "
                                 f"the rest ({', '.join(sorted(str(d).removeprefix('torch.') for d in others))}) to "
                                 "bf16. For fp32 master weights, cast it to fp32 first (model.float()) and pass "
                                 f"{argument}='bf16-mixed'.")
        return "bf16-true", (f"{kind}'s parameters are bf16: planned bf16-true, which trains them as they are "
                             "(under DDP and FSDP2 with no fp32 copy; DeepSpeed keeps fp32 master weights of its "
                             "own). For fp32 master weights everywhere, cast it to fp32 first (model.float()) and "
                             f"pass {argument}='bf16-mixed'.")
    return precision, (f"{kind}'s parameters are bf16 and {precision} does not cast them: under DDP and FSDP2 its "
                       "weights, gradients and optimizer state stay bf16 (no fp32 master weights). Cast it to fp32 "
                       f"first (model.float()) for {precision} as it is meant, or pass {argument}='bf16-true' to "
                       "name what runs.")
