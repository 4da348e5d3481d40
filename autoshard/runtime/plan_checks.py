"""What ``fit()`` checks before any process starts: a given plan against the run, the model and ``fit()``'s own
arguments, and the hardware planned for against this machine's CUDA devices.

A plan fixes the strategy, micro-batch, sequence length, precision and hardware it was priced for, so an argument
that says otherwise is refused rather than ignored (as ``processes=`` and a ``DataLoader``'s batch size are);
``activation_checkpointing=``, ``optimizer_impl=`` and ``reduce_dtype=`` replace the plan's value instead
(:func:`autoshard.runtime.planning.resolve`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autoshard.errors import UsageError
from autoshard.planner.plan_file import ExportedPlan, HardwareFingerprint, ModelFingerprint

if TYPE_CHECKING:
    from autoshard.hardware.specs import HardwareSpec
    from autoshard.runtime.planning import PlanOptions


@dataclass(frozen=True, kw_only=True, slots=True)
class RunShape:
    """The run a plan must fit: how many ranks, on what."""

    world_size: int
    device_type: str
    gpu: str | None
    """This machine's GPU model name, when known."""
    layout: tuple[int, int] | None = None
    """``(nodes, processes per node)`` as a launcher started the run (torchrun's ``WORLD_SIZE`` over
    ``LOCAL_WORLD_SIZE``), when one did."""


def check(exported: ExportedPlan, fingerprint: ModelFingerprint, run: RunShape, *, source: str,
          force: bool) -> list[str]:
    """Compare a plan with the model and run; returns the differences ``force`` let through.

    Raises:
        UsageError: a difference, unless ``force``; a world-size or device mismatch is refused even then
            (the batch sizes and shardings in the plan cannot work).
    """
    hard, soft = [], []
    if exported.hardware.world_size != run.world_size:
        hard.append(f"it is for {_count(exported.hardware.world_size, 'rank')} and this run has {run.world_size}")
    if exported.hardware.device_type != run.device_type:
        hard.append(f"it is for {exported.hardware.device_type} and this run is on {run.device_type}")
    m = exported.model
    if m.layout_hash != fingerprint.layout_hash:
        same = m.parameter_count == fingerprint.parameter_count
        why = (" (as many parameters, laid out or trained otherwise: the layout counts the parameters that train, so "
               "freezing or unfreezing some, as fine-tuning does, changes it)" if same else "")
        soft.append(f"it is for model {m.name} ({m.parameter_count:,} parameters, layout {m.layout_hash}) and this "
                    f"model is {fingerprint.name} ({fingerprint.parameter_count:,} parameters, layout "
                    f"{fingerprint.layout_hash}){why}")
    planned = (exported.hardware.nodes, exported.hardware.gpus_per_node)
    if run.layout is not None and run.world_size == exported.hardware.world_size and run.layout != planned \
            and exported.strategy_traits.hybrid:  # its mesh is (nodes, per node): a sharding group would cross nodes
        soft.append(f"it is for {planned[0]} node(s) of {planned[1]} rank(s) and the launcher started "
                    f"{run.layout[0]} of {run.layout[1]} (WORLD_SIZE / LOCAL_WORLD_SIZE): {exported.strategy} shards "
                    "within each node of its plan, so its sharding groups would span this run's nodes")
    if run.gpu is not None and exported.hardware.gpu is not None and run.gpu != exported.hardware.gpu:
        soft.append(f"it is for {exported.hardware.gpu} GPUs and this machine has {run.gpu}")
    if hard:
        raise UsageError(f"{source} does not fit this run: {'; '.join(hard + soft)}.",
                         hint="Plan again for this run (plan='auto').")
    if soft and not force:
        raise UsageError(f"{source} was made for something else: {'; '.join(soft)}.",
                         hint="Plan again (plan='auto'), or pass force=True to train with it anyway.")
    return soft


