"""Building an optimizer by name, with the implementation (for-loop, foreach, fused) the run would use."""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from autoshard.errors import UsageError, UserCodeError
from autoshard.models.source import ModelSource, call_user
from autoshard.profiler.options import (
    OWN_KERNEL_OPTIMIZERS,
    OptimizerImpl,
    ProfileOptions,
    parse_optimizer,
    parse_optimizer_impl,
)

# Learning rates do not change memory; these are the usual fine-tuning defaults.
_LR = 1e-4


def impl_flags(impl: OptimizerImpl | None) -> dict[str, bool | None]:
    """The ``foreach=`` / ``fused=`` keywords a ``torch.optim`` constructor takes for ``impl``.

    ``None`` leaves both to torch (``_default_to_fused_or_foreach`` decides from the parameters' device).

    Example:
        >>> impl_flags("fused"), impl_flags("for-loop"), impl_flags(None)
        ({'foreach': False, 'fused': True}, {'foreach': False, 'fused': None}, {'foreach': None, 'fused': None})
    """
    if impl is None:
        return {"foreach": None, "fused": None}
    return {"foreach": impl == "foreach", "fused": True if impl == "fused" else None}


def build_optimizer(name: str, params: Iterable[nn.Parameter], *, foreach: bool | None = None,
                    impl: OptimizerImpl | None = None) -> torch.optim.Optimizer:
    """Build ``name`` over ``params``.

    Args:
        name: one of :data:`autoshard.profiler.options.OPTIMIZERS`.
        params: the parameters to optimise.
        foreach: force the multi-tensor (``foreach``) implementation on or off; ``None`` keeps torch's default
            for the parameters' device. On CUDA, torch defaults to ``foreach=True``
            (``torch/optim/optimizer.py::_default_to_fused_or_foreach``, torch 2.x), which allocates list-sized
            temporaries during ``step()`` — a GPU trace must force it to be faithful. Ignored when ``impl`` is
            given.
        impl: the implementation (:data:`~autoshard.profiler.options.OptimizerImpl`); ``None`` uses ``foreach``.

    Returns:
        The optimizer.

    Raises:
        UsageError: an unknown name, or ``fused`` for an optimizer without a fused kernel.
    """
    key = parse_optimizer(name)
    if key in OWN_KERNEL_OPTIMIZERS:
        impl = foreach = None  # one implementation: the library's kernel per parameter
    flags: dict[str, Any] = impl_flags(parse_optimizer_impl(impl, key)) if impl is not None else {"foreach": foreach}
    if flags.get("fused") is None:
        flags.pop("fused", None)
    params = [p for p in params if p.requires_grad]
    if key == "adamw":
        return torch.optim.AdamW(params, lr=_LR, **flags)
    if key == "adam":
        return torch.optim.Adam(params, lr=_LR, **flags)
    if key == "sgd":
        return torch.optim.SGD(params, lr=_LR, momentum=0.9, **flags)
    if key == "adamw8bit":
        return bitsandbytes().optim.AdamW8bit(params, lr=_LR)
    # Adafactor (torch.optim.Adafactor, torch >= 2.5): factored second moments, no first moment.
    return torch.optim.Adafactor(params, lr=1e-2, **flags)


BITSANDBYTES_MIN = (0, 47)
"""bitsandbytes registers its optimizer kernels as torch ops with shape rules (``register_fake``) from 0.47 on,
which the fake-tensor trace needs; its CPU kernel of the 8-bit step (``fit()`` on CPU) came in 0.50."""


def bitsandbytes() -> Any:
    """Import bitsandbytes, quietly (0.50 logs a warning about an optional CPU 4-bit kernel at import).

    Raises:
        UsageError: not installed, or older than :data:`BITSANDBYTES_MIN`.
    """
    import logging

    logging.getLogger("bitsandbytes.backends.cpu.ops").setLevel(logging.ERROR)
    try:
        import bitsandbytes as bnb
    except ImportError as e:
        raise UsageError("optimizer adamw8bit is bitsandbytes' AdamW8bit, and bitsandbytes is not installed.",
                         hint="pip install 'bitsandbytes>=0.50'") from e
    version = tuple(int(p) for p in bnb.__version__.split(".")[:2] if p.isdigit())
    if version < BITSANDBYTES_MIN:
        raise UsageError(f"optimizer adamw8bit needs bitsandbytes >= 0.47 (its optimizer kernels as torch ops), "
                         f"but {bnb.__version__} is installed.", hint="pip install -U 'bitsandbytes>=0.50'")
    return bnb


