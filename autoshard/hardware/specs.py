"""Typed descriptions of hardware: a GPU model, a link, a node, and the whole machine or cluster.

All of them are frozen dataclasses with ``to_dict()`` (JSON-ready; the format is documented in
``docs/hardware.md``). Sizes are ``int`` bytes, rates ``float`` bytes per second, peak compute TFLOP/s.
``None`` means *unknown* (never a ``-1`` sentinel): a GPU profile does not know the host's RAM, and NVML does
not know a GPU's peak TFLOP/s.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from autoshard.errors import HARDWARE_ARGUMENTS, rewording

DTYPES: tuple[str, ...] = ("fp32", "tf32", "bf16", "fp16", "fp8")
"""The dtypes a :class:`PeakTflops` knows, in the order profiles list them."""

LINK_KINDS: tuple[str, ...] = ("nvlink", "pcie", "infiniband", "ethernet")
"""The kinds of :class:`LinkSpec`."""


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return value.to_dict()  # type: ignore[attr-defined]
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    return value


def _fields_dict(obj: Any) -> dict[str, Any]:
    return {f.name: _plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}


MAX_GPUS_PER_NODE = 1024
MAX_NODES = 65_536
"""The most nodes a plan is made for: the largest training clusters have tens of thousands of nodes (``--nodes
1000000000`` planned 8,000,000,000 data-parallel ranks without a word)."""
"""More GPUs per node than any machine holds: the largest NVLink domains sold are 72 GPUs (GB200 NVL72) and
PCIe servers hold about 20, so a larger count is a typo (``80000`` for ``8``), refused before any tracing."""

UNKNOWN_LINK_BYTES_PER_S = 10e9
"""Bandwidth the plans assume for a link the hardware does not describe (the network of a multi-node plan made
from a GPU profile, CPU processes over gloo); flagged in the hardware's notes and the cost notes."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PeakTflops:
    """Dense peak throughput of one GPU per dtype, in TFLOP/s (10**12 FLOP/s).

    Dense means without 2:4 structured sparsity: where a datasheet prints only the with-sparsity figure, the
    profile halves it, as the datasheet's footnote says. ``fp32`` is the non-tensor-core rate; ``tf32``,
    ``bf16``, ``fp16`` and ``fp8`` are tensor-core rates with FP32 accumulation where the vendor gives both.
    ``None``: the GPU has no such unit, or the rate is unknown.
    """

    fp32: float | None = None
    tf32: float | None = None
    """TF32 tensor-core rate (Ampere and newer)."""
    bf16: float | None = None
    fp16: float | None = None
    fp8: float | None = None
    """FP8 tensor-core rate (Ada and Hopper and newer)."""

    def for_dtype(self, dtype: str) -> float | None:
        """The dense peak for ``dtype`` (one of :data:`DTYPES`), or ``None`` when unknown.

        Raises:
            ValueError: ``dtype`` is not one of :data:`DTYPES`.
        """
        if dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype=}.")
        return getattr(self, dtype)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return _fields_dict(self)


