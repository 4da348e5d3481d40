"""Turning a model source (``model.py``, HF ``config.json``, catalog name) into a :class:`ModelSource`.

The names from :mod:`autoshard.models.source` load on first use, so that the catalog's listing
(:mod:`autoshard.models.catalog.listing`, ``autoshard models``) imports no torch.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from autoshard.errors import ModelSourceError, UsageError, in_arguments

if TYPE_CHECKING:  # loaded lazily at runtime (see __getattr__), typed here for type checkers
    from autoshard.models.source import Batch, ModelSource, call_model, default_loss

__all__ = ["Batch", "ModelSource", "call_model", "default_loss", "load_source"]

_FROM_SOURCE = ("Batch", "ModelSource", "call_model", "default_loss")


def __getattr__(name: str) -> object:
    if name not in _FROM_SOURCE:
        raise AttributeError(f"module 'autoshard.models' has no attribute {name!r}")
    from autoshard.models import source

    value = getattr(source, name)
    globals()[name] = value  # the next access is a plain attribute
    return value


@in_arguments(())  # a keyword it does not take is answered in words (seq_len= belongs to profile/recommend)
def load_source(spec: str | os.PathLike[str] | ModelSource) -> ModelSource:
    """Resolve what the user named into a :class:`ModelSource`.

    Args:
        spec: a path to a ``.py`` file following the model-file convention (``docs/models.md``), a path to a
            Hugging Face ``config.json`` (or a directory holding one), a Hugging Face Hub id whose
            config.json is in the local cache (``"org/name"`` or ``"org/name@revision"``; a path of that
            name wins), or a catalog name such as ``"llama-2-7b"``.

    Returns:
        The loaded source. Nothing is allocated: the module is built later, by the caller.

    Raises:
        ModelSourceError: the path does not exist, is of an unknown kind, the Hub id's config.json is not
            in the local cache, or the name is not in the catalog.
        UserCodeError: the user's ``model.py`` failed to import.
    """
    from autoshard.models.source import ModelSource

    if isinstance(spec, ModelSource):
        return spec
    if not isinstance(spec, (str, os.PathLike)):
        raise UsageError(f"a model source is a model.py path, a config.json path, a Hub id or a catalog name, but "
                         f"got {type(spec).__name__} {spec!r}.",
                         hint="fit() takes an nn.Module too; load_source() only what names a model.")
    text = os.fspath(spec)
    if not text.strip():  # Path("") is the current directory
        raise ModelSourceError("the model source is an empty name.",
                               hint="Name a model.py, a Hugging Face config.json, a Hub id or a catalog name.")
    path = Path(text).expanduser()
    looks_like_path = path.suffix in {".py", ".json"} or os.sep in text or text.startswith(".")
    try:
        kind = "dir" if path.is_dir() else "file" if path.is_file() else "other" if path.exists() else None
    except PermissionError:  # a directory on the way that the user cannot enter
        raise ModelSourceError(f"{text}: permission denied (a directory on its path cannot be entered).",
                               hint="Check the path's permissions, or copy the model file somewhere you can read."
                               ) from None
    if kind == "other":
        raise ModelSourceError(f"{text} is not a regular file (a device, socket or pipe).",
                               hint="Point autoshard at a model.py, a Hugging Face config.json, or a catalog name.")
    if kind == "dir":
        config = path / "config.json"
        if not config.is_file():
            inside = path / "model.py"
            raise ModelSourceError(
                f"{text} is a directory without a config.json.",
                hint=f"Point autoshard at {inside}." if inside.is_file() else
                "Point autoshard at a model.py, a Hugging Face config.json, or a catalog name.",
            )
        path = config
        kind = "file"
    if kind == "file":
        if path.suffix == ".py":
            from autoshard.models.pyfile import load_file

            return load_file(path)
        if path.suffix == ".json":
            from autoshard.models.hf import load_config

            return load_config(path)
        raise ModelSourceError(
            f"{text}: unknown kind of model file (expected a .py model file or a config.json).",
        )
    from autoshard.models.hub import load_hub_id, parse_hub_id

    hub_id = parse_hub_id(text)
    if hub_id is not None:
        return load_hub_id(hub_id)
    if looks_like_path:
        raise ModelSourceError(
            f"{text}: no such file.", hint="Check the path; catalog names have no extension (e.g. llama-2-7b)."
        )
    from autoshard.models import catalog

    return catalog.get(text)
