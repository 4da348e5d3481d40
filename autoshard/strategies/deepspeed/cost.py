"""Step time of DeepSpeed ZeRO stages 1-3: compute (:mod:`autoshard.strategies.step_time`), the collectives
deepspeed 0.19.8 issues, their overlap, and offload traffic.

Collectives per step, per rank (payload in the model dtype, which is also the communication dtype:
``engine.py::DeepSpeedEngine.communication_data_type``):

* ZeRO-1/2 (``stage_1_and_2.py``): gradients are reduced bucket by bucket. With the defaults
  (``reduce_scatter=True``, ``use_multi_rank_bucket_allreduce=True``) ``average_tensor`` sends every bucket
  through ``allreduce_and_scatter``: an **all-reduce** of ``reduce_bucket_size`` elements at a time, each rank
  keeping its slices — not a reduce-scatter. After the step the updated partitions are **all-gathered** into
  the flat buffer with one ``all_gather_into_tensor`` per parameter group (``runtime/utils.py::
  all_gather_dp_groups``). So ZeRO-1/2 move 1.5x DDP's volume in 0.19.8, where the paper's ZeRO-2 moves 1x
  (reduce-scatter + all-gather, Rajbhandari et al. 2020, sec. 7.2.1).
* ZeRO-3 (``stage3.py``, ``partitioned_param_coordinator.py``): parameters are **all-gathered** in forward and,
  for those released after forward, again in backward; gradients are **reduce-scattered** per bucket
  (``reduce_scatter_coalesced``); the persistent parameters are all-gathered once after the step
  (``_post_step``). Without retention this is 1.5x DDP (Rajbhandari et al. 2020, sec. 7.2.2).

Overlap model: with ``overlap_comm`` gradient reduction runs on a side stream during backward
(``reduction_stream`` / ``reduce_and_partition_stream``) and ZeRO-3's gathers on ``__allgather_stream``, ahead of
use (prefetch); without it both run on the compute stream and add to the step. Always exposed: the last bucket
(reduced in the epilogue, after the last gradient), ZeRO-3's first fetch (nothing precedes it), and the
post-step all-gathers (the next forward needs them). The rest is exposed only where it exceeds the compute of
its pass.
"""

from __future__ import annotations

import dataclasses
import math

from autoshard.hardware.specs import HardwareSpec
from autoshard.strategies import costs, step_time
from autoshard.strategies.base import Candidate, Collective, CostEstimate
from autoshard.strategies.deepspeed.layout import (
    ZeroSettings,
    flat_layout,
    partitioned_layout,
)
from autoshard.strategies.deepspeed.offload_cost import offload_seconds
from autoshard.strategies.deepspeed.optimizer_state import model_dtype_bytes
from autoshard.strategies.module_census import checkpointed_block_indices
from autoshard.strategies.workload import Workload, compute_dtype, tf32_matmuls

ENGINE_HOST_S: dict[int, float] = {1: 0.24e-3, 2: 0.22e-3, 3: 1.04e-3}
"""Host time the ZeRO engine adds per step, per stage: ZeRO-1/2 per trainable parameter tensor (the gradient
bookkeeping of ``reduce_ready_partitions_and_remove_grads``, once per parameter, ``stage_1_and_2.py``), ZeRO-3
per module that owns a gathered parameter (its forward and backward hooks: ``fetch_sub_module`` with the
prefetch bookkeeping, ``release_sub_module``, the gradient's reduce and partition; ``parameter_offload.py``,
``partitioned_param_coordinator.py``, ``stage3.py``), deepspeed 0.19.8. Measured with the real engines on CPU, world
size 1, as the slope over the layer count of forward + backward time less plain torch's
(``benchmarks/zero_hooks.py``). ZeRO-1/2: stacks of ``nn.Linear(320, 320)`` on the build machine of 2026-11-25 (an
Intel Xeon; ``python benchmarks/zero_hooks.py``, docs/benchmarks/zero_hooks.md) — the figure holds the CPU's own
gradient copies too, and the same stacks give 0.57 and 0.41 ms on the AMD EPYC build machine of 2026-11-29
(docs/benchmarks/zero3_host.md): how a GPU server's host compares is what the GPU campaign measures. ZeRO-3: the
narrow ``nn.Linear(8, 8)`` stack with every parameter gathered, the hooks' Python alone, in the run that measured
:data:`ZERO3_MODULE_HOST_S` (``python benchmarks/zero_hooks.py --steps 30 --repeats 3 --name zero3_host``,
docs/benchmarks/zero3_host.md; the wide stack, whose CPU copies would be kernels on a GPU, gives 1.89 ms there and
gave 1.03 ms on the Xeon). It is Python on the thread that launches the kernels, so it joins the launches on the
host's side of the step (:func:`autoshard.strategies.step_time.estimate`): hidden while the GPU is the slower
side."""

