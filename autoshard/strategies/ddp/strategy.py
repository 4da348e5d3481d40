"""PyTorch DistributedDataParallel (``ddp``): every rank holds the whole model; gradients are all-reduced.

Sources (torch 2.13.0, installed): ``torch/nn/parallel/distributed.py`` (bucket sizes, bucket order, rebuild,
``gradient_as_bucket_view``), ``torch/distributed/algorithms/ddp_comm_hooks/default_hooks.py`` (fp16/bf16
compression) and ``.../powerSGD_hook.py`` (PowerSGD state). The C++ reducer (``reducer.cpp``, not installed) is
used as documented in the DDP design note, https://docs.pytorch.org/docs/stable/notes/ddp.html ("Internal
Design": buckets are created at construction, in roughly the reverse order of ``model.parameters()``, and each
bucket's all-reduce starts as soon as all its gradients are ready). ``docs/strategies/ddp.md`` explains the
rules and the measurements that check them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from autoshard.errors import UsageError
from autoshard.hardware.specs import HardwareSpec
from autoshard.strategies import costs
from autoshard.strategies.base import (
    Candidate,
    Collective,
    CostEstimate,
    GpuMemory,
    Knob,
    MemoryEstimate,
    Strategy,
    Traits,
    allocation_rounding,
    checked_micro_batch,
)
from autoshard.strategies.workload import StepTrace, Workload, compute_dtype, tf32_matmuls

MIB = 1024 * 1024
"""torch's ``_MB_TO_BYTES``: ``bucket_cap_mb`` is in MiB (torch/nn/parallel/distributed.py, torch 2.13.0)."""
DEFAULT_BUCKET_CAP_MB = 25
"""``_DEFAULT_BUCKET_CAP_MB`` (torch/nn/parallel/distributed.py, torch 2.13.0)."""
FIRST_BUCKET_BYTES = 1024 * 1024
"""``torch.distributed._DEFAULT_FIRST_BUCKET_BYTES`` (1 MiB, torch 2.13.0): the cap of the first bucket when
``bucket_cap_mb`` is left unset; an explicit ``bucket_cap_mb`` caps the first bucket too
(``_BucketCapacityConfig.create``)."""
COMM_HOOKS = ("none", "fp16_compress", "bf16_compress", "powersgd")
POWERSGD_MIN_COMPRESSION_RATE = 2
"""``PowerSGDState(min_compression_rate=2)`` default (powerSGD_hook.py, torch 2.13.0)."""
POWERSGD_MATRIX_MIN_NUMEL = 65_536
"""Gradients smaller than this (256×256) are taken as 1-D, hence uncompressed, by :func:`powersgd_elements`: an
assumption standing in for the shapes the workload does not record (it errs towards more traffic)."""
POWERSGD_DEFAULT_START_ITER = 1_000
"""``PowerSGDState(start_powerSGD_iter=1_000)`` default; it must be > 1 with error feedback (powerSGD_hook.py)."""
ONE_DEVICE_NOTE = ("one device: the module trains without DistributedDataParallel (autoshard's fit(), accelerate's "
                   "distributed_type NO, the HF Trainer and Lightning's single-device strategy alike): no gradient "
                   "buckets, no all-reduce; the bucket, gradient-view and hook settings take effect from 2 devices")
"""DDP on one device: what every trainer autoshard hands off to runs then (docs/strategies/ddp.md)."""
_COMPRESSED_ELEMENT_BYTES = 2
"""fp16 and bf16 hooks all-reduce ``buffer.to(dtype)``: 2 bytes per element (default_hooks.py ``_compress_hook``)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class DdpSettings:
    """The DDP constructor arguments and comm hook a candidate runs with."""

    bucket_cap_mb: float
    first_bucket_bytes: int
    """1 MiB when ``bucket_cap_mb`` is left to torch's default, else the cap itself."""
    comm_hook: str
    matrix_approximation_rank: int
    start_powerSGD_iter: int
    gradient_as_bucket_view: bool
    static_graph: bool
    find_unused_parameters: bool


