from __future__ import annotations

import math
import os
from collections import namedtuple
from pathlib import Path

import pytest

from autoshard.errors import HardwareError
from autoshard.hardware.host import (
    Partition,
    cgroup_cpu_limit,
    cgroup_memory,
    directory_disk,
    discover_nvme,
    probe_cpu,
    usable_cores,
)

Usage = namedtuple("Usage", "total used free")


def _disk(
    sys_root: Path, name: str, *, rotational: str, removable: str = "0", partitions: tuple[str, ...] = ()
) -> None:
    device = sys_root / "devices" / name
    (device / "queue").mkdir(parents=True)
    (device / "queue" / "rotational").write_text(rotational + "\n")
    (device / "removable").write_text(removable + "\n")
    block = sys_root / "class" / "block"
    block.mkdir(parents=True, exist_ok=True)
    (block / name).symlink_to(device)
    for part in partitions:
        (device / part).mkdir()
        (device / part / "partition").write_text("1\n")
        (block / part).symlink_to(device / part)


def test_nvme_discovery_keeps_local_non_rotational_mounted_disks(tmp_path: Path) -> None:
    _disk(tmp_path, "nvme0n1", rotational="0", partitions=("nvme0n1p1", "nvme0n1p2"))
    _disk(tmp_path, "sda", rotational="1", partitions=("sda1",))  # spinning disk
    _disk(tmp_path, "sdb", rotational="0")  # a SATA SSD, whole-disk filesystem
    _disk(tmp_path, "sdc", rotational="0", removable="1", partitions=("sdc1",))  # USB stick
    _disk(tmp_path, "loop0", rotational="0")
    partitions = [
        Partition("/dev/nvme0n1p1", "/boot/efi", "vfat"),
        Partition("/dev/nvme0n1p2", "/scratch/bind", "ext4"),
        Partition("/dev/nvme0n1p2", "/scratch", "ext4"),  # the same device mounted twice: keep the shorter path
        Partition("/dev/sda1", "/data", "ext4"),
        Partition("/dev/sdb", "/ssd", "xfs"),
        Partition("/dev/sdc1", "/media/usb", "vfat"),
        Partition("/dev/loop0", "/snap/core/1", "squashfs"),
        Partition("overlay", "/", "overlay"),
        Partition("/dev/nvme9n1", "/gone", "ext4"),  # not in sysfs
    ]
    usage = {"/scratch": Usage(4 * 10**12, 1 * 10**12, 3 * 10**12), "/ssd": Usage(10**12, 0, 10**12)}
    disks = discover_nvme(partitions, sys_class_block=tmp_path / "class" / "block", disk_usage=usage.__getitem__)
    assert [(d.path, d.device, d.free_bytes, d.total_bytes) for d in disks] == [
        ("/scratch", "/dev/nvme0n1p2", 3 * 10**12, 4 * 10**12),
        ("/ssd", "/dev/sdb", 10**12, 10**12),
    ]
    assert all(d.origin == "detected" and d.read_bytes_per_s is None for d in disks)


def test_nvme_discovery_runs_on_this_machine() -> None:
    for disk in discover_nvme():
        assert disk.path and disk.free_bytes is not None and disk.free_bytes >= 0


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ({"memory.max": "max\n"}, (None, None)),
        ({"memory.max": "8589934592\n", "memory.current": "1073741824\n"}, (8 * 2**30, 2**30)),
        ({"memory/memory.limit_in_bytes": "9223372036854771712\n"}, (None, None)),
        ({"memory/memory.limit_in_bytes": "4294967296\n", "memory/memory.usage_in_bytes": "0\n"}, (4 * 2**30, 0)),
        ({}, (None, None)),
    ],
)
def test_cgroup_memory_limit_v1_and_v2(tmp_path: Path, files: dict[str, str], expected: tuple) -> None:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert cgroup_memory(tmp_path) == expected


def test_container_memory_limit_caps_host_ram(tmp_path: Path) -> None:
    (tmp_path / "memory.max").write_text(str(2**30))
    (tmp_path / "memory.current").write_text(str(2**28))
    cpu = probe_cpu(cgroup_root=tmp_path)
    assert cpu.memory_total_bytes == 2**30
    assert cpu.memory_available_bytes is not None and cpu.memory_available_bytes <= 2**30 - 2**28


def test_cpu_probe_on_this_machine() -> None:
    cpu = probe_cpu()
    assert cpu.logical_cores and cpu.logical_cores >= 1
    assert cpu.memory_total_bytes and 0 < cpu.memory_available_bytes <= cpu.memory_total_bytes  # type: ignore[operator]