ZERO3_MODULE_HOST_S: dict[str, float] = {"persistent": 0.96e-3, "parameterless": 0.54e-3}
"""ZeRO-3's host time per step for the modules it gathers nothing for: one owning only persistent parameters
(at most ``stage3_param_persistence_threshold`` elements each: a norm, a small bias-only module) and one owning
none (an activation, a dropout, a block or attention module that only calls its children). DeepSpeed hooks every
module (``_register_deepspeed_module`` recurses over all children, ``parameter_offload.py``): the same fetch and
release bookkeeping runs, and each module's outputs are wrapped in an autograd function for its backward hook.
Measured as :data:`ENGINE_HOST_S`'s ZeRO-3 figure is, in the same run: ZeRO-3 over torch per layer of the narrow
``nn.Linear(8, 8)`` stack with every parameter persistent (the default threshold) and of a stack of ``nn.ReLU``
(docs/benchmarks/zero3_host.md, "ZeRO-3's hooks by module")."""

ZERO3_MODULE_KINDS = ("gathered", "persistent", "parameterless")
"""What a module owns, for ZeRO-3's hooks: a parameter above ``stage3_param_persistence_threshold`` (gathered
around it), only persistent ones, or none."""

ZERO3_RECOMPUTE_HOST_S: dict[str, float] = {"gathered": 0.53e-3, "persistent": 0.39e-3, "parameterless": 0.60e-3}
"""ZeRO-3's host time per step, again, for a module inside a block activation checkpointing recomputes, by what it
owns (as :data:`ZERO3_MODULE_HOST_S`): the recomputation calls the block (``torch.utils.checkpoint``: ``fit()``'s
wrapper and the Hugging Face models' run ``nn.Module.__call__``), so every module in it runs DeepSpeed's forward
hooks a second time (``pre_sub_module_forward_function``: the fetch, its prefetch bookkeeping and the outputs'
wrapping; ``post_sub_module_forward_function``: the release). Measured as ZeRO-3 over torch per layer of the narrow
stacks with each layer checkpointed, less the same uncheckpointed (``python benchmarks/zero_hooks.py --passes
recompute --layers 16 48 96 --steps 30 --repeats 3 --name zero3_recompute``, docs/benchmarks/zero3_recompute.md:
0.53, 0.39 and 0.60 ms, about half of each module's forward + backward hooks, and alike whatever it owns — the
forward hooks' bookkeeping, not the gathering, at world size 1). Only host time: a parameter released after
forward is fetched by the recomputation instead of the backward that follows it (``release_sub_module`` keeps what
is reused within ``stage3_max_reuse_distance``), so the all-gathers stay as many."""

ENGINE_STEP_HOST_S: dict[int, tuple[float, float]] = {1: (2.35e-3, 0.035e-3), 2: (1.62e-3, 0.043e-3),
                                                      3: (2.82e-3, 0.038e-3)}
"""Host time of the ZeRO engine's ``engine.step()`` without offload, per step and per parameter tensor: its Python
loops over the parameter tensors (ZeRO-1/2: ``free_grad_in_param_list`` over every one, the flattening and norms
of the partition's gradients, the copy back into the 16-bit parameters, ``stage_1_and_2.py::step``; ZeRO-3 per
partitioned tensor: ``_partition_all_parameters``, ``zero_grad``, the norm, flattening the gradients and
unflattening the updated partition, ``stage3.py::step``), deepspeed 0.19.8, and the launches of its kernels, once
per optimizer step. Measured at world size 1, where the partition is every tensor (it errs high on more ranks),
on a stack narrow enough that the optimizer's arithmetic is negligible (``nn.Linear(8, 8)``): the line of
``step()``'s time over the parameter tensors. ZeRO-1/2: ``python benchmarks/zero_hooks.py --passes step --name
zero_step --steps 40 --repeats 5`` (docs/benchmarks/zero_step.md; torch's for-loop AdamW took 0.071 ms per tensor
in the same runs, for scale); ZeRO-3 with every parameter partitioned (``stage3_param_persistence_threshold`` 0),
docs/benchmarks/zero3_host.md, where ZeRO-1/2 gave 2.07 ms + 0.044 ms and 2.55 ms + 0.031 ms. The optimizer's
kernels run on the GPU meanwhile: the step takes the longer of the two (:func:`_engine_step_host`)."""

