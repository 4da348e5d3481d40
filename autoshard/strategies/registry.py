"""Strategies by name, with presets (as Lightning registers ``deepspeed_stage_3_offload``), and the families that
train and export them.

The registry imports no family. Each family package (``autoshard/strategies/ddp``, ``fsdp``, ``deepspeed``)
registers its presets and names its backend and exporter in its ``__init__.py``; ``autoshard.strategies``
imports the families once, in the order they are listed to users. The backend and the exporter are named by import
path and loaded only when the runtime or an exporter asks (:func:`backend_class`, :func:`exporter`), so planning
never imports ``torch.distributed`` or DeepSpeed.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from autoshard._suggest import close_names
from autoshard.errors import UsageError
from autoshard.strategies.base import FamilyName, Strategy, Traits


@dataclass(frozen=True, kw_only=True, slots=True)
class Family:
    """A strategy family: where its training backend and its exporter live."""

    name: FamilyName
    backend: str
    """``"module:Class"`` of its :class:`~autoshard.runtime.backends.base.Backend`, imported by the runtime only."""
    exporter: str
    """``"module:object"`` of its :class:`~autoshard.export.family.FamilyExporter`, imported by ``export`` only."""


@dataclass(frozen=True, slots=True)
class _Preset:
    cls: type[Strategy]
    preset: dict[str, Any]
    description: str


_REGISTRY: dict[str, _Preset] = {}
_FAMILIES: dict[str, Family] = {}


def register(name: str, *, description: str, **preset: Any) -> Callable[[type[Strategy]], type[Strategy]]:
    """Register ``cls`` under ``name`` with preset constructor arguments (class decorator; stackable).

    Args:
        name: the user-facing name, e.g. ``"fsdp_shard_grad_op"``.
        description: one line for listings.
        **preset: keyword arguments the class is constructed with.

    Raises:
        ValueError: the name is taken, or the class's family is not registered yet.
    """

    def wrap(cls: type[Strategy]) -> type[Strategy]:
        if name in _REGISTRY:
            raise ValueError(f"strategy {name!r} is registered twice")
        if cls.family not in _FAMILIES:
            raise ValueError(f"register family {cls.family!r} before its strategy {name!r}")
        _REGISTRY[name] = _Preset(cls, dict(preset), description)
        return cls

    return wrap


def register_family(family: Family) -> None:
    """Register a family (once).

    Raises:
        ValueError: registered twice.
    """
    if family.name in _FAMILIES:
        raise ValueError(f"family {family.name!r} is registered twice")
    _FAMILIES[family.name] = family


def names() -> list[str]:
    """Every registered strategy name, in registration order."""
    _load()
    return list(_REGISTRY)


def family_names() -> list[str]:
    """Every registered family, in registration order."""
    _load()
    return list(_FAMILIES)


def describe(name: str) -> str:
    """The one-line description of ``name``."""
    _load()
    return _REGISTRY[name].description


def _named_otherwise(name: str) -> list[str]:
    """The strategy a name people use elsewhere means: ``zero3`` / ``ds3`` / ``stage-2`` (DeepSpeed's stages),
    ``fsdp2`` / ``fsdp1``.

    Example:
        >>> _named_otherwise("ZeRO-3"), _named_otherwise("fsdp2"), _named_otherwise("tp")
        (['deepspeed_stage_3'], ['fsdp'], [])
    """
    key = re.sub(r"[-_ ]", "", name.lower())
    stage = re.fullmatch(r"(?:deepspeed|ds)?(?:zero|stage|ds)([123])(offload)?", key)
    if stage is not None:
        return [f"deepspeed_stage_{stage.group(1)}{'_offload' if stage.group(2) else ''}"]
    return ["fsdp"] if key in ("fsdp1", "fsdp2", "fullyshardeddataparallel") else []


def get(name: str) -> Strategy:
    """A strategy instance by name.

    Raises:
        UsageError: unknown name; the message lists the valid ones.
    """
    _load()
    if name not in _REGISTRY:
        close = _named_otherwise(name) or close_names(name, _REGISTRY)
        maybe = f" Did you mean {', '.join(close)}?" if close else ""
        raise UsageError(f"unknown strategy {name!r}.{maybe}", hint=f"Valid strategies: {', '.join(_REGISTRY)}.")
    entry = _REGISTRY[name]
    strategy = entry.cls(**entry.preset)
    strategy.name = name  # type: ignore[misc]  # the instance carries the name it was created under
    return strategy


def traits(name: str) -> Traits:
    """The traits of the strategy ``name`` (see :func:`get` for errors)."""
    return get(name).traits


def family(name: str) -> Family:
    """A registered family.

    Raises:
        UsageError: unknown family; the message lists the valid ones.
    """
    _load()
    if name not in _FAMILIES:
        raise UsageError(f"unknown strategy family {name!r}.", hint=f"Families: {', '.join(_FAMILIES)}.")
    return _FAMILIES[name]


def backend_class(name: str) -> Any:
    """The training backend class of family ``name`` (imports that family's dependencies only)."""
    return _resolve(family(name).backend)


def exporter(name: str) -> Any:
    """The exporter of family ``name``."""
    return _resolve(family(name).exporter)


def _resolve(path: str) -> Any:
    module, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module), attribute)


def _load() -> None:
    # The families register themselves when the package imports them; a caller that imported this module
    # directly still gets them.
    importlib.import_module("autoshard.strategies")
