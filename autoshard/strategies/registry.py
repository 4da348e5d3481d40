"""Strategies by name, with presets (as Lightning registers ``deepspeed_stage_3_offload``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from autoshard._suggest import close_names
from autoshard.errors import UsageError
from autoshard.strategies.base import Strategy

_REGISTRY: dict[str, tuple[type[Strategy], dict[str, Any], str]] = {}


def register(name: str, *, description: str, **preset: Any) -> Callable[[type[Strategy]], type[Strategy]]:
    """Register ``cls`` under ``name`` with preset constructor arguments (class decorator; stackable).

    Args:
        name: the user-facing name, e.g. ``"fsdp_shard_grad_op"``.
        description: one line for listings.
        **preset: keyword arguments the class is constructed with.
    """

    def wrap(cls: type[Strategy]) -> type[Strategy]:
        if name in _REGISTRY:
            raise ValueError(f"strategy {name!r} is registered twice")
        _REGISTRY[name] = (cls, dict(preset), description)
        return cls

    return wrap


def names() -> list[str]:
    """Every registered strategy name, in registration order."""
    _load()
    return list(_REGISTRY)


def describe(name: str) -> str:
    """The one-line description of ``name``."""
    _load()
    return _REGISTRY[name][2]


def get(name: str) -> Strategy:
    """A strategy instance by name.

    Raises:
        UsageError: unknown name; the message lists the valid ones.
    """
    _load()
    if name not in _REGISTRY:
        close = close_names(name, _REGISTRY)
        maybe = f" Did you mean {', '.join(close)}?" if close else ""
        raise UsageError(f"unknown strategy {name!r}.{maybe}", hint=f"Valid strategies: {', '.join(_REGISTRY)}.")
    cls, preset, _ = _REGISTRY[name]
    strategy = cls(**preset)
    strategy.name = name  # type: ignore[misc]  # the instance carries the name it was created under
    return strategy


def _load() -> None:
    # Explicit imports register the families, in the order they are listed to users.
    from autoshard.strategies import ddp, fsdp, zero  # noqa: F401
