"""A $TMPDIR too small for the weights fit() hands between its workers and the launching process is refused before
any worker starts: on a 2 MiB tmpfs a finished run was lost (rank 0's save of the trained weights failed, and so
did its report of the error, read as a kill for host memory: a container probe)."""

from __future__ import annotations

import shutil
from collections import namedtuple

import pytest

import autoshard
from autoshard.errors import UsageError

Usage = namedtuple("Usage", "total used free")


def test_a_run_directory_without_room_for_the_weights_is_refused_before_the_workers(
        monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)  # tempfile reads TMPDIR afresh
    real = shutil.disk_usage
    monkeypatch.setattr("autoshard.runtime.workers.shutil.disk_usage",
                        lambda path: Usage(2**21, 2**21 - 2**20, 2**20) if str(path).startswith(str(tmp_path))
                        else real(path))  # a 2 MiB file system with 1 MiB free, as the probe's tmpfs
    monkeypatch.setattr("autoshard.runtime.supervisor.run_workers",
                        lambda *a, **k: pytest.fail("the workers started"))
    with pytest.raises(UsageError) as info:
        autoshard.fit("tiny-gpt2", None, max_steps=1, processes=2)
    assert f"in {tmp_path}, which has 1.00 MiB free" in str(info.value)
    assert "TMPDIR" in (info.value.hint or "")
    assert not list(tmp_path.glob("autoshard-fit-*"))  # the run directory is removed