def require_optimizer(name: str) -> None:
    """Check that the library ``name`` needs is installed (bitsandbytes for ``adamw8bit``), before any slow work.

    Raises:
        UsageError: it is not, or is too old.
    """
    if parse_optimizer(name) == "adamw8bit":
        bitsandbytes()


def force_foreach_default(optimizer: torch.optim.Optimizer, foreach: bool = True) -> None:
    """Make groups that left ``foreach`` to torch run ``foreach`` (or the for-loop, ``foreach=False``).

    On CPU tensors torch would pick the for-loop; this makes an optimizer built there behave as it would on
    CUDA (``foreach=None`` → ``True``). Only groups that left ``foreach`` to the default and do not use
    ``fused`` are changed, and only for optimizers whose constructor has a ``foreach`` argument.
    """
    if "foreach" not in inspect.signature(type(optimizer).__init__).parameters:
        return
    for group in optimizer.param_groups:
        if group.get("foreach") is None and not group.get("fused"):
            group["foreach"] = foreach


def declared_optimizer(source: ModelSource) -> str | None:
    """The name (:data:`~autoshard.profiler.options.OPTIMIZERS`) of the optimizer a model file's
    ``optimizer(params)`` builds, built over the model on the meta device: what the trace steps (it wins over
    ``--optimizer``), so what the profile, the plan and its exports must name. ``None`` when the source declares
    none, or one autoshard has no name for (the trace still steps it; the name given is kept), or it cannot be
    built here (the trace then says why)."""
    if source.optimizer_fn is None:
        return None
    from autoshard.profiler.depth_plan import meta_model

    try:
        optimizer = call_user(source.optimizer_fn, meta_model(source).parameters(), what="optimizer()",
                              user_file=source.user_file)
    except UserCodeError:
        return None
    return optimizer_key(optimizer)


_NAMES = {"AdamW": "adamw", "Adam": "adam", "SGD": "sgd", "Adafactor": "adafactor", "AdamW8bit": "adamw8bit"}
_LIBRARIES = ("torch.optim", "transformers", "bitsandbytes")
"""Where the classes of :data:`_NAMES` come from: a class of that name elsewhere (a user's own ``Adam``) is not
taken for one."""


def optimizer_key(optimizer: Any) -> str | None:
    """The name (:data:`~autoshard.profiler.options.OPTIMIZERS`) of an optimizer instance or class from torch,
    transformers or bitsandbytes that autoshard plans by name (torch's and transformers' ``Adafactor`` alike: both
    factor the second moment), else ``None``.

    Example:
        >>> optimizer_key(torch.optim.SGD), optimizer_key(torch.optim.Adagrad)
        ('sgd', None)
    """
    cls = optimizer if isinstance(optimizer, type) else type(optimizer)
    if not cls.__module__.startswith(_LIBRARIES):
        return None
    return _NAMES.get(cls.__name__)


def make_optimizer(source: ModelSource, options: ProfileOptions, model: nn.Module) -> torch.optim.Optimizer:
    """The optimizer the traced step runs: the model file's ``optimizer(params)`` when it defines one (with the
    implementation ``options`` names forced where it can be), else ``options.optimizer`` built by name.

    Raises:
        UserCodeError: the model has no trainable parameters, or ``optimizer()`` returned no optimizer.
    """
    if not any(p.requires_grad for p in model.parameters()):
        frozen = next(model.parameters(), None) is not None
        if source.kind != "module":
            hint = "Check that model() returns the module to train and that its parameters require grad."
        elif frozen:
            hint = "Unfreeze what should train (p.requires_grad = True) before fit()."
        else:  # nn.ReLU(), a module whose layers are plain attributes, not submodules
            hint = ("It has no parameters at all: pass the module that holds the layers (each an nn.Module "
                    "attribute, or in an nn.ModuleList, not a plain list).")
        raise UserCodeError(
            f"{source.name} has no trainable parameters: there is no training step to profile.", hint=hint)
    if source.optimizer_fn is None:
        return build_optimizer(options.optimizer, model.parameters(), impl=options.optimizer_impl)
    optimizer = call_user(source.optimizer_fn, model.parameters(), what="optimizer()", user_file=source.user_file)
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise UserCodeError(
            f"optimizer() in {source.origin} returned {type(optimizer).__name__}, expected a torch.optim.Optimizer.",
            hint="Return e.g. `torch.optim.AdamW(params, lr=1e-4)`.",
        )
    if options.optimizer_impl != "fused":  # fused is the constructor's choice; it cannot be switched on later
        force_foreach_default(optimizer, options.optimizer_impl == "foreach")
    return optimizer
