"""Checks made before anything is traced (planning takes 10-60 s): the paths a command will write, and the counts
its flags take (argparse names the flag in its refusal)."""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from autoshard.errors import UsageError


def _number(text: str, kind: type[int] | type[float], ok: Callable[[float], bool], says: str) -> Any:
    """``text`` as ``kind`` if ``ok`` takes it, else argparse's refusal "must be {says}, not {text!r}" (argparse
    prefixes the flag's name)."""
    try:
        value = kind(text)
    except ValueError:
        value = None
    if value is None or not ok(value):
        raise argparse.ArgumentTypeError(f"must be {says}, not {text!r}")
    return value


def positive_int(text: str) -> int:
    """A flag's positive whole number: argparse's refusal then names the flag (``argument --batch-size: must be a
    positive whole number, not '0'``), where the check deeper in said "batch size" (the bad-input probe)."""
    return int(_number(text, int, lambda v: v >= 1, "a positive whole number"))


def nonnegative_int(text: str) -> int:
    """A flag's whole number >= 0 (``--warmup-steps``), refused by argparse naming the flag."""
    return int(_number(text, int, lambda v: v >= 0, "a whole number >= 0"))


def positive_seconds(text: str) -> float:
    """A flag's positive, finite number of seconds (``--timeout``), refused by argparse naming the flag."""
    return float(_number(text, float, lambda v: 0 < v < float("inf"), "a positive number of seconds"))


def seed(text: str) -> int:
    """A flag's random seed: a whole number from 0 to 2**32 - 1 (what numpy and Optuna's samplers take)."""
    return int(_number(text, int, lambda v: 0 <= v < 2**32, "a whole number from 0 to 2**32 - 1"))


def path(text: str) -> Path:
    """A flag's path: an empty one is refused (``Path("")`` is the current directory, into which ``--output-dir ""``
    wrote a plan's files and ``--nvme ""`` offloaded), by argparse naming the flag."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must be a path, not an empty string")
    return Path(text)


def path_text(text: str) -> str:
    """:func:`path` kept as the text given (a flag read as a string further in)."""
    path(text)
    return text


def _nearest_existing(path: Path) -> Path:
    for parent in (path, *path.parents):
        if parent.exists():
            return parent
    return Path.cwd()


def _writable(folder: Path) -> str | None:
    """``None`` when a file can be made in ``folder``, else why not (a real try: permissions, read-only mounts
    and root's rights all answer as they will when the file is written)."""
    try:
        with tempfile.TemporaryFile(dir=folder):
            return None
    except OSError as exc:
        return exc.strerror or str(exc)


def check_output_dir(path: Path, flag: str = "--output-dir") -> None:
    """``path`` is a directory that exists or can be made, and can be written to.

    Raises:
        UsageError: it is a file, or it (or the closest folder that exists above it) cannot be written.
    """
    existing = _nearest_existing(path.absolute())
    if not existing.is_dir():
        raise UsageError(f"{flag} {path}: {existing} exists and is not a directory.")
    why = _writable(existing)
    if why is not None:
        where = "" if existing == path.absolute() else f" ({existing})"
        raise UsageError(f"{flag} {path} cannot be written{where}: {why}.", hint=f"Choose another {flag}.")


def check_plot_path(path: Path) -> None:
    """``--plot FILE`` can be written: matplotlib is installed, knows the format and the folder is writable.

    Raises:
        UsageError: matplotlib is missing, the suffix is no format it writes, the path is a directory, or its
            folder does not exist or cannot be written.
    """
    from autoshard.report.matplotlib_use import INSTALL_HINT, matplotlib_unusable

    why = matplotlib_unusable()
    if why is not None:
        raise UsageError(f"--plot needs matplotlib, and {why}.", hint=INSTALL_HINT)
    if path.is_dir():
        raise UsageError(f"--plot {path} is a directory; give a file name such as memory.png.")
    suffix = path.suffix.lower().lstrip(".")
    if suffix:
        from matplotlib.backend_bases import FigureCanvasBase

        formats = FigureCanvasBase.get_supported_filetypes()
        if suffix not in formats:
            raise UsageError(f"--plot {path}: matplotlib cannot write .{suffix} files.",
                             hint=f"Use one of {', '.join('.' + f for f in sorted(formats))}.")
    folder = path.absolute().parent
    if not folder.is_dir():
        raise UsageError(f"--plot {path}: the folder {folder} does not exist.")
    why = _writable(folder)
    if why is not None:
        raise UsageError(f"--plot {path} cannot be written ({folder}): {why}.")
