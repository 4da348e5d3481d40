"""Where autoshard keeps what it can compute again, and how an entry is written and read safely.

The cache root is ``$AUTOSHARD_CACHE_DIR`` when set, else ``$XDG_CACHE_HOME/autoshard``, else
``~/.cache/autoshard`` — the XDG Base Directory Specification (0.8) rule, on every platform: a relative
``XDG_CACHE_HOME`` is ignored, as the specification says. Under it:

* ``workloads/``: traced training steps (:mod:`autoshard.planner.workload_cache`), one JSON file each;
* ``tune/``: the tuner's measurements (:mod:`autoshard.tuner.cache`).

Everything here is safe to delete: ``autoshard cache clear`` removes ``workloads/``; the tuner's
measurements in ``tune/`` go by deleting that directory (docs/tune.md). Entries are written to a temporary
file in the same directory and moved into place with ``os.replace`` (atomic on POSIX and Windows), so a
reader never sees half an entry and processes writing the same entry at once each leave a whole one. This module imports
nothing heavy: ``autoshard cache`` answers without torch.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import os
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["CacheEntry", "CacheUsage", "cache_root", "clear", "code_version", "file_in_the_way", "list_entries",
           "note", "read_json", "usage", "workloads_dir", "write_json"]

ENV_VAR = "AUTOSHARD_CACHE_DIR"
WORKLOADS = "workloads"


def cache_root(environ: Mapping[str, str]) -> Path:
    """The cache root for ``environ`` (see the module docstring).

    Example:
        >>> cache_root({"AUTOSHARD_CACHE_DIR": "/tmp/c", "XDG_CACHE_HOME": "/x"}).as_posix()
        '/tmp/c'
        >>> cache_root({"XDG_CACHE_HOME": "/x"}).as_posix()
        '/x/autoshard'
        >>> cache_root({"XDG_CACHE_HOME": "relative", "HOME": "/home/u"}).as_posix()
        '/home/u/.cache/autoshard'
    """
    override = environ.get(ENV_VAR)
    if override:
        return Path(override).expanduser()
    xdg = environ.get("XDG_CACHE_HOME")
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "autoshard"
    home = environ.get("HOME") or str(Path.home())
    return Path(home) / ".cache" / "autoshard"


def file_in_the_way(directory: Path) -> Path | None:
    """The file that stands where ``directory`` or one of its parents should be, if any: then nothing can be
    cached there (``AUTOSHARD_CACHE_DIR`` naming a file).

    Example:
        >>> import tempfile
        >>> with tempfile.NamedTemporaryFile() as f:
        ...     file_in_the_way(Path(f.name) / "workloads") == Path(f.name)
        True
        >>> file_in_the_way(Path("/nonexistent/autoshard/workloads")) is None
        True
    """
    for path in (directory, *directory.parents):
        if path.exists():
            return None if path.is_dir() else path
    return None


def workloads_dir(environ: Mapping[str, str]) -> Path:
    """Where traced workloads are kept: ``<cache root>/workloads``."""
    return cache_root(environ) / WORKLOADS


def note(message: str) -> None:
    """Tell the user something about the cache on stderr, in one line (stdout may carry ``--json``)."""
    print(f"autoshard: note: {message}", file=sys.stderr)


def read_json(path: Path) -> tuple[Any, str | None]:
    """The parsed content of ``path``, or why it cannot be used.

    Returns:
        ``(data, None)``; ``(None, None)`` when there is no such file (a plain miss); ``(None, reason)`` when it
        exists but cannot be read or is not JSON (a truncated or corrupt entry).
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):
        return None, None
    except (OSError, UnicodeDecodeError) as exc:
        return None, f"cannot read it: {exc}"
    try:
        return json.loads(text), None
    except json.JSONDecodeError as exc:
        return None, f"not valid JSON ({exc.msg}: line {exc.lineno}, column {exc.colno})"


