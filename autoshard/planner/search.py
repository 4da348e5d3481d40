"""Enumerate candidates (strategy × checkpointing × micro-batch), check they fit, rank them with the rules."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

from autoshard.errors import UsageError
from autoshard.hardware.specs import HardwareSpec
from autoshard.hardware.units import format_throughput
from autoshard.planner.caveats import (
    assumed_gpu,
    communication_bound,
    flat_adafactor,
    frozen_behind,
    global_batch,
    offload_scope,
    renormed_embeddings,
    slow_step,
    unknown_host,
    unused_under_zero,
    whole_build,
    written_in_forward,
)
from autoshard.planner.plan import Evaluation, Plan, PlanRequest
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
        from autoshard.planner.no_fit import no_fit  # the explanation evaluates more hardware: after search

        raise no_fit(evaluations, workload, hardware, request, strategies)
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
        + frozen_behind(best, workload) + whole_build(best, hardware, workload) + slow_step(best) \
        + flat_adafactor(best, workload) + unused_under_zero(best, workload) \
        + renormed_embeddings(best, hardware, workload) + written_in_forward(best, workload)
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
                hint="Pick a micro-batch that divides the per-device batch, or drop --batch-size or "
                     "--global-batch-size.",
            )


def _evaluate(strategy: Strategy, workload: Workload, hardware: HardwareSpec, request: PlanRequest) -> list[Evaluation]:
    reason = strategy.unsupported(hardware) or strategy.unsupported_precision(workload.precision, hardware) or \
        strategy.refuses(workload.optimizer) or (
        (workload.half_refused or workload.shard_refused) if strategy.traits.family != "ddp" else None)
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
    problem = does_not_fit(memory, hardware, request)
    cost = strategy.cost(workload, hardware, candidate)
    cost = _with_accumulation(cost, accumulation, micro, hardware.world_size, workload)
    return Evaluation(candidate=candidate, traits=strategy.traits, fits=problem is None, memory=memory, cost=cost,
                      gradient_accumulation=accumulation, max_micro_batch_size=max_micro_batch_size, score=0.0,
                      reasons=() if problem is None else (problem,))


def usable_gpu_bytes(hardware: HardwareSpec, request: PlanRequest) -> int:
    """Per-device bytes a plan may use: device memory less the safety margin."""
    capacity = hardware.device_memory_bytes or 0
    return int(capacity * (1 - request.safety_margin))


def does_not_fit(memory: MemoryEstimate, hardware: HardwareSpec, request: PlanRequest) -> str | None:
    usable = usable_gpu_bytes(hardware, request)
    device = "GPU" if hardware.gpu is not None else "process"
    if memory.gpu.total > usable:
        return (f"needs {gib(memory.gpu.total)} per {device}, {gib(usable)} usable "
                f"({gib(hardware.device_memory_bytes or 0)} less a {request.safety_margin:.0%} margin)")
    ram = hardware.node.cpu.memory_available_bytes
    if memory.cpu_bytes_per_node and ram is not None and memory.cpu_bytes_per_node > ram * HOST_MEMORY_FRACTION:
        return (f"needs {gib(memory.cpu_bytes_per_node)} of CPU RAM per node for offloaded states, "
                f"{gib(ram * HOST_MEMORY_FRACTION)} usable")
    if memory.nvme_bytes_per_node and all(d.free_bytes is not None for d in hardware.node.nvme):
        free = sum(d.free_bytes or 0 for d in hardware.node.nvme)  # a disk of unknown room is not checked (noted)
        if memory.nvme_bytes_per_node > free:
            return f"needs {gib(memory.nvme_bytes_per_node)} of NVMe per node, {gib(free)} free"
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
        return does_not_fit(strategy.memory(workload, hardware, candidate), hardware, request) is None

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
        + (f", {gib(best.memory.gpu.total)} per device" if best.memory else "")
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
        favoured = [r for r in rules if r.factor > 1 and any(x.startswith(f"[{r.name}]") for x in runner_up.reasons)]
        if faster < -0.005 and favoured:  # a rule favoured it and the headline still leads: say by how much (a
            factor = math.prod(r.factor for r in favoured)  # 0.8M-parameter model got fsdp with no word of why)
            why = (f", favoured by {', '.join(r.name for r in favoured)} (score ×{factor:.2f}; its reasons say why) "
                   f"and still predicted {100 * -faster:.0f} % slower")
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


def gib(x: float) -> str:
    """GiB to one decimal; a size under 0.1 GiB in its own unit (a 16 MiB GPU read "0.0 GiB usable").

    Example:
        >>> gib(12.6 * 2**30), gib(14.4 * 2**20)
        ('12.6 GiB', '14.40 MiB')
    """
    from autoshard.hardware.units import format_bytes

    return f"{x / 2**30:.1f} GiB" if abs(x) >= 0.1 * 2**30 or x == 0 else format_bytes(x)
