"""Choosing the hardware to plan for: detected by default, or a profile, with pieces overridden.

``--hardware NAME|FILE`` picks a profile; ``--gpus`` (per node), ``--nodes``, ``--gpu-memory``, ``--cpu-memory``,
``--cpu-cores`` and ``--nvme`` override pieces of whichever hardware was chosen. Every override the user gives shows
up in :attr:`HardwareSpec.notes`, and overrides that contradict the hardware are errors.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autoshard.errors import HARDWARE_ARGUMENTS, HardwareError, UsageError, in_arguments
from autoshard.hardware.detect import detect_hardware
from autoshard.hardware.disk_benchmark import DiskBenchmark
from autoshard.hardware.host import directory_disk
from autoshard.hardware.profiles import load_profile, node_from_gpu, profiles_dir
from autoshard.hardware.specs import (
    MAX_GPUS_PER_NODE,
    MAX_NODES,
    UNKNOWN_LINK_BYTES_PER_S,
    GPUSpec,
    HardwareSpec,
    NodeSpec,
    NVMeDevice,
    for_python,
)
from autoshard.hardware.units import format_bytes, parse_bytes


def _positive(value: Any, flag: str) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise UsageError(f"{flag} must be a positive whole number, got {value!r}.")


@dataclass(frozen=True, kw_only=True, slots=True)
class HardwareOverrides:
    """Pieces of the hardware the user sets by hand (``None``: keep what was detected or loaded)."""

    gpus: int | None = None
    """GPUs per node (``--gpus``); with no GPU, the number of CPU processes."""
    nodes: int | None = None
    """Number of nodes (``--nodes``)."""
    gpu_memory_bytes: int | None = None
    """Memory per GPU (``--gpu-memory``)."""
    cpu_memory_bytes: int | None = None
    """Host RAM per node (``--cpu-memory``)."""
    cpu_cores: int | None = None
    """Host CPU cores per node (``--cpu-cores``): what a CPU optimizer step (offload) runs on."""
    nvme_path: str | None = None
    """Directory to offload to (``--nvme``); replaces the disks. On this machine it is measured; on a profile or a
    hardware file it is a directory on that machine, sized by the profile's disk."""

    def __post_init__(self) -> None:
        _positive(self.gpus, "--gpus")
        if self.gpus is not None and self.gpus > MAX_GPUS_PER_NODE:
            raise UsageError(f"--gpus {self.gpus} is GPUs per node, and no node holds more than "
                             f"{MAX_GPUS_PER_NODE}: give the nodes with --nodes.")
        _positive(self.nodes, "--nodes")
        if self.nodes is not None and self.nodes > MAX_NODES:
            raise UsageError(f"--nodes {self.nodes:,} is more than the {MAX_NODES:,} nodes autoshard plans for.")
        _positive(self.gpu_memory_bytes, "--gpu-memory")
        _positive(self.cpu_memory_bytes, "--cpu-memory")
        _positive(self.cpu_cores, "--cpu-cores")

    @classmethod
    def parse(
        cls,
        *,
        gpus: int | None = None,
        nodes: int | None = None,
        gpu_memory: str | int | None = None,
        cpu_memory: str | int | None = None,
        cpu_cores: int | None = None,
        nvme: str | os.PathLike[str] | None = None,
    ) -> HardwareOverrides:
        """Overrides from user-facing values: memory as ``"80GB"``/``"80 GiB"`` strings or ``int`` bytes.

        Raises:
            UsageError: a value is not positive or a size cannot be parsed.
        """
        try:
            gpu_bytes = None if gpu_memory is None else parse_bytes(gpu_memory, what="--gpu-memory")
            cpu_bytes = None if cpu_memory is None else parse_bytes(cpu_memory, what="--cpu-memory")
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        for flag, size in (("--gpu-memory", gpu_memory), ("--cpu-memory", cpu_memory)):
            if isinstance(size, int) and not isinstance(size, bool) and 0 < size < _SMALLEST_MEMORY:
                raise UsageError(f"{flag} {size} is {size} bytes, less than any machine's memory.",
                                 hint=f"Give a unit: {flag} {size}GB (10**9 bytes each) or {flag} {size}GiB "
                                      "(2**30 each).")
        return cls(
            gpus=gpus,
            nodes=nodes,
            gpu_memory_bytes=gpu_bytes,
            cpu_memory_bytes=cpu_bytes,
            cpu_cores=cpu_cores,
            nvme_path=None if nvme is None else os.fspath(nvme),
        )


_SMALLEST_MEMORY = 2**20
"""Memory given as a bare number of bytes below this (1 MiB) is taken for a size without its unit."""


