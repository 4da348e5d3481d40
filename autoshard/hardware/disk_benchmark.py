"""Measure a directory's sequential write and read bandwidth, for NVMe offload decisions.

The benchmark writes one file of at most ``size_bytes`` in large blocks, ``fsync``s it, reads it back, and
always deletes it. It stops early once a phase has used its share of ``max_seconds`` (the final ``fsync`` can
add to that). It opens the file with ``O_DIRECT`` where the OS and filesystem allow, so neither phase goes
through the page cache; elsewhere it writes through the cache (the ``fsync`` still counts), asks the kernel to
drop the file's cached pages (``posix_fadvise(DONTNEED)``, which needs no root but is advisory), and reports
that the read figure may be inflated by caching.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import secrets
import shutil
import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from autoshard.errors import HardwareError

DEFAULT_SIZE_BYTES = 256 * 2**20
"""256 MiB: large enough to get past a drive's small write cache, small enough to run in seconds."""
DEFAULT_MAX_SECONDS = 30.0
_ALIGN_BYTES = 4096  # O_DIRECT wants offsets, sizes and buffers aligned to the logical block size
_MAX_BLOCK_BYTES = 4 * 2**20


@dataclass(frozen=True, kw_only=True, slots=True)
class DiskBenchmark:
    """The result of :func:`benchmark_disk`."""

    path: str
    """The directory measured."""
    bytes_written: int
    bytes_read: int
    write_bytes_per_s: float
    """Sequential write bandwidth, including the final ``fsync``."""
    read_bytes_per_s: float
    direct_io: bool
    """Whether ``O_DIRECT`` bypassed the page cache."""
    read_may_be_cached: bool
    """Whether the read figure may come partly from RAM (no ``O_DIRECT``)."""
    stopped_early: bool
    """Whether a phase stopped at the time limit before reaching the requested size."""
    elapsed_s: float

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _check_directory(directory: Path, size_bytes: int) -> None:
    if not directory.exists():
        raise HardwareError(
            f"cannot benchmark {str(directory)!r}: it does not exist.",
            hint="Pass an existing directory on the disk you want to measure.",
        )
    if not directory.is_dir():
        raise HardwareError(
            f"cannot benchmark {str(directory)!r}: it is not a directory.",
            hint="Pass a directory on the disk you want to measure.",
        )
    free = shutil.disk_usage(directory).free
    if free < size_bytes + _MAX_BLOCK_BYTES:
        raise HardwareError(
            f"cannot benchmark {str(directory)!r}: it has {free} bytes free, the test file needs {size_bytes}.",
            hint="Pass a smaller --benchmark-size or another directory.",
        )


def _open_for(path: Path, flags: int, direct: bool) -> tuple[int, bool]:
    """Open ``path`` with ``O_DIRECT`` when asked and supported; says whether it got it."""
    if direct and hasattr(os, "O_DIRECT"):
        try:
            return os.open(path, flags | os.O_DIRECT), True
        except OSError as exc:
            if exc.errno != errno.EINVAL:  # EINVAL: this filesystem does not do O_DIRECT
                raise
    return os.open(path, flags), False


def benchmark_disk(
    directory: str | os.PathLike[str],
    *,
    size_bytes: int = DEFAULT_SIZE_BYTES,
    max_seconds: float = DEFAULT_MAX_SECONDS,
) -> DiskBenchmark:
    """Measure sequential write then read bandwidth of ``directory`` with one temporary file.

    Args:
        directory: an existing, writable directory on the disk to measure.
        size_bytes: how much to write and read (rounded up to 4 KiB); the default is 256 MiB.
        max_seconds: time budget, split evenly between writing and reading.

    Returns:
        A :class:`DiskBenchmark`.

    Raises:
        HardwareError: the directory is missing, not a directory, not writable, too full, or the disk fails.
        ValueError: ``size_bytes`` or ``max_seconds`` is not positive.
    """
    if isinstance(size_bytes, bool) or not isinstance(size_bytes, int) or size_bytes <= 0:
        raise ValueError(f"size_bytes must be a positive int, got {size_bytes=}.")
    if not max_seconds > 0:
        raise ValueError(f"max_seconds must be positive, got {max_seconds=}.")
    root = Path(directory).expanduser()
    size_bytes = -(-size_bytes // _ALIGN_BYTES) * _ALIGN_BYTES
    block_bytes = min(_MAX_BLOCK_BYTES, size_bytes)
    _check_directory(root, size_bytes)
    path = root / f".autoshard-disk-benchmark-{os.getpid()}-{secrets.token_hex(4)}"
    start = time.perf_counter()
    buffer = mmap.mmap(-1, block_bytes)  # page-aligned, as O_DIRECT requires
    created = False
    try:
        buffer.write(os.urandom(block_bytes))  # incompressible, so drive-side compression cannot help
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            created = True
        except OSError as exc:
            raise HardwareError(
                f"cannot benchmark {str(root)!r}: cannot create a file there ({exc.strerror}).",
                hint="Pass a directory you can write to.",
            ) from None
        try:
            written, write_s, direct, early_w = _write(path, buffer, size_bytes, max_seconds / 2)
            read, read_s, direct, early_r = _read(path, buffer, direct, max_seconds / 2)
        except OSError as exc:
            what = "ran out of space" if exc.errno == errno.ENOSPC else f"failed: {exc.strerror or exc}"
            raise HardwareError(f"disk benchmark of {str(root)!r} {what}.") from None
    finally:
        buffer.close()
        if created:  # else nothing to remove, and unlink on a read-only file system would hide why
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
    return DiskBenchmark(
        path=str(root.resolve()),
        bytes_written=written,
        bytes_read=read,
        write_bytes_per_s=written / max(write_s, 1e-9),
        read_bytes_per_s=read / max(read_s, 1e-9),
        direct_io=direct,
        read_may_be_cached=not direct,
        stopped_early=early_w or early_r,
        elapsed_s=time.perf_counter() - start,
    )


def _write(path: Path, buffer: mmap.mmap, size_bytes: int, budget_s: float) -> tuple[int, float, bool, bool]:
    fd, direct = _open_for(path, os.O_WRONLY, direct=True)
    written = 0
    try:
        t0 = time.perf_counter()
        while written < size_bytes and (written == 0 or time.perf_counter() - t0 < budget_s):
            try:
                written += os.write(fd, buffer)
            except OSError as exc:
                if not (direct and written == 0 and exc.errno == errno.EINVAL):
                    raise
                # The filesystem accepted O_DIRECT at open but not for writes: go through the cache.
                os.close(fd)
                fd, direct = os.open(path, os.O_WRONLY), False
        os.fsync(fd)
        elapsed = time.perf_counter() - t0
    finally:
        os.close(fd)
    return written, elapsed, direct, written < size_bytes


def _read(path: Path, buffer: mmap.mmap, direct: bool, budget_s: float) -> tuple[int, float, bool, bool]:
    fd, direct = _open_for(path, os.O_RDONLY, direct=direct)
    read = 0
    try:
        if not direct and hasattr(os, "posix_fadvise"):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # advisory; the caller still warns
        total = os.fstat(fd).st_size
        t0 = time.perf_counter()
        while read < total and (read == 0 or time.perf_counter() - t0 < budget_s):
            n = os.readv(fd, [buffer])
            if n == 0:
                break
            read += n
        elapsed = time.perf_counter() - t0
    finally:
        os.close(fd)
    return read, elapsed, direct, read < total
