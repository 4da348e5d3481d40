"""The machine the trials run on: its hardware, checked to be this one, and the workers' environment."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from autoshard.errors import UsageError
from autoshard.planner.machine import hardware_for

if TYPE_CHECKING:
    from autoshard.hardware.specs import HardwareSpec


def trial_hardware(hardware: HardwareSpec | str | os.PathLike[str] | None, processes: int | None) -> HardwareSpec:
    """The hardware the study plans for, which must be this machine: one node, and no more GPUs than it has.

    Raises:
        UsageError: the hardware describes several nodes, or more CUDA devices than this machine has.
    """
    hw = hardware_for(hardware, processes=processes)
    if hw.nodes > 1:
        launch = hw.launch.launcher if hw.launch is not None and hw.source == "detected" else None
        whose = f" ({'SLURM' if launch == 'slurm' else launch}'s job has {hw.nodes})" if launch else ""
        raise UsageError(f"trials run on this machine, and the hardware describes {hw.nodes} nodes{whose}.",
                         hint="Tune one node's plan: pass --nodes 1; run so on each node with one shared --storage "
                              "URL, they tune one study.")
    if hw.device_type == "cuda":
        import torch

        have = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if have < hw.processes_per_node:
            raise UsageError(f"trials run on this machine, which has {have} CUDA device(s); the hardware describes "
                             f"{hw.processes_per_node} GPU(s).",
                             hint="Drop --hardware to tune for this machine as detected (or pass --gpus N).")
    return hw


def worker_threads(environ: Mapping[str, str], hw: Any) -> int:
    """Threads one CPU trial worker computes with: ``OMP_NUM_THREADS`` of its environment, else the cores shared
    by the workers."""
    value = environ.get("OMP_NUM_THREADS", "")
    if value.isdigit() and int(value) > 0:
        return int(value)
    return max(1, (os.cpu_count() or 1) // max(1, hw.processes_per_node))


def worker_environ(environ: Mapping[str, str], hw: Any) -> dict[str, str]:
    """The trials' workers' environment: ``environ``, with one OpenMP thread per process when several CPU
    processes share the machine."""
    env = dict(environ)
    if hw.device_type == "cpu" and "OMP_NUM_THREADS" not in env and hw.processes_per_node > 1:
        env["OMP_NUM_THREADS"] = "1"  # as torchrun does for several processes per node: no oversubscription
    return env
