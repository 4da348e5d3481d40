"""Hugging Face Hub ids (``org/name`` or ``org/name@revision``) read from the local cache, never the network.

The config.json is looked up with ``huggingface_hub.try_to_load_from_cache``, which only reads the cache
layout (``models--org--name/refs/<revision>`` → ``snapshots/<commit>/config.json``) and never connects. The
cache folder is resolved when the id is loaded, from the same environment variables huggingface_hub reads at
import (``HF_HUB_CACHE``, ``HUGGINGFACE_HUB_CACHE``, ``HF_HOME``, ``XDG_CACHE_HOME``), so a later change is
respected.
"""

from __future__ import annotations

import importlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from autoshard.errors import ModelSourceError
from autoshard.models.source import ModelSource

__all__ = ["HubId", "hub_cache_dir", "load_hub_id", "parse_hub_id"]

# huggingface_hub's REPO_ID_REGEX (utils/_validators.py): an optional namespace and a name of word characters,
# "-" and ".", at most 96 each. autoshard requires the namespace, so "gpt2" stays a catalog name.
_HUB_ID = re.compile(r"(?P<repo>[\w\-.]{1,96}/[\w\-.]{1,96})(?:@(?P<revision>[\w\-./]{1,256}))?")


@dataclass(frozen=True, kw_only=True, slots=True)
class HubId:
    """A model repository on the Hub, and the revision to read."""

    repo_id: str
    """``org/name``."""
    revision: str | None = None
    """A branch, tag or commit; ``None`` reads ``main``."""

    def __str__(self) -> str:
        return self.repo_id if self.revision is None else f"{self.repo_id}@{self.revision}"

    def download_command(self) -> str:
        """The command that fetches only this repository's config.json."""
        revision = "" if self.revision is None else f" --revision {self.revision}"
        return f"hf download {self.repo_id} config.json{revision}"


def parse_hub_id(text: str) -> HubId | None:
    """``text`` as a Hub id, or ``None`` when it cannot be one (a relative or absolute path, a file name).

    Example:
        >>> parse_hub_id("meta-llama/Llama-3.1-8B@main")
        HubId(repo_id='meta-llama/Llama-3.1-8B', revision='main')
        >>> parse_hub_id("./configs/llama") is None, parse_hub_id("llama-2-7b") is None
        (True, True)
    """
    match = _HUB_ID.fullmatch(text)
    if match is None or text.startswith((".", "~")) or match["repo"].endswith((".py", ".json")):
        return None
    org, name = match["repo"].split("/")
    if any(
        part.startswith(".") or part.endswith(".") or "--" in part or ".." in part for part in (org, name)
    ):
        return None  # huggingface_hub's validate_repo_id refuses these
    return HubId(repo_id=match["repo"], revision=match["revision"])


def hub_cache_dir(environ: Mapping[str, str] = os.environ) -> Path:
    """The Hugging Face Hub cache folder, resolved from ``environ`` as huggingface_hub's ``constants.py``
    does: ``HF_HUB_CACHE``, else ``HUGGINGFACE_HUB_CACHE``, else ``HF_HOME/hub``, else
    ``$XDG_CACHE_HOME/huggingface/hub``, else ``~/.cache/huggingface/hub``."""
    cache_home = environ.get("XDG_CACHE_HOME", os.path.join(os.path.expanduser("~"), ".cache"))
    home = environ.get("HF_HOME", os.path.join(cache_home, "huggingface"))
    hub = environ.get("HF_HUB_CACHE", environ.get("HUGGINGFACE_HUB_CACHE", os.path.join(home, "hub")))
    return Path(os.path.expandvars(os.path.expanduser(hub)))


def load_hub_id(hub_id: HubId, *, cache_dir: Path | None = None) -> ModelSource:
    """The :class:`ModelSource` of a Hub id, from the config.json in the local Hugging Face cache.

    Args:
        hub_id: the repository and revision.
        cache_dir: the Hub cache folder (default: :func:`hub_cache_dir`).

    Returns:
        The source, named after the Hub id; its origin is the cached config.json.

    Raises:
        ModelSourceError: huggingface_hub is not installed, or the config.json is not in the cache.
    """
    cache = hub_cache_dir() if cache_dir is None else cache_dir
    try:
        huggingface_hub = importlib.import_module("huggingface_hub")
    except ImportError as exc:
        raise ModelSourceError(
            f"{hub_id}: reading a Hub id from the local cache needs huggingface_hub, which cannot be "
            "imported.",
            hint="Install it with `pip install 'transformers>=4.45'` (in autoshard's checkout: "
                 "`pip install -e '.[hf]'`), or pass the path to a config.json.",
        ) from exc
    found = huggingface_hub.try_to_load_from_cache(
        hub_id.repo_id, "config.json", cache_dir=str(cache), revision=hub_id.revision
    )
    if not isinstance(found, str):
        at = "" if hub_id.revision is None else f" at revision {hub_id.revision}"
        folder = hub_id.repo_id.split("/")[0]
        if Path(folder).is_dir():  # "cfg/llama" with a ./cfg here reads as a mistyped path before a Hub id
            raise ModelSourceError(
                f"{hub_id} is neither a file nor a folder here ({folder}/ is), and as a Hub id its config.json{at} "
                f"is not in the local Hugging Face cache ({cache}); autoshard never downloads.",
                hint=f"Check the path (ls {folder}/); for a Hub id, fetch only the config with "
                     f"`{hub_id.download_command()}`, then run again.",
            )
        raise ModelSourceError(
            f"{hub_id} is not a file, and its config.json{at} is not in the local Hugging Face cache "
            f"({cache}); "
            "autoshard never downloads.",
            hint=f"Fetch only the config with `{hub_id.download_command()}` (or `huggingface-cli download`), "
            "then run again.",
        )
    from autoshard.models.hf import load_config

    return load_config(found, name=str(hub_id))
