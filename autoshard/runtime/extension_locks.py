"""Lock files of torch extension builds that no process holds: a JIT build killed half-way.

DeepSpeed builds its ops (``cpu_adam`` for optimizer offload, ``deepspeed_shm_comm`` on CPU) the first time they
are loaded, with ``torch.utils.cpp_extension.load`` (``op_builder/builder.py::OpBuilder.jit_load``, 0.19.8). The
builder takes ``<build directory>/lock`` with ``FileBaton`` (``torch/utils/file_baton.py``, torch 2.13): it creates
the file exclusively and keeps it open while it builds; every other loader polls until the file is gone, with no
time limit. A build killed half-way (a Ctrl-C, a time limit, a lost node) leaves the file behind, and every later
run that loads the op then waits on it for ever, silently. :func:`check_extension_locks` finds such files before a
run starts: a lock older than a few seconds that no process has open (Linux: ``/proc/<pid>/fd``) is stale.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from pathlib import Path

from autoshard.errors import UsageError

__all__ = ["check_extension_locks", "extensions_root", "release_locks_left_since", "stale_extension_locks"]

SETTLE_S = 10.0
"""A lock younger than this is left alone: its builder may be between creating the file and holding it."""


def extensions_root(environ: dict[str, str] | None = None) -> Path:
    """Where torch builds extensions: ``$TORCH_EXTENSIONS_DIR``, else torch's default build root
    (``torch.utils.cpp_extension._get_build_directory``)."""
    env = os.environ if environ is None else environ
    if env.get("TORCH_EXTENSIONS_DIR"):
        return Path(env["TORCH_EXTENSIONS_DIR"])
    from torch.utils.cpp_extension import get_default_build_root

    return Path(get_default_build_root())


def _open_files(proc: Path = Path("/proc")) -> set[str] | None:
    """Paths of the files this user's processes hold open; ``None`` where that cannot be read (no ``/proc``)."""
    if not proc.is_dir():
        return None
    held: set[str] = set()
    for pid in proc.iterdir():
        if not pid.name.isdigit():
            continue
        try:
            fds = list((pid / "fd").iterdir())
        except OSError:  # another user's process, or one that just exited
            continue
        for fd in fds:
            try:
                held.add(os.readlink(fd))
            except OSError:
                continue
    return held


def stale_extension_locks(root: Path | None = None, *, now: float | None = None,
                          held: Iterable[str] | None = None) -> list[Path]:
    """Lock files under ``root`` (``<root>/<python and device tag>/<op>/lock``) that no process holds open and
    that are older than :data:`SETTLE_S`; empty when the holders cannot be known.

    ``held``: the open files to check against (default: read from ``/proc``).
    """
    root = extensions_root() if root is None else root
    locks = sorted(root.glob("*/*/lock"))
    if not locks:
        return []
    open_files = _open_files() if held is None else set(held)
    if open_files is None:
        return []
    now = time.time() if now is None else now
    stale = []
    for lock in locks:
        try:
            age = now - lock.stat().st_mtime
        except OSError:  # released meanwhile
            continue
        if age >= SETTLE_S and str(lock.resolve()) not in open_files and str(lock) not in open_files:
            stale.append(lock)
    return stale


def check_extension_locks(root: Path | None = None) -> None:
    """Refuse to start when a stale build lock would make the run wait for ever.

    Raises:
        UsageError: naming each stale lock, with the command that removes them.
    """
    stale = stale_extension_locks(root)
    if not stale:
        return
    ops = ", ".join(lock.parent.name for lock in stale)
    raise UsageError(
        f"a build of torch extension op(s) {ops} was interrupted and left its lock file, which no process holds: "
        "DeepSpeed would wait on it for ever when it loads the op.",
        hint="Remove it and run again: rm " + " ".join(str(lock) for lock in stale))


def release_locks_left_since(started: float, root: Path | None = None) -> list[Path]:
    """Remove the build locks made since ``started`` that no process holds: called once a run's own workers have
    all been stopped (a tune trial past its time limit), whose build of an op they were in the middle of would
    otherwise leave its lock for every later run to wait on. A lock another process is building under is open in
    that process (``FileBaton`` creates and opens it in one call) and is left alone; so is any lock when the
    holders cannot be known (no ``/proc``).

    Returns:
        The locks removed.
    """
    root = extensions_root() if root is None else root
    locks = sorted(root.glob("*/*/lock"))
    if not locks:
        return []
    open_files = _open_files()
    if open_files is None:
        return []
    removed = []
    for lock in locks:
        try:
            made = lock.stat().st_mtime
        except OSError:  # released meanwhile
            continue
        if made >= started and str(lock.resolve()) not in open_files and str(lock) not in open_files:
            try:
                lock.unlink()
            except OSError:
                continue
            removed.append(lock)
    return removed