def bucket_members(
    numels: Sequence[int], element_bytes: float, *, first_bucket_bytes: int, bucket_bytes: int
) -> tuple[tuple[int, ...], ...]:
    """Element counts of the gradients in each bucket, in the steady state, buckets in the order they become ready.

    Parameters are taken in reverse order of ``model.parameters()`` (the order gradients become ready, which
    DDP's bucket rebuild after the first iteration records) and packed greedily: a bucket is closed once it
    reaches its cap, the first bucket's cap being ``first_bucket_bytes`` and every later one ``bucket_bytes``
    (``compute_bucket_assignment_by_size`` behind ``torch.distributed._compute_bucket_assignment_by_size``;
    the caps are ``[first_bucket_bytes_cap, bucket_bytes_cap]``, torch/nn/parallel/distributed.py 2.13.0).

    Example:
        >>> bucket_members([300_000, 10, 300_000], 4, first_bucket_bytes=1 << 20, bucket_bytes=2 << 20)
        ((300000,), (10, 300000))
    """
    buckets: list[tuple[int, ...]] = []
    current: list[int] = []
    size, cap = 0.0, first_bucket_bytes
    for n in reversed(numels):
        current.append(n)
        size += n * element_bytes
        if size >= cap:
            buckets.append(tuple(current))
            current, size, cap = [], 0.0, bucket_bytes
    if current or not buckets:
        buckets.append(tuple(current))
    return tuple(buckets)


def gradient_buckets(
    numels: Sequence[int], element_bytes: float, *, first_bucket_bytes: int, bucket_bytes: int
) -> tuple[int, ...]:
    """Bytes of each gradient bucket (see :func:`bucket_members`).

    Example:
        >>> gradient_buckets([300_000, 10, 300_000], 4, first_bucket_bytes=1 << 20, bucket_bytes=2 << 20)
        (1200000, 1200040)
    """
    members = bucket_members(numels, element_bytes, first_bucket_bytes=first_bucket_bytes, bucket_bytes=bucket_bytes)
    return tuple(round(sum(b) * element_bytes) for b in members)


def powersgd_elements(numels: Sequence[int], rank: int) -> tuple[int, int]:
    """``(p_and_q, uncompressed)`` elements PowerSGD all-reduces for these gradients at ``rank``.

    A gradient viewed as an n×m matrix is compressed to P (n×r) and Q (m×r) when ``(n + m)·r·2 < n·m``
    (``_should_compress`` with ``min_compression_rate=2``, powerSGD_hook.py, torch 2.13.0); others are
    all-reduced as they are. The workload records element counts, not shapes, so (an approximation) a gradient
    of fewer than :data:`POWERSGD_MATRIX_MIN_NUMEL` elements is taken as 1-D (a bias or norm weight, which
    PowerSGD sends uncompressed) and a larger one as a square √N×√N matrix (exact for square weights; P+Q is
    underestimated for elongated ones, e.g. by 15 % for a 1:2.7 MLP weight — small next to the gradients).

    Example:
        >>> powersgd_elements([4096 * 4096, 4096], rank=4)
        (32768, 4096)
    """
    pq = uncompressed = 0
    for n in numels:
        side = math.isqrt(n)
        r = min(side, rank)
        if n >= POWERSGD_MATRIX_MIN_NUMEL and 2 * side * r * POWERSGD_MIN_COMPRESSION_RATE < n:
            pq += 2 * side * r
        else:
            uncompressed += n
    return pq, uncompressed


