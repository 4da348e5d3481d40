"""GPU detection through NVML (``nvidia-ml-py``, imported as ``pynvml``), without initialising CUDA.

NVML reads the driver's view of the GPUs; unlike ``torch.cuda`` it creates no CUDA context, so the calling
process stays free to fork workers later. NVML numbers GPUs by PCI bus and ignores ``CUDA_VISIBLE_DEVICES``;
:mod:`autoshard.hardware.environment` maps its answer onto CUDA's numbering.

Every NVML call goes through the module object handed to :func:`probe_nvml`, so tests pass a fake module
with the real API's shapes (``tests/hardware/fixtures/``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from autoshard.errors import HardwareError
from autoshard.hardware.specs import GPUDevice

# NVML_TOPOLOGY_* levels (nvml.h, nvmlGpuTopologyLevel_t) → the labels ``nvidia-smi topo -m`` prints.
_TOPOLOGY_LABELS = {0: "INT", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
_NVLINK_DEVICE_TYPE_GPU = 0x00  # NVML_NVLINK_DEVICE_TYPE_GPU
_NVLINK_DEVICE_TYPE_SWITCH = 0x02  # NVML_NVLINK_DEVICE_TYPE_SWITCH
_DEFAULT_MAX_LINKS = 18  # NVML_NVLINK_MAX_LINKS before nvidia-ml-py 12.550 (36 since); the module's own wins
_NO_GPU_ERRORS = ("NVMLError_LibraryNotFound", "NVMLError_DriverNotLoaded")
_UNSUPPORTED_ERRORS = (
    "NVMLError_NotSupported",
    "NVMLError_NoPermission",
    "NVMLError_FunctionNotFound",
    "NVMLError_InvalidArgument",
)
_HINT = "Check `nvidia-smi`; to plan without this machine's GPUs, pass --hardware NAME (`autoshard hardware --list`)."


@dataclass(frozen=True, kw_only=True, slots=True)
class NvmlReport:
    """What NVML said about this machine's GPUs, in NVML order."""

    devices: tuple[GPUDevice, ...]
    """Every GPU, with ``index == nvml_index`` (CUDA numbering is applied later)."""
    nvlink_counts: tuple[tuple[int, ...], ...] = ()
    """NVLink links usable between each pair (direct links plus links through a common NVSwitch)."""
    topology_levels: tuple[tuple[int | None, ...], ...] = ()
    """``NVML_TOPOLOGY_*`` common-ancestor level of each pair (``None``: not reported)."""
    driver_version: str | None = None
    no_gpu_reason: str | None = None
    """Why there are no GPUs (NVML missing, no driver, zero devices), when there are none."""
    notes: tuple[str, ...] = ()
    """What the user should know: GPUs this process may not use, left out."""

    def topology_label(self, i: int, j: int) -> str:
        """``nvidia-smi topo -m``-style label for NVML indices ``i`` and ``j``."""
        if i == j:
            return "X"
        if self.nvlink_counts[i][j]:
            return f"NV{self.nvlink_counts[i][j]}"
        level = self.topology_levels[i][j]
        return "?" if level is None else _TOPOLOGY_LABELS.get(level, "?")


