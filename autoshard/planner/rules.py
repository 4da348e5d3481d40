"""The field's guidance as declarative rules.

Each :class:`Rule` is a named object with a condition, an effect on the ranking (a factor on the candidate's
score, which starts as its predicted throughput) and the sentence it adds to the explanation. The planner
applies every rule to every candidate that fits; the list is data, so a rule is added or removed in one place.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from autoshard.hardware.specs import HardwareSpec
from autoshard.hardware.units import format_throughput
from autoshard.planner.plan import Evaluation, PlanRequest
from autoshard.strategies import costs
from autoshard.strategies.workload import Workload

SMALL_MODEL_PARAMETERS = 500_000_000
"""Below this, sharding rarely pays when DDP fits (DeepSpeed's ZeRO tutorial and PyTorch's FSDP tutorial both
present sharding as the answer for models that do not fit data parallelism; ~500M is where ZeRO-DP starts to
matter on 16–32 GB GPUs: 500M × 16 B of mixed-precision Adam state = 8 GB)."""

SLOW_LINK_BYTES_PER_S = 50e9
"""Bus bandwidth, per direction, below which per-step parameter all-gathers are expensive (PCIe gen4 x16 is ~32 GB/s,
a node with one 100 GbE port 12.5 GB/s; NVLink 3 is 300 GB/s, a DGX A100's 8 HDR ports 200 GB/s)."""


# What the rules reason about, asked of each candidate's traits (never its name).
def _gathers_parameters(e: Evaluation) -> bool:
    """Parameters gathered for each use, in forward and backward (ZeRO-3, FSDP full shard)."""
    return e.traits.shards_parameters


def _communicates_less(e: Evaluation) -> bool:
    """Keeps parameters whole on the GPU through the step and moves nothing to the host: only gradients (and,
    sharded, the updated parameters once) cross the network."""
    return not e.traits.shards_parameters and not e.traits.offloads


def _communication_per_sample(e: Evaluation) -> tuple[float, float]:
    """Seconds of collectives per sample of an optimizer step, all of them and those exposed: what the candidate's
    step moves and what of it the step waits for, per unit of the work it does (accumulation repeats ZeRO-2's
    reductions, a larger micro-batch spreads them)."""
    if e.cost is None:
        return math.inf, math.inf
    samples = e.candidate.micro_batch_size * e.gradient_accumulation
    return e.cost.communication_s / samples, e.cost.exposed_communication_s / samples


def _less_communication_fits(ctx: Context, e: Evaluation) -> bool:
    """The fastest fitting candidate that keeps parameters whole — the one the discount would pick in ``e``'s
    place — communicates less per sample than ``e`` by the cost model and waits no longer for it: the claim the
    ``pretrain-least-communication`` rule makes, checked rather than assumed. (ZeRO-2 under accumulation without
    ``overlap_comm`` waits for all of its reductions; a slower ZeRO-1 communicating less would not stand in for
    it.)"""
    whole = [f for f in ctx.fitting if _communicates_less(f) and f.cost is not None]
    if not whole:
        return False
    instead = max(whole, key=lambda f: f.cost.samples_per_s)  # type: ignore[union-attr]
    (total, exposed), (other_total, other_exposed) = _communication_per_sample(e), _communication_per_sample(instead)
    return other_total < total and other_exposed <= exposed


def _replicas(e: Evaluation) -> bool:
    """Plain data parallelism: nothing sharded."""
    return e.traits.zero_stage == 0


def _offloads(e: Evaluation) -> bool:
    return e.traits.offloads


def _offloads_to_host(e: Evaluation) -> bool:
    return e.traits.offload == "cpu"


def _offloads_to_nvme(e: Evaluation) -> bool:
    return e.traits.offload == "nvme"


@dataclass(frozen=True, kw_only=True, slots=True)
class Context:
    """What rules may look at besides the candidate."""

    workload: Workload
    hardware: HardwareSpec
    request: PlanRequest
    fitting: tuple[Evaluation, ...]
    """Every candidate that fits."""

    def fits_any(self, test: Callable[[Evaluation], bool]) -> bool:
        """Whether some fitting candidate satisfies ``test``."""
        return any(test(e) for e in self.fitting)

    def slowest_link_bytes_per_s(self) -> float | None:
        """The slowest link gradients or parameters cross: the intra-node link and, over several nodes, the node's
        whole network, which a ring over every rank runs at (the cost model's own bound)."""
        return costs.bus_bandwidth_bytes_per_s(self.hardware, "world")

    def gather_link_bytes_per_s(self, e: Evaluation) -> float | None:
        """The link ``e`` gathers parameters over: within each node for hybrid sharding (it shards inside a node
        and replicates across nodes), else a ring over every rank (:meth:`slowest_link_bytes_per_s`)."""
        return costs.bus_bandwidth_bytes_per_s(self.hardware, "intra" if e.traits.hybrid else "world")


@dataclass(frozen=True, kw_only=True, slots=True)
class Rule:
    """A piece of guidance: when it applies, what it does to the score, and what it says."""

    name: str
    applies: Callable[[Context, Evaluation], bool]
    factor: float
    """Multiplies the candidate's score when the rule applies (>1 favours it, <1 disfavours it)."""
    says: Callable[[Context, Evaluation], str]


def _count(n: int) -> str:
    """``124.4M``-style count, in the units the tables use (K, M, B).

    Example:
        >>> _count(81_226), _count(200_000), _count(124_439_808), _count(999)
        ('81.2K', '200.0K', '124.4M', '999')
    """
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f}{unit}"
    return str(n)