@dataclass(frozen=True, kw_only=True, slots=True)
class _Layout:
    """The gradients as DDP's reducer holds them."""

    members: tuple[tuple[int, ...], ...]
    element_bytes: float
    """Bytes per gradient element: the parameters' (gradients take their parameter's dtype)."""

    @classmethod
    def of(cls, workload: Workload, trace: StepTrace, s: DdpSettings) -> _Layout:
        element_bytes = trace.at_1.parameter_bytes / max(1, trace.at_1.parameter_count)
        caps = {"first_bucket_bytes": s.first_bucket_bytes, "bucket_bytes": int(s.bucket_cap_mb * MIB)}
        if s.find_unused_parameters and not s.static_graph:
            # The reducer rebuilds buckets only with static_graph or find_unused_parameters=False
            # (_BucketCapacityConfig.compute_bucket_size_limits, distributed.py 2.13.0); otherwise the
            # construction-time assignment stays: parameters in definition order, buckets then reversed.
            numels = tuple(reversed(workload.parameter_numels))
            return cls(members=tuple(reversed(bucket_members(numels, element_bytes, **caps))),
                       element_bytes=element_bytes)
        return cls(members=bucket_members(workload.parameter_numels, element_bytes, **caps),
                   element_bytes=element_bytes)

    def bucket_bytes(self) -> tuple[int, ...]:
        return tuple(round(sum(b) * self.element_bytes) for b in self.members)


