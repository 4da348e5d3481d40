"""Enumerate candidates (strategy × checkpointing × micro-batch), check they fit, rank them with the rules."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

from autoshard.errors import NoFeasiblePlan, UsageError
from autoshard.hardware.specs import HardwareSpec
from autoshard.hardware.units import format_throughput
from autoshard.planner.caveats import (
    assumed_gpu,
    communication_bound,
    frozen_behind,
    global_batch,
    offload_scope,
    unknown_host,
)
from autoshard.planner.plan import Evaluation, Plan, PlanRequest, candidate_dict
from autoshard.planner.rules import RULES, Context, Rule, apply_rules
from autoshard.strategies.base import Candidate, CostEstimate, MemoryEstimate, Strategy
from autoshard.strategies.workload import Workload

MAX_MICRO_BATCH = 1024
"""The largest micro-batch the search considers."""

HOST_MEMORY_FRACTION = 0.90
"""Share of the node's available RAM offloaded states may use (the rest stays for the data loader, Python and
the OS)."""


def plan(
    workload: Workload,
    hardware: HardwareSpec,
    request: PlanRequest,
    strategies: Sequence[Strategy],
    *,
    rules: tuple[Rule, ...] = RULES,
    fitting_elsewhere: tuple[Evaluation, ...] = (),
) -> Plan:
    """Evaluate every candidate and pick the best that fits.

    ``fitting_elsewhere``: candidates that fit in a plan this one is weighed against (another checkpointing
    policy's, :mod:`autoshard.planner.selective`), which the rules count as fitting too: an offloading candidate
    is the last resort while any configuration fits without offloading, whichever policy it checkpoints with.

    Raises:
        UsageError: contradictory request (e.g. global batch not divisible by the devices).
        NoFeasiblePlan: nothing fits; the message gives the smallest requirement and what would make it fit.
        ValueError: the request weighs a checkpointing choice the workload was not traced with.
    """
    check_request(request, hardware.world_size)
    untraced = set(request.checkpointing_choices(workload)) - set(workload.checkpointing_choices)
    if untraced:
        raise ValueError(f"the request weighs checkpointing {sorted(untraced)}, which the workload did not trace "
                         f"(it traced {list(workload.checkpointing_choices)}).")
    evaluations: list[Evaluation] = []
    for strategy in strategies:
        evaluations.extend(_evaluate(strategy, workload, hardware, request))
    fitting = tuple(e for e in evaluations if e.fits)
    if not fitting:
        raise _no_fit(evaluations, workload, hardware, request, strategies)
    ctx = Context(workload=workload, hardware=hardware, request=request, fitting=fitting + fitting_elsewhere)
    ranked = []
    for e in evaluations:
        if not e.fits or e.cost is None:
            ranked.append(e)
            continue
        factor, sentences = apply_rules(ctx, e, rules)
        ranked.append(dataclasses.replace(e, score=e.cost.samples_per_s * factor, reasons=e.reasons + tuple(sentences)))
    ranked.sort(key=lambda e: (not e.fits, -e.score))
    best = ranked[0]
    explanation = _explain(best, ranked, [r for r in rules if r.factor < 1 and r.applies(ctx, best)],
                           workload.checkpoint_mode.label, rules, placeholder_speed=hardware.gpu is None) \
        + _search_limit(best, hardware, request) \
        + global_batch(best, hardware) + communication_bound(best, hardware) + unknown_host(best, hardware) \
        + assumed_gpu(best, hardware) + offload_scope(best, hardware, ranked, workload, request.goal) \
        + frozen_behind(best, workload)
    return Plan(recommended=best, candidates=tuple(ranked), explanation=explanation, workload=workload,
                hardware=hardware, request=request)


def _search_limit(best: Evaluation, hardware: HardwareSpec, request: PlanRequest) -> tuple[str, ...]:
    """A line when the micro-batch chosen is the search's limit (:data:`MAX_MICRO_BATCH`), not what memory allows,
    and nothing in the request set the batch: the global batch then follows from that limit."""
    micro = best.candidate.micro_batch_size
    if micro != MAX_MICRO_BATCH or request.micro_batch_size is not None or request.global_batch_size is not None:
        return ()
    world = hardware.world_size
    return (f"Micro-batch {micro} is the search's limit, not memory's ({MAX_MICRO_BATCH} samples per device at "
            f"most are tried): a global batch of {micro * world:,} over {world} device(s). The batch size changes "
            "what training learns; choose it with --global-batch-size (or --batch-size).",)


def check_request(request: PlanRequest, world: int) -> None:
    """The batch settings agree with the ``world`` devices (checked before anything is traced).

    Raises:
        UsageError: the global batch is not divisible by the devices, or the per-device batch by the micro-batch.
    """
    if request.global_batch_size is not None and request.global_batch_size % world:
        raise UsageError(
            f"global batch size {request.global_batch_size} is not divisible by the {world} devices.",
            hint=f"Use a multiple of {world}, e.g. {world * max(1, request.global_batch_size // world)}.",
        )
    if request.global_batch_size is not None and request.micro_batch_size is not None:
        if (request.global_batch_size // world) % request.micro_batch_size:
            raise UsageError(
                f"global batch {request.global_batch_size} over {world} device{'s' if world != 1 else ''} is "
                f"{request.global_batch_size // world} per device, not a multiple of micro-batch "
                f"{request.micro_batch_size}.",
                hint="Pick a micro-batch that divides the per-device batch, or drop one of the two flags.",
            )


def _evaluate(strategy: Strategy, workload: Workload, hardware: HardwareSpec, request: PlanRequest) -> list[Evaluation]:
    reason = strategy.unsupported(hardware) or strategy.unsupported_precision(workload.precision, hardware) or \
        strategy.refuses(workload.optimizer) or (
        workload.half_refused if strategy.traits.family != "ddp" else None)
    checkpointing = request.checkpointing_choices(workload)
    if reason is not None:
        return [
            Evaluation(candidate=_candidate(strategy, hardware, request, request.micro_batch_size or 1, False),
                       traits=strategy.traits, fits=False, memory=None, cost=None, gradient_accumulation=1,
                       max_micro_batch_size=0, score=0.0, reasons=(reason,))
        ]
    out = []
    for ckpt in checkpointing:
        largest = _max_micro_batch(strategy, workload, hardware, request, ckpt)
        per_device = None if request.global_batch_size is None else request.global_batch_size // hardware.world_size
        if request.micro_batch_size is None and per_device is not None and largest < per_device:
            # The per-device batch takes several micro-batches: search with the gradients they accumulate (FSDP's
            # sharded, ZeRO-1's 16-bit gradients kept through every forward), as evaluate() prices the choice.
            largest = _max_micro_batch(strategy, workload, hardware, request, ckpt, accumulating=True)
        micro = _choose_micro_batch(request, hardware.world_size, largest)
        candidate = _candidate(strategy, hardware, request, micro, ckpt)
        out.append(evaluate(strategy, workload, hardware, request, candidate, max_micro_batch_size=largest))
    return out


def _candidate(strategy: Strategy, hardware: HardwareSpec, request: PlanRequest, micro_batch_size: int,
               ckpt: bool) -> Candidate:
    """A candidate with the request's settings that ``strategy`` has as knobs."""
    knobs = {k.name for k in strategy.knobs(hardware)} if request.settings else set()
    return Candidate(strategy=strategy.name, micro_batch_size=micro_batch_size, activation_checkpointing=ckpt,
                     settings={k: v for k, v in request.settings.items() if k in knobs})


def evaluate(strategy: Strategy, workload: Workload, hardware: HardwareSpec, request: PlanRequest,
             candidate: Candidate, *, max_micro_batch_size: int = 0) -> Evaluation:
    """One candidate's predicted memory and step time, whether it fits, and why not (unranked: score 0).

    Args:
        strategy: the candidate's strategy.
        workload: the traced model.
        hardware: where it runs.
        request: batch settings and safety margin (the gradient accumulation follows from them).
        candidate: the configuration, with any knob settings.
        max_micro_batch_size: recorded as is (the caller's search result, if it made one).

    Raises:
        UsageError: the candidate carries a setting its strategy does not have, or a value out of range.
    """
    micro = candidate.micro_batch_size
    accumulation = _accumulation(request, hardware.world_size, micro)
    memory = strategy.memory(workload, hardware,
                             dataclasses.replace(candidate, gradient_accumulation=accumulation)).with_peak_said()
    problem = _does_not_fit(memory, hardware, request)
    cost = strategy.cost(workload, hardware, candidate)
    cost = _with_accumulation(cost, accumulation, micro, hardware.world_size, workload)
    return Evaluation(candidate=candidate, traits=strategy.traits, fits=problem is None, memory=memory, cost=cost,
                      gradient_accumulation=accumulation, max_micro_batch_size=max_micro_batch_size, score=0.0,
                      reasons=() if problem is None else (problem,))


def usable_gpu_bytes(hardware: HardwareSpec, request: PlanRequest) -> int:
    """Per-device bytes a plan may use: device memory less the safety margin."""
    capacity = hardware.device_memory_bytes or 0
    return int(capacity * (1 - request.safety_margin))


def _does_not_fit(memory: MemoryEstimate, hardware: HardwareSpec, request: PlanRequest) -> str | None:
    usable = usable_gpu_bytes(hardware, request)
    device = "GPU" if hardware.gpu is not None else "process"
    if memory.gpu.total > usable:
        return (f"needs {_gib(memory.gpu.total)} per {device}, {_gib(usable)} usable "
                f"({_gib(hardware.device_memory_bytes or 0)} less a {request.safety_margin:.0%} margin)")
    ram = hardware.node.cpu.memory_available_bytes
    if memory.cpu_bytes_per_node and ram is not None and memory.cpu_bytes_per_node > ram * HOST_MEMORY_FRACTION:
        return (f"needs {_gib(memory.cpu_bytes_per_node)} of CPU RAM per node for offloaded states, "
                f"{_gib(ram * HOST_MEMORY_FRACTION)} usable")
    if memory.nvme_bytes_per_node and all(d.free_bytes is not None for d in hardware.node.nvme):
        free = sum(d.free_bytes or 0 for d in hardware.node.nvme)  # a disk of unknown room is not checked (noted)
        if memory.nvme_bytes_per_node > free:
            return f"needs {_gib(memory.nvme_bytes_per_node)} of NVMe per node, {_gib(free)} free"
    return None


def _max_micro_batch(strategy: Strategy, workload: Workload, hardware: HardwareSpec, request: PlanRequest,
                     ckpt: bool, *, accumulating: bool = False) -> int:
    """Largest micro-batch that fits this candidate (see :func:`largest_micro_batch`); ``accumulating``: with the
    gradient accumulation the global batch implies for each micro-batch tried (at least two micro-batches, so
    that memory stays monotone in the micro-batch)."""

    def fits(mb: int) -> bool:
        candidate = _candidate(strategy, hardware, request, mb, ckpt)
        if accumulating:
            accumulation = max(2, _accumulation(request, hardware.world_size, mb))
            candidate = dataclasses.replace(candidate, gradient_accumulation=accumulation)
        return _does_not_fit(strategy.memory(workload, hardware, candidate), hardware, request) is None

    return largest_micro_batch(fits, limit=min(MAX_MICRO_BATCH, request.max_micro_batch_size or MAX_MICRO_BATCH))


def largest_micro_batch(fits: Callable[[int], bool], limit: int = MAX_MICRO_BATCH) -> int:
    """The largest micro-batch up to ``limit`` that ``fits(mb)`` accepts, 0 if none: doubling, then bisection
    (memory never decreases with the micro-batch, so ``fits`` is monotone).

    Example:
        >>> largest_micro_batch(lambda mb: mb <= 37)
        37
        >>> largest_micro_batch(lambda mb: False)
        0
    """
    if not fits(1):
        return 0
    low, high = 1, 2
    while high <= limit and fits(high):
        low, high = high, high * 2
    high = min(high, limit + 1)
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if fits(mid) else (low, mid)
    return low


def _choose_micro_batch(request: PlanRequest, world: int, largest: int) -> int:
    if request.micro_batch_size is not None:
        return request.micro_batch_size
    if largest == 0:
        return 1
    if request.global_batch_size is None:
        return largest
    per_device = request.global_batch_size // world
    # The largest micro-batch that fits and divides the per-device batch.
    return max(d for d in range(1, min(largest, per_device) + 1) if per_device % d == 0)


def _accumulation(request: PlanRequest, world: int, micro: int) -> int:
    if request.global_batch_size is None:
        return 1
    return max(1, request.global_batch_size // (world * micro))


def _with_accumulation(cost: CostEstimate, accumulation: int, micro: int, world: int,
                       workload: Workload) -> CostEstimate:
    """Scale a one-micro-batch step to ``accumulation`` micro-batches: compute repeats, and so does the
    communication the strategy's cost model marks as repeating (``CostEstimate.repeated_*``); the rest and the
    optimizer step happen once per optimizer step (DDP ``no_sync``, DeepSpeed's accumulation boundary, the
    all-gathers after the step)."""
    if accumulation == 1:
        return cost
    extra = accumulation - 1
    step = cost.step_time_s + extra * (cost.compute_s + cost.repeated_exposed_s)
    samples = micro * world * accumulation / step
    tokens = None if workload.tokens_per_sample is None else samples * workload.tokens_per_sample
    return dataclasses.replace(
        cost, step_time_s=step, samples_per_s=samples, tokens_per_s=tokens, compute_s=accumulation * cost.compute_s,
        communication_s=cost.communication_s + extra * cost.repeated_communication_s,
        exposed_communication_s=cost.exposed_communication_s + extra * cost.repeated_exposed_s,
        repeated_communication_s=accumulation * cost.repeated_communication_s,
        repeated_exposed_s=accumulation * cost.repeated_exposed_s)


def _explain(best: Evaluation, ranked: list[Evaluation], discounts: list[Rule],
             checkpointing: str = "activation checkpointing", rules: Sequence[Rule] = (), *,
             placeholder_speed: bool = False) -> tuple[str, ...]:
    """Why ``best``: its numbers, the rules that favour it and the runner-up (``checkpointing``: what the
    workload's checkpointed traces recompute, in words; ``placeholder_speed``: the speeds are the CPU placeholder's,
    :data:`autoshard.strategies.costs.CPU_PLACEHOLDER_FLOPS_PER_S`, good for ranking only).

    A rule that discounted ``best`` argues for another kind of strategy: its sentence stays in the candidate's
    reasons (the table, the JSON), and the explanation says only that ``best`` leads in spite of it.
    """
    c = best.candidate
    lines = [
        f"{best.strategy} with micro-batch {c.micro_batch_size}"
        + (f", {checkpointing}" if c.activation_checkpointing else "")
        + (f", {best.gradient_accumulation} accumulation steps" if best.gradient_accumulation > 1 else "")
        + (f": {format_throughput(best.cost.samples_per_s)} samples/s "
           + ("at a placeholder CPU speed (for ranking only; fit() measures the real one)" if placeholder_speed
              else "predicted") if best.cost else "")
        + (f", {_gib(best.memory.gpu.total)} per device" if best.memory else "")
        + "."
    ]
    against = tuple(f"[{rule.name}]" for rule in discounts)
    lines.extend(r for r in best.reasons if not r.startswith(against))
    if discounts:
        factor = 1.0
        for rule in discounts:
            factor *= rule.factor
        names = ", ".join(rule.name for rule in discounts)
        lines.append(f"It leads even after the {names} discount (score ×{factor:.2f}): its predicted throughput "
                     "outweighs what the rule weighs against it.")
    runner_up = next((e for e in ranked[1:] if e.fits and e.strategy != best.strategy), None)
    if runner_up is not None and runner_up.cost is not None and best.cost is not None:
        rate = format_throughput(runner_up.cost.samples_per_s)
        faster = runner_up.cost.samples_per_s / best.cost.samples_per_s - 1
        held = [r for r in rules if r.factor < 1 and any(x.startswith(f"[{r.name}]") for x in runner_up.reasons)]
        why = ""
        if faster > 0.005 and held:  # the headline is not the fastest predicted: say what ranked it lower
            factor = math.prod(r.factor for r in held)
            why = (f", predicted {100 * faster:.0f} % faster, ranked below it by "
                   f"{', '.join(r.name for r in held)} (score ×{factor:.2f}; its reasons say why)")
        if runner_up.score == 0 and held:  # a rule ruled it out (a factor of 0): no score to weigh
            lines.append(f"Runner-up: {runner_up.strategy} at {rate} samples/s, ruled out by "
                         f"{', '.join(r.name for r in held)} (its reasons say why).")
        else:
            lines.append(f"Runner-up: {runner_up.strategy} at {rate} samples/s{why} "
                         f"(score {runner_up.score:.4g} against {best.score:.4g}).")
    return tuple(lines)


def check_optimizer(optimizer: str, strategies: Sequence[Strategy]) -> None:
    """At least one of ``strategies`` can step ``optimizer`` (checked before anything is traced).

    Raises:
        UsageError: none can, with each one's reason: the strategies asked for contradict the optimizer (exit
            code 2 on the command line, not "nothing fits"'s 3).
    """
    refusals = [r for r in (s.refuses(optimizer) for s in strategies) if r is not None]
    if strategies and len(refusals) == len(strategies):
        raise UsageError(f"none of the strategies asked for can step {optimizer}: "
                         f"{'; '.join(sorted({r.rstrip('.') for r in refusals}))}.",
                         hint="Choose other strategies (--strategies; strategy= in fit()) or another optimizer "
                              "(--optimizer).")


def _no_fit(evaluations: list[Evaluation], workload: Workload, hardware: HardwareSpec,
            request: PlanRequest, strategies: Sequence[Strategy] = ()) -> NoFeasiblePlan:
    measured = [e for e in evaluations if e.memory is not None]
    if not measured:
        reasons = "; ".join(sorted({r.rstrip(".") for e in evaluations for r in e.reasons}))
        missing = "install" in reasons.lower()  # a package (DeepSpeed, libaio), not the hardware itself
        return NoFeasiblePlan(f"no strategy can run on this hardware: {reasons}.",
                              hint="Install what is missing, or plan for other hardware with --hardware." if missing
                              else "Choose strategies this hardware can run (--strategies; strategy= in fit()), or "
                                   "plan for other hardware with --hardware.",
                              candidates=tuple(candidate_dict(e, workload, hardware) for e in evaluations))
    smallest = min(measured, key=lambda e: e.memory.gpu.total)  # type: ignore[union-attr]
    need = smallest.memory.gpu.total  # type: ignore[union-attr]
    usable = usable_gpu_bytes(hardware, request)
    what = (f"the smallest is {smallest.strategy}"
            + (" with activation checkpointing" if smallest.candidate.activation_checkpointing else "")
            + f" at micro-batch {smallest.candidate.micro_batch_size}: {_gib(need)} per device against "
            f"{_gib(usable)} usable ({_gib(hardware.device_memory_bytes or 0)} less a {request.safety_margin:.0%} "
            "margin)")
    if need <= usable and smallest.reasons:
        what += f", but it {smallest.reasons[0].rstrip('.')}"  # it fails on something else: host RAM
    activations = smallest.memory.gpu.activations  # type: ignore[union-attr]
    one = "a GPU" if hardware.gpu is not None else "a CPU process's share of memory"

    def shorter(before: str, after: str = "") -> str:  # only a model that takes a sequence length has one to cut
        return f"{before}a shorter --seq-len{after}" if workload.seq_len is not None else ""
    if need <= usable and smallest.reasons and "of CPU RAM" in smallest.reasons[0]:  # the host is what is short
        hint = ("The offloaded states are divided among nodes, not among a node's GPUs: try more nodes (--nodes), "
                "a host with more RAM (--cpu-memory), NVMe offload (--nvme PATH), or larger GPUs (--hardware).")
    elif activations > usable and smallest.candidate.micro_batch_size > 1:  # the batch asked for is too large
        hint = (f"Its activations alone ({_gib(activations)} at micro-batch {smallest.candidate.micro_batch_size}) "
                f"exceed {one}, and more devices do not divide them: try a smaller micro-batch (--batch-size; "
                "batch_size= in fit()), with --global-batch-size (global_batch_size=) to keep the batch by "
                f"gradient accumulation{shorter(', or ')}.")
    elif activations > usable:  # a sample's activations are not divided among GPUs
        hint = (f"Its activations alone ({_gib(activations)}) exceed {one}, and more devices do not divide them "
                f"(autoshard plans no sequence or context parallelism): try {shorter('', ', or ')}larger GPUs "
                "(--hardware).")
    elif any(e.traits.zero_stage > 0 for e in measured):
        hint = (f"Try more GPUs ({_more_gpus(evaluations, strategies, workload, hardware, request)}), larger GPUs "
                f"(--hardware){_last(_offload_hint(evaluations, hardware), shorter(''))}.")
    else:  # whole replicas on every GPU: more of them hold no less each
        hint = ("The strategies weighed all keep a whole copy of the model's states on each GPU, so more GPUs do "
                "not help: try a sharding strategy (fsdp, deepspeed_stage_3 with --strategies; strategy= in fit()), "
                f"larger GPUs (--hardware){_last(_offload_hint(evaluations, hardware), shorter(''))}.")
    return NoFeasiblePlan(f"nothing fits {workload.model} on {hardware.world_size} × {_device(hardware)}: {what}.",
                          hint=hint, candidates=tuple(candidate_dict(e, workload, hardware) for e in sorted(
                              evaluations, key=lambda e: e.memory.gpu.total if e.memory else float("inf"))))


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
        if _does_not_fit(strategy.memory(workload, larger, candidate), larger, request) is None:
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


def _gib(x: float) -> str:
    """GiB to one decimal; a size under 0.1 GiB in its own unit (a 16 MiB GPU read "0.0 GiB usable").

    Example:
        >>> _gib(12.6 * 2**30), _gib(14.4 * 2**20)
        ('12.6 GiB', '14.40 MiB')
    """
    from autoshard.hardware.units import format_bytes

    return f"{x / 2**30:.1f} GiB" if abs(x) >= 0.1 * 2**30 or x == 0 else format_bytes(x)
