"""Per-device memory of DeepSpeed ZeRO stages 1-3, phase by phase, as deepspeed 0.19.8 allocates it.

Every rule below was read in the installed sources (``deepspeed/runtime/...``, version 0.19.8) and the comment
next to it names the file and function. Sizes are bytes; ``numel`` counts elements. ``N`` is the data-parallel
world size, ``lp`` the bytes of the model dtype DeepSpeed trains in (2 for ``bf16``/``fp16``, 4 for fp32).

What a rank holds, in short:

* ZeRO-1/2 (``stage_1_and_2.py::DeepSpeedZeroOptimizer``): all parameters in one flat ``lp`` buffer, an fp32
  master partition (a clone, even when ``lp`` is fp32), the optimizer state of that partition; gradients of the
  partition's parameters in one ``lp`` buffer (``grads_in_partition``); reduce buckets while gradients are
  reduced. ZeRO-1 keeps every gradient until backward ends (accumulating, until the boundary's backward ends, and
  its reduce buckets with them); ZeRO-2 moves each into a bucket as it is produced.
* ZeRO-3 (``stage3.py::DeepSpeedZeroOptimizer_Stage3``): one ``lp`` partition of every parameter (each padded to
  ``ceil(numel / N)``), full copies of the small "persistent" ones, an fp32 master partition, optimizer state, an
  ``lp`` gradient partition, one reduce bucket for the whole run, and the parameters gathered for compute —
  frozen ones too, which backward gathers again where it runs through them to reach a trainable parameter
  (LoRA, norm-only tuning: :func:`~autoshard.strategies.deepspeed.layout.partitioned_layout`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from autoshard.hardware.specs import HardwareSpec
from autoshard.profiler.options import Precision
from autoshard.profiler.result import MemoryBreakdown
from autoshard.strategies.base import Candidate, GpuMemory, MemoryEstimate
from autoshard.strategies.deepspeed.layout import NCCL_START_ALIGNMENT, ZeroSettings, partitioned_layout
from autoshard.strategies.deepspeed.model_states import ModelStates, model_states
from autoshard.strategies.deepspeed.optimizer_state import FP32_BYTES, model_dtype_bytes
from autoshard.strategies.workload import StepTrace, Workload


@dataclass(frozen=True, kw_only=True, slots=True)
class _Step:
    """What the trace says about the step at one micro-batch, for the phases a strategy rebuilds."""

    activations: dict[str, int]
    """Non-model-state bytes at each phase's high point (activations, temporaries, inputs)."""
    inputs: int
    backward_gradient_bytes: int
    """Gradient bytes alive at the trace's backward high point (single device, model dtype)."""
    backward_high_point_non_state: int
    """Non-model-state bytes (activations, temporaries, inputs) at that same high point: what is alive beside
    :attr:`backward_gradient_bytes`. ``activations["backward"]`` is the highest of them anywhere in backward,
    usually earlier, when few gradients exist yet."""
    backward_progress: float
    """Fraction of the gradients already produced at that point (0 = start of backward)."""
    gradients_beside_highest: int
    """Gradient bytes the single-device step holds where ``activations["backward"]`` peaks: 0 when that is before
    any gradient exists, so before ZeRO-1/2 allocate their reduce buckets and gradient partition."""
    progress_at_highest: float
    """:attr:`backward_progress` at that moment."""
    backward_saved: int
    """Saved activations and inputs alive when the first gradient hook runs: those at the trace's backward high
    point, once the loss gradient's temporaries are gone — and, when that high point is before any gradient
    exists, at most what the repeated blocks saved (the head's and the loss's are freed by the time the first
    parameter's gradient is accumulated)."""


def optimizer_scratch_bytes(workload: Workload, trace: StepTrace, micro_batch: int, numel: int) -> int:
    """Temporaries of ``optimizer.step()`` on one flat fp32 tensor of ``numel`` elements.

    The trace stepped the real parameter list: with ``foreach`` on CUDA (``profiler/optimizers.py``) its
    temporaries span every parameter, on CPU torch loops tensor by tensor
    (``torch/optim/optimizer.py::_default_to_fused_or_foreach`` picks foreach only for CUDA tensors), so they span
    the largest one. ZeRO hands the optimizer one flat partition, so the scratch scales with its size.
    """
    phase = _phase(trace.phases(micro_batch), "optimizer")
    scratch = phase.activations + phase.temporaries
    reference = sum(workload.parameter_numels) if workload.target == "cuda" else max(workload.parameter_numels)
    profiled = 2 if trace.precision is Precision.BF16_TRUE else FP32_BYTES
    return int(scratch * numel / max(reference, 1) * FP32_BYTES / profiled)