ENGINE_OFFLOAD_STEP_HOST_S: dict[int, tuple[float, float]] = {2: (2.30e-3, 0.0), 3: (0.89e-3, 0.035e-3)}
"""Host time of ``engine.step()`` under CPU optimizer offload, per step and per parameter tensor, beside
``DeepSpeedCPUAdam``'s arithmetic (priced by :func:`.offload_cost.cpu_adam_parameters_per_s`): the offloaded
step's own Python (the norm over the CPU partition, ``DeepSpeedCPUAdam.step``'s call per group, the copy of the
updated fp32 partition into the 16-bit parameters; ZeRO-3 per partitioned sub-group and tensor), deepspeed 0.19.8.
Measured as :data:`ENGINE_STEP_HOST_S` is, with autoshard's offload presets and ``DeepSpeedCPUAdam`` (``python
benchmarks/zero_hooks.py --passes offload --layers 16 48 96 128 --steps 30 --repeats 3 --name zero_offload_step``,
docs/benchmarks/zero_offload_step.md): ZeRO-2 flat over the tensors (2.3 ms; its slope, -0.0004 ms, is taken as 0),
ZeRO-3 0.035 ms per tensor whether gathered or persistent, with the persistent stack's intercept (the gathered
one's, -0.9 ms, is below it by noise). It runs on the host before and after the CPU Adam: added to it. ZeRO-3's
is at least the resident step's (:data:`ENGINE_STEP_HOST_S`, :data:`ZERO3_STEP_PERSISTENT_S`): it runs the same
loops and ``_post_step``'s all-gather of the persistent parameters, and one run measuring both
(docs/benchmarks/zero_step_offload.md, a busy machine) found it the longer at every depth."""

ZERO3_STEP_PERSISTENT_S = 0.10e-3
"""ZeRO-3's ``engine.step()`` host time per persistent parameter tensor (``_post_step`` all-gathers them,
``persistent_parameters[0].all_gather(...)``, a loop over them): the slope of the same line with every parameter
of the narrow stack persistent (the default threshold), docs/benchmarks/zero3_host.md. Used in place of
:data:`ENGINE_STEP_HOST_S`'s slope for those tensors."""

