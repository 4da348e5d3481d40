"""What a profile is asked for: :class:`ProfileOptions` and the precision / optimizer names."""

from __future__ import annotations

import difflib
from dataclasses import asdict, dataclass
from enum import Enum
from typing import Any, Literal

import torch

from autoshard.errors import UsageError

PrecisionName = Literal["32-true", "16-mixed", "bf16-mixed", "bf16-true"]
"""The precision names, as Lightning's ``Trainer(precision=...)`` spells them (for type checkers)."""


class Precision(str, Enum):
    """Training precision, named as in Lightning's ``Trainer(precision=...)``."""

    FP32 = "32-true"
    """fp32 parameters, gradients, optimizer state and compute."""
    FP16_MIXED = "16-mixed"
    """fp32 parameters and optimizer state; fp16 autocast for compute (with a GradScaler)."""
    BF16_MIXED = "bf16-mixed"
    """fp32 parameters and optimizer state; bf16 autocast for compute."""
    BF16_TRUE = "bf16-true"
    """Everything in bf16: parameters, gradients, optimizer state and compute."""

    @property
    def param_dtype(self) -> torch.dtype:
        """The dtype parameters (and so gradients and optimizer state) are stored in."""
        return torch.bfloat16 if self is Precision.BF16_TRUE else torch.float32

    @property
    def autocast_dtype(self) -> torch.dtype | None:
        """The autocast compute dtype, or ``None`` when autocast is off."""
        return {Precision.FP16_MIXED: torch.float16, Precision.BF16_MIXED: torch.bfloat16}.get(self)


# Aliases users type; Lightning accepts "bf16"/"16"/"32" for the mixed / true variants the same way.
_PRECISION_ALIASES = {
    "32": Precision.FP32,
    "fp32": Precision.FP32,
    "32-true": Precision.FP32,
    "16": Precision.FP16_MIXED,
    "fp16": Precision.FP16_MIXED,
    "16-mixed": Precision.FP16_MIXED,
    "fp16-mixed": Precision.FP16_MIXED,
    "bf16": Precision.BF16_MIXED,
    "bf16-mixed": Precision.BF16_MIXED,
    "bf16-true": Precision.BF16_TRUE,
    "pure-bf16": Precision.BF16_TRUE,
}

OPTIMIZERS = ("adamw", "adam", "sgd", "adafactor")
"""Optimizers autoshard can build by name (``sgd`` is SGD with momentum 0.9)."""


def parse_precision(value: str | Precision) -> Precision:
    """Parse a precision name such as ``"bf16-mixed"`` or ``"32"``.

    Raises:
        UsageError: unknown name (the message lists the valid ones).
    """
    if isinstance(value, Precision):
        return value
    key = str(value).strip().lower()
    if key not in _PRECISION_ALIASES:
        raise UsageError(
            f"unknown precision {value!r}.",
            hint=f"Use one of: {', '.join(p.value for p in Precision)}.",
        )
    return _PRECISION_ALIASES[key]


def parse_optimizer(value: str) -> str:
    """Validate an optimizer name (case-insensitive).

    Raises:
        UsageError: unknown name, with the closest valid one suggested.
    """
    key = value.strip().lower()
    if key not in OPTIMIZERS:
        close = difflib.get_close_matches(key, OPTIMIZERS, n=1)
        maybe = f" Did you mean {close[0]!r}?" if close else ""
        raise UsageError(f"unknown optimizer {value!r}.{maybe}", hint=f"Use one of: {', '.join(OPTIMIZERS)}.")
    return key


@dataclass(frozen=True, kw_only=True, slots=True)
class ProfileOptions:
    """How to run the traced training step."""

    batch_size: int
    """Micro-batch size (samples per forward/backward)."""
    seq_len: int | None = None
    """Sequence length for token models; ``None`` uses the model's default."""
    precision: Precision = Precision.BF16_MIXED
    """Training precision."""
    optimizer: str = "adamw"
    """Optimizer name (one of :data:`OPTIMIZERS`), used unless the model source defines its own."""
    activation_checkpointing: bool = False
    """Recompute each repeated block's activations in backward instead of saving them."""
    grad_accumulation: int = 1
    """Micro-batches per optimizer step."""
    target: str = "cuda"
    """The device the answer is for: ``"cuda"`` models CUDA kernels and the caching allocator;
    ``"cpu"`` reports exactly what the CPU run allocates (used to compare against real CPU runs)."""
    fp32_output: bool = False
    """Cast the model's floating outputs to fp32 before the loss, as FSDP2's root ``output_dtype=float32`` does
    (``fit()`` sets it for ``16-mixed``, so that the scaled loss and its gradient stay finite)."""

    def __post_init__(self) -> None:
        if not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise UsageError(f"batch size must be a positive integer, but got {self.batch_size!r}.")
        if self.seq_len is not None and (not isinstance(self.seq_len, int) or self.seq_len < 1):
            raise UsageError(f"sequence length must be a positive integer, but got {self.seq_len!r}.")
        if not isinstance(self.grad_accumulation, int) or self.grad_accumulation < 1:
            raise UsageError(f"gradient accumulation must be a positive integer, but got {self.grad_accumulation!r}.")
        if self.target not in ("cuda", "cpu"):
            raise UsageError(f"target must be 'cuda' or 'cpu', but got {self.target!r}.")
        object.__setattr__(self, "precision", parse_precision(self.precision))
        object.__setattr__(self, "optimizer", parse_optimizer(self.optimizer))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        d = asdict(self)
        d["precision"] = self.precision.value
        return d
