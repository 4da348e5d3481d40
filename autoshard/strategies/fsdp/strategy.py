"""PyTorch FSDP2 (``torch.distributed.fsdp.fully_shard``): parameters, gradients and optimizer state sharded.

Registered under Lightning's names: ``fsdp`` (full shard, ``reshard_after_forward=True``), ``fsdp_shard_grad_op``
(``reshard_after_forward=False``), ``fsdp_hybrid`` (shard within a node, replicate across nodes: a 2-D mesh)
and ``fsdp_cpu_offload`` (``CPUOffloadPolicy``: sharded parameters, gradients and optimizer state in host RAM;
FSDP cannot offload to NVMe).

The wrapping the hand-off applies: ``fully_shard`` on each repeated block (or ``blocks_per_unit`` consecutive
ones, as one group) and then on the root, which takes every remaining parameter; the root keeps the default
``reshard_after_forward=None`` (never resharded after forward, ``FSDPState._lazy_init``). Mixed precisions use
``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)`` and no autocast, so activations come from the
profile's ``half`` trace; ``32-true`` runs without a policy.

Memory: :mod:`autoshard.strategies.fsdp.memory`; time: :mod:`autoshard.strategies.fsdp.cost`;
rules, sources and measurements: ``docs/strategies/fsdp.md``.
"""

from __future__ import annotations

from typing import Any

from autoshard.errors import UsageError
from autoshard.hardware.specs import HardwareSpec
from autoshard.profiler.options import Precision, own_kernel
from autoshard.strategies import costs
from autoshard.strategies.base import (
    Candidate,
    CostEstimate,
    GpuMemory,
    Knob,
    MemoryEstimate,
    Strategy,
    Traits,
    allocation_rounding,
    checked_micro_batch,
)
from autoshard.strategies.fsdp.cost import communication, cpu_offload, host_time, units_in_backward
from autoshard.strategies.fsdp.memory import (
    Layout,
    Moment,
    StepActivations,
    Units,
    cpu_offload_bytes_per_rank,
    step_moments,
    wrapping_units,
)
from autoshard.strategies.workload import (
    StepTrace,
    Workload,
    compute_dtype,
    fsdp_half_mode,
    tf32_matmuls,
)

_DTYPE_BYTES = {"fp32": 4, "bf16": 2}


