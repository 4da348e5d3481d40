"""The host: CPU cores and RAM (``psutil``, capped by a container's memory limit) and local fast disks.

Fast disks are local, non-rotational block devices (NVMe, SATA SSDs) that are mounted, found from
``psutil.disk_partitions()`` and ``/sys/class/block/<dev>/queue/rotational``. Loop, RAM and zram devices,
removable drives and ``/boot`` are left out. Everything that touches the machine takes its root paths and
sources as arguments, so tests can point it at a fake ``/sys``.
"""

from __future__ import annotations

import math
import os
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NamedTuple

from autoshard.errors import HardwareError
from autoshard.hardware.specs import CPUSpec, NVMeDevice

_UNLIMITED_BYTES = 2**60  # cgroup v1 writes ~2**63 for "no limit"
_SKIPPED_DEVICE_PREFIXES = ("loop", "ram", "zram", "sr", "fd", "nbd")
_SKIPPED_MOUNT_PREFIXES = ("/boot", "/snap/")


class Partition(NamedTuple):
    """A mounted partition, as ``psutil.disk_partitions()`` reports it."""

    device: str
    mountpoint: str
    fstype: str = ""


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii", errors="replace").strip()
    except OSError:
        return None


def cgroup_memory(cgroup_root: Path = Path("/sys/fs/cgroup"),
                  proc_cgroup: Path = Path("/proc/self/cgroup")) -> tuple[int | None, int | None]:
    """This process's memory limit and its cgroup's current usage in bytes (``None``: no limit / not readable).

    The limit is the smallest of the process's own cgroup (``proc_cgroup``: ``/proc/self/cgroup``) and its
    ancestors up to ``cgroup_root``: a SLURM job's (``.../job_7/memory.max``), a ``systemd-run -p MemoryMax``
    scope's and a container's with its own cgroup namespace (whose own cgroup is the root). cgroup v2
    (``memory.max``, ``memory.current``) or v1 (``memory/<path>/memory.limit_in_bytes``, ``memory.usage_in_bytes``).

    Example:
        >>> import tempfile
        >>> root = Path(tempfile.mkdtemp()); job = root / "slurm" / "job_7"; job.mkdir(parents=True)
        >>> _ = (root / "memory.max").write_text("max"); _ = (job / "memory.max").write_text(str(2**31))
        >>> _ = (job / "memory.current").write_text(str(2**20)); _ = (root / "self").write_text("0::/slurm/job_7")
        >>> cgroup_memory(root, root / "self")
        (2147483648, 1048576)
    """
    best: tuple[int, int | None] | None = None
    for directory, version in _own_cgroups(cgroup_root, proc_cgroup, "memory"):
        limit_name, usage_name = _MEMORY_FILES[version]
        raw = _read_text(directory / limit_name)
        if raw is None or not raw.isdigit() or int(raw) >= _UNLIMITED_BYTES:  # "max" in v2
            continue
        if best is None or int(raw) < best[0]:
            usage = _read_text(directory / usage_name)
            best = int(raw), int(usage) if usage and usage.isdigit() else None
    return (None, None) if best is None else best


def cgroup_cpu_limit(cgroup_root: Path = Path("/sys/fs/cgroup"),
                     proc_cgroup: Path = Path("/proc/self/cgroup")) -> float | None:
    """This process's CPU bandwidth limit in cores (quota ÷ period), ``None`` where none is set or readable.

    The smallest of the process's own cgroup and its ancestors, as for :func:`cgroup_memory`: what ``docker run
    --cpus 4``, Kubernetes' CPU limit and ``systemd-run -p CPUQuota=`` set. cgroup v2 ``cpu.max`` (``"400000
    100000"``; ``"max ..."`` for none) or v1 ``cpu/<path>/cpu.cfs_quota_us`` (``-1`` for none) over
    ``cpu.cfs_period_us``. The process's affinity still lists every core of the machine then, and threads beyond
    the quota only wait for it.

    Example:
        >>> import tempfile
        >>> root = Path(tempfile.mkdtemp()); _ = (root / "cpu.max").write_text("150000 100000")
        >>> _ = (root / "self").write_text("0::/")
        >>> cgroup_cpu_limit(root, root / "self")
        1.5
    """
    best: float | None = None
    for directory, version in _own_cgroups(cgroup_root, proc_cgroup, "cpu"):
        if version == "v2":
            quota, _, period = (_read_text(directory / "cpu.max") or "").partition(" ")
        else:
            quota, period = (_read_text(directory / name) or "" for name in ("cpu.cfs_quota_us", "cpu.cfs_period_us"))
        if not (quota.isdigit() and period.isdigit()) or int(quota) == 0 or int(period) == 0:  # "max", -1: none
            continue
        cores = int(quota) / int(period)
        best = cores if best is None else min(best, cores)
    return best


def usable_cores(cgroup_root: Path = Path("/sys/fs/cgroup"), proc_cgroup: Path = Path("/proc/self/cgroup"),
                 affinity: int | None = None) -> int | None:
    """Cores this process can keep busy: its affinity mask (``affinity``, or read), cut to its cgroup's CPU limit
    rounded up (:func:`cgroup_cpu_limit`; 1.5 cores keep 2 threads partly busy). ``None`` off Linux."""
    if affinity is None:
        try:
            affinity = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):  # not on Linux
            return None
    limit = cgroup_cpu_limit(cgroup_root, proc_cgroup)
    return affinity if limit is None else max(1, min(affinity, math.ceil(limit)))