@in_arguments(HARDWARE_ARGUMENTS, result=for_python)
def load_hardware(
    name_or_path: str | os.PathLike[str],
    *,
    gpus: int | None = None,
    nodes: int | None = None,
    gpu_memory: str | int | None = None,
    cpu_memory: str | int | None = None,
    cpu_cores: int | None = None,
    nvme: str | os.PathLike[str] | None = None,
) -> HardwareSpec:
    """Hardware from a profile — a shipped name or a YAML file — with optional overrides.

    A GPU profile becomes one node of ``gpus`` such GPUs (default 1); a node profile is one such node;
    a cluster profile brings its own number of nodes.

    Args:
        name_or_path: e.g. ``"h100-sxm-80gb"``, ``"dgx-a100"``, or ``"my-cluster.yaml"``; ``"NAME:G"`` or
            ``"NAME:GxN"`` is ``NAME`` with ``gpus=G`` (and ``nodes=N``), as ``--hardware`` takes it.
        gpus: GPUs per node (at most a node profile's own count).
        nodes: number of nodes.
        gpu_memory: memory per GPU, ``"80GB"`` (10**9 bytes per GB), ``"80GiB"`` (2**30) or ``int`` bytes.
        cpu_memory: host RAM per node, same forms.
        cpu_cores: host CPU cores per node (what prices a CPU optimizer step under offload).
        nvme: a directory to offload to: measured on this machine, or, with ``hardware`` a profile or file, an
            absolute path on that machine, sized by its disk.

    Returns:
        A :class:`HardwareSpec` with ``source`` ``"profile"`` or ``"file"``.

    Raises:
        HardwareError: unknown profile (close names are listed), an invalid file, a missing ``nvme`` directory.
        UsageError: an override is malformed or contradicts the profile.

    Example:
        >>> hw = load_hardware("a100-sxm-80gb", gpus=8, nodes=2)
        >>> hw.world_size, hw.backend, hw.node.intra_node_link.name
        (16, 'nccl', 'nvlink3')
    """
    if isinstance(name_or_path, HardwareSpec):
        raise UsageError("load_hardware() loads a profile by name or YAML path, and this is a HardwareSpec already.",
                         hint="Pass it as hardware= as it is; to change its size, load its profile again: "
                              'load_hardware("h100-sxm-80gb", gpus=8, nodes=2).')
    if not isinstance(name_or_path, (str, os.PathLike)):
        raise UsageError(f"load_hardware() takes a profile name or YAML path, not {name_or_path!r}.",
                         hint="autoshard.detect_hardware() describes this machine; "
                              "autoshard.hardware.list_profiles() lists the profiles.")
    if isinstance(name_or_path, str) and not Path(name_or_path).exists():
        name, sized_gpus, sized_nodes = sized_machine(name_or_path)
        if sized_gpus is not None:
            if gpus is not None or nodes is not None:
                raise UsageError(f"load_hardware({name_or_path!r}) sizes the machine, and gpus= or nodes= sizes it "
                                 "again.", hint=f"Pass one: load_hardware({name!r}, gpus=..., nodes=...).")
            name_or_path, gpus, nodes = name, sized_gpus, sized_nodes
    overrides = HardwareOverrides.parse(
        gpus=gpus, nodes=nodes, gpu_memory=gpu_memory, cpu_memory=cpu_memory, cpu_cores=cpu_cores, nvme=nvme
    )
    return _from_profile(name_or_path, overrides)


def select_hardware(
    hardware: str | os.PathLike[str] | None,
    overrides: HardwareOverrides = HardwareOverrides(),
    *,
    environ: Mapping[str, str] | None = None,
    nvml: Any = None,
) -> HardwareSpec:
    """The hardware to plan for: ``hardware`` (a profile name or file) if given, else this machine.

    Args:
        hardware: a profile name or YAML path, or ``None`` to detect this machine.
        overrides: pieces set by hand.
        environ: the environment for detection (default ``os.environ``).
        nvml: a stand-in for ``pynvml`` (tests).

    Raises:
        HardwareError: see :func:`load_hardware` and :func:`detect_hardware`.
        UsageError: an override contradicts the hardware.
    """
    if hardware is not None:
        return _from_profile(hardware, overrides)
    detected = detect_hardware(gpus=overrides.gpus, environ=environ, nvml=nvml)
    if detected.device_type == "cpu" and overrides.gpu_memory_bytes is not None:
        raise UsageError(
            "--gpu-memory was given, but no GPU was detected and no --hardware chosen.",
            hint="Pass --hardware NAME (`autoshard hardware --list`) to plan for a GPU you do not have here.",
        )
    return _apply(detected, overrides, was="detected")