def check_arguments(exported: ExportedPlan, options: PlanOptions, where: str) -> None:
    """``fit()``'s planning arguments given with a plan say what the plan says: ``strategy``, ``batch_size``,
    ``seq_len``, ``precision`` and ``hardware`` choose a plan under ``plan="auto"``, and a given plan would train
    its own values in their place.

    Raises:
        UsageError: one says otherwise, naming the argument and the plan's value.
    """
    from autoshard.profiler.options import parse_precision

    given: list[tuple[str, str]] = []  # (the argument as written, the plan's value)
    if options.strategy is not None and options.strategy != exported.strategy:
        given.append((f"strategy={options.strategy!r}", f"strategy {exported.strategy}"))
    if options.batch_size is not None and options.batch_size != exported.micro_batch_size:
        given.append((f"batch_size={options.batch_size}", f"micro-batch {exported.micro_batch_size}"))
    if options.seq_len is not None and options.seq_len != exported.seq_len:
        given.append((f"seq_len={options.seq_len}",
                      "no seq_len" if exported.seq_len is None else f"seq_len {exported.seq_len}"))
    if options.precision is not None and parse_precision(options.precision).value != exported.precision:
        given.append((f"precision={options.precision!r}", f"precision {exported.precision}"))
    if options.hardware is not None:
        written = _other_hardware(options.hardware, options.processes, exported.hardware)
        if written is not None:
            given.append((written, describe(exported.hardware)))
    if given:
        arguments = ", ".join(g[0] for g in given)
        names = ", ".join(g[0].split("=", 1)[0] + "=" for g in given)
        raise UsageError(f"the plan ({where}) was made for {', '.join(g[1] for g in given)}, and fit() was given "
                         f"{arguments}: a given plan trains as it says.",
                         hint=f"Drop {names} to train the plan as it is, or plan again with "
                              f"{'them' if len(given) > 1 else 'it'} (plan='auto').")


def describe(hardware: HardwareFingerprint) -> str:
    """The hardware of a plan in a few words.

    Example:
        >>> describe(HardwareFingerprint(gpu="h100-sxm5-80gb", gpu_memory_bytes=80 * 2**30, gpus_per_node=8,
        ...                              nodes=2, device_type="cuda", backend="nccl", nvme_path=None))
        '8 h100-sxm5-80gb GPUs of 80.0 GiB per node × 2 nodes'
    """
    what = (f"{_count(hardware.gpus_per_node, 'CPU process', 'CPU processes')}" if hardware.gpu is None else
            f"{_count(hardware.gpus_per_node, hardware.gpu + ' GPU')}"
            + ("" if hardware.gpu_memory_bytes is None else f" of {hardware.gpu_memory_bytes / 2**30:.1f} GiB"))
    return what if hardware.nodes == 1 else f"{what} per node × {hardware.nodes} nodes"


def _other_hardware(hardware: Any, processes: int | None, planned: HardwareFingerprint) -> str | None:
    """``hardware=`` as written, with what it describes, when it is other hardware than the plan's."""
    from autoshard.planner.machine import hardware_for

    spec = hardware_for(hardware, processes=processes)
    memory = spec.device_memory_bytes if spec.gpu is not None else None
    described = HardwareFingerprint(gpu=None if spec.gpu is None else spec.gpu.name, gpu_memory_bytes=memory,
                                    gpus_per_node=spec.processes_per_node, nodes=spec.nodes,
                                    device_type=spec.device_type, backend=spec.backend, nvme_path=None)
    # Memory within 5 %: NVML's total and a profile's may round differently; an override (gpu_memory=) differs more.
    if (described.gpu, described.gpus_per_node, described.nodes, described.device_type) == (
            planned.gpu, planned.gpus_per_node, planned.nodes, planned.device_type) and (
            memory is None or planned.gpu_memory_bytes is None
            or abs(memory - planned.gpu_memory_bytes) <= 0.05 * planned.gpu_memory_bytes):
        return None
    written = repr(os.fspath(hardware)) if isinstance(hardware, (str, os.PathLike)) else "a HardwareSpec"
    return f"hardware={written} ({describe(described)})"


def check_global_batch(global_batch: int | None, exported: ExportedPlan, ranks: int, where: str) -> None:
    """A ``global_batch_size=`` given with a plan is the one the plan trains.

    Raises:
        UsageError: it is not (the plan priced another step: its accumulation and memory are the planner's).
    """
    planned = exported.micro_batch_size * exported.gradient_accumulation * ranks
    if global_batch is not None and global_batch != planned:
        raise UsageError(
            f"global_batch_size={global_batch}, and the plan ({where}) trains {planned} samples per optimizer step "
            f"(micro-batch {exported.micro_batch_size} × {exported.gradient_accumulation} accumulated × "
            f"{_count(ranks, 'rank')}).",
            hint="Drop global_batch_size= to train as the plan says, or plan again with it (plan='auto').")