_MEMORY_FILES = {"v2": ("memory.max", "memory.current"), "v1": ("memory.limit_in_bytes", "memory.usage_in_bytes")}


def _own_cgroups(cgroup_root: Path, proc_cgroup: Path, controller: str) -> list[tuple[Path, str]]:
    """The cgroup directories of ``controller`` that bound this process, its own first, up to the hierarchy's root,
    each with its version: v2's unified hierarchy at ``cgroup_root``, v1's at ``cgroup_root / controller``."""
    paths = {"v2": "/", "v1": "/"}
    for line in (_read_text(proc_cgroup) or "").splitlines():  # "hierarchy-ID:controllers:path"
        parts = line.split(":", 2)
        if len(parts) == 3 and parts[0] == "0" and parts[1] == "":
            paths["v2"] = parts[2]
        elif len(parts) == 3 and controller in parts[1].split(","):
            paths["v1"] = parts[2]
    out = []
    for base, version in ((cgroup_root, "v2"), (cgroup_root / controller, "v1")):
        directory = base / paths[version].strip("/")
        while True:
            out.append((directory, version))
            if directory == base or base not in directory.parents:
                break
            directory = directory.parent
    return out


def probe_cpu(*, cgroup_root: Path = Path("/sys/fs/cgroup"), proc_cgroup: Path = Path("/proc/self/cgroup")) -> CPUSpec:
    """Cores (physical, logical, usable by this process) and RAM (total and available) of this machine.

    RAM is capped by the memory limit of the process's cgroup (:func:`cgroup_memory`: a container's, a SLURM
    job's) when one is set, since that is what the training processes may actually use; the usable cores by its CPU
    limit (:func:`usable_cores`).
    """
    import psutil  # imported where used: planning for a hardware profile never needs it (~75 ms)

    memory = psutil.virtual_memory()
    total, available = int(memory.total), int(memory.available)
    limit, usage = cgroup_memory(cgroup_root, proc_cgroup)
    if limit is not None and limit < total:
        total = limit
        available = min(available, max(limit - (usage or 0), 0))
    return CPUSpec(
        physical_cores=psutil.cpu_count(logical=False),
        logical_cores=psutil.cpu_count(logical=True),
        usable_cores=usable_cores(cgroup_root, proc_cgroup),
        memory_total_bytes=total,
        memory_available_bytes=available,
    )


def _disk_of(name: str, sys_class_block: Path) -> str | None:
    """The whole-disk name of a block device (``nvme0n1`` for ``nvme0n1p2``), or ``None`` if unknown."""
    entry = sys_class_block / name
    if not entry.exists():
        return None
    if (entry / "partition").exists():
        return entry.resolve().parent.name
    return name


def discover_nvme(
    partitions: Iterable[Any] | None = None,
    *,
    sys_class_block: Path = Path("/sys/class/block"),
    disk_usage: Callable[[str], Any] = shutil.disk_usage,
) -> tuple[NVMeDevice, ...]:
    """Mounted local non-rotational disks with their free space, one entry per device.

    Args:
        partitions: mounted partitions with ``device``, ``mountpoint`` (default ``psutil.disk_partitions()``).
        sys_class_block: the sysfs directory describing block devices.
        disk_usage: returns ``total``/``free`` for a path (default :func:`shutil.disk_usage`).

    Returns:
        One :class:`NVMeDevice` per device (its shortest mount point), sorted by path.
    """
    if partitions is None:
        import psutil

        partitions = psutil.disk_partitions(all=False)
    mounts: dict[str, str] = {}  # device -> its shortest mount point
    for part in partitions:
        device, mountpoint = str(part.device), str(part.mountpoint)
        if not device.startswith("/dev/") or mountpoint.startswith(_SKIPPED_MOUNT_PREFIXES):
            continue
        name = os.path.basename(os.path.realpath(device)) if os.path.islink(device) else os.path.basename(device)
        if name.startswith(_SKIPPED_DEVICE_PREFIXES):
            continue
        disk = _disk_of(name, sys_class_block)
        if disk is None:
            continue
        if _read_text(sys_class_block / disk / "queue" / "rotational") != "0":
            continue
        if _read_text(sys_class_block / disk / "removable") == "1":
            continue
        if device not in mounts or len(mountpoint) < len(mounts[device]):
            mounts[device] = mountpoint
    found = []
    for device, mountpoint in mounts.items():
        try:
            usage = disk_usage(mountpoint)
        except OSError:
            continue  # mounted but not readable by this user: not a place to offload to
        found.append(NVMeDevice(
            path=mountpoint,
            device=device,
            total_bytes=int(usage.total),
            free_bytes=int(usage.free),
            origin="detected",
        ))
    return tuple(sorted(found, key=lambda d: d.path))


def directory_disk(path: str | os.PathLike[str], *, origin: str = "override") -> NVMeDevice:
    """Describe a directory chosen for offloading (``--nvme PATH``): its free and total space.

    Raises:
        HardwareError: the path does not exist or is not a directory.
    """
    p = Path(path).expanduser()
    if not p.exists():
        raise HardwareError(f"NVMe path {str(p)!r} does not exist.", hint="Pass an existing directory on the disk.")
    if not p.is_dir():
        raise HardwareError(f"NVMe path {str(p)!r} is not a directory.", hint="Pass a directory on the disk.")
    usage = shutil.disk_usage(p)
    return NVMeDevice(
        path=str(p.resolve()),
        device=None,
        total_bytes=int(usage.total),
        free_bytes=int(usage.free),
        origin=origin,
    )