class FSDPStrategy(Strategy):
    """FSDP2 with one of the presets above.

    Args:
        reshard_after_forward: the blocks' default ``reshard_after_forward``.
        hybrid: a ``(nodes, ranks per node)`` mesh, sharding on the second dimension.
        offload: ``CPUOffloadPolicy``.
    """

    family = "fsdp"

    def __init__(self, *, reshard_after_forward: bool = True, hybrid: bool = False, offload: bool = False) -> None:
        self.reshard_after_forward = reshard_after_forward
        self.hybrid = hybrid
        self.offload = offload

    @property
    def traits(self) -> Traits:
        """Stage 3 (2 when blocks keep their parameters to backward), sharded between steps either way; CPU
        offload moves parameters, gradients and optimizer state to the host."""
        return Traits(family="fsdp", zero_stage=3 if self.reshard_after_forward else 2,
                      offload="cpu" if self.offload else "none", offload_parameters=self.offload, hybrid=self.hybrid,
                      sharded_at_rest=True)

    # -- settings ---------------------------------------------------------------------------------------------
    def unsupported(self, hardware: HardwareSpec) -> str | None:
        """Hybrid sharding needs two nodes; CPU offload needs a GPU to offload from."""
        if self.hybrid and hardware.nodes < 2:
            return ("hybrid sharding replicates across nodes, and this hardware has one node: use fsdp, which "
                    "shards across all its ranks.")
        if self.offload and hardware.gpu is None:
            return ("FSDP's CPU offload moves GPU memory to the host; without a GPU the parameters are on the host "
                    "already: use fsdp.")
        return None

    def refuses(self, optimizer: str) -> str | None:
        """bitsandbytes' optimizers and Adafactor cannot step FSDP2's sharded parameters."""
        if own_kernel(optimizer):
            return ("bitsandbytes' optimizers cannot step FSDP2's sharded (DTensor) parameters: their kernels take "
                    "plain tensors. ddp and DeepSpeed ZeRO without offload can.")
        if optimizer == "adafactor":
            # torch 2.13: torch.optim.Adafactor's in-place pow_ on a row norm's _NormPartial placement raises
            # ("in-place operations that require placement changes are not supported"); transformers' mixes
            # plain tensors and DTensors. Both at the first step, after the workers started (an optimizer probe).
            return ("Adafactor cannot step FSDP2's sharded (DTensor) parameters: its factored second moment's "
                    "row and column norms fail on a shard (torch's and transformers' alike). ddp steps it as it is "
                    "(DeepSpeed ZeRO, on flat partitions, unfactored).")
        return None

    def knobs(self, hardware: HardwareSpec) -> tuple[Knob, ...]:
        """``reshard_after_forward`` (with the partial sizes the shard group allows), prefetch depths, the
        reduce dtype, blocks per unit and, for offload, pinned memory."""
        n = self._shard_size(hardware)
        per_node = hardware.processes_per_node  # a shard over one node's ranks, where it divides the shard group
        partial = (per_node,) if 2 <= per_node < n and n % per_node == 0 else ()
        knobs = [
            Knob(name="reshard_after_forward", default=self.reshard_after_forward, kind="choice",
                 choices=(True, False, *partial),
                 description="Free blocks' unsharded parameters after forward (True), keep them (False), or keep "
                             "a shard over this many ranks (int: the backward all-gather stays in the node)."),
            Knob(name="forward_prefetch", default=0, kind="int", low=0, high=2,
                 description="Blocks all-gathered ahead in forward (set_modules_to_forward_prefetch)."),
            Knob(name="backward_prefetch", default=1, kind="int", low=1, high=2,
                 description="Blocks all-gathered ahead in backward (1 is FSDP2's implicit prefetch)."),
            Knob(name="reduce_dtype", default="fp32", kind="choice", choices=("fp32", "bf16"),
                 description="MixedPrecisionPolicy.reduce_dtype: the gradient reduce-scatter's dtype.", tuned=False),
            Knob(name="blocks_per_unit", default=1, kind="int", low=1, high=4,
                 description="Consecutive blocks wrapped as one fully_shard group: fewer, larger collectives."),
            Knob(name="foreach", default=False, kind="bool",
                 description="Optimizer foreach=True on the DTensor shards (torch's default for FSDP2 parameters "
                             "is the per-tensor loop): faster, one extra shard-sized list of temporaries."),
        ]
        if self.offload:
            knobs.append(Knob(name="pin_memory", default=True, kind="bool",
                              description="CPUOffloadPolicy.pin_memory: pinned host copies that overlap compute."))
        return tuple(knobs)

    def workload_settings(self, workload: Workload) -> dict[str, bool]:
        """``foreach`` as the optimizer implementation the user named (``--optimizer-impl``); fused keeps the
        for-loop's scratch (an upper bound: the fused kernel allocates none)."""
        if workload.optimizer_impl is None:
            return {}
        return {"foreach": workload.optimizer_impl == "foreach"}

    def layout(self, workload: Workload, hardware: HardwareSpec, candidate: Candidate) -> tuple[Layout, dict[str, Any]]:
        """The candidate's settings as a :class:`~autoshard.strategies.fsdp.memory.Layout`.

        Raises:
            UsageError: an unknown setting or a value out of range.
        """
        values = self.settings(hardware, candidate, workload)
        n = self._shard_size(hardware)
        raf = values["reshard_after_forward"]
        if not isinstance(raf, bool):
            if not isinstance(raf, int) or not 1 < raf < n or n % raf:
                raise UsageError(f"{self.name}: reshard_after_forward must be True, False or a divisor of the "
                                 f"shard group size {n} between 2 and {n - 1}, but got {raf!r}.")
        for name, low in (("forward_prefetch", 0), ("backward_prefetch", 1), ("blocks_per_unit", 1)):
            v = values[name]
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise UsageError(f"{self.name}: {name} must be a whole number >= {low}, but got {v!r}.")
        if values["reduce_dtype"] not in _DTYPE_BYTES:
            raise UsageError(f"{self.name}: reduce_dtype must be 'fp32' or 'bf16', but got {values['reduce_dtype']!r}.")
        precision = workload.precision
        orig = 2 if precision is Precision.BF16_TRUE else 4
        gather = 4 if precision is Precision.FP32 else 2
        reduce = _DTYPE_BYTES[values["reduce_dtype"]]
        if precision is Precision.BF16_TRUE and "reduce_dtype" not in candidate.settings:
            reduce = 2  # bf16-true trains without a policy: gradients reduce in their own dtype
        # Frozen parameters stay in the dtype the module holds them in, but for bf16-true's cast of the whole
        # module; a policy (16-bit mixed) gathers them in its param_dtype, fp32 training in their own.
        frozen = None if precision is Precision.BF16_TRUE else workload.frozen_bytes_per_element
        return Layout(
            shard_size=n, hybrid=self.hybrid, reshard_after_forward=raf, offload=self.offload,
            orig_bytes=orig, gather_bytes=gather, reduce_bytes=reduce, frozen_bytes=frozen,
            frozen_gather_bytes=frozen if precision is Precision.FP32 else None,
            forward_prefetch=values["forward_prefetch"], backward_prefetch=values["backward_prefetch"],
            round_bytes=allocation_rounding(workload), optimizer=workload.optimizer, foreach=bool(values["foreach"]),
            reduce_scatter_copies_input=hardware.backend == "gloo",
        ), values

    def _shard_size(self, hardware: HardwareSpec) -> int:
        return hardware.processes_per_node if self.hybrid else hardware.world_size

    # -- memory -----------------------------------------------------------------------------------------------
    def moments(self, workload: Workload, hardware: HardwareSpec, candidate: Candidate) -> list[Moment]:
        """Every moment of the step where this candidate's per-rank memory can peak (see ``fsdp_memory``)."""
        layout, units, acts = self._model(workload, hardware, candidate)
        return step_moments(units, layout, acts, workload.optimizer_state_bytes_per_parameter, workload.buffer_bytes,
                            accumulating=workload.grads_kept_through_forward(candidate.gradient_accumulation))

    def memory(self, workload: Workload, hardware: HardwareSpec, candidate: Candidate) -> MemoryEstimate:
        """Per-rank peak over FSDP2's moments (:meth:`moments`) plus host RAM for offload."""
        layout, units, acts = self._model(workload, hardware, candidate)
        kept = workload.grads_kept_through_forward(candidate.gradient_accumulation)
        moments = step_moments(units, layout, acts, workload.optimizer_state_bytes_per_parameter,
                               workload.buffer_bytes, accumulating=kept)
        peak = max(moments, key=lambda m: m.total)
        overhead = workload.cuda_overhead_bytes if workload.target == "cuda" else 0
        cpu = 0
        if self.offload:
            cpu = hardware.processes_per_node * cpu_offload_bytes_per_rank(
                units, layout, acts, workload.optimizer_state_bytes_per_parameter)
        return MemoryEstimate(
            gpu=GpuMemory(parameters=peak.parameters, gradients=peak.gradients, optimizer=peak.optimizer,
                          activations=peak.activations, buffers=peak.buffers, overhead=overhead),
            peak_phase=peak.phase, cpu_bytes_per_node=cpu,
            notes=tuple(_memory_notes(layout, units, peak.where, overhead) + (
                [f"{candidate.gradient_accumulation} micro-batches per step, each reduce-scattered: the sharded "
                 "gradients are kept between micro-batches and accumulated in place"]
                if candidate.gradient_accumulation > 1 else []) + (
                [UNCHECKED_MISSING] if candidate.activation_checkpointing and _unchecked(workload) is None else [])),
        )

    def _model(self, workload: Workload, hardware: HardwareSpec, candidate: Candidate
               ) -> tuple[Layout, Units, StepActivations]:
        layout, values = self.layout(workload, hardware, candidate)
        units = wrapping_units(workload, values["blocks_per_unit"])
        ckpt = candidate.activation_checkpointing
        acts = StepActivations.from_traces(
            workload.trace(fsdp_half_mode(workload.precision), ckpt), workload.trace("amp", ckpt),
            checked_micro_batch(candidate), units,
            values["blocks_per_unit"], unchecked=_unchecked(workload) if ckpt else None)
        return layout, units, acts

    # -- cost -------------------------------------------------------------------------------------------------
    def cost(self, workload: Workload, hardware: HardwareSpec, candidate: Candidate) -> CostEstimate:
        """Compute from the traced ops (:mod:`~autoshard.strategies.step_time`) with FSDP2's hooks on the host
        beside the launches, per-unit collectives with one-unit-ahead overlap, CPU offload's work, and the
        optimizer step with DTensor's dispatch (:func:`~autoshard.strategies.fsdp.cost.host_time`)."""
        layout, values = self.layout(workload, hardware, candidate)
        b = checked_micro_batch(candidate)
        trace = workload.trace(fsdp_half_mode(workload.precision), candidate.activation_checkpointing)
        units = wrapping_units(workload, values["blocks_per_unit"])
        notes: list[str] = []
        dtype = compute_dtype(workload.precision)
        # The plan's fused implementation wins over the foreach knob (runtime/train.py); it steps lists, as foreach.
        host = host_time(units, layout, foreach=layout.foreach or workload.optimizer_impl == "fused")
        compute_s, note = costs.step_compute_seconds(trace, b, hardware, dtype, host_extra_s=host.hooks_s,
                                                     tf32_matmuls=tf32_matmuls(workload))
        notes += [note, *host.notes]
        fwd, bwd = trace.at_1.forward_flops, trace.at_1.backward_flops
        forward_s = compute_s * (fwd / (fwd + bwd) if fwd + bwd else 1 / 3)
        reached = units_in_backward(units, [blk.backward_flops for blk in trace.at_1.blocks], workload.block_stacks,
                                    values["blocks_per_unit"], values["backward_prefetch"])
        comm = communication(units, layout, hardware, forward_s, compute_s - forward_s, reached)
        notes += comm.notes
        offload_s = optimizer_s = 0.0
        if self.offload:
            off = cpu_offload(units, layout, hardware, compute_s, bool(values["pin_memory"]),
                              costs.optimizer_step_bytes_per_parameter(workload, candidate.activation_checkpointing)
                              or costs.ADAMW_TRACED_BYTES_PER_PARAMETER, workload.optimizer)
            clip_s, clip_note = costs.grad_clip_seconds(workload, hardware, shard=layout.shard_size, on_host=True)
            offload_s = off.exposed_s + clip_s
            notes += [*off.notes, *([clip_note] if clip_note else [])]
        else:  # the optimizer steps the shards on the GPU
            optimizer_s, optimizer_note = costs.optimizer_step_seconds(
                workload, hardware, candidate.activation_checkpointing, shard=layout.shard_size)
            notes += [optimizer_note] if optimizer_note else []
        # Once per optimizer step, after backward: with CPU offload the step on the DTensor shards runs on the host.
        if self.offload:
            offload_s += host.optimizer_s
        else:
            optimizer_s += host.optimizer_s
        contention_s, contention_note = costs.contention_seconds(comm.total_s - comm.exposed_s, compute_s, hardware)
        notes += [contention_note] if contention_note else []
        exposed_s = comm.exposed_s + contention_s
        step_s = compute_s + exposed_s + offload_s + optimizer_s
        replicas = hardware.world_size
        samples_per_s = b * replicas / step_s
        tokens = workload.tokens_per_sample
        return CostEstimate(
            compute_s=compute_s, communication_s=comm.total_s, exposed_communication_s=exposed_s,
            offload_s=offload_s, step_time_s=step_s, samples_per_s=samples_per_s,
            tokens_per_s=None if tokens is None else samples_per_s * tokens, collectives=comm.collectives,
            notes=tuple(notes), optimizer_s=optimizer_s,
            # Parameters are gathered for every forward and backward, and fit()'s backend reduce-scatters every
            # micro-batch's gradients: all of it repeats under accumulation.
            repeated_communication_s=comm.total_s, repeated_exposed_s=exposed_s,
        )