def estimate(workload: Workload, hardware: HardwareSpec, candidate: Candidate,
             settings: ZeroSettings) -> CostEstimate:
    """Predicted step time of one ZeRO candidate (see the module docstring for the model).

    Args:
        workload: the traced step.
        hardware: nodes, links, GPU peak and host link.
        candidate: micro-batch and checkpointing.
        settings: the DeepSpeed settings in force.

    Returns:
        Compute, communication (total and exposed), offload time, step time and global throughput.
    """
    trace = workload.trace("half", candidate.activation_checkpointing)
    b = candidate.micro_batch_size
    # Forward's share of the step's FLOPs, from the micro-batch-1 trace (the one that always counts FLOPs).
    one = trace.at_1
    forward_share = one.forward_flops / max(one.forward_flops + one.backward_flops, 1)
    notes: list[str] = []
    hooks_s, hooks_note = _engine_host(workload, settings, candidate.activation_checkpointing)
    compute_s, note = costs.step_compute_seconds(trace, b, hardware, compute_dtype(workload.precision),
                                                 host_extra_s=hooks_s, tf32_matmuls=tf32_matmuls(workload))
    notes += [note, *hooks_note]
    forward_s = compute_s * forward_share
    backward_s = compute_s - forward_s
    if settings.stage == 3:
        comm = _zero3_collectives(workload, hardware, settings)
    else:
        comm = _zero12_collectives(workload, hardware, settings)
    collectives, fwd_overlap, bwd_overlap, exposed_fixed, once_s, comm_notes = comm
    copies_s, copies_note = _gradient_copies(workload, hardware, settings)
    notes += copies_note
    if settings.overlap_comm:  # on the reduction stream, beside the all-reduce
        bwd_overlap += copies_s
    else:
        exposed_fixed += copies_s
    total_s = sum(costs.collective_seconds(c, hardware) for c in collectives) + copies_s
    exposed_s = (exposed_fixed + costs.exposed(fwd_overlap, forward_s) + costs.exposed(bwd_overlap, backward_s))
    notes += comm_notes
    contention_s, contention_note = costs.contention_seconds(total_s - min(exposed_s, total_s), compute_s, hardware)
    notes += [contention_note] if contention_note else []
    for scope in sorted({c.scope for c in collectives}):
        if not costs.link(hardware, scope).known:
            notes.append(f"{scope} link bandwidth unknown: {costs.UNKNOWN_LINK_BYTES_PER_S / 1e9:g} GB/s assumed")
    offload_s, offload_notes = offload_seconds(workload, hardware, settings, backward_s)
    notes += offload_notes
    if settings.offload_optimizer != "none":  # the offloaded step's Python, on the host with the CPU Adam
        step_host_s, step_note = _engine_step_host(workload, settings)
        offload_s += step_host_s
        notes += step_note
    optimizer_s = 0.0
    if settings.offload_optimizer == "none":  # the ZeRO optimizer steps this rank's fp32 partition on the GPU
        optimizer_s, optimizer_note = costs.optimizer_step_seconds(
            workload, hardware, candidate.activation_checkpointing, shard=hardware.world_size, flat=True)
        notes += [optimizer_note] if optimizer_note else []
        step_host_s, step_note = _engine_step_host(workload, settings)
        optimizer_s = max(optimizer_s, step_host_s)
        notes += step_note
    step_s = compute_s + exposed_s + contention_s + offload_s + optimizer_s
    # Under accumulation ZeRO-2 reduces every micro-batch's gradients (partition_gradients) and ZeRO-3 also
    # gathers parameters every micro-batch; ZeRO-1 reduces at the boundary. The all-gather after the step runs once.
    repeats = settings.stage >= 2
    samples_per_s = b * hardware.world_size / step_s
    tokens = workload.tokens_per_sample
    return CostEstimate(
        compute_s=compute_s,
        communication_s=total_s,
        exposed_communication_s=min(exposed_s, total_s) + contention_s,
        offload_s=offload_s,
        step_time_s=step_s,
        samples_per_s=samples_per_s,
        tokens_per_s=None if tokens is None else samples_per_s * tokens,
        collectives=tuple(collectives),
        notes=tuple(notes),
        optimizer_s=optimizer_s,
        repeated_communication_s=max(0.0, total_s - once_s) if repeats else 0.0,
        repeated_exposed_s=max(0.0, min(exposed_s, total_s) + contention_s - once_s) if repeats else 0.0,
    )


def _gradient_copies(workload: Workload, hardware: HardwareSpec, settings: ZeroSettings) -> tuple[float, list[str]]:
    """GPU time of the gradient copies ZeRO-1/2 make without ``contiguous_gradients`` (and its note).

    With it, each gradient is copied into the bucket as it is produced, and the bucket is reduced in place.
    Without it (and without offload, which forces it: ``DeepSpeedZeroOptimizer.__init__``), ``reduce_ipg_grads``
    takes ``buffered_reduce_fallback`` -> ``allreduce_no_retain`` -> ``allreduce_and_copy`` (``stage_1_and_2.py``,
    deepspeed 0.19.8; the same path in 0.5.x): each bucket's gradients are flattened into a new tensor
    (``allreduce_bucket``), all-reduced, and copied back into every ``.grad`` — two more passes over the
    16-bit gradients, each a read and a write: 4 x their bytes, memory-bound, on the stream of the reduction.
    """
    if settings.stage == 3 or settings.contiguous_gradients or settings.offload_optimizer != "none":
        return 0.0, []
    gpu = hardware.gpu
    if gpu is None:
        return 0.0, []
    grads = sum(workload.parameter_numels) * model_dtype_bytes(workload.precision)
    seconds = step_time.memory_bound_seconds(4 * grads, gpu)
    where = "on the reduction stream" if settings.overlap_comm else "on the compute stream, exposed"
    return seconds, [f"contiguous_gradients=False: each bucket flattened and copied back into the gradients "
                     f"(buffered_reduce_fallback), 4 x {grads / 2**30:.2f} GiB of memory traffic, "
                     f"{seconds * 1e3:.3g} ms {where}"]


