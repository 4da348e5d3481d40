"""What a profile is asked for: :class:`ProfileOptions` and the precision / optimizer names."""

from __future__ import annotations

import difflib
import math
from dataclasses import asdict, dataclass
from enum import Enum
from typing import Any, Literal

import torch

from autoshard.errors import UsageError
from autoshard.profiler.checkpointing import ActivationCheckpointing, parse_checkpointing

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

MAX_DIMENSION = 2**31 - 1
"""The largest micro-batch or sequence length a profile is asked for: far beyond any training run, and within what
the example batches' integer tensors (token ids drawn by ``torch.randint``, positions, masks) can hold."""

OPTIMIZERS = ("adamw", "adam", "sgd", "adafactor", "adamw8bit")
"""Optimizers autoshard can build by name (``sgd`` is SGD with momentum 0.9; ``adamw8bit`` is bitsandbytes'
``AdamW8bit``, the Hugging Face Trainer's ``--optim adamw_bnb_8bit``)."""

_OPTIMIZER_ALIASES = {"adamw_bnb_8bit": "adamw8bit", "adamw-8bit": "adamw8bit", "adamw_8bit": "adamw8bit",
                      "bnb-adamw8bit": "adamw8bit"}
"""Other spellings users type: the HF Trainer's ``optim`` name and bitsandbytes' class name with separators."""

OWN_KERNEL_OPTIMIZERS = ("adamw8bit",)
"""Optimizers with one implementation of their own, not ``torch.optim``'s for-loop / foreach / fused:
bitsandbytes' ``AdamW8bit`` updates each parameter in one kernel, in place (``optimizer_update_8bit_blockwise``,
``optimizer_update_32bit`` for tensors under its ``min_8bit_size`` of 4096 elements; bitsandbytes 0.50
``optim/optimizer.py::Optimizer2State``), with 8-bit states whose size does not follow the parameters' dtype."""

BITSANDBYTES_OBJECT = "bitsandbytes."
"""How a bitsandbytes optimizer given to ``fit()`` as a class or an instance is named to the strategies when it is
not AdamW8bit: ``bitsandbytes.<Class>`` (``bitsandbytes.Lion8bit``, ``bitsandbytes.AdamW`` with 32-bit state)."""


def own_kernel(optimizer: str) -> bool:
    """Whether ``optimizer`` steps each parameter with a kernel of its own rather than ``torch.optim``'s: a name of
    :data:`OWN_KERNEL_OPTIMIZERS`, or ``bitsandbytes.<Class>`` for any other bitsandbytes optimizer. Every
    bitsandbytes optimizer does (``optimizer_update_32bit`` or ``optimizer_update_8bit_blockwise``, bitsandbytes
    0.50), and none of those kernels takes FSDP2's DTensor parameters.

    Example:
        >>> own_kernel("adamw8bit"), own_kernel("bitsandbytes.Lion8bit"), own_kernel("adamw")
        (True, True, False)
    """
    return optimizer in OWN_KERNEL_OPTIMIZERS or optimizer.startswith(BITSANDBYTES_OBJECT)


OptimizerImpl = Literal["foreach", "for-loop", "fused"]
"""How ``torch.optim`` runs a step (``torch/optim/adam.py``, torch 2.13):

* ``"for-loop"`` (``foreach=False``): ``_single_tensor_adam``, one parameter at a time; its temporaries are one
  parameter's (``exp_avg_sq.sqrt() / bias_correction2_sqrt``). Torch's default on CPU, and the shape of the
  per-parameter AdamW the Hugging Face Trainer used to default to (issue #16).
* ``"foreach"`` (``foreach=True``): ``_multi_tensor_adam``, one list per device and dtype;
  ``torch._foreach_sqrt(exp_avg_sqs)`` allocates a temporary the size of every parameter of the list at once.
  Torch's default for CUDA tensors (``torch/optim/optimizer.py::_default_to_fused_or_foreach`` picks foreach,
  never fused, unless asked).
* ``"fused"`` (``fused=True``): ``torch._fused_adam_``, one kernel that updates in place with no temporaries.
"""
OPTIMIZER_IMPLS: tuple[OptimizerImpl, ...] = ("foreach", "for-loop", "fused")
_FUSED_OPTIMIZERS = ("adamw", "adam", "sgd")
"""Optimizers with a ``fused=`` implementation in torch 2.13 (Adafactor has none)."""


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
            hint=f"Use one of: {', '.join(p.value for p in Precision)} (or fp32 / 32, fp16 / 16, bf16 for the "
                 "mixed ones).",
        )
    return _PRECISION_ALIASES[key]


