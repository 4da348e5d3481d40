"""Why nothing fits, and what would: the explanation of :class:`~autoshard.errors.NoFeasiblePlan` when no
candidate of the search fits (the smallest candidate, what it is short of, and the hardware or settings that
would make one fit, found by evaluating the sharding candidates on more GPUs)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from autoshard.errors import NoFeasiblePlan
from autoshard.hardware.specs import HardwareSpec
from autoshard.planner.plan import Evaluation, PlanRequest, candidate_dict
from autoshard.planner.search import does_not_fit, gib, usable_gpu_bytes
from autoshard.strategies.base import Strategy
from autoshard.strategies.trace_sessions import HALF_FAILS
from autoshard.strategies.workload import COMPLEX_FAILS, SCALAR_FAILS, STRIDED_FAILS, Workload


def no_fit(evaluations: list[Evaluation], workload: Workload, hardware: HardwareSpec,
            request: PlanRequest, strategies: Sequence[Strategy] = ()) -> NoFeasiblePlan:
    measured = [e for e in evaluations if e.memory is not None]
    if not measured:
        reasons = "; ".join(sorted({r.rstrip(".") for e in evaluations for r in e.reasons}))
        missing = "install" in reasons.lower()  # a package (DeepSpeed, libaio), not the hardware itself
        said = [r for e in evaluations for r in e.reasons]
        precision = bool(said) and all(HALF_FAILS in r for r in said)  # the model's code, not the machine
        scalar = bool(said) and all(HALF_FAILS in r or SCALAR_FAILS in r for r in said) and not precision
        complex_ = bool(said) and all(HALF_FAILS in r or COMPLEX_FAILS in r for r in said) and not precision
        strided = bool(said) and all(HALF_FAILS in r or STRIDED_FAILS in r for r in said) and not precision
        if strided:
            hint = ("Train with ddp (--strategies ddp; strategy= in fit()), or keep the parameters contiguous as said "
                    "above.")
        elif complex_:
            hint = ("Train with ddp (--strategies ddp; strategy= in fit()), which steps complex parameters as torch "
                    "does.")
        elif scalar:
            hint = ("Train with ddp (--strategies ddp; strategy= in fit()), or make each 0-d parameter a 1-element "
                    "tensor as said above.")
        elif precision:
            hint = ("Train with a strategy that keeps fp32 parameters under autocast (ddp), or at --precision 32-true "
                    "(precision= in fit()); or make the forward cast the fp32 tensors it makes itself to its "
                    "parameters' dtype (e.g. emb.to(self.proj.weight.dtype)).")
        elif missing:
            hint = "Install what is missing, or plan for other hardware with --hardware."
        else:
            hint = ("Choose strategies this hardware can run (--strategies; strategy= in fit()), or plan for other "
                    "hardware with --hardware.")
        what = ("weighed can train this model" if precision or scalar or complex_ or strided
                else "can run on this hardware")
        return NoFeasiblePlan(f"no strategy {what}: {reasons}.", hint=hint,
                              candidates=tuple(candidate_dict(e, workload, hardware) for e in evaluations))
    smallest = min(measured, key=lambda e: e.memory.gpu.total)  # type: ignore[union-attr]
    need = smallest.memory.gpu.total  # type: ignore[union-attr]
    usable = usable_gpu_bytes(hardware, request)
    what = (f"the smallest is {smallest.strategy}"
            + (" with activation checkpointing" if smallest.candidate.activation_checkpointing else "")
            + f" at micro-batch {smallest.candidate.micro_batch_size}: {gib(need)} per device against "
            f"{gib(usable)} usable ({gib(hardware.device_memory_bytes or 0)} less a {request.safety_margin:.0%} "
            "margin)")
    if need <= usable and smallest.reasons:
        what += f", but it {smallest.reasons[0].rstrip('.')}"  # it fails on something else: host RAM
    activations = smallest.memory.gpu.activations  # type: ignore[union-attr]
    one = "a GPU" if hardware.gpu is not None else "a CPU process's share of memory"

    larger = _larger_gpus(hardware, need, usable)

    def shorter(before: str, after: str = "") -> str:  # only a model that takes a sequence length has one to cut
        return f"{before}a shorter --seq-len{after}" if workload.seq_len is not None else ""
    if need <= usable and smallest.reasons and "of CPU RAM" in smallest.reasons[0]:  # the host is what is short
        nvme = [] if hardware.node.nvme else ["NVMe offload (--nvme PATH)"]  # else it was weighed: still short
        hint = ("The offloaded states are divided among nodes, not among a node's GPUs: try more nodes (--nodes)"
                f"{_last(['a host with more RAM (--cpu-memory)', *nvme], larger)}.")
    elif activations > usable and smallest.candidate.micro_batch_size > 1:  # the batch asked for is too large
        hint = (f"Its activations alone ({gib(activations)} at micro-batch {smallest.candidate.micro_batch_size}) "
                f"exceed {one}, and more devices do not divide them: try a smaller micro-batch (--batch-size; "
                "batch_size= in fit()), with --global-batch-size (global_batch_size=) to keep the batch by "
                f"gradient accumulation{shorter(', or ')}.")
    elif activations > usable:  # a sample's activations are not divided among GPUs
        ways = [w for w in (_shorter_that_fits(workload.seq_len, need, activations, usable) or shorter(""), larger)
                if w]
        hint = (f"Its activations alone ({gib(activations)}) exceed {one}, and more devices do not divide them "
                "(autoshard plans no sequence or context parallelism): "
                + (f"try {' or '.join(ways)}." if ways else "no shipped GPU is larger."))
    elif any(e.traits.zero_stage > 0 for e in measured):
        hint = (f"Try more GPUs ({_more_gpus(evaluations, strategies, workload, hardware, request)})"
                f"{', ' + larger if larger else ''}{_last(_offload_hint(evaluations, hardware), shorter(''))}.")
    else:  # whole replicas on every GPU: more of them hold no less each
        hint = ("The strategies weighed all keep a whole copy of the model's states on each GPU, so more GPUs do "
                "not help: try a sharding strategy (fsdp, deepspeed_stage_3 with --strategies; strategy= in fit())"
                f"{', ' + larger if larger else ''}{_last(_offload_hint(evaluations, hardware), shorter(''))}.")
    return NoFeasiblePlan(f"nothing fits {workload.model} on {hardware.world_size} × {_device(hardware)}: {what}.",
                          hint=hint, candidates=tuple(candidate_dict(e, workload, hardware) for e in sorted(
                              evaluations, key=lambda e: e.memory.gpu.total if e.memory else float("inf"))))


def _shorter_that_fits(seq_len: int | None, need: int, activations: int, usable: int) -> str | None:
    """A sequence length that fits, from the smallest candidate's figures: its activations (with the batch and the
    peak's temporaries: everything that grows with the sequence) scaled down in proportion to the sequence, the
    rest (states, buffers) as they are. Activations grow at least in proportion (attention's scores faster), so
    the length this finds fits by these figures: a floor, rounded down to a multiple of 256 (128k-token users
    were told only "a shorter --seq-len").

    Example:
        >>> _shorter_that_fits(131072, need=132 * 2**30, activations=130 * 2**30, usable=72 * 2**30)
        'a --seq-len of at most about 70,400 (activations grow at least in proportion to the sequence, so at that \
length they fit by these figures; recommend at it to check)'
    """
    room = usable - (need - activations)
    if seq_len is None or room <= 0 or activations <= 0:
        return None
    tokens = seq_len * room // activations
    tokens = tokens // 256 * 256 if tokens >= 256 else tokens
    if tokens < 1 or tokens >= seq_len:
        return None
    return (f"a --seq-len of at most about {tokens:,} (activations grow at least in proportion to the sequence, so "
            "at that length they fit by these figures; recommend at it to check)")


def _more_gpus(evaluations: list[Evaluation], strategies: Sequence[Strategy], workload: Workload,
               hardware: HardwareSpec, request: PlanRequest) -> str:
    """How many GPUs of this kind the sharding candidates evaluated need, in words: the fewest on which one fits,
    found by evaluating them at growing counts (the node filled, then twice the nodes, up to
    :data:`MAX_WORLD_SEARCHED`), or twice the count when they cannot be re-evaluated (no GPU, strategies unknown)."""
    world = _smallest_world(evaluations, strategies, workload, hardware, request)
    if world is None:
        return f"e.g. --gpus/--nodes for {hardware.world_size * 2}"
    if world.world_size > MAX_WORLD_SEARCHED:
        return f"even {MAX_WORLD_SEARCHED:,} are too few at this micro-batch"
    nodes = f": {world.nodes} nodes of {world.processes_per_node}" if world.nodes > 1 else ""
    one_node = dataclasses.replace(world, nodes=1, processes_per_node=world.world_size)
    if world.nodes > 1 and world.world_size <= ONE_NODE_GPUS and _fits_on(one_node, evaluations, strategies,
                                                                           workload, request):
        nodes = (f": one node of {world.world_size} (--gpus {world.world_size}), or {world.nodes} nodes of "
                 f"{world.processes_per_node}")
    return f"the fewest on which it fits are {world.world_size}, e.g. --gpus/--nodes for {world.world_size}{nodes}"


ONE_NODE_GPUS = 8
"""GPUs one node commonly holds (an HGX / DGX board of 8): a count up to it is offered on one node too, where the
hardware named fewer per node."""


def _fits_on(larger: HardwareSpec, evaluations: list[Evaluation], strategies: Sequence[Strategy],
             workload: Workload, request: PlanRequest) -> bool:
    """Whether a sharding candidate of ``evaluations`` (its micro-batch and accumulation as evaluated) fits
    ``larger``."""
    by_name = {s.name: s for s in strategies}
    for e in evaluations:
        strategy = by_name.get(e.strategy)
        if e.memory is None or e.traits.zero_stage == 0 or strategy is None or strategy.unsupported(larger):
            continue
        candidate = dataclasses.replace(e.candidate, gradient_accumulation=e.gradient_accumulation)
        if does_not_fit(strategy.memory(workload, larger, candidate), larger, request) is None:
            return True
    return False


MAX_WORLD_SEARCHED = 4096
"""The most GPUs the nothing-fits hint evaluates the sharding candidates on."""


def _smallest_world(evaluations: list[Evaluation], strategies: Sequence[Strategy], workload: Workload,
                    hardware: HardwareSpec, request: PlanRequest) -> HardwareSpec | None:
    """The first of growing GPU counts on which a sharding candidate of ``evaluations`` fits (its micro-batch and
    accumulation as evaluated), past :data:`MAX_WORLD_SEARCHED` when none does; ``None`` without a GPU or
    without the candidates' strategies."""
    by_name = {s.name: s for s in strategies}
    sharded = [e for e in evaluations if e.memory is not None and e.traits.zero_stage > 0 and e.strategy in by_name]
    if hardware.gpu is None or not sharded:
        return None
    per_node = max(hardware.node.gpus, hardware.processes_per_node)
    nodes, ranks = hardware.nodes, hardware.processes_per_node
    while nodes * ranks <= MAX_WORLD_SEARCHED:
        if ranks < per_node:  # fill the node first: NVLink, and what --gpus asks for
            ranks = min(2 * ranks, per_node)
        else:
            nodes *= 2
        larger = dataclasses.replace(hardware, nodes=nodes, processes_per_node=ranks)
        if _fits_on(larger, sharded, strategies, workload, request):
            return larger
    return dataclasses.replace(hardware, nodes=nodes, processes_per_node=ranks)


def _offload_hint(evaluations: list[Evaluation], hardware: HardwareSpec) -> list[str]:
    """What offloading would take, from what was evaluated: an install only when an offloading strategy could
    not run, NVMe only when no fast disk is known, CPU offload only with a GPU to offload from."""
    offloading = [e for e in evaluations if e.traits.offloads]
    missing = sorted({e.reasons[0].rstrip(".") for e in offloading
                      if e.memory is None and e.reasons and e.traits.offload != "nvme"})
    parts = []
    if hardware.gpu is None:  # without a GPU the states are in host RAM already: CPU offload moves nothing
        pass
    elif missing:
        parts.append(f"offload ({'; '.join(missing)})")
    elif not offloading:
        parts.append("an offloading strategy (deepspeed_stage_3_offload, fsdp_cpu_offload)")
    if not hardware.node.nvme:
        parts.append("NVMe offload (--nvme PATH)")
    return parts


def _larger_gpus(hardware: HardwareSpec, need: int, usable: int) -> str:
    """``larger GPUs (NAME or NAME, with --hardware)``: the shipped GPU profiles whose memory holds ``need`` per GPU
    (with this GPU's share of its memory usable), smallest first, else every one over 5 % larger than this GPU,
    largest first;
    ``""`` where none is larger
    (a B200 is the largest shipped: suggesting larger GPUs there sent a 128k-token user nowhere)."""
    from autoshard.hardware.profiles import list_profiles, load_profile
    from autoshard.hardware.specs import GPUSpec

    own = hardware.device_memory_bytes
    if hardware.gpu is None or not own:  # CPU processes, or a GPU of unknown memory: any GPU profile
        return "larger GPUs (--hardware)"
    larger = []
    for entry in list_profiles():
        spec = load_profile(entry.name).spec if entry.kind == "gpu" else None
        if isinstance(spec, GPUSpec) and spec.memory_bytes > own * 1.05:  # not an A100's 80 GiB for an H100's 79.6
            larger.append((spec.memory_bytes, entry.name))
    if not larger:
        return ""
    holding = [name for memory, name in sorted(larger) if memory * usable / own >= need]
    # None holds it alone: the largest first, which need the fewest of them (a 49 GB card for a 46 GB one helped
    # nobody short of 266 GiB per device).
    names = holding or [name for _, name in sorted(larger, reverse=True)]
    shown = " or ".join(names) if len(names) <= 3 else f"{', '.join(names[:3])}, ..."
    return f"{'GPUs large enough' if holding else 'larger GPUs'} ({shown}, with --hardware)"


def _last(items: list[str], last: str) -> str:
    """``", A, B, or C"`` from ``items`` and ``last`` (left out when empty); ``""`` for nothing.

    Example:
        >>> _last(["offload (x, y)", "NVMe offload"], "a shorter --seq-len"), _last([], "x"), _last(["a"], "")
        (', offload (x, y), NVMe offload, or a shorter --seq-len', ', or x', ', or a')
    """
    items = [*items, last] if last else list(items)
    if not items:
        return ""
    return ", " + ", ".join(items[:-1]) + (", or " if len(items) > 1 else "or ") + items[-1]


def _device(hardware: HardwareSpec) -> str:
    return hardware.gpu.display_name if hardware.gpu is not None else "CPU process"