class DDPStrategy(Strategy):
    """DistributedDataParallel with its bucket, gradient-view and communication-hook settings."""

    family = "ddp"

    @property
    def traits(self) -> Traits:
        """Whole replicas: nothing sharded, nothing offloaded."""
        return Traits(family="ddp", zero_stage=0)

    # -- settings ---------------------------------------------------------------------------------------------
    def knobs(self, hardware: HardwareSpec) -> tuple[Knob, ...]:
        """DDP's constructor arguments and comm hook; ``bf16_compress`` only with CUDA and NCCL. On one device
        none is tuned: the module trains unwrapped (:data:`ONE_DEVICE_NOTE`), so they change nothing."""
        hooks = tuple(h for h in COMM_HOOKS if h != "bf16_compress" or _nccl(hardware))
        several = hardware.world_size > 1
        return (
            Knob(name="bucket_cap_mb", default=DEFAULT_BUCKET_CAP_MB, kind="float", low=1.0, high=200.0, log=True,
                 description="Gradient bucket size in MiB (an explicit value also caps the first bucket).",
                 tuned=several),
            Knob(name="comm_hook", default="none", kind="choice", choices=hooks,
                 description="Gradient communication hook: none, fp16/bf16 compression, or PowerSGD.", tuned=several),
            Knob(name="matrix_approximation_rank", default=1, kind="int", low=1, high=32, log=True,
                 description="PowerSGD rank (only with comm_hook=powersgd).", when=("comm_hook", "powersgd"),
                 tuned=several),
            Knob(name="start_powerSGD_iter", default=POWERSGD_DEFAULT_START_ITER, kind="int", low=2, high=10_000,
                 log=True, description="Steps of plain all-reduce before PowerSGD starts (accuracy, not speed).",
                 tuned=False),
            Knob(name="gradient_as_bucket_view", default=False, kind="bool",
                 description="Gradients as views of the buckets: saves one copy of the gradients.", tuned=several),
            Knob(name="static_graph", default=False, kind="bool",
                 description="The set of used parameters never changes (no per-step graph search).", tuned=several),
            Knob(name="find_unused_parameters", default=False, kind="bool",
                 description="Only for models where some parameters get no gradient; searches the graph each step "
                 "(on by default when the profiled step leaves parameters unused).", tuned=False),
        )

    def trial_settings(self) -> dict[str, Any]:
        """PowerSGD from step 2 (the earliest it allows with error feedback), so that a short trial measures it."""
        return {"start_powerSGD_iter": 2}

    def workload_settings(self, workload: Workload) -> dict[str, bool]:
        """``find_unused_parameters=True`` when the step leaves trainable parameters without a gradient: without
        it DDP's reducer waits for their gradients and the next iteration fails ("Expected to have finished
        reduction in the prior iteration", torch/nn/parallel/distributed.py 2.13.0)."""
        return {"find_unused_parameters": True} if workload.unused_parameter_count else {}

    def resolve(self, hardware: HardwareSpec, candidate: Candidate,
                workload: Workload | None = None) -> DdpSettings:
        """The candidate's settings (else those the workload needs, else the defaults), typed and checked.

        Raises:
            UsageError: an unknown setting or an out-of-range value.
        """
        values = self.settings(hardware, candidate, workload)
        cap = values["bucket_cap_mb"]
        if isinstance(cap, bool) or not isinstance(cap, (int, float)) or not cap > 0:
            raise UsageError(f"ddp: bucket_cap_mb must be a positive number of MiB, but got {cap!r}.")
        hooks = next(k.choices for k in self.knobs(hardware) if k.name == "comm_hook")
        if values["comm_hook"] not in hooks:
            raise UsageError(f"ddp: comm_hook {values['comm_hook']!r} is not available here.",
                             hint=f"Choose one of: {', '.join(hooks)} (bf16_compress needs CUDA with NCCL).")
        # PowerSGDState refuses start_powerSGD_iter <= 1 with error feedback or warm start (powerSGD_hook.py).
        for name, low in (("matrix_approximation_rank", 1), ("start_powerSGD_iter", 2)):
            if isinstance(values[name], bool) or not isinstance(values[name], int) or values[name] < low:
                raise UsageError(f"ddp: {name} must be a whole number >= {low}, but got {values[name]!r}.")
        cap_bytes = int(cap * MIB)  # int(effective_bucket_cap_mb * _MB_TO_BYTES), distributed.py
        return DdpSettings(
            bucket_cap_mb=float(cap),
            first_bucket_bytes=cap_bytes if "bucket_cap_mb" in candidate.settings else FIRST_BUCKET_BYTES,
            comm_hook=values["comm_hook"],
            matrix_approximation_rank=values["matrix_approximation_rank"],
            start_powerSGD_iter=values["start_powerSGD_iter"],
            gradient_as_bucket_view=bool(values["gradient_as_bucket_view"]),
            static_graph=bool(values["static_graph"]),
            find_unused_parameters=bool(values["find_unused_parameters"]),
        )

    # -- memory -----------------------------------------------------------------------------------------------
    def memory(self, workload: Workload, hardware: HardwareSpec, candidate: Candidate) -> MemoryEstimate:
        """Per-rank peak: the step's own memory plus DDP's buckets and comm-hook state (see module docs)."""
        s = self.resolve(hardware, candidate, workload)
        b = checked_micro_batch(candidate)
        trace = workload.trace("amp", candidate.activation_checkpointing)
        rnd = allocation_rounding(workload)
        phases = trace.phases(b)
        # Model states as the trace holds them (the allocator's rounding included on CUDA), whole on every rank.
        param_bytes = max(br.parameters for br in phases.values())
        grad_bytes, optimizer_bytes = trace.at_1.gradient_bytes, trace.at_1.optimizer_state_bytes
        layout = _Layout.of(workload, trace, s)
        single = hardware.world_size == 1
        buckets = () if single else layout.bucket_bytes()
        bucket_bytes = sum(rnd(x) for x in buckets)
        views = s.gradient_as_bucket_view and not single
        hook_state, in_flight, hook_note = (0, 0, None) if single else _hook_memory(s, layout, rnd)
        overhead = workload.cuda_overhead_bytes if workload.target == "cuda" else 0
        # Accumulating, .grad is kept from one micro-batch to the next (no_sync: nothing is reduced, nothing
        # freed), so from the second micro-batch on every phase holds all of it; zeroed rather than set to None
        # between steps, it is kept from one step to the next the same way.
        accumulating = candidate.gradient_accumulation > 1
        kept = workload.grads_kept_through_forward(candidate.gradient_accumulation)
        # Gradients whole through the step (bucket views, or kept between micro-batches / steps) are a constant
        # beside the step's other bytes, so the phase peaks where those do: its highest non-state bytes. Otherwise
        # .grad grows through backward as in the single-device step, and the phase's peak is the trace's own
        # moment of highest total: its gradients *and* its other bytes at that moment, never the highest of
        # each wherever it falls (at the start of backward the activations, at its end the gradients).
        whole = views or kept
        by_phase: dict[str, GpuMemory] = {}
        for phase, br in phases.items():
            by_phase[phase] = GpuMemory(
                parameters=param_bytes,
                # With views, .grad *is* the buckets (alive from construction); otherwise .grad lives as in the
                # single-device step and the buckets are a second, flat copy.
                gradients=bucket_bytes if views else (grad_bytes if kept else min(br.gradients, grad_bytes)),
                optimizer=optimizer_bytes,
                activations=(trace.activation_bytes(phase, b) if whole
                             else br.activations + br.temporaries + br.inputs),
                # A hook's per-bucket transients exist only while buckets are reduced, i.e. during backward.
                buffers=br.buffers + (0 if views else bucket_bytes) + hook_state
                + (in_flight if phase == "backward" else 0),
                overhead=overhead,
            )
        peak_phase = max(by_phase, key=lambda p: by_phase[p].total)
        notes = ([ONE_DEVICE_NOTE, "parameters, gradients and optimizer state as the traced step holds them, in the "
                  "user's precision with autocast (the 'amp' trace)"]
                 if single else _replica_notes(s, buckets, hook_note))
        if accumulating and not views:
            notes.append(f"{candidate.gradient_accumulation} micro-batches per step: the gradients "
                         f"({_mib(grad_bytes)}) are kept between micro-batches, alive through every forward after "
                         "the first")
        elif kept and not views:
            notes.append(f"gradients zeroed, not set to None, between steps: they ({_mib(grad_bytes)}) stay "
                         "allocated through every forward")
        if overhead:
            notes.append(f"CUDA allocator-side overheads: {_mib(overhead)} (from the profile)")
        return MemoryEstimate(gpu=by_phase[peak_phase], peak_phase=peak_phase, notes=tuple(notes))

    # -- cost -------------------------------------------------------------------------------------------------
    def cost(self, workload: Workload, hardware: HardwareSpec, candidate: Candidate) -> CostEstimate:
        """Compute from the traced ops (:mod:`~autoshard.strategies.step_time`) plus the gradient all-reduce,
        overlapped with backward except for the last bucket."""
        s = self.resolve(hardware, candidate, workload)
        b = checked_micro_batch(candidate)
        trace = workload.trace("amp", candidate.activation_checkpointing)
        notes: list[str] = []
        compute_s, note = costs.step_compute_seconds(trace, b, hardware, compute_dtype(workload.precision),
                                                     tf32_matmuls=tf32_matmuls(workload))
        notes.append(note)
        fwd, bwd = trace.at_1.forward_flops, trace.at_1.backward_flops
        backward_s = compute_s * (bwd / (fwd + bwd) if fwd + bwd else 2 / 3)

        optimizer_s, optimizer_note = costs.optimizer_step_seconds(
            workload, hardware, candidate.activation_checkpointing)
        optimizer_notes = [optimizer_note] if optimizer_note else []
        n = hardware.world_size
        if n == 1:
            return _throughput(workload, b, 1, compute_s=compute_s, comm_s=0.0, exposed_s=0.0,
                               optimizer_s=optimizer_s, collectives=(), notes=[*notes, ONE_DEVICE_NOTE,
                                                                               *optimizer_notes])
        layout = _Layout.of(workload, trace, s)
        scope = "world" if hardware.nodes > 1 else "intra"
        payloads, calls_per_bucket, hook_note = _hook_wire(s, layout)
        notes.append(hook_note)
        collective = Collective(kind="all_reduce", bytes=sum(payloads), calls=len(payloads) * calls_per_bucket,
                                group_size=n, scope=scope, overlappable=True)
        comm_s = costs.collective_seconds(collective, hardware)
        # The last bucket to be ready holds the first parameters (embeddings); no backward is left to hide it.
        last = Collective(kind="all_reduce", bytes=payloads[-1], calls=calls_per_bucket, group_size=n, scope=scope,
                          overlappable=False)
        last_s = costs.collective_seconds(last, hardware)
        exposed_s = last_s + costs.exposed(max(0.0, comm_s - last_s), backward_s)
        notes.append("overlap: each bucket's all-reduce starts when its gradients are ready and hides behind the "
                     "rest of backward; the last bucket is exposed (DDP design note, Backward Pass)")
        contention_s, contention_note = costs.contention_seconds(comm_s - exposed_s, backward_s, hardware)
        exposed_s += contention_s
        notes += [contention_note] if contention_note else []
        collectives = [collective]
        if workload.buffer_bytes:  # broadcast_buffers=True, DDP's default and fit()'s
            broadcast = Collective(kind="broadcast", bytes=workload.buffer_bytes,
                                   calls=math.ceil(workload.buffer_bytes / BROADCAST_BUCKET_BYTES), group_size=n,
                                   scope=scope, overlappable=False)
            broadcast_s = costs.collective_seconds(broadcast, hardware)
            comm_s += broadcast_s
            exposed_s += broadcast_s
            collectives.append(broadcast)
            notes.append(f"broadcast_buffers=True (DDP's default): rank 0's buffers ({_mib(workload.buffer_bytes)}) "
                         "are broadcast before the first forward of each step, in buckets of 250 MiB, ahead of the "
                         "compute (_sync_buffers in torch/nn/parallel/distributed.py, torch 2.13.0)")
        if not costs.link(hardware, scope).known:
            notes.append(f"link bandwidth unknown: {costs.UNKNOWN_LINK_BYTES_PER_S / 1e9:g} GB/s assumed")
        if s.find_unused_parameters and not s.static_graph:
            why = (f" because the step leaves {workload.unused_parameter_count:,} parameters without a gradient"
                   if workload.unused_parameter_count else "")
            notes.append(f"find_unused_parameters=True{why}: DDP traverses the autograd graph from the outputs after "
                         "every forward to mark them ready (not timed here)")
        return _throughput(workload, b, n, compute_s=compute_s, comm_s=comm_s, exposed_s=exposed_s,
                           optimizer_s=optimizer_s, collectives=tuple(collectives), notes=[*notes, *optimizer_notes])