def _gb(x: float) -> str:
    return f"{x / 1e9:.0f} GB/s"


def _gib(x: float) -> str:
    return f"{x / 2**30:.1f} GiB"


_HALF = {"bf16-mixed": "bf16", "16-mixed": "fp16"}
"""Mixed precisions whose FSDP2 / DeepSpeed run casts the parameters, not each op (their traces: ``half``)."""


def _small(ctx: Context) -> bool:
    """A small model, for the rules that favour plain DDP: under :data:`SMALL_MODEL_PARAMETERS` parameters, or on
    one device under that many trained ones (a LoRA 7B trains 8M: what sharding would hold of it on one device is
    its optimizer's states, and ZeRO-1 led DDP there by 0.1 %)."""
    w = ctx.workload
    return w.parameter_count < SMALL_MODEL_PARAMETERS or (
        ctx.hardware.world_size == 1 and w.trainable_parameter_count < SMALL_MODEL_PARAMETERS)


def _small_model(ctx: Context, e: Evaluation) -> str:
    """Why plain DDP is favoured for a small model: on several devices the gathers sharding adds, on one the
    engine's host-side work around a step that shards nothing."""
    w = ctx.workload
    count = f"{_count(w.parameter_count)} parameters"
    if w.trainable_parameter_count < w.parameter_count:
        count += f", {_count(w.trainable_parameter_count)} of them trained,"
    if ctx.hardware.world_size > 1:
        return (f"The model has {count} and its states fit on every device: plain DDP avoids the "
                "gathers sharding adds (sharding pays from roughly 500M parameters).")
    return (f"The model has {count} and its states fit on the device: on one device FSDP and ZeRO "
            "shard nothing and add their engine's host-side work per parameter to every step, which at this size "
            "the step-time model underestimates (GPT-2 on one H200 measured ZeRO-2 27 % and FSDP shard-grad-op "
            "97 % slower than DDP; docs/benchmarks/gpu_strategies.md): plain DDP runs the step with nothing around "
            "it.")


def _one_device(ctx: Context, e: Evaluation) -> str:
    """Why a sharding strategy can lead on one device: its precision and memory against DDP's best, in numbers."""
    half = _HALF.get(ctx.workload.precision.value)
    why = (f"its precision: it casts the parameters rather than each op, so forward and backward run in {half} "
           "throughout (DDP's autocast casts op by op and keeps some activations in fp32)"
           if half else "only how it holds the model states")
    ddp = [o for o in ctx.fitting if _replicas(o) and o.cost is not None]
    if not ddp:
        against = "DDP does not fit"
    else:
        best = max(ddp, key=lambda o: o.cost.samples_per_s)  # type: ignore[union-attr]
        against = (f"micro-batch {e.candidate.micro_batch_size} here against {best.candidate.micro_batch_size} for "
                   f"DDP's best ({format_throughput(best.cost.samples_per_s)} samples/s)")  # type: ignore[union-attr]
    return f"On one device nothing is sharded; what {e.strategy} changes is {why}: {against}."


