"""What loading a checkpoint does to the optimizer the run was given: which algorithm it is, which of its
hyper-parameters the checkpoint replaced, and the keys a sibling implementation needs that the checkpoint lacks.

torch's ``Optimizer.load_state_dict`` (which DDP's, FSDP2's ``set_optimizer_state_dict`` and DeepSpeed's loaders all
end in) replaces each parameter group with the saved one, keeping only ``params``: a learning rate passed to the new
optimizer is silently the checkpoint's, and a key the new class reads that the saved class never wrote (``momentum``
for SGD after AdamW, ``bias_correction`` for ``DeepSpeedCPUAdam`` after torch's AdamW) fails at the first step.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

import torch

Groups = list[dict[str, Any]]
"""Each parameter group's hyper-parameters: everything but ``params``."""

_SAME_ALGORITHM = {"DeepSpeedCPUAdam": ("AdamW", "Adam")}
"""Implementations of one algorithm under another class: DeepSpeed's CPU Adam is what optimizer offload steps with
in place of torch's Adam / AdamW (``adamw_mode`` says which; ``deepspeed/ops/adam/cpu_adam.py``, 0.19.8)."""


def algorithm(optimizer: torch.optim.Optimizer) -> str:
    """The optimizer's algorithm by its class name, an implementation standing in for another named as it:
    ``"AdamW"`` for ``torch.optim.AdamW`` and for ``DeepSpeedCPUAdam(adamw_mode=True)``."""
    name = type(optimizer).__name__
    if name in _SAME_ALGORITHM:
        decoupled, coupled = _SAME_ALGORITHM[name]
        return decoupled if getattr(optimizer, "adam_w_mode", True) else coupled
    return name


def hyperparameters(optimizer: torch.optim.Optimizer) -> Groups:
    """A copy of each parameter group's settings (not its parameters)."""
    return [{k: v for k, v in group.items() if k != "params"} for group in optimizer.param_groups]


def fill_missing(optimizer: torch.optim.Optimizer, given: Groups) -> list[str]:
    """Put back into the loaded groups the keys the checkpoint's groups lacked, as the run's optimizer had them
    (an implementation of the same algorithm reads settings the saved one never wrote); returns their names."""
    filled: set[str] = set()
    for group, before in zip(optimizer.param_groups, given, strict=False):
        for key, value in before.items():
            if key not in group:
                group[key] = value
                filled.add(key)
    return sorted(filled)


def replaced(given: Groups, loaded: Groups, *, scheduled: bool) -> list[str]:
    """``"lr 0.0001 -> 0.01"`` for each number-valued setting the checkpoint replaced (the first group that
    differs says the values), leaving out ``lr`` when a restored schedule sets it."""
    changes: dict[str, str] = {}
    for before, after in zip(given, loaded, strict=False):
        for key, value in before.items():
            if key in changes or key not in after or (scheduled and key in ("lr", "initial_lr")):
                continue
            if _numbers(value) and _numbers(after[key]) and not _same(value, after[key]):
                changes[key] = f"{key} {_show(value)} -> {_show(after[key])}"
    return list(changes.values())


def _numbers(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return value.numel() == 1
    if isinstance(value, Sequence) and not isinstance(value, str):
        return all(_numbers(v) for v in value)
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _floats(value: Any) -> list[float]:
    if isinstance(value, torch.Tensor):
        return [float(value.item())]
    if isinstance(value, Sequence):
        return [f for v in value for f in _floats(v)]
    return [float(value)]


def _same(a: Any, b: Any) -> bool:
    x, y = _floats(a), _floats(b)
    return len(x) == len(y) and all(math.isclose(p, q, rel_tol=1e-9, abs_tol=0.0) for p, q in zip(x, y, strict=True))


def _show(value: Any) -> str:
    shown = [f"{v:g}" for v in _floats(value)]
    return shown[0] if len(shown) == 1 and not isinstance(value, Sequence) else f"({', '.join(shown)})"
