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

import json
import os
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["CacheUsage", "cache_root", "clear", "note", "read_json", "usage", "workloads_dir", "write_json"]

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
        return None, f"not valid JSON ({exc.msg} at line {exc.lineno})"


def write_json(path: Path, data: Any) -> str | None:
    """Write ``data`` as JSON to ``path`` atomically (a temporary file beside it, then ``os.replace``).

    Returns:
        ``None`` when written, else why not (an unwritable directory): a cache that cannot be written costs
        the next run its time, never its answer.
    """
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


def clear(directory: Path) -> CacheUsage:
    """Delete every entry in ``directory`` (and temporary files left by an interrupted write).

    Returns:
        What was deleted.

    Raises:
        OSError: an entry could not be deleted (permissions).
    """
    entries = _entries(directory)
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