# -- helpers -----------------------------------------------------------------------------------------------------

BROADCAST_BUCKET_BYTES = 250 * 1024 * 1024
"""DDP's ``broadcast_bucket_size``: the buffers are broadcast in coalesced buckets of this size (torch 2.13.0)."""



def _replica_notes(s: DdpSettings, buckets: tuple[int, ...], hook_note: str | None) -> list[str]:
    """The memory notes of two ranks or more: whole replicas, the buckets, the hook."""
    notes = [
        "parameters, gradients and optimizer state are whole on every rank, in the user's precision with "
        "autocast (the 'amp' trace), as DDP trains the module it wraps",
        f"{len(buckets)} gradient bucket(s) of {', '.join(_mib(x) for x in buckets[:4])}"
        f"{', ...' if len(buckets) > 4 else ''}: reverse parameter order, first bucket capped at "
        f"{_mib(s.first_bucket_bytes)}, then {s.bucket_cap_mb:g} MiB (a tensor past the cap is a bucket of its own) "
        "(torch/nn/parallel/distributed.py _BucketCapacityConfig, torch 2.13.0); allocated at construction "
        "(docs/notes/ddp.rst, Internal Design)",
        "gradient_as_bucket_view=True: .grad tensors are views of the buckets, no second copy"
        if s.gradient_as_bucket_view else
        "gradient_as_bucket_view=False: the buckets are a second copy of all gradients, alive all step "
        "(distributed.py docstring: views save 'the total gradients size')",
        "optimizer.zero_grad(set_to_none=True) (torch >= 2.0 default, torch/optim/optimizer.py) frees .grad "
        "between steps; the buckets stay",
    ]
    if hook_note:
        notes.append(hook_note)
    if s.find_unused_parameters and not s.static_graph:
        notes.append("find_unused_parameters=True: buckets keep their construction-time assignment (the small "
                     "first bucket holds the first parameters); they are rebuilt from the real gradient order "
                     "only with static_graph or find_unused_parameters=False")
    return notes


