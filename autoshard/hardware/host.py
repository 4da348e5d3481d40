"""The host: CPU cores and RAM (``psutil``, capped by a container's memory limit) and local fast disks.

Fast disks are local, non-rotational block devices (NVMe, SATA SSDs) that are mounted, found from
``psutil.disk_partitions()`` and ``/sys/class/block/<dev>/queue/rotational``. Loop, RAM and zram devices,
removable drives and ``/boot`` are left out. Everything that touches the machine takes its root paths and
sources as arguments, so tests can point it at a fake ``/sys``.
"""

from __future__ import annotations

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


def cgroup_memory(cgroup_root: Path = Path("/sys/fs/cgroup")) -> tuple[int | None, int | None]:
    """This container's memory limit and current usage in bytes (``None``: no limit / not readable).

    Reads cgroup v2 (``memory.max``, ``memory.current``) or v1 (``memory/memory.limit_in_bytes``,
    ``memory/memory.usage_in_bytes``).
    """
    for limit_file, usage_file in (
        (cgroup_root / "memory.max", cgroup_root / "memory.current"),
        (cgroup_root / "memory" / "memory.limit_in_bytes", cgroup_root / "memory" / "memory.usage_in_bytes"),
    ):
        raw = _read_text(limit_file)
        if raw is None:
            continue
        if not raw.isdigit() or int(raw) >= _UNLIMITED_BYTES:  # "max" in v2
            return None, None
        usage = _read_text(usage_file)
        return int(raw), int(usage) if usage and usage.isdigit() else None
    return None, None


def probe_cpu(*, cgroup_root: Path = Path("/sys/fs/cgroup")) -> CPUSpec:
    """Cores (physical, logical, usable by this process) and RAM (total and available) of this machine.

    RAM is capped by the container's cgroup memory limit when one is set, since that is what the training
    processes may actually use.
    """
    import psutil  # imported where used: planning for a hardware profile never needs it (~75 ms)

    memory = psutil.virtual_memory()
    total, available = int(memory.total), int(memory.available)
    limit, usage = cgroup_memory(cgroup_root)
    if limit is not None and limit < total:
        total = limit
        available = min(available, max(limit - (usage or 0), 0))
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        usable = None
    return CPUSpec(
        physical_cores=psutil.cpu_count(logical=False),
        logical_cores=psutil.cpu_count(logical=True),
        usable_cores=usable,
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