def default_optimizer_impl(target: str) -> OptimizerImpl:
    """What torch picks when neither ``foreach`` nor ``fused`` is given: ``foreach`` for CUDA tensors, the
    ``for-loop`` elsewhere (``_default_to_fused_or_foreach``: CPU is not a foreach-kernel device).

    Example:
        >>> default_optimizer_impl("cuda"), default_optimizer_impl("cpu")
        ('foreach', 'for-loop')
    """
    return "foreach" if target == "cuda" else "for-loop"


def parse_optimizer_impl(value: str, optimizer: str = "adamw") -> OptimizerImpl:
    """Validate an optimizer implementation name for ``optimizer`` (``foreach``, ``for-loop``, ``fused``).

    ``forloop``, ``for_loop`` and ``single`` are accepted for ``for-loop``.

    Raises:
        UsageError: unknown name, or ``fused`` for an optimizer torch has no fused kernel for.
    """
    if optimizer in OWN_KERNEL_OPTIMIZERS:
        raise UsageError(f"{optimizer} has one implementation (bitsandbytes' kernel per parameter), not torch's "
                         f"{value!r}.", hint="Drop --optimizer-impl (optimizer_impl=).")
    key = str(value).strip().lower().replace("_", "-")
    key = {"forloop": "for-loop", "single": "for-loop", "single-tensor": "for-loop", "multi-tensor": "foreach"
           }.get(key, key)
    if key not in OPTIMIZER_IMPLS:
        raise UsageError(f"unknown optimizer implementation {value!r}.",
                         hint=f"Use one of: {', '.join(OPTIMIZER_IMPLS)}.")
    if key == "fused" and optimizer not in _FUSED_OPTIMIZERS:
        raise UsageError(f"torch has no fused {optimizer} (fused=True exists for {', '.join(_FUSED_OPTIMIZERS)}).",
                         hint="Use --optimizer-impl foreach or for-loop.")
    return key


def steps_tensor_by_tensor(optimizer: str, impl: OptimizerImpl | None) -> bool:
    """Whether the step launches its kernels parameter by parameter (torch's for-loop, bitsandbytes' kernels),
    so that a flat partition (DeepSpeed's) takes one parameter's launches.

    Example:
        >>> steps_tensor_by_tensor("adamw", "for-loop"), steps_tensor_by_tensor("adamw8bit", None)
        (True, True)
    """
    return impl == "for-loop" or optimizer in OWN_KERNEL_OPTIMIZERS


def state_follows_parameter_dtype(optimizer: str) -> bool:
    """Whether the optimizer state is kept in the parameters' dtype (torch's optimizers: ``zeros_like(p)``), so
    that state traced on bf16 parameters doubles on an fp32 master copy; bitsandbytes' 8-bit states do not.

    Example:
        >>> state_follows_parameter_dtype("adamw"), state_follows_parameter_dtype("adamw8bit")
        (True, False)
    """
    return optimizer not in OWN_KERNEL_OPTIMIZERS


