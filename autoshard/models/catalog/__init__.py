"""Built-in catalog of well-known models, built from their published hyperparameters.

Each entry is a function returning a :class:`~autoshard.models.source.ModelSource`, registered by name with
:func:`register`. The definitions are autoshard's own pure-PyTorch modules (no transformers needed), so the
catalog works on any install.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from autoshard._suggest import close_names
from autoshard.errors import ModelSourceError
from autoshard.models.fingerprint import definition_fingerprint

if TYPE_CHECKING:
    from autoshard.models.source import ModelSource

_REGISTRY: dict[str, Callable[[], ModelSource]] = {}


def register(name: str) -> Callable[[Callable[[], ModelSource]], Callable[[], ModelSource]]:
    """Register a catalog entry under ``name`` (decorator)."""

    def wrap(factory: Callable[[], ModelSource]) -> Callable[[], ModelSource]:
        if name in _REGISTRY:
            raise ValueError(f"catalog name {name!r} is registered twice")
        _REGISTRY[name] = factory
        return factory

    return wrap


def names() -> list[str]:
    """Every catalog name, sorted."""
    _load_entries()
    return sorted(_REGISTRY)


def get(name: str) -> ModelSource:
    """The catalog entry ``name``.

    Raises:
        ModelSourceError: unknown name; the message suggests the closest names.
    """
    _load_entries()
    key = name.lower()
    if key not in _REGISTRY:
        close = close_names(key, _REGISTRY, n=3)
        hint = f"Did you mean {', '.join(close)}?" if close else "Run `autoshard models` to list them."
        raise ModelSourceError(f"{name!r} is not a file, a config.json or a catalog model name.", hint=hint)
    factory = _REGISTRY[key]
    source = factory()
    return source.replace(fingerprint=_definition(key, factory))


def _definition(name: str, factory: Callable[[], ModelSource]) -> str | None:
    """The entry's fingerprint: its name and the text of its family's module and of the shared pieces."""
    import inspect

    from autoshard.models.catalog import _common

    defining = inspect.getsourcefile(factory)
    if defining is None or _common.__file__ is None:  # pragma: no cover — catalog modules are .py files
        return None
    return definition_fingerprint(name, (defining, _common.__file__))


def _load_entries() -> None:
    # Explicit imports register the entries (no module introspection).
    from autoshard.models.catalog import entries  # noqa: F401