def _from_profile(name_or_path: str | os.PathLike[str], overrides: HardwareOverrides) -> HardwareSpec:
    profile = load_profile(name_or_path)
    is_file = _is_user_file(profile.path)
    source = "file" if is_file else "profile"
    origin = profile.path if is_file else profile.name
    notes: list[str] = []
    spec = profile.spec
    if isinstance(spec, GPUSpec):
        node = node_from_gpu(spec, overrides.gpus or 1)
    elif isinstance(spec, NodeSpec):
        node = spec
        if overrides.gpus is not None and overrides.gpus != spec.gpus:
            if overrides.gpus > spec.gpus:
                raise UsageError(
                    f"--gpus {overrides.gpus} contradicts {profile.name!r}, which has {spec.gpus} GPUs per node.",
                    hint=f"Use the GPU profile with --gpus to plan for a different node (e.g. --hardware "
                    f"{spec.gpu.name if spec.gpu else 'NAME'} --gpus {overrides.gpus}).",
                )
            node = _fewer_gpus(spec, overrides.gpus)
            notes.append(f"Using {overrides.gpus} of the node's {spec.gpus} GPUs (--gpus {overrides.gpus}).")
    else:
        raise HardwareError(
            f"{profile.name!r} is an {profile.kind} profile; --hardware takes a GPU, node or cluster profile.",
            hint="`autoshard hardware --list` lists them.",
        )
    nodes = profile.nodes or 1
    hw = HardwareSpec(
        source=source,
        origin=origin,
        device_type="cuda",
        backend="nccl",
        nodes=nodes,
        processes_per_node=node.gpus,
        node=node,
        notes=tuple(notes),
    )
    hw = _apply(hw, overrides, was="profile")
    if hw.nodes > 1 and hw.node.network is None:
        hw = dataclasses.replace(hw, notes=(*hw.notes, (
            f"{hw.nodes} nodes, but the network between them is unknown: priced as "
            f"{UNKNOWN_LINK_BYTES_PER_S / 1e9:g} GB/s per node, which may be far from yours; use a node or cluster "
            "profile with a 'network:' entry (docs/hardware.md)."
        )))
    return hw


def _is_user_file(path: str) -> bool:
    try:
        Path(path).resolve().relative_to(profiles_dir().resolve())
    except ValueError:
        return True
    return False


def _fewer_gpus(node: NodeSpec, gpus: int) -> NodeSpec:
    single = gpus == 1
    return dataclasses.replace(
        node,
        gpus=gpus,
        intra_node_link=None if single else node.intra_node_link,
        intra_node_bandwidth_bytes_per_s=None if single else node.intra_node_bandwidth_bytes_per_s,
    )


def _apply(hw: HardwareSpec, overrides: HardwareOverrides, *, was: str) -> HardwareSpec:
    """Apply the overrides that do not depend on how the hardware was built (all but ``gpus``)."""
    node = hw.node
    notes = list(hw.notes)
    nodes = hw.nodes
    if overrides.nodes is not None and overrides.nodes != hw.nodes:
        notes.append(f"Nodes set to {overrides.nodes} ({was}: {hw.nodes}).")
        nodes = overrides.nodes
    if overrides.gpu_memory_bytes is not None:
        if node.gpu is None:
            raise UsageError("--gpu-memory was given, but the chosen hardware has no GPU.")
        notes.append(
            f"GPU memory set to {format_bytes(overrides.gpu_memory_bytes)} by --gpu-memory "
            f"({was}: {format_bytes(node.gpu.memory_bytes)})."
        )
        node = dataclasses.replace(node, gpu=dataclasses.replace(node.gpu, memory_bytes=overrides.gpu_memory_bytes))
    if overrides.cpu_memory_bytes is not None:
        notes.append(
            f"CPU memory set to {format_bytes(overrides.cpu_memory_bytes)} by --cpu-memory "
            f"({was}: {format_bytes(node.cpu.memory_total_bytes)})."
        )
        cpu = dataclasses.replace(
            node.cpu, memory_total_bytes=overrides.cpu_memory_bytes, memory_available_bytes=overrides.cpu_memory_bytes
        )
        node = dataclasses.replace(node, cpu=cpu)
    if overrides.cpu_cores is not None:
        known = node.cpu.usable_cores or node.cpu.physical_cores
        notes.append(f"CPU cores set to {overrides.cpu_cores} by --cpu-cores ({was}: {known or 'unknown'}).")
        cores = overrides.cpu_cores
        cpu = dataclasses.replace(node.cpu, physical_cores=cores, logical_cores=cores, usable_cores=cores)
        node = dataclasses.replace(node, cpu=cpu)
    if overrides.nvme_path is not None:
        disk, note = _offload_disk(hw, overrides.nvme_path)
        notes.append(note)
        node = dataclasses.replace(node, nvme=(disk,))
    return dataclasses.replace(hw, nodes=nodes, node=node, notes=tuple(notes))