def _throughput(workload: Workload, b: int, n: int, *, compute_s: float, comm_s: float, exposed_s: float,
                optimizer_s: float, collectives: tuple[Collective, ...], notes: list[str]) -> CostEstimate:
    step_s = compute_s + exposed_s + optimizer_s
    samples_per_s = b * n / step_s
    tokens = workload.tokens_per_sample
    return CostEstimate(
        compute_s=compute_s, communication_s=comm_s, exposed_communication_s=exposed_s, offload_s=0.0,
        step_time_s=step_s, samples_per_s=samples_per_s,
        tokens_per_s=None if tokens is None else samples_per_s * tokens,
        collectives=collectives, notes=tuple(notes), optimizer_s=optimizer_s,
    )


def _nccl(hardware: HardwareSpec) -> bool:
    return hardware.device_type == "cuda" and hardware.backend == "nccl"



def _hook_memory(s: DdpSettings, layout: _Layout, rnd: Callable[[int], int]) -> tuple[int, int, str]:
    """``(bytes kept between steps, transient bytes while the largest bucket is reduced, note)`` of the hook.

    The transient is counted on top of the backward high point: an upper bound, since a bucket early in the
    ready order completes while most activations are still alive (measured in tests/strategies/test_ddp.py).
    """
    buckets = layout.bucket_bytes()
    if s.comm_hook in ("fp16_compress", "bf16_compress"):
        # compressed_tensor = buffer.to(dtype).div_(world_size), alive until the all-reduce future completes
        # (default_hooks.py _compress_hook, torch 2.13.0).
        copy = max(rnd(round(sum(m) * _COMPRESSED_ELEMENT_BYTES)) for m in layout.members)
        return 0, copy, (f"{s.comm_hook}: a 2-byte copy of a bucket ({_mib(copy)}) while it is reduced "
                         "(default_hooks.py _compress_hook, torch 2.13.0)")
    if s.comm_hook == "powersgd":
        rank = s.matrix_approximation_rank
        split = [powersgd_elements(m, rank) for m in layout.members]
        error = sum(rnd(x) for x in buckets)
        # P and Q are two allocations per bucket of (n + m)·r elements in all.
        pq = sum(2 * rnd(round(p / 2 * layout.element_bytes)) for p, _ in split)
        # Per bucket in flight: input_tensor_cp (a clone of the bucket), the cat of the uncompressed tensors,
        # and the new error (input_tensor_cp - input_tensor) computed while the old one is still held.
        transient = max(2 * rnd(x) + rnd(round(u * layout.element_bytes))
                        for x, (_, u) in zip(buckets, split, strict=True))
        return error + pq, transient, (
            f"PowerSGD (rank {rank}), steady state after start_powerSGD_iter: error feedback of every bucket "
            f"({_mib(error)}) and warm-start P/Q ({_mib(pq)}) kept between steps, {_mib(transient)} more while a "
            "bucket is reduced (PowerSGDState.error_dict, p_memory_dict, q_memory_dict; powerSGD_hook.py, "
            "torch 2.13.0)")
    return 0, 0, ""