def _text(value: Any) -> str:
    """NVML strings are ``str`` in recent nvidia-ml-py and ``bytes`` in old releases."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def normalise_bus_id(bus_id: Any) -> str:
    """A PCI bus id as ``DDDDDDDD:BB:DD.F`` in upper case (NVML writes 4- or 8-digit domains).

    Example:
        >>> normalise_bus_id(b"0000:07:00.0")
        '00000000:07:00.0'
    """
    text = _text(bus_id).strip().upper()
    domain, sep, rest = text.partition(":")
    if sep and rest.count(":") == 1:
        try:
            return f"{int(domain, 16):08X}:{rest}"
        except ValueError:
            return text
    return text


def _error_class(nvml: Any, name: str) -> type[BaseException] | None:
    cls = getattr(nvml, name, None)
    return cls if isinstance(cls, type) and issubclass(cls, BaseException) else None


def _is_one_of(nvml: Any, exc: BaseException, names: tuple[str, ...]) -> bool:
    classes = tuple(c for c in (_error_class(nvml, n) for n in names) if c is not None)
    return bool(classes) and isinstance(exc, classes)


def _optional(nvml: Any, fn_name: str, *args: Any) -> Any:
    """Call an NVML query some GPUs, drivers or permissions do not offer; ``None`` when unsupported."""
    fn = getattr(nvml, fn_name, None)
    if fn is None:  # an older nvidia-ml-py without this function
        return None
    try:
        return fn(*args)
    except nvml.NVMLError as exc:
        if _is_one_of(nvml, exc, _UNSUPPORTED_ERRORS):
            return None
        raise


def probe_nvml(nvml: Any = None) -> NvmlReport:
    """Ask NVML for every GPU, its memory, PCIe link and NVLink/PCIe topology.

    Args:
        nvml: the ``pynvml`` module, or a stand-in with the same API (tests). ``None`` imports ``pynvml``.

    Returns:
        An :class:`NvmlReport`; with no devices and a ``no_gpu_reason`` when nvidia-ml-py, the NVML library
        or the driver is missing, or when the machine has no NVIDIA GPU.

    Raises:
        HardwareError: NVML is present but fails (e.g. a driver/library version mismatch, a GPU that fell off
            the bus mid-way): planning for a machine whose GPUs cannot be read would be wrong.
    """
    if nvml is None:
        try:
            nvml = importlib.import_module("pynvml")
        except ImportError:
            return NvmlReport(devices=(), no_gpu_reason="nvidia-ml-py is not installed (pip install nvidia-ml-py)")
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        if _is_one_of(nvml, exc, _NO_GPU_ERRORS):
            return NvmlReport(devices=(), no_gpu_reason=f"NVML: {exc}")
        raise HardwareError(f"NVML could not start: {exc}.", hint=_HINT) from None
    try:
        return _read_all(nvml)
    except nvml.NVMLError as exc:
        raise HardwareError(f"NVML failed while reading the GPUs: {exc}.", hint=_HINT) from None
    finally:
        with contextlib.suppress(nvml.NVMLError):  # the answer is complete; a failed shutdown changes nothing
            nvml.nvmlShutdown()


def _read_all(nvml: Any) -> NvmlReport:
    count = int(nvml.nvmlDeviceGetCount())
    driver = _optional(nvml, "nvmlSystemGetDriverVersion")
    driver_version = None if driver is None else _text(driver)
    if count == 0:
        return NvmlReport(devices=(), driver_version=driver_version, no_gpu_reason="NVML found no NVIDIA GPU")
    handles = []
    devices = []
    denied = []
    for i in range(count):
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
        except nvml.NVMLError as exc:
            # A job confined to some GPUs (SLURM's ConstrainDevices, a container's device cgroup): NVML counts
            # every GPU and refuses the others' handles (nvml.h, nvmlDeviceGetCount_v2); CUDA sees only these
            if _is_one_of(nvml, exc, ("NVMLError_NoPermission",)):
                denied.append(i)
                continue
            raise HardwareError(f"NVML failed reading its handle of GPU {i} (NVML numbering): {exc}.",
                                hint=_HINT) from None
        handles.append(handle)
        devices.append(_read_device(nvml, i, handle))
    notes = () if not denied else (
        f"NVML counts {count} GPUs, and this process may not use {len(denied)} of them (NVML numbering "
        f"{', '.join(map(str, denied))}: Insufficient Permissions, as in a job confined to its own GPUs): planned "
        f"with the other {len(devices)}.",)
    if not devices:
        return NvmlReport(devices=(), driver_version=driver_version, notes=notes,
                          no_gpu_reason=f"NVML found {count} GPU(s), none of which this process may use")
    count = len(devices)
    links = [_read_nvlinks(nvml, handle) for handle in handles]
    bus_ids = [d.pci_bus_id for d in devices]
    counts = tuple(
        tuple(0 if i == j else _pair_links(links[i], links[j], bus_ids[j]) for j in range(count))
        for i in range(count)
    )
    levels: list[list[int | None]] = [[None] * count for _ in range(count)]
    for i in range(count):
        for j in range(i + 1, count):
            level = _optional(nvml, "nvmlDeviceGetTopologyCommonAncestor", handles[i], handles[j])
            levels[i][j] = levels[j][i] = None if level is None else int(level)
    devices = [
        dataclasses.replace(d, nvlink_active_links=len(link_list)) for d, link_list in zip(devices, links, strict=True)
    ]
    return NvmlReport(
        devices=tuple(devices),
        nvlink_counts=counts,
        topology_levels=tuple(tuple(row) for row in levels),
        driver_version=driver_version,
        notes=notes,
    )


def _required(nvml: Any, index: int, what: str, fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    except nvml.NVMLError as exc:
        raise HardwareError(f"NVML failed reading {what} of GPU {index} (NVML numbering): {exc}.", hint=_HINT) from None


def _read_device(nvml: Any, index: int, handle: Any) -> GPUDevice:
    memory = _required(nvml, index, "the memory", nvml.nvmlDeviceGetMemoryInfo, handle)
    pci = _required(nvml, index, "the PCI info", nvml.nvmlDeviceGetPciInfo, handle)
    capability = _optional(nvml, "nvmlDeviceGetCudaComputeCapability", handle)
    return GPUDevice(
        index=index,
        nvml_index=index,
        name=_text(_required(nvml, index, "the name", nvml.nvmlDeviceGetName, handle)).strip(),
        uuid=_text(_required(nvml, index, "the UUID", nvml.nvmlDeviceGetUUID, handle)).strip(),
        pci_bus_id=normalise_bus_id(pci.busId),
        memory_total_bytes=int(memory.total),
        memory_free_bytes=int(memory.free),
        compute_capability=None if capability is None else (int(capability[0]), int(capability[1])),
        pcie_generation=_optional_int(nvml, "nvmlDeviceGetCurrPcieLinkGeneration", handle),
        pcie_width=_optional_int(nvml, "nvmlDeviceGetCurrPcieLinkWidth", handle),
        pcie_max_generation=_optional_int(nvml, "nvmlDeviceGetMaxPcieLinkGeneration", handle),
        pcie_max_width=_optional_int(nvml, "nvmlDeviceGetMaxPcieLinkWidth", handle),
    )


def _optional_int(nvml: Any, fn_name: str, handle: Any) -> int | None:
    value = _optional(nvml, fn_name, handle)
    return None if value is None else int(value)


@dataclass(frozen=True, slots=True)
class _Link:
    remote_bus_id: str | None
    remote_type: int | None


def _read_nvlinks(nvml: Any, handle: Any) -> list[_Link]:
    """The active NVLink links of one GPU (links past the GPU's last raise NotSupported and are skipped)."""
    active = []
    for link in range(int(getattr(nvml, "NVML_NVLINK_MAX_LINKS", _DEFAULT_MAX_LINKS))):
        state = _optional(nvml, "nvmlDeviceGetNvLinkState", handle, link)
        if not state:  # None (no such link) or NVML_FEATURE_DISABLED
            continue
        remote = _optional(nvml, "nvmlDeviceGetNvLinkRemotePciInfo", handle, link)
        remote_type = _optional(nvml, "nvmlDeviceGetNvLinkRemoteDeviceType", handle, link)
        active.append(_Link(
            remote_bus_id=None if remote is None else normalise_bus_id(remote.busId),
            remote_type=None if remote_type is None else int(remote_type),
        ))
    return active


def _pair_links(mine: list[_Link], theirs: list[_Link], their_bus_id: str) -> int:
    """Links between two GPUs: direct GPU-to-GPU links, plus (through NVSwitch) the fewer switch links."""
    direct = sum(
        1 for link in mine
        if link.remote_bus_id == their_bus_id and link.remote_type in (None, _NVLINK_DEVICE_TYPE_GPU)
    )
    my_switch = sum(1 for link in mine if link.remote_type == _NVLINK_DEVICE_TYPE_SWITCH)
    their_switch = sum(1 for link in theirs if link.remote_type == _NVLINK_DEVICE_TYPE_SWITCH)
    return direct + min(my_switch, their_switch)