Float32MatmulPrecision = Literal["highest", "high", "medium"]
FLOAT32_MATMUL_PRECISIONS: tuple[Float32MatmulPrecision, ...] = ("highest", "high", "medium")
"""``torch.set_float32_matmul_precision``'s settings: ``highest`` (torch's default) keeps fp32 matmuls in fp32;
``high`` and ``medium`` let CUDA run them on TF32 tensor cores (``torch.backends.cuda.matmul.allow_tf32``)."""


def parse_float32_matmul_precision(value: str) -> Float32MatmulPrecision:
    """Validate a ``torch.set_float32_matmul_precision`` setting (case-insensitive).

    Raises:
        UsageError: not ``highest``, ``high`` or ``medium``.
    """
    key = str(value).strip().lower()
    for name in FLOAT32_MATMUL_PRECISIONS:
        if key == name:
            return name
    raise UsageError(f"unknown float32 matmul precision {value!r}.",
                     hint=f"Use one of: {', '.join(FLOAT32_MATMUL_PRECISIONS)} (torch.set_float32_matmul_precision).")


def parse_grad_clip_norm(value: object, name: str = "grad_clip_norm") -> float | None:
    """Validate a gradient-clipping norm: the global 2-norm the gradients are clipped to before each optimizer
    step (``torch.nn.utils.clip_grad_norm_``, DeepSpeed's ``gradient_clipping``); ``None`` clips nothing.

    Example:
        >>> parse_grad_clip_norm(1), parse_grad_clip_norm(None)
        (1.0, None)

    Raises:
        UsageError: not a positive finite number (``name`` is the argument or flag to name).
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise UsageError(f"{name} must be a positive number (the gradients' global 2-norm to clip to), "
                         f"but got {value!r}.", hint="Leave it out to train without clipping.")
    return float(value)


def parse_optimizer(value: str) -> str:
    """Validate an optimizer name (case-insensitive).

    Raises:
        UsageError: unknown name, with the closest valid one suggested.
    """
    if not isinstance(value, str):  # fit() takes a torch.optim class or a factory; a trace names the optimizer
        what = value.__name__ if isinstance(value, type) else type(value).__name__
        raise UsageError(f"optimizer is named here, e.g. 'adamw', but got {what}.",
                         hint=f"Use one of: {', '.join(OPTIMIZERS)} (fit() also takes a torch.optim class or a "
                              "factory; its plan traces the name it stands for).")
    key = value.strip().lower()
    key = _OPTIMIZER_ALIASES.get(key, key)
    if key not in OPTIMIZERS:
        close = difflib.get_close_matches(key, OPTIMIZERS, n=1)
        maybe = f" Did you mean {close[0]!r}?" if close else ""
        raise UsageError(f"unknown optimizer {value!r}.{maybe}", hint=f"Use one of: {', '.join(OPTIMIZERS)}.")
    return key


MAX_TRACED_ACCUMULATION = 1024
"""The most micro-batches a profile's step traces: each runs under the tracer (a tiny MLP took 135 s for 1,000, and
``--grad-accumulation 1000000000`` ran on without a word), and the peak is the same from the second on."""


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
    optimizer_impl: OptimizerImpl | None = None
    """How the optimizer steps (:data:`OptimizerImpl`); ``None`` takes torch's default on ``target``
    (:func:`default_optimizer_impl`: ``foreach`` on CUDA). A model source's own optimizer keeps the flags it
    was built with; only groups that left ``foreach`` to torch get ``foreach`` / ``for-loop`` from here. Always
    ``None`` for :data:`OWN_KERNEL_OPTIMIZERS`."""
    activation_checkpointing: bool = False
    """Recompute repeated blocks' activations in backward instead of saving them (``True``: every block,
    unless :attr:`checkpointing` says how); always ``bool(checkpointing)`` once constructed."""
    checkpointing: ActivationCheckpointing | str | None = None
    """What is recomputed: ``none``, ``full``, ``every-N`` or ``op`` (:mod:`autoshard.profiler.checkpointing`);
    ``None`` follows :attr:`activation_checkpointing` (``full`` or ``none``). An :class:`ActivationCheckpointing` once
    constructed."""
    grad_accumulation: int = 1
    """Micro-batches per optimizer step."""
    target: str = "cuda"
    """The device the answer is for: ``"cuda"`` models CUDA kernels and the caching allocator;
    ``"cpu"`` reports exactly what the CPU run allocates (used to compare against real CPU runs)."""
    set_grads_to_none: bool = True
    """``optimizer.zero_grad(set_to_none=True)`` between steps, torch >= 2.0's default: gradients are freed and
    made anew in backward. ``False`` keeps them allocated (zeroed) through the next forward, as
    ``zero_grad(set_to_none=False)`` does, and ``Module.zero_grad()`` did by default before torch 2.0 (the HF
    Trainer's ``model.zero_grad()`` then): the full gradients add to the forward's peak."""
    fp32_output: bool = False
    """Cast the model's floating outputs to fp32 before the loss, as FSDP2's root ``output_dtype=float32`` does
    (``fit()`` sets it for ``16-mixed``, so that the scaled loss and its gradient stay finite)."""

    def __post_init__(self) -> None:
        if not _positive_int(self.batch_size):
            raise UsageError(f"batch size must be a positive integer, but got {self.batch_size!r}.")
        if self.seq_len is not None and not _positive_int(self.seq_len):
            raise UsageError(f"sequence length must be a positive integer, but got {self.seq_len!r}.")
        for what, value in (("batch size", self.batch_size), ("sequence length", self.seq_len)):
            if value is not None and value > MAX_DIMENSION:
                raise UsageError(f"{what} {value:,} is above the {MAX_DIMENSION:,} autoshard can trace.",
                                 hint="Token ids, positions and masks are built with torch's integer types.")
        if not _positive_int(self.grad_accumulation):
            raise UsageError(f"gradient accumulation must be a positive integer, but got {self.grad_accumulation!r}.")
        if self.grad_accumulation > MAX_TRACED_ACCUMULATION:
            raise UsageError(f"gradient accumulation {self.grad_accumulation:,} is above the "
                             f"{MAX_TRACED_ACCUMULATION:,} micro-batches a profile traces (each one is run).",
                             hint="The peak is the same from 2 on: profile with fewer, or plan the global batch with "
                                  "recommend --global-batch-size.")
        if not isinstance(self.set_grads_to_none, bool):
            raise UsageError(f"set_grads_to_none must be True or False, but got {self.set_grads_to_none!r}.")
        if self.target not in ("cuda", "cpu"):
            raise UsageError(f"target must be 'cuda' or 'cpu', but got {self.target!r}.")
        object.__setattr__(self, "precision", parse_precision(self.precision))
        object.__setattr__(self, "optimizer", parse_optimizer(self.optimizer))
        ckpt = parse_checkpointing(self.activation_checkpointing if self.checkpointing is None
                                   else self.checkpointing)
        if self.activation_checkpointing is True and not ckpt:
            raise UsageError(f"activation_checkpointing=True contradicts checkpointing={self.checkpointing!r}.")
        object.__setattr__(self, "checkpointing", ckpt)
        object.__setattr__(self, "activation_checkpointing", bool(ckpt))
        if self.optimizer in OWN_KERNEL_OPTIMIZERS and self.optimizer_impl is None:
            return
        impl = default_optimizer_impl(self.target) if self.optimizer_impl is None else self.optimizer_impl
        object.__setattr__(self, "optimizer_impl", parse_optimizer_impl(impl, self.optimizer))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        d = asdict(self)
        d["precision"] = self.precision.value
        d["checkpointing"] = str(self.checkpointing)
        return d


def _positive_int(value: object) -> bool:
    """A whole number above 0 (``True`` is an ``int`` to Python, not to a user)."""
    return isinstance(value, int) and not isinstance(value, bool) and value > 0