_STEP_PHASES = ("forward", "loss", "backward", "optimizer")
"""The phases of a traced step (``profiler/trace.py``) the ZeRO estimates rebuild."""


def _phase(phases: dict[str, MemoryBreakdown], name: str) -> MemoryBreakdown:
    """Phase ``name``'s high point; empty when that phase allocated nothing, so the trace recorded none (plain
    SGD has no optimizer phase; a model that computes its loss inside forward, e.g. any Hugging Face causal LM
    given labels, has no loss phase)."""
    return phases.get(name) or MemoryBreakdown(parameters=0, gradients=0, optimizer_state=0, activations=0,
                                               temporaries=0, buffers=0, inputs=0)


def _step_facts(workload: Workload, trace: StepTrace, micro_batch: int) -> _Step:
    phases = trace.phases(micro_batch)
    backward = _phase(phases, "backward")
    full_gradients = sum(workload.parameter_numels) * model_dtype_bytes(trace.precision)
    beside = trace.activation_moment("backward", micro_batch)[1] if "backward" in phases else 0
    saved = backward.activations + backward.inputs
    blocks = trace.block_activation_bytes(micro_batch)
    if backward.gradients == 0 and blocks:
        saved = min(saved, sum(blocks) + backward.inputs)
    return _Step(
        # A phase the trace has no record of allocated nothing: it adds no bytes beyond what the others hold.
        activations={p: trace.activation_bytes(p, micro_batch) if p in phases else 0
                     for p in (*_STEP_PHASES, *phases)},
        inputs=_phase(phases, "optimizer").inputs,
        backward_gradient_bytes=backward.gradients,
        backward_high_point_non_state=backward.activations + backward.temporaries + backward.inputs,
        backward_progress=min(1.0, backward.gradients / max(full_gradients, 1)),
        gradients_beside_highest=beside,
        progress_at_highest=min(1.0, beside / max(full_gradients, 1)),
        backward_saved=saved,
    )


# -- model states ---------------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Phase:
    """Bytes of one moment of the step, by kind, on the device."""

    parameters: int = 0
    gradients: int = 0
    optimizer: int = 0
    activations: int = 0
    buffers: int = 0

    def total(self) -> int:
        return self.parameters + self.gradients + self.optimizer + self.activations + self.buffers


def estimate(workload: Workload, hardware: HardwareSpec, candidate: Candidate,
             settings: ZeroSettings) -> MemoryEstimate:
    """Per-device peak memory of a ZeRO stage (see the module docstring for the rules).

    For each phase of the step: the stage's model states at that moment, the trace's non-model-state bytes at
    the phase's high point (``workload.trace("half", checkpointing)``), and the communication buffers alive then.

    Args:
        workload: the traced step.
        hardware: nodes and ranks (``N = hardware.world_size``).
        candidate: micro-batch and activation checkpointing.
        settings: the DeepSpeed settings in force.

    Returns:
        The highest phase with its breakdown, plus CPU and NVMe bytes per node.
    """
    trace = workload.trace("half", candidate.activation_checkpointing)
    states = model_states(workload, hardware.world_size, settings)
    build = _zero3 if settings.stage == 3 else _zero12
    b = candidate.micro_batch_size
    phases, notes = build(workload, hardware, trace, candidate, settings, _step_facts(workload, trace, b), states)
    # The trace records one high point per phase; a smaller micro-batch may peak at another moment of backward
    # (later, once buckets exist). Every moment of the step holds at least as much at a larger micro-batch, so
    # the backward peak at b is at least the one at any b' < b: take the highest.
    for smaller in _earlier_micro_batches(trace, b):
        earlier, _ = build(workload, hardware, trace, candidate, settings, _step_facts(workload, trace, smaller),
                           states)
        phases["backward"] = max(phases["backward"], earlier["backward"], key=_Phase.total)
    peak_name = max(phases, key=lambda p: phases[p].total())
    peak = phases[peak_name]
    overhead = workload.cuda_overhead_bytes if workload.target == "cuda" else 0
    gpu = GpuMemory(parameters=peak.parameters, gradients=peak.gradients, optimizer=peak.optimizer,
                    activations=peak.activations, buffers=peak.buffers + workload.buffer_bytes, overhead=overhead)
    per_node = hardware.processes_per_node
    if states.cpu or states.nvme:
        notes.append(f"Per rank outside the GPU: {states.cpu / 2**20:.4g} MiB CPU "
                     f"({states.cpu_master_and_state / 2**20:.4g} fp32 master/gradients/state, "
                     f"{states.cpu_16bit / 2**20:.4g} model-dtype copies, {states.cpu_buffers / 2**20:.4g} staging "
                     f"and swap buffers), {states.nvme / 2**20:.4g} MiB NVMe; x{per_node} ranks per node.")
    return MemoryEstimate(gpu=gpu, peak_phase=peak_name,
                          cpu_bytes_per_node=states.cpu * per_node, nvme_bytes_per_node=states.nvme * per_node,
                          notes=tuple(notes))