def check_cuda_devices(hw: HardwareSpec, hardware: Any, *, launched: bool) -> None:
    """The CUDA GPUs ``hw`` describes are this machine's, before planning for them and starting a worker for
    each: at least one CUDA device, and (when ``fit()`` starts the workers itself, one per GPU) as many as a node
    of ``hw`` has. Under a launcher, each rank may see only its own GPU (srun), so only none is refused.

    Raises:
        UsageError: too few, naming ``hardware=`` when it was given.
    """
    if hw.device_type != "cuda":
        return
    have = _visible_cuda_devices()
    need = 1 if launched else hw.processes_per_node
    if have >= need:
        return
    given = ("" if hardware is None else
             f"hardware={os.fspath(hardware)!r} " if isinstance(hardware, (str, os.PathLike)) else "hardware= ")
    raise UsageError(f"{given or 'the hardware planned for '}describes {_count(hw.processes_per_node, 'CUDA GPU')} "
                     f"per node, and this process sees {have}: fit() trains on this machine.",
                     hint="Drop hardware= to plan for this machine as detected (processes= sets how many ranks), "
                          "or run on the GPU machine." if hardware is not None else
                          "Pass processes= no more than the GPUs this process sees, or run on the GPU machine.")


def check_plan_devices(exported: ExportedPlan, where: str) -> None:
    """A given CUDA plan that ``fit()`` starts itself (no launcher: one process per GPU, all on this machine) has
    as many CUDA devices here as it has ranks; checked before any process starts, where each rank would otherwise
    fail alone on a device it cannot see. Called after :func:`check`, which refuses another world size, and the
    plan's device type on a machine without CUDA.

    Raises:
        UsageError: too few.
    """
    hw = exported.hardware
    have = _visible_cuda_devices() if hw.device_type == "cuda" else 0
    if have == 0 or have >= hw.world_size:  # no CUDA at all: check() has refused the plan's device type
        return
    shape = f" ({hw.nodes} nodes × {hw.gpus_per_node} GPUs)" if hw.nodes > 1 else ""
    raise UsageError(f"{where} is for {_count(hw.world_size, 'CUDA rank')}{shape}, and this process sees "
                     f"{_count(have, 'CUDA GPU')}: fit() starts one process per GPU on this machine.",
                     hint="Start the script under torchrun or srun on the plan's machines (export_plan writes the "
                          "commands), or pass plan='auto' to plan for this machine.")


def _visible_cuda_devices() -> int:
    """The CUDA devices this process sees (0 without CUDA)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _count(n: int, singular: str, plural: str | None = None) -> str:
    """``1 rank``, ``2 ranks``.

    Example:
        >>> _count(1, "rank"), _count(8, "CUDA GPU"), _count(2, "CPU process", "CPU processes")
        ('1 rank', '8 CUDA GPUs', '2 CPU processes')
    """
    return f"{n} {singular if n == 1 else plural or singular + 's'}"


def single_samples(data: Any, micro_batch_size: int) -> Any:
    """``data`` as a dataset of single samples (:func:`~autoshard.runtime.data.as_samples`) when it is a list whose
    first element is one sample for a plan of ``micro_batch_size``: every tensor in it at most 1-D (a token
    sequence, a feature vector, a label) and its first dimension not the plan's micro-batch. ``None`` otherwise.

    ``plan="auto"`` tells samples from batches by running the first element through the model as a batch; a given
    plan is not traced, so the shape decides. A list of tokenized samples (``input_ids`` of 32 tokens each) was
    read as batches of 32 and refused against the plan's micro-batch, and ``force=True`` then failed in the model.

    Example:
        >>> import torch
        >>> samples = [{"input_ids": torch.zeros(32, dtype=torch.long)}] * 8
        >>> len(single_samples(samples, 4)), single_samples([torch.zeros(4, 32)] * 2, 4)
        (8, None)
    """
    import torch

    from autoshard.models.source import batch_rows, batch_values
    from autoshard.runtime.data import as_samples

    if type(data) not in (list, tuple) or not data:
        return None
    values = batch_values(data[0]) or []
    tensors = [v for v in values if isinstance(v, torch.Tensor)]
    if not tensors or any(t.dim() > 1 for t in tensors) or batch_rows(data[0]) == micro_batch_size:
        return None
    return as_samples(data)