@dataclass(frozen=True, kw_only=True, slots=True)
class Achievable:
    """Fractions of a GPU model's datasheet rates that training kernels reach: the step-time model's constants
    (:mod:`autoshard.strategies.step_time`). Each comes from a published measurement, cited in the profile."""

    matmul: float
    """Large GEMMs, of the dense peak (cuBLAS at its best shapes: the "maximum achievable matmul FLOPS")."""
    attention: float
    """Fused attention (the flash kernel PyTorch's SDPA runs), forward + backward, of the dense peak."""
    memory: float
    """Streaming (memory-bound) kernels, of the memory bandwidth."""
    matmul_fp32: float | None = None
    """fp32 GEMMs and convolutions on the CUDA cores, of the fp32 peak: other units than the tensor cores, with
    their own efficiency. ``None``: :attr:`matmul`."""
    matmul_tf32: float | None = None
    """fp32 GEMMs and convolutions on TF32 tensor cores, of the TF32 peak. ``None``: :attr:`matmul`."""
    unaligned_matmul: float | None = None
    """16-bit GEMMs whose leading dimensions are aligned to 4 or 8 bytes but not 16 (an even dimension not a
    multiple of 8): their rate over an aligned GEMM's of the same shape. ``None``: not known, not priced."""
    unaligned_matmul_2b: float | None = None
    """16-bit GEMMs with a leading dimension aligned to 2 bytes only (an odd dimension, GPT-2's vocabulary of
    50,257): their rate over an aligned GEMM's of the same shape. ``None``: not known, not priced."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return _fields_dict(self)


@dataclass(frozen=True, kw_only=True, slots=True)
class LinkSpec:
    """An interconnect: NVLink, PCIe, InfiniBand or Ethernet."""

    name: str
    """Profile name, e.g. ``"nvlink3"``, ``"pcie-gen4"``, ``"infiniband-hdr"``."""
    display_name: str
    kind: str
    """One of :data:`LINK_KINDS`."""
    bandwidth_bytes_per_s: float
    """Bandwidth in one direction: per GPU for NVLink and PCIe (all its links / an x16 slot), per port for a
    network link."""
    lanes: int | None = None
    """NVLink links per GPU or PCIe lanes that :attr:`bandwidth_bytes_per_s` covers; ``None`` for networks."""
    latency_s: float | None = None
    """Typical small-message latency, when known."""

    @property
    def lane_bandwidth_bytes_per_s(self) -> float | None:
        """Bandwidth of one NVLink link or PCIe lane in one direction, when :attr:`lanes` is known."""
        return None if not self.lanes else self.bandwidth_bytes_per_s / self.lanes

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return _fields_dict(self)


@dataclass(frozen=True, kw_only=True, slots=True)
class NetworkSpec:
    """How a node talks to other nodes: ``ports`` network ports of one link type."""

    link: LinkSpec
    ports: int
    """Ports per node used for training traffic (e.g. 8 HDR InfiniBand ports on a DGX A100)."""

    @property
    def bandwidth_bytes_per_s(self) -> float:
        """Inter-node bandwidth of one node in one direction (all ports)."""
        return self.link.bandwidth_bytes_per_s * self.ports

    @property
    def latency_s(self) -> float | None:
        """Small-message latency between two nodes, when known."""
        return self.link.latency_s

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {**_fields_dict(self), "bandwidth_bytes_per_s": self.bandwidth_bytes_per_s}


@dataclass(frozen=True, kw_only=True, slots=True)
class GPUSpec:
    """A GPU model: what every GPU of a node looks like to the planner."""

    name: str
    """Profile name (``"a100-sxm4-80gb"``), or the NVML name when no profile matches."""
    display_name: str
    """The vendor's name, as NVML reports it (``"NVIDIA A100-SXM4-80GB"``)."""
    memory_bytes: int
    """Memory per GPU: the NVML total when detected, the datasheet capacity for a profile."""
    compute_capability: tuple[int, int] | None = None
    memory_bandwidth_bytes_per_s: float | None = None
    peak_tflops: PeakTflops = PeakTflops()
    form_factor: str | None = None
    """``"sxm"`` or ``"pcie"`` when known."""
    host_link: LinkSpec | None = None
    """The PCIe link to the host."""
    nvlink: LinkSpec | None = None
    """The NVLink generation this GPU has, if any (an SXM board, or a bridge)."""
    nvml_names: tuple[str, ...] = ()
    """Names NVML reports for this GPU (matched ignoring case, spaces and an ``NVIDIA``/``Tesla``/``GeForce``
    prefix)."""
    achievable: Achievable | None = None
    """What training kernels reach of the peaks on this GPU model; ``None``: not measured (generic fractions)."""
    power_limit_w: float | None = None
    """The board power limit the profile describes, when it is not the datasheet's default (a power-capped
    variant)."""
    profile_path: str | None = None
    """The profile file this spec came from; ``None`` when only NVML described it."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return _fields_dict(self)


@dataclass(frozen=True, kw_only=True, slots=True)
class GPUDevice:
    """One GPU found by NVML on this machine."""

    index: int
    """The CUDA ordinal this process will see (after ``CUDA_VISIBLE_DEVICES``)."""
    nvml_index: int
    """NVML's index, which ignores ``CUDA_VISIBLE_DEVICES``."""
    name: str
    uuid: str
    pci_bus_id: str
    memory_total_bytes: int
    memory_free_bytes: int
    compute_capability: tuple[int, int] | None = None
    pcie_generation: int | None = None
    """Current PCIe generation (GPUs drop to a lower one when idle)."""
    pcie_width: int | None = None
    pcie_max_generation: int | None = None
    """Highest generation this GPU and its slot support together."""
    pcie_max_width: int | None = None
    nvlink_active_links: int = 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return _fields_dict(self)