def test_directory_disk_measures_a_directory_and_rejects_bad_paths(tmp_path: Path) -> None:
    disk = directory_disk(tmp_path)
    assert disk.path == str(tmp_path.resolve()) and disk.free_bytes and disk.origin == "override"
    with pytest.raises(HardwareError, match="does not exist"):
        directory_disk(tmp_path / "missing")
    (tmp_path / "file").write_text("x")
    with pytest.raises(HardwareError, match="not a directory"):
        directory_disk(tmp_path / "file")
    assert os.listdir(tmp_path) == ["file"]


@pytest.mark.parametrize(("own", "files"), [
    # SLURM's cgroup plugin under cgroup v2: the job's limit on its own cgroup, none on the root
    ("0::/system.slice/slurmstepd.scope/job_7/step_0", {"memory.max": "max", "system.slice/slurmstepd.scope/job_7/"
                                                        "memory.max": str(2**31), "system.slice/slurmstepd.scope/"
                                                        "job_7/memory.current": str(2**20)}),
    # and under v1: memory/slurm/uid_0/job_7
    ("4:memory:/slurm/uid_0/job_7/step_0\n3:cpuset:/", {"memory/memory.limit_in_bytes": "9223372036854771712",
                                                        "memory/slurm/uid_0/job_7/memory.limit_in_bytes": str(2**31),
                                                        "memory/slurm/uid_0/job_7/memory.usage_in_bytes": str(2**20)}),
])
def test_the_limit_of_the_processs_own_cgroup_caps_host_ram(tmp_path: Path, own: str, files: dict[str, str]) -> None:
    """Only the hierarchy's root was read: a SLURM job's 2 GiB limit on its own cgroup was planned as the whole
    node's RAM (a container probe)."""
    root = tmp_path / "cgroup"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    (tmp_path / "self").write_text(own)
    assert cgroup_memory(root, tmp_path / "self") == (2**31, 2**20)
    cpu = probe_cpu(cgroup_root=root, proc_cgroup=tmp_path / "self")
    assert cpu.memory_total_bytes == min(2**31, cpu.memory_total_bytes or 0) == 2**31


@pytest.mark.parametrize(("own", "files", "limit"), [
    # docker run --cpus 1.5 under cgroup v2 (the container's own cgroup is its namespace's root)
    ("0::/", {"cpu.max": "150000 100000"}, 1.5),
    # a Kubernetes pod's limit on its own cgroup, none on the root; v2
    ("0::/kubepods/pod7/c1", {"cpu.max": "max 100000", "kubepods/pod7/cpu.max": "300000 100000",
                              "kubepods/pod7/c1/cpu.max": "max 100000"}, 3.0),
    # v1, the cpu controller mounted with cpuacct, a SLURM-like job cgroup
    ("4:cpu,cpuacct:/slurm/job_7\n3:memory:/", {"cpu/cpu.cfs_quota_us": "-1", "cpu/cpu.cfs_period_us": "100000",
                                                "cpu/slurm/job_7/cpu.cfs_quota_us": "200000",
                                                "cpu/slurm/job_7/cpu.cfs_period_us": "100000"}, 2.0),
    # no limit anywhere: v2 "max", v1 -1
    ("0::/", {"cpu.max": "max 100000"}, None),
    ("1:cpu:/", {"cpu/cpu.cfs_quota_us": "-1", "cpu/cpu.cfs_period_us": "100000"}, None),
])
def test_a_cgroup_cpu_limit_caps_the_usable_cores(tmp_path: Path, own: str, files: dict[str, str],
                                                   limit: float | None) -> None:
    """`docker run --cpus 2` on a 64-core host: the affinity mask still lists 64 cores, and each rank was given
    threads for 64 (a container probe left CPU quotas unread)."""
    root = tmp_path / "cgroup"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    (tmp_path / "self").write_text(own)
    assert cgroup_cpu_limit(root, tmp_path / "self") == limit
    assert usable_cores(root, tmp_path / "self", affinity=64) == (64 if limit is None else math.ceil(limit))
    assert usable_cores(root, tmp_path / "self", affinity=1) == 1
    cpu = probe_cpu(cgroup_root=root, proc_cgroup=tmp_path / "self")
    affinity = len(os.sched_getaffinity(0))
    assert cpu.usable_cores == (affinity if limit is None else min(affinity, math.ceil(limit)))
