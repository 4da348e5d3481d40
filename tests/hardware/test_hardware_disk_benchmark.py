from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from autoshard.errors import HardwareError
from autoshard.hardware import benchmark_disk

MiB = 2**20


def test_disk_benchmark_measures_and_deletes_its_file(tmp_path: Path) -> None:
    result = benchmark_disk(tmp_path, size_bytes=1 * MiB)
    assert result.bytes_written == result.bytes_read == MiB
    assert result.write_bytes_per_s > 0 and result.read_bytes_per_s > 0
    assert result.read_may_be_cached is not result.direct_io
    assert not result.stopped_early and result.path == str(tmp_path.resolve())
    assert list(tmp_path.iterdir()) == []


def test_disk_benchmark_stops_at_its_time_limit(tmp_path: Path) -> None:
    result = benchmark_disk(tmp_path, size_bytes=8 * MiB, max_seconds=1e-9)
    assert result.stopped_early and result.bytes_written == 4 * MiB  # one 4 MiB block, then time is up
    assert list(tmp_path.iterdir()) == []


def test_disk_benchmark_rounds_tiny_sizes_up_to_a_block(tmp_path: Path) -> None:
    assert benchmark_disk(tmp_path, size_bytes=1).bytes_written == 4096


@pytest.mark.parametrize(
    ("make", "fragment"),
    [
        (lambda p: p / "missing", "does not exist"),
        (lambda p: (p / "file").write_text("x") and p / "file", "not a directory"),
    ],
)
def test_disk_benchmark_rejects_missing_paths_and_files(tmp_path: Path, make, fragment: str) -> None:
    with pytest.raises(HardwareError, match=fragment):
        benchmark_disk(make(tmp_path), size_bytes=MiB)


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root can write anywhere")
def test_disk_benchmark_rejects_an_unwritable_directory(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    try:
        with pytest.raises(HardwareError, match="cannot create a file there"):
            benchmark_disk(locked, size_bytes=MiB)
    finally:
        locked.chmod(0o700)


def test_disk_benchmark_refuses_sizes_the_disk_cannot_hold(tmp_path: Path) -> None:
    with pytest.raises(HardwareError, match="bytes free"):
        benchmark_disk(tmp_path, size_bytes=2**62)
    with pytest.raises(ValueError, match="size_bytes"):
        benchmark_disk(tmp_path, size_bytes=0)


def test_disk_benchmark_deletes_its_file_when_the_disk_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def full(fd: int, data: object) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(HardwareError, match="ran out of space"):
        benchmark_disk(tmp_path, size_bytes=MiB)
    assert list(tmp_path.iterdir()) == []


def test_disk_benchmark_reports_a_directory_it_may_not_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_open = os.open

    def denied(path: object, flags: int, *args: object) -> int:
        if flags & os.O_CREAT:
            raise PermissionError(errno.EACCES, "Permission denied")
        return real_open(path, flags, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", denied)
    with pytest.raises(HardwareError, match=r"cannot create a file there \(Permission denied\)"):
        benchmark_disk(tmp_path, size_bytes=MiB)
    assert list(tmp_path.iterdir()) == []


def test_a_read_only_file_system_is_said_not_hidden_by_the_cleanup(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """On a read-only mount both creating the file and removing it fail with EROFS: the removal's error, raised
    from the cleanup, replaced the refusal and was reported as an internal error (a bad-input probe's `mount -o
    ro`). The two system calls answer here as that mount's did."""
    def read_only(*args: object, **kwargs: object) -> None:
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(os, "open", read_only)
    monkeypatch.setattr(Path, "unlink", read_only)
    with pytest.raises(HardwareError, match=r"cannot create a file there \(Read-only file system\)"):
        benchmark_disk(tmp_path, size_bytes=MiB)