def _hook_wire(s: DdpSettings, layout: _Layout) -> tuple[list[int], int, str]:
    """``(payload bytes per bucket, all-reduces per bucket, note)`` of one step."""
    if s.comm_hook in ("fp16_compress", "bf16_compress"):
        return ([round(sum(m) * _COMPRESSED_ELEMENT_BYTES) for m in layout.members], 1,
                f"{s.comm_hook}: gradients all-reduced as 2-byte floats (default_hooks.py, torch 2.13.0)")
    if s.comm_hook == "powersgd":
        split = [powersgd_elements(m, s.matrix_approximation_rank) for m in layout.members]
        return ([round((p + u) * layout.element_bytes) for p, u in split], 3,
                f"PowerSGD rank {s.matrix_approximation_rank}: all-reduces the uncompressed tensors, then P, then "
                "Q per bucket (powerSGD_hook.py, torch 2.13.0); steady state after start_powerSGD_iter; "
                "orthogonalisation and the low-rank matmuls are not timed")
    return list(layout.bucket_bytes()), 1, "all-reduce of all gradients every step, in their dtype"


def _mib(n: float) -> str:
    return f"{n / MIB:,.0f} MiB" if n >= 1000 * MIB else f"{n / MIB:.3g} MiB"  # 2,004 MiB, not 2e+03