@dataclass(frozen=True, kw_only=True, slots=True)
class GpuTopology:
    """How each pair of visible GPUs is connected, in CUDA order (like ``nvidia-smi topo -m``)."""

    labels: tuple[tuple[str, ...], ...]
    """``labels[i][j]``: ``"X"`` on the diagonal, ``"NV<n>"`` for ``n`` NVLink links, else the closest common
    PCIe ancestor: ``"PIX"`` (one switch), ``"PXB"`` (several switches), ``"PHB"`` (host bridge), ``"NODE"``
    (same NUMA node), ``"SYS"`` (across CPU sockets), or ``"?"`` when NVML could not tell."""
    nvlink_counts: tuple[tuple[int, ...], ...]
    """``nvlink_counts[i][j]``: NVLink links usable between GPUs ``i`` and ``j`` (0 on the diagonal)."""

    @property
    def all_pairs_nvlink(self) -> bool:
        """Whether every pair of distinct GPUs has at least one NVLink link."""
        n = len(self.labels)
        return n > 1 and all(self.nvlink_counts[i][j] > 0 for i in range(n) for j in range(n) if i != j)

    @property
    def min_pair_nvlinks(self) -> int:
        """The fewest NVLink links between any pair (0 with fewer than two GPUs)."""
        n = len(self.labels)
        counts = [self.nvlink_counts[i][j] for i in range(n) for j in range(n) if i != j]
        return min(counts, default=0)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return _fields_dict(self)


@dataclass(frozen=True, kw_only=True, slots=True)
class CPUSpec:
    """The host's CPU cores and RAM (all ``None`` when unknown, e.g. for a GPU-only profile)."""

    physical_cores: int | None = None
    logical_cores: int | None = None
    usable_cores: int | None = None
    """Cores this process may run on (its CPU affinity), when it differs from the machine's."""
    memory_total_bytes: int | None = None
    """Total RAM, capped by a container's memory limit when there is one."""
    memory_available_bytes: int | None = None
    """RAM available to new allocations now (equal to the total for profiles)."""
    memory_bandwidth_bytes_per_s: float | None = None
    """Peak DRAM bandwidth of the host, all sockets (channels × transfer rate × 8 bytes), when a profile gives it:
    what bounds a CPU optimizer step (``autoshard.strategies.deepspeed.cost``)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return _fields_dict(self)


@dataclass(frozen=True, kw_only=True, slots=True)
class NVMeDevice:
    """Local fast storage usable for offloading (NVMe or another non-rotational disk)."""

    path: str
    """Where to put offload files: a mount point, or the directory given with ``--nvme``."""
    device: str | None = None
    """The block device, e.g. ``"/dev/nvme0n1p1"``, when known."""
    total_bytes: int | None = None
    free_bytes: int | None = None
    read_bytes_per_s: float | None = None
    """Sequential read bandwidth, when measured (``--benchmark-disk``) or given by a profile."""
    write_bytes_per_s: float | None = None
    origin: str = "detected"
    """``"detected"``, ``"profile"`` or ``"override"`` (``--nvme``)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return _fields_dict(self)