def _memory_notes(layout: Layout, units: Units, where: str, overhead: int) -> list[str]:
    n = layout.shard_size
    raf = layout.reshard_after_forward
    notes = [
        f"peak at: {where}",
        f"{len(units.blocks)} block unit(s) + the root unit ({sum(abs(t) for t in units.root):,} parameters); "
        "each tensor sharded "
        f"on dim 0 over {n} ranks, padded so rank 0 holds ceil(rows/{n}) rows (FSDPParam._init_sharded_param, "
        "_fsdp_param.py, torch 2.13.0; padding approximated per tensor from element counts)",
        f"gathered parameters, all-gather buffers and unsharded gradients in {8 * layout.gather_bytes}-bit, "
        f"reduce-scatter in {8 * layout.reduce_bytes}-bit (MixedPrecisionPolicy; FSDPParam.init_dtype_attrs)",
        "optimizer state on the shards, 1/N per rank (the optimizer is built over the DTensor shards)",
        "optimizer step temporaries on the shards: "
        + ("foreach, one list of all shards (_foreach_sqrt)" if layout.foreach else
           "per-tensor loop, the previous parameter's denom + this one's sqrt and denom at most; torch defaults "
           "to it for DTensor parameters (_default_to_fused_or_foreach)") + " (torch/optim/adam.py, torch 2.13.0)",
        "forward: the root stays unsharded all step; each unit's flat all-gather output is kept until the next "
        "unit's copy-out (comm_ctx.all_gather_state, _fsdp_param_group.py wait_for_unshard)",
        "backward: the next unit is prefetched (_backward_prefetch), the previous unit's reduce-scatter input is "
        "held until this unit's post-backward (reduce_scatter_states), and foreach_reduce keeps the unit's last "
        "gradient alive until it returns (its loop variable; _fsdp_collectives.py)",
        "blocks reshard after forward" if raf is True else
        "blocks keep their unsharded parameters from forward to backward (reshard_after_forward=False)"
        if raf is False else f"blocks keep a shard over {raf} ranks from forward to backward",
    ]
    if layout.hybrid:
        notes.append("hybrid: shard over the node's ranks, replicas across nodes (HSDPMeshInfo)")
    if layout.offload:
        notes.append("CPU offload: sharded parameters, gradients and optimizer state in host RAM "
                     "(CPUOffloadPolicy, _fsdp_api.py); the GPU holds only gathered units and comm buffers")
    if overhead:
        notes.append(f"CUDA allocator-side overheads: {overhead / 2**20:.3g} MiB (from the profile)")
    return notes


UNCHECKED_MISSING = ("low: the workload has no trace without checkpointing, so a block's activations while it is "
                     "recomputed in backward are counted as what it saves in forward (trace both choices, as "
                     "recommend does)")
"""The memory note of a checkpointed candidate planned without FSDP2's 'half' trace without checkpointing."""


def _unchecked(workload: Workload) -> StepTrace | None:
    """FSDP2's 'half' trace without checkpointing, when the workload has it."""
    try:
        return workload.trace(fsdp_half_mode(workload.precision), False)
    except LookupError:
        return None