def _earlier_micro_batches(trace: StepTrace, micro_batch: int) -> list[int]:
    """The micro-batches below ``micro_batch`` where the backward estimate can be highest.

    From micro-batch 2 on, each quantity of a phase is affine in the micro-batch, clamped at zero
    (:func:`autoshard.strategies.step_trace._affine`), so the estimate is piecewise affine: its maximum over
    ``[1, micro_batch)`` lies at an end or next to a point where a quantity reaches zero.
    """
    one, two = (_phase(dict(t.phase_peaks), "backward") for t in (trace.at_1, trace.at_2))
    points = {1, 2, micro_batch - 1}
    for field in ("gradients", "activations", "temporaries", "inputs"):
        a, c = getattr(one, field), getattr(two, field)
        if a > c:  # reaches zero at 1 + a / (a - c)
            x = 1 + a / (a - c)
            points |= {math.floor(x), math.ceil(x)}
    return sorted(p for p in points if 1 <= p < micro_batch)


def _zero12(workload: Workload, hardware: HardwareSpec, trace: StepTrace, candidate: Candidate,
            settings: ZeroSettings, step: _Step, states: ModelStates) -> tuple[dict[str, _Phase], list[str]]:
    lp = model_dtype_bytes(workload.precision)
    numels = workload.parameter_numels
    total, largest = sum(numels), max(numels)
    alignment = NCCL_START_ALIGNMENT * hardware.world_size
    part = math.ceil(total / alignment) * alignment // hardware.world_size  # as flat_layout
    offload = settings.offload_optimizer != "none"
    # Offload forces contiguous gradients (DeepSpeedZeroOptimizer.__init__: `contiguous_gradients or cpu_offload`).
    contiguous = settings.contiguous_gradients or offload
    # Reduce buckets are allocated at their full size at the first gradient hook of backward and freed at the end
    # of the reduction epilogue; two with overlap_comm (setup_buckets / _release_ipg_buffers). Without contiguous
    # gradients, buffered_reduce_fallback flattens each bucket into a new tensor instead.
    bucket = settings.reduce_bucket_size * lp * ((2 if settings.overlap_comm else 1) if contiguous else 0)
    # allreduce_bucket flattens the bucket's slices into a new tensor before the all-reduce.
    flat_copy = min(settings.reduce_bucket_size, total) * lp
    params, gin = states.gpu_parameters, states.gpu_gradients
    held = states.gpu_master + states.gpu_optimizer_state
    # Gradients are reduced inside the hooks when they are partitioned (ZeRO-2) or with overlap_comm
    # (process_gradients); ZeRO-1 without overlap keeps them all and reduces after backward (reduce_gradients).
    in_hooks = settings.stage == 2 or settings.overlap_comm
    started = step.backward_progress > 0
    # Where the non-state bytes peak (usually the start of backward) a gradient may not exist yet: then neither
    # the buckets nor the partition do (allocated at the first hook and first reduction, setup_buckets /
    # copy_grads_in_partition; released in _release_ipg_buffers).
    started_at_highest = step.gradients_beside_highest > 0
    act = step.activations
    notes = [
        f"ZeRO-{settings.stage} (deepspeed 0.19.8 stage_1_and_2.py DeepSpeedZeroOptimizer): all {total:,} "
        f"parameters in one {lp}-byte flat buffer per rank; fp32 master + optimizer state of a {part:,}-element "
        "partition" + (" on CPU" if offload else "") + ".",
        f"Reduce bucket: reduce_bucket_size={settings.reduce_bucket_size:,} elements x {lp} B"
        + (" x 2 (overlap_comm)" if settings.overlap_comm else "") + " allocated in full during backward "
        "(setup_buckets).",
    ]
    # Accumulating (several micro-batches per step), what a micro-batch leaves for the next is alive through its
    # forward: ZeRO-1 reduces only at the accumulation boundary (reduce_ready_partitions_and_remove_grads,
    # reduce_gradients), so the 16-bit gradients accumulate whole in .grad; ZeRO-2 reduces every micro-batch
    # into grads_in_partition, which lives until the step.
    carried = 0
    if candidate.gradient_accumulation > 1 and not offload:
        carried = gin if settings.stage == 2 else total * lp
        notes.append(f"{candidate.gradient_accumulation} micro-batches per step: "
                     + ("the gradient partition (grads_in_partition) is kept between micro-batches"
                        if settings.stage == 2 else "the 16-bit gradients accumulate whole in .grad until the "
                        "boundary's reduction") + ", alive through every forward after the first")
    # ZeRO-1's reduce buckets outlive a micro-batch too. The engine calls the reduction only at the boundary
    # (engine.py::allreduce_gradients: reduce_gradients for stage 1; ZeRO-2's
    # overlapping_partition_gradients_reduce_epilogue every micro-batch), so the epilogue that frees the buckets
    # and clears ready_for_gradients (independent_gradient_partition_epilogue -> _release_ipg_buffers) runs once
    # per step: the buckets setup_buckets allocates at the first micro-batch's first gradient hook stay alive,
    # not allocated again, through every later forward and backward until the boundary's reduction.
    kept_buckets = bucket if candidate.gradient_accumulation > 1 and settings.stage == 1 else 0
    if kept_buckets:
        notes.append("ZeRO-1's reduce bucket, allocated in the first micro-batch's backward (setup_buckets), is "
                     "kept until the boundary's reduction frees it (_release_ipg_buffers).")
    phases = {name: _Phase(parameters=params, optimizer=held, gradients=carried, activations=act[name],
                           buffers=kept_buckets)
              for name in ("forward", "loss")}
    if offload:
        # A GPU staging buffer of the largest parameter for CPU copies (temp_grad_buffer_for_gpu_offload), and an
        # fp32 copy of a gradient slice before it goes to the CPU (async_inplace_copy_grad_to_fp32_buffer_from_gpu).
        staging, convert = largest * lp, largest * FP32_BYTES
        reducing_bytes = staging + bucket + convert
        phases["backward"] = max(
            _Phase(parameters=params, activations=act["backward"],
                   buffers=reducing_bytes if started_at_highest else staging + kept_buckets),
            # ZeRO-1 keeps every .grad until backward ends: the trace's high point, gradients and activations of
            # the same moment (see below).
            _Phase(parameters=params, gradients=0 if in_hooks else step.backward_gradient_bytes,
                   activations=step.backward_high_point_non_state,
                   buffers=reducing_bytes if started else staging + kept_buckets),
            _Phase(parameters=params, activations=step.backward_saved, buffers=reducing_bytes),
            _Phase(parameters=params, gradients=0 if in_hooks else total * lp, activations=step.inputs,
                   buffers=reducing_bytes),
            key=_Phase.total)
        phases["optimizer"] = _Phase(parameters=params, activations=step.inputs, buffers=staging)
        notes.append(
            "Optimizer offload: the fp32 master, its fp32 gradient, optimizer state and a 16-bit copy of the "
            "partition live in (pinned) CPU memory (DeepSpeedZeroOptimizer.__init__ / initialize_optimizer_states); "
            "the step runs on the CPU (DeepSpeedCPUAdam, no GPU scratch). NVMe is treated as CPU: "
            "stage_1_and_2.py has no swapper.")
        return phases, notes
    # Moments of backward: the highest activations and the trace's high point (buckets and partition there only
    # if a gradient exists already); the first gradient hook, just after it, when the loss gradient's
    # temporaries are gone but the saved activations are not; and the end of backward, activations gone,
    # gradients at their most.
    if in_hooks:
        # Each gradient moves into the bucket as produced; the partition's own go to grads_in_partition, which
        # the rank whose partition backward reaches first allocates at the first reduction.
        reducing = _Phase(parameters=params, optimizer=held, gradients=gin, buffers=bucket + flat_copy)
        end_gradients = gin + largest * lp
    else:
        # reduce_gradients after backward: each gradient is copied into the bucket and its own storage freed, so
        # the flattened copy of a bucket replaces gradients already moved; grads_in_partition is allocated at the
        # first reduction that reaches the rank's partition (rank 0: the first one).
        reducing = _Phase(parameters=params, optimizer=held, buffers=bucket)
        end_gradients = total * lp + gin
    phases["backward"] = max(
        # The highest activations, with what is alive beside them whenever they peak: ZeRO-2's partition and
        # buckets once a gradient exists (ZeRO-1's .grad as the trace holds them there), and the gradients
        # carried from earlier micro-batches.
        _Phase(parameters=params, optimizer=held,
               gradients=max(carried, (reducing.gradients if started_at_highest else 0) if in_hooks
                             else step.gradients_beside_highest),
               activations=act["backward"], buffers=reducing.buffers if started_at_highest else kept_buckets),
        # ZeRO-1 (without overlap_comm) holds every .grad as the single-device trace does, so its gradients peak
        # with the trace's: at its high point, beside that moment's activations (which are below the highest,
        # reached earlier with fewer gradients: adding the two counted ~11 GiB no step holds, Llama-2-7B at
        # micro-batch 12, and made memory fall as the micro-batch grew); the bucket exists from the first hook.
        _Phase(parameters=params, optimizer=held,
               gradients=max(carried, step.backward_gradient_bytes if not in_hooks
                             else reducing.gradients if started else 0),
               activations=step.backward_high_point_non_state,
               buffers=reducing.buffers if started else kept_buckets),
        _Phase(parameters=params, optimizer=held, gradients=max(carried, reducing.gradients),
               activations=step.backward_saved, buffers=reducing.buffers),
        _Phase(parameters=params, optimizer=held, gradients=max(carried, end_gradients), activations=step.inputs,
               buffers=reducing.buffers),
        key=_Phase.total)
    # step(): flatten the partition's gradients (a copy), cast to fp32 (a second copy unless already fp32), free
    # grads_in_partition, then optimizer.step on the fp32 partition.
    fp32_grad = states.gpu_fp32_gradients
    flatten = gin + lp * part + (fp32_grad if lp != FP32_BYTES else 0)
    scratch = optimizer_scratch_bytes(workload, trace, candidate.micro_batch_size, part)
    phases["optimizer"] = max(
        _Phase(parameters=params, optimizer=held, gradients=flatten, activations=step.inputs),
        _Phase(parameters=params, optimizer=held, gradients=fp32_grad, activations=step.inputs + scratch),
        key=_Phase.total)
    notes.append("Optimizer phase (DeepSpeedZeroOptimizer.step): the partition's gradients flattened and cast to "
                 "fp32, then the optimizer's scratch scaled to the flat partition; parameters are all-gathered "
                 "in place (all_gather_into_tensor into the flat buffer: no extra memory).")
    return phases, notes


