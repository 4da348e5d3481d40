"""A torch extension build killed half-way leaves ``<op>/lock``; torch's loader then waits on it for ever.
fit() finds such a lock before a DeepSpeed run starts and says how to remove it."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from torch.utils.file_baton import FileBaton

from autoshard.errors import UsageError
from autoshard.runtime.extension_locks import SETTLE_S, check_extension_locks, extensions_root, stale_extension_locks
from tests.runtime.test_fit_backends import run_script


def leave_lock(root: Path, op: str = "cpu_adam", age_s: float = 3600) -> Path:
    """What a build killed after FileBaton.try_acquire leaves: the lock file, held by no one."""
    lock = root / "py311_cpu" / op / "lock"
    lock.parent.mkdir(parents=True)
    baton = FileBaton(str(lock))
    assert baton.try_acquire()
    os.close(baton.fd)  # the builder died: its descriptor is gone, the file stays
    old = time.time() - age_s
    os.utime(lock, (old, old))
    return lock


def test_a_lock_no_process_holds_is_stale_and_torch_would_wait_on_it(tmp_path: Path) -> None:
    lock = leave_lock(tmp_path)
    assert not FileBaton(str(lock)).try_acquire()  # torch's loader then calls baton.wait(): no time limit
    assert stale_extension_locks(tmp_path) == [lock]
    with pytest.raises(UsageError, match="cpu_adam was interrupted") as info:
        check_extension_locks(tmp_path)
    assert info.value.hint == f"Remove it and run again: rm {lock}"


def test_a_lock_being_built_is_left_alone(tmp_path: Path) -> None:
    lock = tmp_path / "py311_cpu" / "cpu_adam" / "lock"
    lock.parent.mkdir(parents=True)
    baton = FileBaton(str(lock))
    assert baton.try_acquire()  # this process is the builder: it holds the file open
    try:
        old = time.time() - 3600
        os.utime(lock, (old, old))
        assert stale_extension_locks(tmp_path) == []
    finally:
        baton.release()
    young = leave_lock(tmp_path, "deepspeed_shm_comm", age_s=SETTLE_S / 2)
    assert young.exists() and stale_extension_locks(tmp_path) == []


def test_the_root_is_torchs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    assert extensions_root() == tmp_path
    monkeypatch.delenv("TORCH_EXTENSIONS_DIR")
    from torch.utils.cpp_extension import get_default_build_root

    assert extensions_root() == Path(get_default_build_root())


def test_fit_refuses_a_deepspeed_run_that_would_hang(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    lock = leave_lock(tmp_path, "deepspeed_shm_comm")
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    proc = run_script({"strategy": "deepspeed_stage_1", "processes": 2}, check=False, timeout=300)
    assert proc.returncode != 0
    assert "deepspeed_shm_comm was interrupted" in proc.stderr and f"rm {lock}" in proc.stderr