_Comm = tuple[list[Collective], float, float, float, float, list[str]]
"""Collectives, seconds that may hide behind forward, behind backward, seconds always exposed, the part of those
run once per optimizer step (the all-gather after it), notes."""


def _gathered(numels: tuple[int, ...], settings: ZeroSettings) -> list[int]:
    """The parameters ZeRO-3 gathers, those above ``stage3_param_persistence_threshold`` (a linear layer's or
    embedding's weight; their biases and norms stay persistent): one fetched module each. A module owning two such
    parameters is fetched once (one ``all_gather_coalesced``) and counted twice: the count errs high there."""
    return [x for x in numels if x > settings.param_persistence_threshold]


def _engine_host(workload: Workload, settings: ZeroSettings, checkpointing: bool) -> tuple[float, list[str]]:
    """The ZeRO engine's host time per step (:data:`ENGINE_HOST_S`, and for ZeRO-3 :data:`ZERO3_MODULE_HOST_S`,
    with :data:`ZERO3_RECOMPUTE_HOST_S` for the modules checkpointing recomputes) and its note."""
    per = ENGINE_HOST_S[settings.stage]
    if settings.stage != 3:
        units = len(workload.parameter_numels)
        seconds = units * per
        return seconds, [f"ZeRO-{settings.stage} engine on the host: {units:,} parameter tensors x {per * 1e3:.3g} "
                         f"ms per step (gradient bookkeeping; measured, docs/benchmarks/zero_hooks.md): "
                         f"{seconds * 1e3:.3g} ms beside the kernel launches"]
    census = workload.module_largest_parameters
    if not census:  # not known: the modules owning a gathered parameter, one per gathered tensor
        units = len(_gathered(workload.parameter_numels, settings))
        seconds = units * per
        return seconds, [f"ZeRO-3 engine on the host: {units:,} modules with gathered parameters x "
                         f"{per * 1e3:.3g} ms per step (fetch, release, gradient partitioning; measured, "
                         f"docs/benchmarks/zero3_host.md): {seconds * 1e3:.3g} ms beside the kernel launches"]
    threshold = settings.param_persistence_threshold

    def kind(n: int) -> str:
        return "gathered" if n > threshold else "persistent" if n > 0 else "parameterless"

    counts = dict.fromkeys(ZERO3_MODULE_KINDS, 0)
    for n in census:
        counts[kind(n)] += 1
    costs_s = {"gathered": per, **ZERO3_MODULE_HOST_S}
    seconds = sum(counts[k] * costs_s[k] for k in counts)
    parts = ", ".join(f"{counts[k]:,} {k} x {costs_s[k] * 1e3:.3g} ms" for k in counts)
    notes = [f"ZeRO-3 engine on the host: hooks on every module ({parts}; fetch, release, the outputs wrapped for "
             f"backward, gradient partitioning; measured, docs/benchmarks/zero3_host.md): {seconds * 1e3:.3g} ms per "
             "step beside the kernel launches"]
    if checkpointing and len(workload.module_blocks) == len(census):  # not known: not priced
        chosen = checkpointed_block_indices(workload.checkpoint_mode, len(workload.block_parameter_counts))
        again = dict.fromkeys(ZERO3_MODULE_KINDS, 0)
        for n, block in zip(census, workload.module_blocks, strict=True):
            if block in chosen:
                again[kind(n)] += 1
        recompute_s = sum(again[k] * ZERO3_RECOMPUTE_HOST_S[k] for k in again)
        if recompute_s:
            seconds += recompute_s
            parts = ", ".join(f"{again[k]:,} {k} x {ZERO3_RECOMPUTE_HOST_S[k] * 1e3:.3g} ms" for k in again)
            notes.append(f"ZeRO-3's forward hooks again in the recomputation of the {len(chosen):,} checkpointed "
                         f"blocks ({parts}; measured, docs/benchmarks/zero3_recompute.md): "
                         f"{recompute_s * 1e3:.3g} ms more on the host")
    return seconds, notes