def _zero3(workload: Workload, hardware: HardwareSpec, trace: StepTrace, candidate: Candidate,
           settings: ZeroSettings, step: _Step, states: ModelStates) -> tuple[dict[str, _Phase], list[str]]:
    world = hardware.world_size
    lp = model_dtype_bytes(workload.precision)
    numels = workload.parameter_numels
    total = sum(numels)
    # Frozen parameters are gathered too (partitioned_layout says when they stay gathered into backward).
    layout = partitioned_layout(numels, world, settings, workload.module_parameter_numels)
    persistent = layout.persistent_numel * lp if world > 1 or settings.offload_param != "none" else 0
    bucket = settings.reduce_bucket_size * lp if settings.contiguous_gradients else 0  # allocated once, kept
    params, grads = states.gpu_parameters, states.gpu_gradients
    held = states.gpu_master + states.gpu_optimizer_state
    act = step.activations
    # Gathered parameters (partitioned_param_coordinator.py::fetch_sub_module): a module's own parameters when it
    # runs (``current``, taken as the largest tensor) and, once the trace is known, up to ``prefetch`` more
    # in flight. A coalesced fetch lands in one flat buffer that lives until its last parameter is waited for,
    # each parameter being copied out of it (AllGatherCoalescedHandle.wait: torch.cat), so the step's first
    # fetch briefly holds twice its size. With one rank nothing is gathered: the parameter is a view of its
    # partition (NoGatherCoalescedHandle), unless that is on the CPU.
    copies = 1 if world > 1 or settings.offload_param != "none" else 0
    gathered_numel = layout.gathered_numel * copies
    current = layout.largest_gathered_numel * copies
    prefetch = layout.prefetch_numel * copies
    retained = layout.retained_numel * copies
    start = 2 * min(gathered_numel, max(prefetch, current))
    # Backward gathers only what it uses: frozen tensors before the first trainable one are not among them.
    backward_numel = layout.backward_numel * copies
    boundary = max(current, min(backward_numel, retained + prefetch))
    # In backward the retained tail of forward is used first, then the rest is fetched module by module with
    # the prefetch ahead; the trace's gradients at a moment tell how far backward has got there (at its highest
    # activations, which can come long before its high point: the start, under checkpointing at micro-batch 1).
    def gathered_at(progress: float) -> int:
        done = progress * backward_numel
        kept = max(0.0, retained - done)
        rest = max(0.0, backward_numel - done - kept)
        return int(max(current, kept + min(rest, current + prefetch)))

    backward_gathered = gathered_at(step.progress_at_highest)
    # reduce_scatter_coalesced concatenates a bucket's gradients (padded per rank) into a new tensor; it exists
    # at the trace's backward high point only if a gradient does, and at the first reduction just after it.
    scatter_copy = min(settings.reduce_bucket_size, total) * lp
    started = step.gradients_beside_highest > 0
    # The head's full gradient: of a trainable tensor only (a frozen head has none).
    head_gradient = max((n for n in numels if n > settings.param_persistence_threshold), default=0) * copies * lp

    def phase(activations: int, gathered: int | float, extra: int = 0) -> _Phase:
        return _Phase(parameters=params, gradients=grads, optimizer=held, activations=activations,
                      buffers=bucket + int(gathered) * lp + extra)

    phases = {
        "forward": max(phase(step.inputs, start), phase(act["forward"], boundary), key=_Phase.total),
        "loss": phase(act["loss"], boundary),
        # The head's backward comes first: what the loss phase holds, the parameters gathered at the boundary,
        # and the head weight's full gradient (taken as the largest tensor), alive until the hook copies it into
        # the bucket. Under checkpointing the trace's own backward high point comes later (its gradients pile up
        # on one device), so this moment is not in it.
        "backward": max(phase(act["backward"], backward_gathered, scatter_copy if started else 0),
                        phase(step.backward_saved, boundary, scatter_copy),
                        phase(act["loss"], boundary, head_gradient), key=_Phase.total),
    }
    # step(): every gathered parameter is released first (_partition_all_parameters, persistent ones too; they
    # are re-gathered in _post_step); per sub-group the gradient partition is flattened and cast to fp32.
    sub = layout.sub_group_numel
    if settings.offload_optimizer != "none":
        phases["optimizer"] = _Phase(parameters=params - persistent, activations=step.inputs, buffers=bucket)
    else:
        fp32_grad = states.gpu_fp32_gradients
        flatten = lp * sub + (fp32_grad if lp != FP32_BYTES else 0)
        scratch = optimizer_scratch_bytes(workload, trace, candidate.micro_batch_size, sub)
        phases["optimizer"] = max(
            _Phase(parameters=params - persistent, gradients=grads + flatten, optimizer=held,
                   activations=step.inputs, buffers=bucket),
            _Phase(parameters=params - persistent, gradients=grads + fp32_grad, optimizer=held,
                   activations=step.inputs + scratch, buffers=bucket),
            key=_Phase.total)
    notes = [
        f"ZeRO-3 (deepspeed 0.19.8 stage3.py): {layout.partition_numel:,}-element partitions of every parameter "
        f"({lp} B each; fp32 master and optimizer state"
        + ("" if settings.offload_optimizer == "none" else f" on {settings.offload_optimizer}") + "); "
        f"{layout.persistent_numel:,} elements in tensors <= stage3_param_persistence_threshold="
        f"{settings.param_persistence_threshold:,} also kept whole on every rank.",
        f"Gathered for compute: {layout.retained_numel:,} of {layout.gathered_numel:,} elements stay gathered "
        f"from forward into backward (stage3_max_reuse_distance={settings.max_reuse_distance:,}), plus "
        f"prefetch windows of {layout.prefetch_numel:,} elements (stage3_prefetch_bucket_size, "
        "stage3_max_live_parameters); a fetch briefly holds its flat buffer and the copies.",
        f"One reduce bucket of reduce_bucket_size={settings.reduce_bucket_size:,} x {lp} B kept for the whole run "
        "(_setup_for_real_optimizer).",
    ]
    if settings.offload_param != "none":
        notes.append(f"Parameter offload to {settings.offload_param}: the partitions leave the GPU; gathered and "
                     "persistent parameters stay on it.")
    return phases, notes