def write_json(path: Path, data: Any) -> str | None:
    """Write ``data`` as JSON to ``path`` atomically (a temporary file beside it, then ``os.replace``).

    Returns:
        ``None`` when written, else why not (an unwritable directory): a cache that cannot be written costs
        the next run its time, never its answer.
    """
    home = Path(os.environ.get("HOME") or Path.home())
    if not home.is_dir() and home in path.parents:  # /nonexistent, a system account's home: not made for a cache
        return f"the home directory {home} does not exist ({path.parent})"
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, separators=(",", ":"))
        os.replace(tmp, path)
        return None
    except OSError as exc:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        return f"{exc.strerror or exc} ({path.parent})"


@dataclass(frozen=True, kw_only=True, slots=True)
class CacheUsage:
    """What a cache directory holds."""

    directory: Path
    entries: int
    size_bytes: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {"directory": str(self.directory), "entries": self.entries, "size_bytes": self.size_bytes}


def usage(directory: Path) -> CacheUsage:
    """How many entries ``directory`` holds and their size (zero when it does not exist)."""
    files = _entries(directory)
    return CacheUsage(directory=directory, entries=len(files), size_bytes=sum(_size(f) for f in files))


@functools.cache
def code_version() -> str:
    """autoshard's version and 16 hex digits of a SHA-256 over its own ``.py`` files (names and bytes, in a stable
    order): an edited checkout keys its entries apart from what older code wrote."""
    import autoshard

    root = Path(autoshard.__file__).resolve().parent
    digest = hashlib.sha256()
    for file in sorted(root.rglob("*.py")):
        digest.update(file.relative_to(root).as_posix().encode() + b"\0")
        digest.update(file.read_bytes())
    return f"{autoshard.__version__}+{digest.hexdigest()[:16]}"


def installed_version(distribution: str) -> str | None:
    """The installed version of ``distribution`` (from its metadata: no import), ``None`` when absent."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


_VERSION_FIELDS = ("torch", "transformers", "python", "autoshard")
"""The fields of a workload entry's key that name the software that traced it."""


def _this_install() -> dict[str, str | None]:
    return {"torch": installed_version("torch"), "transformers": installed_version("transformers"),
            "python": ".".join(map(str, sys.version_info[:3])), "autoshard": code_version()}


@dataclass(frozen=True, kw_only=True, slots=True)
class CacheEntry:
    """One workload entry: what it was traced for, and whether this install can still read it."""

    path: Path
    size_bytes: int
    key: dict[str, Any] | None
    """The entry's key (model, options, versions); ``None`` for a file that is not a readable entry."""
    stale: str | None
    """Why this install never reads it (another torch, transformers, Python or autoshard traced it; not an
    entry), ``None`` when it can."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {"path": str(self.path), "size_bytes": self.size_bytes, "key": self.key, "stale": self.stale}


def list_entries(directory: Path) -> list[CacheEntry]:
    """Every entry in ``directory``, by file name, each with its key and whether this install would read it."""
    here = _this_install()
    listed = []
    for file in _entries(directory):
        data, _ = read_json(file)
        key = data.get("key") if isinstance(data, dict) else None
        if not isinstance(key, dict):
            listed.append(CacheEntry(path=file, size_bytes=_size(file), key=None, stale="not a workload entry"))
            continue
        differ = [f"{name} {key.get(name)} (here {here[name]})" for name in _VERSION_FIELDS
                  if key.get(name) != here[name]]
        listed.append(CacheEntry(path=file, size_bytes=_size(file), key=key,
                                 stale=f"traced by {', '.join(differ)}" if differ else None))
    return listed


def clear(directory: Path, *, stale_only: bool = False) -> CacheUsage:
    """Delete every entry in ``directory`` (and temporary files left by an interrupted write), or with
    ``stale_only`` only those this install never reads (:func:`list_entries`).

    Returns:
        What was deleted.

    Raises:
        OSError: an entry could not be deleted (permissions).
    """
    entries = [e.path for e in list_entries(directory) if e.stale] if stale_only else _entries(directory)
    files = entries + (sorted(directory.glob(".*.partial")) if directory.is_dir() else [])
    removed = CacheUsage(directory=directory, entries=len(entries), size_bytes=sum(_size(f) for f in files))
    for file in files:
        file.unlink(missing_ok=True)
    return removed


def _entries(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.json")) if directory.is_dir() else []


def _size(file: Path) -> int:
    try:
        return file.stat().st_size
    except OSError:  # deleted meanwhile by another process
        return 0