def _precision_difference(ctx: Context, e: Evaluation) -> str:
    """On several devices, what of a sharding strategy's lead over DDP is its precision, in numbers."""
    half = _HALF[ctx.workload.precision.value]
    best = max((o for o in ctx.fitting if _replicas(o) and o.cost is not None),
               key=lambda o: o.cost.samples_per_s)  # type: ignore[union-attr]
    return (f"Beside sharding, {e.strategy} changes the precision: it casts the parameters rather than each op, so "
            f"forward and backward run in {half} throughout, where DDP's autocast casts op by op and keeps some "
            f"activations in fp32; part of any lead over DDP's best (micro-batch {best.candidate.micro_batch_size}, "
            f"{format_throughput(best.cost.samples_per_s)} samples/s) is that, not sharding.")  # type: ignore[union-attr]


def _headroom(ctx: Context, e: Evaluation) -> float:
    capacity = ctx.hardware.device_memory_bytes or 1
    used = e.memory.gpu.total if e.memory else capacity
    return max(0.0, 1 - used / capacity)


RULES: tuple[Rule, ...] = (
    Rule(
        name="small-model-ddp",
        applies=lambda ctx, e: _replicas(e) and _small(ctx),
        factor=1.15,
        says=_small_model,
    ),
    Rule(
        name="pretrain-least-communication",
        applies=lambda ctx, e: ctx.request.goal == "pretrain"
        and _gathers_parameters(e)
        and _less_communication_fits(ctx, e),
        factor=0.90,
        says=lambda ctx, e: "Pre-training is compute-bound and runs long: a strategy that keeps parameters whole "
        "(DDP, ZeRO-1/2, shard-grad-op) fits and, by the cost model, communicates less per sample than gathering "
        "parameters, and waits no longer for it.",
    ),
    Rule(
        name="finetune-headroom",
        applies=lambda ctx, e: ctx.request.goal == "finetune" and e.memory is not None,
        factor=1.0,  # the factor is scaled by headroom in apply_rules
        says=lambda ctx, e: f"Fine-tuning values memory headroom: {100 * _headroom(ctx, e):.0f} % of each "
        f"{_device_memory(ctx)} stays free for longer sequences or larger batches.",
    ),
    Rule(
        name="slow-interconnect",
        applies=lambda ctx, e: _gathers_parameters(e)
        and (ctx.gather_link_bytes_per_s(e) or 1e18) < SLOW_LINK_BYTES_PER_S,
        factor=0.85,
        says=lambda ctx, e: f"The GPUs talk over a slow link ({_gb(ctx.gather_link_bytes_per_s(e) or 0)}): gathering "
        "parameters every step is costly here; prefer strategies that only reduce gradients.",
    ),
    Rule(
        name="slow-interconnect-compression",
        applies=lambda ctx, e: (ctx.slowest_link_bytes_per_s() or 1e18) < SLOW_LINK_BYTES_PER_S
        and _replicas(e),
        factor=1.0,
        says=lambda ctx, e: f"Over a slow link ({_gb(ctx.slowest_link_bytes_per_s() or 0)}) a compressing comm hook "
        "(fp16/bf16 compress, PowerSGD) cuts DDP's all-reduce volume 2× or more; `autoshard tune` measures it.",
    ),
    Rule(
        name="one-device-small-model",
        applies=lambda ctx, e: ctx.hardware.world_size == 1 and not _replicas(e)
        and _small(ctx) and ctx.fits_any(_replicas),
        factor=0.0,  # not picked while DDP fits (said in the candidate's reasons)
        says=lambda ctx, e: f"On one device {e.strategy} shards nothing and DDP fits: a lead predicted for it comes "
        "from running the whole step in the half precision (not the autocast asked for) and from a larger "
        "micro-batch, while its engine's host-side work, which the step-time model underestimates, is measured "
        "to cost more (GPT-2 on one H200: ZeRO-2 27 % and FSDP shard-grad-op 97 % slower than DDP; "
        "docs/benchmarks/gpu_strategies.md); it is not recommended over DDP.",
    ),
    Rule(
        name="one-device-sharding",
        applies=lambda ctx, e: ctx.hardware.world_size == 1 and not _replicas(e) and not _offloads(e),
        factor=1.0,  # said, not weighed: the costs already price the difference
        says=_one_device,
    ),
    Rule(
        name="sharding-precision",
        applies=lambda ctx, e: ctx.hardware.world_size > 1 and not _replicas(e) and not _offloads(e)
        and ctx.workload.precision.value in _HALF and ctx.fits_any(lambda o: _replicas(o) and o.cost is not None),
        factor=1.0,  # said, not weighed: the costs already price the difference
        says=_precision_difference,
    ),
    Rule(
        name="offload-last-resort",
        applies=lambda ctx, e: _offloads(e) and ctx.fits_any(lambda o: not _offloads(o)),
        factor=0.50,
        says=lambda ctx, e: "GPU memory can hold the model states without offloading: ranked at half its "
        "predicted throughput, as its step (PCIe transfers, the optimizer on the host's cores and memory, "
        "pinned host RAM) rests on a host the plan prices with less certainty than the GPUs.",
    ),
    Rule(
        name="nvme-last-resort",
        applies=lambda ctx, e: _offloads_to_nvme(e) and ctx.fits_any(_offloads_to_host),
        factor=0.50,
        says=lambda ctx, e: "CPU RAM can hold the offloaded states; NVMe is only worth its bandwidth when it cannot.",
    ),
    Rule(
        name="ddp-unused-parameters",
        applies=lambda ctx, e: _replicas(e) and ctx.workload.unused_parameter_count > 0
        and e.candidate.settings.get("find_unused_parameters", True) is not False,
        factor=1.0,  # the traversal is not timed: nothing to weigh it with
        says=lambda ctx, e: f"The step leaves {_count(ctx.workload.unused_parameter_count)} parameters without a "
        f"gradient ({', '.join(ctx.workload.unused_modules[:3])}): DDP runs with find_unused_parameters=True, "
        "an extra traversal of the autograd graph every step; FSDP2 needs no setting for them, and ZeRO steps them "
        "with a zero gradient (weight decay and momentum still change them).",
    ),
    Rule(
        name="checkpoint-only-when-needed",
        applies=lambda ctx, e: e.candidate.activation_checkpointing
        and ctx.fits_any(
            lambda o: o.strategy == e.strategy
            and not o.candidate.activation_checkpointing
            and o.candidate.micro_batch_size >= e.candidate.micro_batch_size
        ),
        factor=0.95,
        says=lambda ctx, e: "Activation checkpointing recomputes the forward pass (about a third more compute) and "
        "this batch fits without it.",
    ),
    Rule(
        name="checkpoint-when-activations-dominate",
        applies=lambda ctx, e: e.candidate.activation_checkpointing
        and False in ctx.request.checkpointing_choices(ctx.workload)  # not when the user asked for checkpointing
        and not ctx.fits_any(
            lambda o: o.strategy == e.strategy
            and not o.candidate.activation_checkpointing
            and o.candidate.micro_batch_size >= e.candidate.micro_batch_size
        ),
        factor=1.0,
        says=lambda ctx, e: f"Activations dominate: {ctx.workload.checkpoint_mode.label} is what lets this "
        "micro-batch fit.",
    ),
)


def _device_memory(ctx: Context) -> str:
    """What a rank's memory is on this hardware, in a sentence: "GPU", or a CPU process's "process's memory"."""
    return "GPU" if ctx.hardware.device_type == "cuda" else "process's memory"


def apply_rules(ctx: Context, evaluation: Evaluation, rules: tuple[Rule, ...] = RULES) -> tuple[float, list[str]]:
    """The score factor and the sentences of every rule that applies to a fitting candidate."""
    factor, sentences = 1.0, []
    for rule in rules:
        if rule.applies(ctx, evaluation):
            f = rule.factor
            if rule.name == "finetune-headroom":
                f = 1.0 + 0.5 * _headroom(ctx, evaluation)
            factor *= f
            sentences.append(f"[{rule.name}] {rule.says(ctx, evaluation)}")
    return factor, sentences
