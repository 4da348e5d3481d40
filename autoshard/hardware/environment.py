"""What the process environment says about devices and ranks: ``CUDA_VISIBLE_DEVICES``, torchrun, SLURM.

These functions take the environment as a mapping; only the public entry points
(:func:`autoshard.hardware.detect_hardware`, the CLI) read ``os.environ`` and pass it in.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from autoshard.errors import HardwareError
from autoshard.hardware.specs import GPUDevice, LaunchEnvironment


def _int_var(environ: Mapping[str, str], name: str) -> int | None:
    raw = environ.get(name)
    if raw is None or raw.strip() == "":
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        raise HardwareError(f"environment variable {name}={raw!r}: expected a whole number.") from None
    if value < 0:
        raise HardwareError(f"environment variable {name}={raw!r}: expected a number >= 0.")
    return value


_SLURM_TASKS_RE = re.compile(r"^(\d+)(?:\(x(\d+)\))?$")
_SLURM_HINT = ("Ask SLURM for the same number of tasks on every node (--ntasks-per-node), or plan for a profile "
               "instead: --hardware NAME with --gpus N and --nodes N.")


def slurm_task_counts(layout: str) -> list[int]:
    """Tasks on each node from SLURM's compressed ``SLURM_TASKS_PER_NODE``; ``[]`` for a form it does not know.

    Example:
        >>> slurm_task_counts("2(x3),1"), slurm_task_counts("4"), slurm_task_counts("odd")
        ([2, 2, 2, 1], [4], [])
    """
    counts: list[int] = []
    for part in layout.split(","):
        match = _SLURM_TASKS_RE.match(part.strip())
        if match is None:
            return []
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    return counts


def slurm_memory(environ: Mapping[str, str]) -> tuple[int, str] | None:
    """The RAM a SLURM job was given on this node in bytes, and the variables that say so; ``None`` outside a job or
    where it asked for none.

    ``SLURM_MEM_PER_NODE`` (``--mem``, in MiB; 0 is the whole node), else ``SLURM_MEM_PER_CPU`` (``--mem-per-cpu``)
    times ``SLURM_CPUS_ON_NODE``. Where SLURM's cgroup plugin constrains RAM the job's cgroup says the same
    (:func:`autoshard.hardware.host.cgroup_memory`); where it does not, SLURM's accounting still kills a job over it.

    Example:
        >>> slurm_memory({"SLURM_JOB_ID": "7", "SLURM_MEM_PER_CPU": "4000", "SLURM_CPUS_ON_NODE": "8"})
        (33554432000, 'SLURM_MEM_PER_CPU=4000 x SLURM_CPUS_ON_NODE=8')
    """
    if "SLURM_JOB_ID" not in environ:
        return None
    per_node = _int_var(environ, "SLURM_MEM_PER_NODE")
    if per_node:
        return per_node * 2**20, f"SLURM_MEM_PER_NODE={per_node}"
    per_cpu, cpus = _int_var(environ, "SLURM_MEM_PER_CPU"), _int_var(environ, "SLURM_CPUS_ON_NODE")
    if per_node is None and per_cpu and cpus:
        return per_cpu * cpus * 2**20, f"SLURM_MEM_PER_CPU={per_cpu} x SLURM_CPUS_ON_NODE={cpus}"
    return None


def launch_environment(environ: Mapping[str, str]) -> LaunchEnvironment | None:
    """Nodes and ranks from torchrun's or SLURM's variables, or ``None`` outside a launcher.

    torchrun sets ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``RANK``, ``LOCAL_RANK`` and ``GROUP_RANK`` (the node's
    rank); SLURM sets ``SLURM_JOB_NUM_NODES``, ``SLURM_NTASKS_PER_NODE`` (or ``SLURM_TASKS_PER_NODE``),
    ``SLURM_NTASKS``, ``SLURM_PROCID``, ``SLURM_LOCALID`` and ``SLURM_NODEID``. torchrun wins when both are set
    (torchrun inside an ``sbatch`` script), because its ranks are the ones training uses.

    Args:
        environ: the environment (``os.environ`` at the edge).

    Raises:
        HardwareError: a launcher variable is not a number, or the numbers contradict each other.

    Example:
        >>> launch_environment({"WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "8", "RANK": "9"}).nodes
        2
    """
    if "LOCAL_WORLD_SIZE" in environ or "TORCHELASTIC_RUN_ID" in environ:
        world = _int_var(environ, "WORLD_SIZE")
        local = _int_var(environ, "LOCAL_WORLD_SIZE")
        nodes = 1
        if world and local:
            if world % local:
                raise HardwareError(
                    f"WORLD_SIZE={world} is not a multiple of LOCAL_WORLD_SIZE={local}; "
                    "autoshard plans for nodes that all run the same number of processes."
                )
            nodes = world // local
        return LaunchEnvironment(
            launcher="torchrun",
            nodes=nodes,
            processes_per_node=local or None,
            world_size=world or None,
            rank=_int_var(environ, "RANK"),
            local_rank=_int_var(environ, "LOCAL_RANK"),
            node_rank=_int_var(environ, "GROUP_RANK"),
        )
    if "SLURM_JOB_ID" in environ:
        nodes = _int_var(environ, "SLURM_JOB_NUM_NODES") or _int_var(environ, "SLURM_NNODES") or 1
        per_node = _int_var(environ, "SLURM_NTASKS_PER_NODE")
        layout = environ.get("SLURM_TASKS_PER_NODE", "").strip()
        if per_node is None and layout:
            counts = slurm_task_counts(layout)
            if len(set(counts)) > 1:
                raise HardwareError(f"SLURM_TASKS_PER_NODE={layout!r}: this job runs {'+'.join(map(str, counts))} "
                                    "tasks on its nodes; autoshard plans for nodes that all run the same number "
                                    "of processes.", hint=_SLURM_HINT)
            per_node = counts[0] if counts else None
        if per_node == 0:
            raise HardwareError("SLURM says this job runs 0 tasks per node (SLURM_NTASKS_PER_NODE=0).",
                                hint=_SLURM_HINT)
        tasks = _int_var(environ, "SLURM_NTASKS")
        if tasks and per_node and tasks != nodes * per_node:
            raise HardwareError(f"SLURM_NTASKS={tasks} is not {nodes} node(s) x {per_node} task(s) per node: the "
                                "job's nodes do not all run the same number of tasks, which autoshard plans for.",
                                hint=_SLURM_HINT)
        return LaunchEnvironment(
            launcher="slurm",
            nodes=nodes,
            processes_per_node=per_node,
            world_size=tasks,
            rank=_int_var(environ, "SLURM_PROCID"),
            local_rank=_int_var(environ, "SLURM_LOCALID"),
            node_rank=_int_var(environ, "SLURM_NODEID"),
        )
    return None


def cuda_order(
    devices: Sequence[GPUDevice], cuda_visible_devices: str | None, device_order: str | None
) -> tuple[list[int], list[str]]:
    """Which NVML GPUs CUDA will show this process, in CUDA's order.

    CUDA numbers GPUs by PCI bus when ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` (and, in practice, when all GPUs are
    the same model); ``CUDA_VISIBLE_DEVICES`` then picks and reorders them by index or by UUID (``GPU-…``,
    any unique prefix). Like CUDA, parsing stops at the first entry that names no GPU, and everything after it
    is ignored; an empty value hides every GPU.

    Args:
        devices: the GPUs NVML found.
        cuda_visible_devices: the value of ``CUDA_VISIBLE_DEVICES`` (``None`` when unset).
        device_order: the value of ``CUDA_DEVICE_ORDER``.

    Returns:
        The positions in ``devices`` of the visible GPUs in CUDA order, and notes for the user.
    """
    notes: list[str] = []
    by_bus = sorted(range(len(devices)), key=lambda k: devices[k].pci_bus_id)
    mixed = len({d.name for d in devices}) > 1
    if mixed and (device_order or "").strip().upper() != "PCI_BUS_ID":
        notes.append(
            "These GPUs are not all the same model and CUDA_DEVICE_ORDER is not PCI_BUS_ID, so CUDA may number "
            "them fastest-first rather than in the bus order shown; set CUDA_DEVICE_ORDER=PCI_BUS_ID to be sure."
        )
    if cuda_visible_devices is None:
        return by_bus, notes
    chosen: list[int] = []
    for entry in (e.strip() for e in cuda_visible_devices.split(",")):
        if entry == "" and not chosen and cuda_visible_devices.strip() == "":
            break
        if entry.upper().startswith("MIG-"):
            notes.append(
                f"CUDA_VISIBLE_DEVICES entry {entry!r} is a MIG instance, which autoshard does not plan for; "
                "it stops reading CUDA_VISIBLE_DEVICES there."
            )
            break
        position = _match_entry(entry, devices, by_bus)
        if position is None or position in chosen:
            why = "repeats a GPU" if position is not None else "names no GPU on this machine"
            notes.append(
                f"CUDA_VISIBLE_DEVICES entry {entry!r} {why}; CUDA ignores it and every entry after it."
            )
            break
        chosen.append(position)
    if not chosen:
        notes.append(f"CUDA_VISIBLE_DEVICES={cuda_visible_devices!r} hides all {len(devices)} GPU(s).")
    return chosen, notes


def _match_entry(entry: str, devices: Sequence[GPUDevice], by_bus: list[int]) -> int | None:
    if entry.isdigit():
        k = int(entry)
        return by_bus[k] if k < len(by_bus) else None
    prefix = entry.lower()
    if not prefix.startswith("gpu-"):
        prefix = "gpu-" + prefix
    if len(prefix) <= len("gpu-"):
        return None
    matches = [k for k, d in enumerate(devices) if d.uuid.lower().startswith(prefix)]
    return matches[0] if len(matches) == 1 else None