def _offload_disk(hw: HardwareSpec, path: str) -> tuple[NVMeDevice, str]:
    """The disk ``--nvme PATH`` offloads to, and the note saying where its size comes from.

    On this machine the directory is measured. On a profiled or described machine it is a directory there: its
    size is the profile's disk (the one with the most room), not this machine's, and the path need not exist here.
    """
    if hw.source == "detected":
        disk = directory_disk(path)
        return disk, f"Offload directory set to {disk.path} by --nvme ({format_bytes(disk.free_bytes)} free here)."
    if not path.startswith("/"):
        raise UsageError(f"--nvme {path}: give the directory's absolute path on {hw.origin} (e.g. /local_nvme); "
                         "it is a directory there, not on this machine.")
    listed = max(hw.node.nvme, key=lambda d: d.free_bytes or 0, default=None)
    if listed is not None and listed.free_bytes is not None:
        disk = dataclasses.replace(listed, path=path)
        return disk, (f"Offload directory set to {path} by --nvme, on {hw.origin}'s disk "
                      f"({format_bytes(listed.free_bytes)} from its {hw.source}).")
    disk = NVMeDevice(path=path, origin="override")
    return disk, (f"Offload directory set to {path} by --nvme; {hw.origin} lists no disk, so its room is unknown and "
                  "NVMe offload is not checked against it: give the disk's size under 'nvme:' in a hardware file "
                  "(docs/hardware.md).")


def attach_disk_benchmark(hw: HardwareSpec, result: DiskBenchmark) -> HardwareSpec:
    """Record measured bandwidth on the disk entry holding ``result.path`` (added if none holds it)."""
    measured = Path(result.path)
    best: int | None = None
    for i, disk in enumerate(hw.node.nvme):
        try:
            measured.relative_to(disk.path)
        except ValueError:
            continue
        if best is None or len(disk.path) > len(hw.node.nvme[best].path):
            best = i
    nvme = list(hw.node.nvme)
    if best is None:
        nvme.append(directory_disk(measured, origin="benchmark"))
        best = len(nvme) - 1
    nvme[best] = dataclasses.replace(
        nvme[best], read_bytes_per_s=result.read_bytes_per_s, write_bytes_per_s=result.write_bytes_per_s
    )
    return dataclasses.replace(hw, node=dataclasses.replace(hw.node, nvme=tuple(nvme)))


_SIZED = re.compile(r"^(?P<name>.+):(?P<gpus>[0-9]+)(?:[xX](?P<nodes>[0-9]+))?$")
SIZE_HINT = ("Size a machine once, as NAME:G (G GPUs per node) or NAME:GxN (and N nodes), e.g. h100-sxm-80gb:16 or "
             "h100-sxm-80gb:8x2; a node profile keeps its own GPUs per node (dgx-h100:8x2).")


def sized_machine(machine: str) -> tuple[str, int | None, int | None]:
    """``(profile, GPUs per node, nodes)`` of a machine written ``NAME``, ``NAME:G`` or ``NAME:GxN`` (``x`` in either
    case, as profile names are; as ``autoshard compare`` takes machines and ``--hardware`` accepts them); ``None``
    for a size not given. A file of that very name is not sized.

    Raises:
        UsageError: a size that is not one (``dgx-h100:8x``), zero, given twice (``h100-sxm-80gb:8x2:3``), or more
            GPUs per node than any node holds (the message starts with ``machine``).

    Example:
        >>> sized_machine("h100-sxm-80gb:8X2"), sized_machine("l40s:8"), sized_machine("dgx-h100")
        (('h100-sxm-80gb', 8, 2), ('l40s', 8, None), ('dgx-h100', None, None))
    """
    if Path(machine).exists():
        return machine, None, None
    sized = _SIZED.match(machine)
    if sized is None:
        base, colon, size = machine.rpartition(":")
        if colon and base and not any(c in size for c in "/\\."):  # "h100-sxm-80gb:8x", not a file name
            raise UsageError(f"{machine}: {size!r} is not a size.", hint=SIZE_HINT)
        return machine, None, None
    name, gpus = sized["name"], int(sized["gpus"])
    nodes = None if sized["nodes"] is None else int(sized["nodes"])
    if _SIZED.match(name) and not Path(name).exists():
        raise UsageError(f"{machine}: the machine is sized twice.", hint=SIZE_HINT)
    if gpus == 0 or nodes == 0:
        raise UsageError(f"{machine}: a machine has at least one GPU per node and one node.", hint=SIZE_HINT)
    if gpus > MAX_GPUS_PER_NODE:
        raise UsageError(f"{machine}: {gpus} is GPUs per node, and no node holds more than {MAX_GPUS_PER_NODE}.",
                         hint=f"Give the nodes too, e.g. {name}:8x{math.ceil(gpus / 8)} for "
                              f"{8 * math.ceil(gpus / 8)} GPUs.")
    return name, gpus, nodes