def _engine_step_host(workload: Workload, settings: ZeroSettings) -> tuple[float, list[str]]:
    """Host time of the ZeRO engine's ``step()`` (:data:`ENGINE_STEP_HOST_S`, and for ZeRO-3
    :data:`ZERO3_STEP_PERSISTENT_S`; under optimizer offload :data:`ENGINE_OFFLOAD_STEP_HOST_S`) and its note."""
    numels = workload.parameter_numels
    if settings.offload_optimizer != "none":
        intercept, per = ENGINE_OFFLOAD_STEP_HOST_S[3 if settings.stage == 3 else 2]
        seconds = intercept + len(numels) * per
        note = (f"ZeRO-{settings.stage} offloaded engine.step() on the host: {intercept * 1e3:.3g} ms + "
                f"{len(numels):,} parameter tensors x {per * 1e3:.3g} ms = {seconds * 1e3:.3g} ms (measured, "
                "docs/benchmarks/zero_offload_step.md), beside DeepSpeedCPUAdam's arithmetic")
        resident = 0.0
        if settings.stage == 3:
            resident, _ = _engine_step_host(workload, dataclasses.replace(settings, offload_optimizer="none",
                                                                          offload_param="none"))
        if resident > seconds:  # the offloaded step runs the same loops and _post_step's persistent all-gather
            note += (f"; at least the {resident * 1e3:.3g} ms of the step without offload, whose loops over the "
                     "partitions and all-gather of the persistent parameters it runs too (stage3.py::step, "
                     "_post_step; the two lines were measured in separate runs)")
            seconds = resident
        return seconds, [note]
    intercept, per = ENGINE_STEP_HOST_S[settings.stage]
    if settings.stage == 3:
        partitioned = len(_gathered(numels, settings))
        persistent = len(numels) - partitioned
        seconds = intercept + partitioned * per + persistent * ZERO3_STEP_PERSISTENT_S
        how = (f"{intercept * 1e3:.3g} ms + {partitioned:,} partitioned parameter tensors x {per * 1e3:.3g} ms + "
               f"{persistent:,} persistent ones x {ZERO3_STEP_PERSISTENT_S * 1e3:.3g} ms (their all-gather after "
               "the step)")
    else:
        seconds = intercept + len(numels) * per
        how = f"{intercept * 1e3:.3g} ms + {len(numels):,} parameter tensors x {per * 1e3:.3g} ms"
    page = "zero3_host" if settings.stage == 3 else "zero_step"
    return seconds, [f"ZeRO-{settings.stage} engine.step() on the host: {how} = {seconds * 1e3:.3g} ms (measured, "
                     f"docs/benchmarks/{page}.md); the optimizer step takes the longer of it and its kernels"]


def _scope(hardware: HardwareSpec) -> str:
    return "world" if hardware.nodes > 1 else "intra"


def _seconds(kind: str, payload: int, calls: int, hardware: HardwareSpec) -> float:
    c = Collective(kind=kind, bytes=payload, calls=calls, group_size=hardware.world_size, scope=_scope(hardware),
                   overlappable=False)
    return costs.collective_seconds(c, hardware)


def _zero12_collectives(workload: Workload, hardware: HardwareSpec, settings: ZeroSettings) -> _Comm:
    n, lp = hardware.world_size, model_dtype_bytes(workload.precision)
    layout = flat_layout(workload.parameter_numels, n)
    total = sum(workload.parameter_numels)
    buckets = max(1, math.ceil(total / settings.reduce_bucket_size))
    grads = Collective(kind="all_reduce", bytes=layout.aligned_numel * lp, calls=buckets, group_size=n,
                       scope=_scope(hardware), overlappable=settings.overlap_comm)
    gather = Collective(kind="all_gather", bytes=layout.aligned_numel * lp, calls=1, group_size=n,
                        scope=_scope(hardware), overlappable=False)
    grads_s = costs.collective_seconds(grads, hardware)
    last_s = _seconds("all_reduce", min(settings.reduce_bucket_size, total) * lp, 1, hardware)
    gather_s = costs.collective_seconds(gather, hardware)
    if settings.overlap_comm:
        bwd_overlap, fixed = max(0.0, grads_s - last_s), min(last_s, grads_s) + gather_s
    else:
        bwd_overlap, fixed = 0.0, grads_s + gather_s
    notes = [
        f"gradients: all-reduce in {buckets} bucket(s) of reduce_bucket_size (average_tensor -> "
        "allreduce_and_scatter, use_multi_rank_bucket_allreduce=True), "
        + ("on the reduction stream during backward, the last bucket exposed" if settings.overlap_comm
           else "on the compute stream (overlap_comm=False): fully exposed"),
        "parameters: one all-gather of the updated partitions after the step (all_gather_into_tensor), exposed",
    ]
    return [grads, gather], 0.0, bwd_overlap, fixed, gather_s, notes