@dataclass(frozen=True, kw_only=True, slots=True)
class NodeSpec:
    """One node: its GPUs, how they are linked, its CPU, RAM, local disks and network ports."""

    name: str
    gpu: GPUSpec | None
    """The GPU model every GPU of the node is planned as; ``None`` for a CPU-only node."""
    gpus: int
    """GPUs per node (0 for a CPU-only node)."""
    intra_node_link: LinkSpec | None = None
    intra_node_bandwidth_bytes_per_s: float | None = None
    """Bandwidth between two GPUs of the node in one direction, for the slowest pair (``None``: unknown, or
    a single GPU)."""
    cpu: CPUSpec = CPUSpec()
    nvme: tuple[NVMeDevice, ...] = ()
    network: NetworkSpec | None = None
    devices: tuple[GPUDevice, ...] = ()
    """The GPUs NVML found (detected hardware only), in CUDA order."""
    topology: GpuTopology | None = None
    """Pairwise links between :attr:`devices` (detected hardware with two or more GPUs)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return _fields_dict(self)


@dataclass(frozen=True, kw_only=True, slots=True)
class LaunchEnvironment:
    """Nodes and ranks as a launcher (torchrun, SLURM) describes the current job."""

    launcher: str
    """``"torchrun"`` or ``"slurm"``."""
    nodes: int
    processes_per_node: int | None = None
    world_size: int | None = None
    rank: int | None = None
    local_rank: int | None = None
    node_rank: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return _fields_dict(self)


@dataclass(frozen=True, kw_only=True, slots=True)
class HardwareSpec:
    """The hardware a plan is made for: ``nodes`` identical nodes, each running ``processes_per_node`` ranks.

    This is the cluster description (nodes, inter-node bandwidth and latency through ``node.network``) plus
    where it came from and what autoshard wants the user to know about it (:attr:`notes`).
    """

    source: str
    """``"detected"`` (this machine), ``"profile"`` (a shipped profile) or ``"file"`` (a user's YAML file)."""
    origin: str
    """Human-readable provenance: ``"this machine"``, a profile name, or a path."""
    device_type: str
    """``"cuda"``, or ``"cpu"`` when planning for this machine's CPU because no GPU was found."""
    backend: str
    """The ``torch.distributed`` backend: ``"nccl"`` for GPUs, ``"gloo"`` for CPU."""
    nodes: int
    processes_per_node: int
    """One per GPU; for CPU, the number of gloo processes."""
    node: NodeSpec
    launch: LaunchEnvironment | None = None
    notes: tuple[str, ...] = ()
    """Plain-language remarks: what was assumed, overridden or not found."""

    @property
    def gpu(self) -> GPUSpec | None:
        """The GPU model (``None`` for CPU)."""
        return self.node.gpu

    @property
    def world_size(self) -> int:
        """Total number of ranks."""
        return self.nodes * self.processes_per_node

    @property
    def device_memory_bytes(self) -> int | None:
        """Memory one rank can use: its GPU's memory, or for CPU the available RAM shared by the processes."""
        if self.node.gpu is not None:
            return self.node.gpu.memory_bytes
        available = self.node.cpu.memory_available_bytes
        return None if available is None else available // max(self.processes_per_node, 1)

    @property
    def inter_node_bandwidth_bytes_per_s(self) -> float | None:
        """One node's network bandwidth in one direction, when known."""
        return None if self.node.network is None else self.node.network.bandwidth_bytes_per_s

    @property
    def inter_node_latency_s(self) -> float | None:
        """Small-message latency between nodes, when known."""
        return None if self.node.network is None else self.node.network.latency_s

    def reworded(self, text: Callable[[str], str]) -> HardwareSpec:
        """This spec with ``text`` applied to its notes (the command line's flags they name, as a Python caller's
        arguments: :func:`autoshard.errors.in_arguments`)."""
        return dataclasses.replace(self, notes=tuple(text(n) for n in self.notes))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (documented in ``docs/hardware.md``)."""
        return {
            "schema_version": 1,
            **_fields_dict(self),
            "world_size": self.world_size,
            "device_memory_bytes": self.device_memory_bytes,
            "inter_node_bandwidth_bytes_per_s": self.inter_node_bandwidth_bytes_per_s,
            "inter_node_latency_s": self.inter_node_latency_s,
        }


def for_python(hardware: HardwareSpec) -> HardwareSpec:
    """``hardware`` with its notes naming :func:`autoshard.hardware.load_hardware`'s arguments, not the command
    line's flags: what :func:`load_hardware` and :func:`detect_hardware` return to a Python caller."""
    return hardware.reworded(rewording(HARDWARE_ARGUMENTS))
