"""The process group a run trains in: who this process is, on which device, and how ranks talk.

``fit()`` reads the launcher's environment once (at its edge) into a :class:`RunContext`; nothing below reads
``os.environ``. Under ``torchrun`` or the ``deepspeed`` launcher the variables are theirs; the workers
``fit()`` starts itself get the same ones from :mod:`autoshard.runtime.supervisor`.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from autoshard.errors import UsageError

DEFAULT_TIMEOUT = timedelta(minutes=30)
"""Collective timeout: long enough for a first NCCL communicator or a big checkpoint, short enough that a
rank lost mid-run is noticed (torch's own default for NCCL is 10 minutes, for gloo 30)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RunContext:
    """This process's place in the run."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    device: torch.device
    backend: str
    """``nccl`` or ``gloo``."""
    owns_group: bool
    """Whether ``fit()`` created the process group (and so destroys it when training has succeeded)."""

    @property
    def is_main(self) -> bool:
        """Rank 0: the one that plans, writes results and consolidated weights."""
        return self.rank == 0


@dataclass(frozen=True, kw_only=True, slots=True)
class LaunchInfo:
    """What the environment says about how this process was started."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    master_addr: str | None
    master_port: int | None

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> LaunchInfo | None:
        """The launcher's view (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ... as torchrun and deepspeed set them),
        or ``None`` when this process was not started by a launcher.

        Raises:
            UsageError: a variable is there but not a whole number.

        Example:
            >>> LaunchInfo.from_environ({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"}).local_world_size
            2
            >>> LaunchInfo.from_environ({}) is None
            True
        """
        if "RANK" not in environ or "WORLD_SIZE" not in environ:
            return None

        def number(name: str) -> int | None:
            text = environ.get(name)
            if text is None:
                return None
            try:
                return int(text)
            except ValueError:
                raise UsageError(f"environment variable {name}={text!r} is not a whole number.") from None

        rank, world = number("RANK") or 0, number("WORLD_SIZE") or 1
        local_rank = number("LOCAL_RANK")
        local_world = number("LOCAL_WORLD_SIZE") or number("LOCAL_SIZE") or world
        if not 0 <= rank < world:
            raise UsageError(f"RANK={rank} is outside WORLD_SIZE={world}.")
        return cls(rank=rank, world_size=world, local_rank=rank if local_rank is None else local_rank,
                   local_world_size=local_world,
                   master_addr=environ.get("MASTER_ADDR"), master_port=number("MASTER_PORT"))


def check_not_a_launcher_copy(environ: Mapping[str, str]) -> None:
    """Refuse to start workers from one of several copies a launcher started without ranks of torch's: ``srun -n 2
    python train.py`` runs the script twice, and each :func:`~autoshard.runtime.fit.fit` would start its own whole
    run of the plan (SLURM's ``SLURM_PROCID`` / ``SLURM_NTASKS`` are not ``RANK`` / ``WORLD_SIZE``).

    Raises:
        UsageError: this process is one of several tasks of a SLURM step (``srun``), not a torchrun rank.

    Example:
        >>> check_not_a_launcher_copy({"SLURM_JOB_ID": "8", "SLURM_STEP_ID": "0", "SLURM_NTASKS": "1"})
    """
    if "SLURM_STEP_ID" not in environ or "SLURM_PROCID" not in environ:  # sbatch's own script: one copy
        return
    tasks = environ.get("SLURM_NTASKS", "1").strip()
    if tasks.isdigit() and int(tasks) > 1:
        raise UsageError(f"this process is SLURM task {environ['SLURM_PROCID']} of {tasks} (srun started the "
                         f"script {tasks} times): each would start its own run of the plan.",
                         hint="Start one task per node that runs torchrun (srun --ntasks-per-node=1 torchrun ... "
                              "train.py, as slurm.sbatch from `autoshard export` does): fit() joins its ranks.")


_EXCEPTHOOK_BEFORE_GROUP: Any = None
"""``sys.excepthook`` as it was before :func:`join` created the default group; :func:`destroy_group` puts it back."""


def join(launch: LaunchInfo, *, device_type: str, init_method: str | None = None,
         timeout: timedelta = DEFAULT_TIMEOUT) -> RunContext:
    """Join (or reuse) the default process group and pick this rank's device.

    Args:
        launch: this process's rank and world.
        device_type: ``cuda`` or ``cpu`` (from the plan).
        init_method: a ``tcp://`` address; ``None`` uses ``env://`` (``MASTER_ADDR`` / ``MASTER_PORT``).
        timeout: collective timeout.

    Raises:
        UsageError: the plan wants CUDA and this process has no GPU, or a group already exists with another size.
    """
    if device_type == "cuda":
        if not torch.cuda.is_available():
            raise UsageError("the plan trains on CUDA GPUs, and this process sees none.",
                             hint="Run on the GPU machine, or plan for this one (plan='auto').")
        device = torch.device("cuda", launch.local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    owns = not dist.is_initialized()
    if owns:
        global _EXCEPTHOOK_BEFORE_GROUP
        _EXCEPTHOOK_BEFORE_GROUP = sys.excepthook  # init_process_group prefixes it with "[rank0]: " for good
        dist.init_process_group(backend, init_method=init_method or "env://", rank=launch.rank,
                                world_size=launch.world_size, timeout=timeout)
    elif dist.get_world_size() != launch.world_size:
        raise UsageError(f"a process group of {dist.get_world_size()} ranks exists, and the launcher says "
                         f"{launch.world_size}.")
    return RunContext(rank=launch.rank, world_size=launch.world_size, local_rank=launch.local_rank,
                      local_world_size=launch.local_world_size, device=device, backend=backend, owns_group=owns)


COMMUNICATION_ERROR_TYPES = frozenset({"DistBackendError", "DistNetworkError", "DistStoreError", "DistError"})
"""``torch.distributed``'s error classes (NCCL's, the store's, and their base)."""
_COMMUNICATION_TEXT = re.compile(r"\bgloo\b|\bnccl\b|connection (?:reset|closed|refused)|broken pipe|\bc10d\b|"
                                 r"ProcessGroup|socket timeout|\bpeer\b", re.IGNORECASE)
"""gloo / NCCL / the TCP store, as their errors read when a peer is lost or a collective fails: gloo raises a plain
``RuntimeError`` ("[gloo/transport/tcp/pair.cc:537] Read error ...: Connection reset by peer", torch 2.13)."""


def communication_failure(type_name: str, message: str) -> bool:
    """Whether an error (its class name and message) is a collective failing because another rank is gone or
    the transport broke — not the fault of the code that called the collective.

    Example:
        >>> communication_failure("RuntimeError",
        ...                       "[gloo/transport/tcp/pair.cc:537] Read error: Connection reset by peer")
        True
        >>> communication_failure("RuntimeError", "mat1 and mat2 shapes cannot be multiplied (4x8 and 3x3)")
        False
    """
    return type_name in COMMUNICATION_ERROR_TYPES or _COMMUNICATION_TEXT.search(message) is not None


def broadcast_json(value: Any, ctx: RunContext, *, src: int = 0) -> Any:
    """Rank ``src``'s JSON-serialisable ``value`` on every rank (as JSON text in a byte tensor, never a pickle).

    Other ranks pass anything (ignored).
    """
    device = ctx.device if ctx.backend == "nccl" else torch.device("cpu")
    if ctx.rank == src:
        data = torch.frombuffer(bytearray(json.dumps(value).encode()), dtype=torch.uint8).to(device)
        size = torch.tensor([data.numel()], dtype=torch.int64, device=device)
    else:
        size = torch.zeros(1, dtype=torch.int64, device=device)
    dist.broadcast(size, src)
    if ctx.rank != src:
        data = torch.empty(int(size.item()), dtype=torch.uint8, device=device)
    dist.broadcast(data, src)
    return json.loads(bytes(data.cpu().tolist()).decode())


def mean_over_ranks(values: torch.Tensor, ctx: RunContext) -> list[float]:
    """Each element of ``values`` averaged over all ranks (gloo has no ``AVG``: sum, then divide)."""
    if ctx.world_size == 1:
        return [float(v) for v in values.tolist()]
    total = values.detach().to(ctx.device if ctx.backend == "nccl" else "cpu", torch.float64).clone()
    dist.all_reduce(total)
    return [float(v) / ctx.world_size for v in total.tolist()]


def all_true(flag: bool, ctx: RunContext) -> bool:
    """Whether ``flag`` holds on every rank (one all-reduce)."""
    if ctx.world_size == 1:
        return flag
    t = torch.tensor([0 if flag else 1], dtype=torch.int64,
                     device=ctx.device if ctx.backend == "nccl" else "cpu")
    dist.all_reduce(t)
    return int(t.item()) == 0


def destroy_group() -> None:
    """Destroy the default process group — through ``deepspeed.comm`` when DeepSpeed joined it, which also
    drops DeepSpeed's clones of it (``groups._WORLD_GROUP``); left behind, the next run's engine broadcasts
    over a group of the destroyed one and fails ("Group ... is not registered", DeepSpeed 0.19.8)."""
    global _EXCEPTHOOK_BEFORE_GROUP
    ds_comm = sys.modules.get("deepspeed.comm.comm")
    if ds_comm is not None and getattr(ds_comm, "cdb", None) is not None:
        ds_comm.destroy_process_group()
    else:
        dist.destroy_process_group()
    if _EXCEPTHOOK_BEFORE_GROUP is not None:
        # torch's init_process_group wraps sys.excepthook to prefix every line with the rank and never unwraps it:
        # after each one-process fit() the user's own later tracebacks gained another "[rank0]: "
        sys.excepthook, _EXCEPTHOOK_BEFORE_GROUP = _EXCEPTHOOK_BEFORE_GROUP, None