def _zero3_collectives(workload: Workload, hardware: HardwareSpec, settings: ZeroSettings) -> _Comm:
    n, lp = hardware.world_size, model_dtype_bytes(workload.precision)
    numels = workload.parameter_numels  # the trainable tensors: reduce-scattered, stepped, persistent ones re-gathered
    every = tuple(abs(x) for x in workload.module_parameter_numels) or numels  # frozen ones gathered for compute too
    layout = partitioned_layout(numels, n, settings, module_numels=workload.module_parameter_numels)
    scope = _scope(hardware)
    padded = [math.ceil(x / n) * n for x in numels]
    gathered = [math.ceil(x / n) * n for x in _gathered(every, settings)]
    persistent = sum(padded) - sum(math.ceil(x / n) * n for x in _gathered(numels, settings))
    # Backward fetches again what it uses and forward released (not frozen tensors before the first trainable one).
    released = max(0, layout.backward_numel - layout.retained_numel)
    window = max(layout.prefetch_numel, layout.largest_gathered_numel, 1)
    # One all_gather_coalesced per fetched module, prefetched or not (fetch_sub_module); backward re-fetches the
    # released share of them.
    fwd_calls = len(gathered)
    bwd_calls = math.ceil(fwd_calls * released / max(layout.gathered_numel, 1)) if released else 0
    buckets = max(1, math.ceil(sum(numels) / settings.reduce_bucket_size))
    overlap = settings.overlap_comm
    fwd = Collective(kind="all_gather", bytes=sum(gathered) * lp, calls=fwd_calls, group_size=n, scope=scope,
                     overlappable=overlap)
    bwd = Collective(kind="all_gather", bytes=int(sum(gathered) * lp * released / max(layout.gathered_numel, 1)),
                     calls=bwd_calls, group_size=n, scope=scope, overlappable=overlap)
    rs = Collective(kind="reduce_scatter", bytes=sum(padded) * lp, calls=buckets, group_size=n, scope=scope,
                    overlappable=overlap)
    post = Collective(kind="all_gather", bytes=persistent * lp, calls=1 if persistent else 0, group_size=n,
                      scope=scope, overlappable=False)
    t = {c: costs.collective_seconds(c, hardware) for c in (fwd, bwd, rs, post)}
    first_s = _seconds("all_gather", min(window, layout.gathered_numel) * lp, 1, hardware) if gathered else 0.0
    last_s = _seconds("reduce_scatter", min(settings.reduce_bucket_size, sum(numels)) * lp, 1, hardware)
    first_s, last_s = min(first_s, t[fwd]), min(last_s, t[rs])
    if overlap:
        fwd_overlap, bwd_overlap = t[fwd] - first_s, t[bwd] + t[rs] - last_s
        fixed = first_s + last_s + t[post]
    else:
        fwd_overlap = bwd_overlap = 0.0
        fixed = sum(t.values())
    notes = [
        f"parameters: all-gathered in forward ({fwd_calls} fetch(es), one per module, up to {window:,} elements "
        f"in flight) and again in backward for the {released:,} elements released after forward; persistent ones "
        "once after the step",
        f"gradients: reduce-scatter in {buckets} bucket(s) of reduce_bucket_size (reduce_scatter_coalesced)",
        "overlap_comm=True: gathers prefetched on their own stream and reductions on another; the first fetch "
        "and the last bucket exposed" if overlap else "overlap_comm=False: every collective on the compute stream",
    ]
    return [fwd, bwd, rs, post], fwd_overlap, bwd_overlap, fixed, t[post], notes
