"""FSDP2 step time: compute (:mod:`autoshard.strategies.step_time`), the per-unit collectives, their overlap,
and CPU offload.

Collectives per step, per rank (torch 2.13.0, ``torch/distributed/fsdp/_fully_shard/``):

* forward: one all-gather per unit of its parameters in ``param_dtype`` (``foreach_all_gather``);
* backward: again for every block when ``reshard_after_forward=True`` (over the smaller group when it is an
  int; none when ``False``) — the root is never resharded after forward (``FSDPState._lazy_init``);
* backward: one reduce-scatter per unit of its gradients in ``reduce_dtype`` (``foreach_reduce``), and for
  hybrid sharding an all-reduce of the reduced shard across nodes, on its own stream
  (``FSDPCommContext.all_reduce_stream``: "collectives use different network resources and can overlap").

Overlap model: all-gathers run on their own stream and are issued one unit ahead (forward: the CPU issues the
next unit's all-gather while the GPU computes the current one; backward: ``_backward_prefetch``), and a unit's
reduce-scatter runs while the next unit's backward computes. So everything hides behind compute except the
first all-gather of the step (the root's, which nothing precedes) and the last reduce-scatter (the root's,
which ``_root_post_backward_final_callback`` waits for); the rest is exposed only where it exceeds the
compute of its pass.

Host time (:func:`host_time`): FSDP2's hooks run Python around every unit, once per pass, and the optimizer
steps DTensor parameters, every aten op through DTensor's dispatch; both are work on the thread that launches the
kernels, priced from ``benchmarks/fsdp_hooks.py`` (``docs/benchmarks/fsdp_hooks.md``) and added to the launches
(``host_extra_s``) as DeepSpeed's engine host time is (:mod:`autoshard.strategies.deepspeed.cost`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from autoshard.hardware.specs import HardwareSpec
from autoshard.strategies import costs
from autoshard.strategies.base import Collective
from autoshard.strategies.fsdp.memory import Layout, Units, size, trained

HOOK_UNIT_S: dict[tuple[bool, bool], float] = {
    (True, True): 0.434e-3, (False, True): 0.362e-3, (True, False): 0.357e-3, (False, False): 0.347e-3,
}
"""Host time FSDP2's hooks add per unit and step, forward and backward together, beside a part per parameter
tensor (:data:`HOOK_TENSOR_S`), by ``(reshards after forward, MixedPrecisionPolicy casts the parameters)``:
``pre_forward`` (the all-gather issued, its output copied out into the unsharded parameters), ``post_forward``
(reshard), ``pre_backward`` (unshard again when resharded) and ``post_backward`` (``foreach_reduce``, the sharded
gradients built as DTensors); ``torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py``, torch 2.13.0.
Measured: the slope over the unit count of a stack's forward + backward time less the same stack in plain torch,
real ``fully_shard`` at world size 1 on gloo, units of one and of six ``nn.Linear`` layers, on this project's
2-core build machine's CPU (``python benchmarks/fsdp_hooks.py``, docs/benchmarks/fsdp_hooks.md); ``bf16``:
autoshard's policy (``param_dtype=bf16, reduce_dtype=fp32``). Run of 2026-11-28 (AMD EPYC, torch 2.13.0), medians
of 3 repeats; the repeats' own slopes span 0.31-0.38 ms (fp32) and 0.33-0.85 ms (bf16, one noisy repeat). A
partial ``reshard_after_forward`` (an int) is priced as resharding; hybrid meshes and CPU offload, not measured,
at the same figures."""

HOOK_TENSOR_S: dict[tuple[bool, bool], float] = {
    (True, True): 0.044e-3, (False, True): 0.045e-3, (True, False): 0.040e-3, (False, False): 0.033e-3,
}
"""Host time FSDP2's hooks add per parameter tensor of a unit and step (the per-parameter loops of the same
hooks: ``FSDPParam.to_unsharded`` / ``to_sharded``, the copy-out views, the sharded gradient's DTensor), keyed as
:data:`HOOK_UNIT_S`; from the same run, the difference between the two unit shapes (12 and 2 tensors) over 10:
0.033-0.045 ms (repeats' range -0.002-0.060 ms)."""

OPTIMIZER_TENSOR_S: dict[bool, float] = {False: 0.132e-3, True: 0.018e-3}
"""Host time DTensor adds to ``torch.optim.AdamW``'s step per parameter tensor, by ``foreach``: each aten op on a
DTensor parameter goes through DTensor's dispatch (sharding propagation, the local op, the result wrapped), about
ten ops per tensor for the for-loop, about ten per list for ``foreach`` (``torch/optim/adamw.py``,
``torch/distributed/tensor/_dispatch.py``, torch 2.13.0). Measured by the same run: the step's slope over the
parameter tensors, FSDP2's shards less plain tensors, the same optimizer: for-loop 0.132 ms (repeats
0.130-0.134), foreach 0.018 ms (0.016-0.019), 2026-11-28, torch 2.13.0. Other optimizers are priced at AdamW's
figure (fused steps one list op, priced as ``foreach``)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class HostTime:
    """FSDP2's own host time per step, beyond the kernels' launches."""

    hooks_s: float
    """The hooks of every unit, per micro-batch (forward + backward): added to the launches."""
    optimizer_s: float
    """DTensor's dispatch in the optimizer step, once per step: added to the step after backward."""
    notes: tuple[str, ...]


def host_time(units: Units, layout: Layout, *, foreach: bool) -> HostTime:
    """FSDP2's hook and DTensor host time for one step (:data:`HOOK_UNIT_S`, :data:`HOOK_TENSOR_S`,
    :data:`OPTIMIZER_TENSOR_S`), with its notes.

    Args:
        units: the root (a unit when it holds parameters) and the block units.
        layout: ``reshard_after_forward`` and whether the policy casts (``gather_bytes < orig_bytes``).
        foreach: the optimizer steps lists (``foreach`` or fused) rather than tensor by tensor.

    Returns:
        The hooks' seconds per micro-batch, the optimizer's extra seconds per step, and the notes.
    """
    all_units = (units.root, *units.blocks) if units.root else units.blocks
    count, tensors = len(all_units), sum(len(u) for u in all_units)
    key = (layout.reshard_after_forward is not False, layout.gather_bytes < layout.orig_bytes)
    per_unit, per_tensor = HOOK_UNIT_S[key], HOOK_TENSOR_S[key]
    hooks_s = count * per_unit + tensors * per_tensor
    per_step = OPTIMIZER_TENSOR_S[foreach]
    stepped = sum(len(trained(u)) for u in all_units)  # the optimizer holds the trained parameters alone
    optimizer_s = stepped * per_step
    raf = "reshard_after_forward" if key[0] else "no reshard after forward"
    policy = "bf16 policy" if key[1] else "no cast"
    impl = "foreach" if foreach else "for-loop"
    return HostTime(hooks_s=hooks_s, optimizer_s=optimizer_s, notes=(
        f"FSDP2 hooks on the host: {count} unit(s) x {per_unit * 1e3:.3g} ms + {tensors:,} parameter tensors x "
        f"{per_tensor * 1e3:.3g} ms ({raf}, {policy}) = {hooks_s * 1e3:.3g} ms per micro-batch beside the kernel "
        "launches (all-gather issue and copy-out, reshard, unshard, foreach_reduce; measured on CPU, "
        "docs/benchmarks/fsdp_hooks.md, torch 2.13.0)",
        f"DTensor dispatch in the {impl} optimizer step: {stepped:,} parameter tensors x {per_step * 1e3:.3g} ms = "
        f"{optimizer_s * 1e3:.3g} ms per step over plain tensors (measured with AdamW on CPU, "
        "docs/benchmarks/fsdp_hooks.md, torch 2.13.0)",
    ))


def units_in_backward(units: Units, backward_flops: Sequence[int], stacks: Sequence[int],
                      blocks_per_unit: int, prefetch: int = 1) -> tuple[bool, ...]:
    """For each block unit of :func:`~autoshard.strategies.fsdp.memory.wrapping_units`, whether backward gathers
    it again: backward runs through it (it trains something, or one of its blocks did backward work in the trace:
    ``backward_flops``, by block in order, :attr:`~autoshard.profiler.result.BlockProfile.backward_flops`; a frozen
    block the gradient passes through computes its input's gradient, a teacher under ``no_grad`` none), or a unit
    backward runs through within ``prefetch`` units after it prefetches it (FSDP2 gathers the unit before, in
    forward order, whether or not backward reaches it: two gloo processes gathered a distillation model's last
    teacher block so). ``stacks``: blocks per stack (empty: one stack). Empty when the trace's blocks do not line
    up with the units.

    Example:
        >>> u = Units(root_before=(8,), root_after=(), blocks=((-4,), (-4,), (-4,), (4,)))
        >>> units_in_backward(u, (0, 0, 0, 10), (), 1)
        (False, False, True, True)
    """
    sizes = list(stacks) or [len(backward_flops)]
    reached: list[bool] = []
    start = 0
    for size_ in sizes:
        for first in range(start, start + size_, blocks_per_unit):
            reached.append(any(f > 0 for f in backward_flops[first : min(first + blocks_per_unit, start + size_)]))
        start += size_
    if start != len(backward_flops) or len(reached) != len(units.blocks):
        return ()
    reached = [r or bool(trained(u)) for r, u in zip(reached, units.blocks, strict=True)]
    return tuple(any(reached[i : i + 1 + max(1, prefetch)]) for i in range(len(reached)))


@dataclass(frozen=True, kw_only=True, slots=True)
class Communication:
    """The collectives of one step with their times and what of them cannot hide."""

    collectives: tuple[Collective, ...]
    total_s: float
    exposed_s: float
    notes: tuple[str, ...]


def _shard(u: Sequence[int], n: int) -> int:
    return sum(math.ceil(size(t) / n) for t in u)


def _gathered_bytes(u: Sequence[int], layout: Layout) -> int:
    """A unit's all-gather output: each tensor's padded shard times the ranks, in the dtype it is gathered in."""
    n = layout.shard_size
    return math.ceil(sum(math.ceil(size(t) / n) * n * layout.gathered_as(t) for t in u))


def communication(units: Units, layout: Layout, hardware: HardwareSpec, forward_s: float,
                  backward_s: float, in_backward: Sequence[bool] = ()) -> Communication:
    """The step's collectives and their exposed time under the overlap model above. ``in_backward``: for each
    block unit, whether backward runs through it (:func:`units_in_backward`; empty: every one does); one it does not
    reach (a frozen teacher run under ``no_grad``) is not gathered again in backward, as FSDP2 registers its
    pre-backward unshard only on outputs that require grad (``_register_pre_backward_hook``, _fsdp_state.py)."""
    n, r = layout.shard_size, layout.reduce_bytes
    hybrid = layout.hybrid
    scope = "intra" if hybrid or hardware.nodes == 1 else "world"
    all_units = (units.root, *units.blocks) if units.root else units.blocks
    gather = [_gathered_bytes(u, layout) for u in all_units]
    reduce = [_shard(trained(u), n) * n * r for u in all_units]  # frozen tensors: no gradient to reduce
    first_gather, last_reduce = gather[0], reduce[0]  # the root: first gathered, last reduced

    def coll(kind: str, payload: Sequence[int], group: int, where: str, overlappable: bool = True) -> Collective:
        return Collective(kind=kind, bytes=int(sum(payload)), calls=len(payload), group_size=group, scope=where,
                          overlappable=overlappable)

    fwd = coll("all_gather", gather, n, scope)
    out = [fwd]
    reached = list(in_backward) if len(in_backward) == len(units.blocks) else [True] * len(units.blocks)
    block_gather = [_gathered_bytes(u, layout) for u, r in zip(units.blocks, reached, strict=True) if r]
    raf = layout.reshard_after_forward
    bwd_ag: Collective | None = None
    if raf is True:
        bwd_ag = coll("all_gather", block_gather, n, scope)
    elif raf is not False:  # an int: gather from the `raf` ranks holding the post-forward shards
        inner = hardware.processes_per_node % raf == 0 or hardware.nodes == 1
        bwd_ag = coll("all_gather", block_gather, raf, "intra" if inner else "world")
    if bwd_ag is not None:
        out.append(bwd_ag)
    rs = coll("reduce_scatter", [x for x in reduce if x], n, scope)  # a unit that trains nothing reduces nothing
    out.append(rs)
    ar: Collective | None = None
    if hybrid:
        ar = coll("all_reduce", [x // n for x in reduce if x], hardware.nodes, "inter")
        out.append(ar)

    def t(x: Collective | None) -> float:
        return 0.0 if x is None else costs.collective_seconds(x, hardware)

    def one(x: Collective | None, payload: int) -> float:
        if x is None or payload == 0:
            return 0.0
        return costs.collective_seconds(Collective(kind=x.kind, bytes=payload, calls=1, group_size=x.group_size,
                                                   scope=x.scope, overlappable=False), hardware)

    first_s = one(fwd, first_gather)
    last_s = one(rs, last_reduce) + (one(ar, last_reduce // n) if ar else 0.0)
    fwd_exposed = first_s + costs.exposed(t(fwd) - first_s, forward_s)
    intra_bwd = t(bwd_ag) + t(rs) - one(rs, last_reduce)
    inter_bwd = t(ar) - (one(ar, last_reduce // n) if ar else 0.0)
    bwd_exposed = last_s + costs.exposed(max(intra_bwd, inter_bwd), backward_s)
    notes = [
        "overlap: all-gathers one unit ahead and reduce-scatters behind the next unit's backward; exposed are "
        "the root's all-gather (first of the step) and the root's reduce-scatter (last), plus whatever exceeds "
        "each pass's compute (FSDPCommContext streams, _backward_prefetch; _fsdp_param_group.py, torch 2.13.0)",
    ]
    if hybrid:
        notes.append("hybrid: reduce-scatter within the node, then all-reduce of the shard across nodes on its own "
                     "stream, overlapping the intra-node collectives (_fsdp_collectives.py foreach_reduce)")
    for where in {x.scope for x in out}:
        if not costs.link(hardware, where).known:
            notes.append(f"{where} link bandwidth unknown: {costs.UNKNOWN_LINK_BYTES_PER_S / 1e9:g} GB/s assumed")
    total = sum(t(x) for x in out)
    return Communication(collectives=tuple(out), total_s=total, exposed_s=fwd_exposed + bwd_exposed,
                         notes=tuple(notes))


@dataclass(frozen=True, kw_only=True, slots=True)
class Offload:
    """CPU offload's host↔device traffic and CPU optimizer step, per rank."""

    transfer_s: float
    optimizer_s: float
    exposed_s: float
    notes: tuple[str, ...]


def cpu_offload(units: Units, layout: Layout, hardware: HardwareSpec, compute_s: float, pin_memory: bool,
                step_bytes_per_parameter: float, optimizer: str) -> Offload:
    """Parameters up for every all-gather, gradients down once, the optimizer step on the CPU
    (``CPUOffloadPolicy``); ``step_bytes_per_parameter``: what the workload's traced optimizer step reads and
    writes per parameter (:func:`autoshard.strategies.costs.cpu_optimizer_seconds`)."""
    n, o = layout.shard_size, layout.orig_bytes
    all_units = (units.root, *units.blocks)

    forward_up = sum(layout.shard_bytes(t) for u in all_units for t in u)
    stepped = sum(_shard(trained(u), n) for u in all_units)
    backward_up = sum(layout.shard_bytes(t) for u in units.blocks for t in u) if (
        layout.reshard_after_forward is True) else 0
    up, down = forward_up + backward_up, stepped * o
    bandwidth, notes = costs.host_link_bytes_per_s(hardware)
    # PCIe is full duplex and the bandwidth is per direction: in backward the re-gathered parameters go up while
    # the gradients go down (the copies run on FSDP's all-gather and reduce-scatter streams).
    transfer_s = forward_up / bandwidth + max(backward_up, down) / bandwidth
    threads, how = costs.cpu_optimizer_threads(hardware)
    # The node's ranks step at once after backward: they share its cores (OMP_NUM_THREADS as autoshard's launches
    # set it) and its DRAM bandwidth.
    dram, assumed = costs.host_memory_bytes_per_s(hardware)
    optimizer_s = costs.cpu_optimizer_seconds(stepped, step_bytes_per_parameter, threads, dram,
                                              ranks=hardware.processes_per_node)
    if optimizer_s > costs.cpu_optimizer_seconds(stepped, step_bytes_per_parameter, threads) and dram:
        how += (f", bound by host memory: {dram / 1e9:.4g} GB/s x {costs.HOST_MEMORY_EFFICIENCY:g} shared by "
                f"{hardware.processes_per_node} rank(s){assumed}")
    # Pinned memory lets the non_blocking copies overlap compute (_fsdp_api.py CPUOffloadPolicy); pageable copies
    # are synchronous. The optimizer step runs on the CPU after backward, on the critical path.
    exposed_transfer = costs.exposed(transfer_s, compute_s) if pin_memory else transfer_s
    notes += [
        f"CPU offload: sharded parameters copied up for each all-gather ({up / 2**20:.4g} MiB), gradients down "
        f"once ({down / 2**20:.4g} MiB) over the host link at {costs.LINK_EFFICIENCY:g} of nominal per direction, "
        "up and down at once in backward (FSDPParam.all_gather_inputs, foreach_reduce; torch 2.13.0)",
        f"CPU optimizer step ({optimizer}): {optimizer_s:.3g} s for {stepped:,} parameters on "
        f"{how}; its traced step moves "
        f"{step_bytes_per_parameter:.0f} bytes per parameter, priced at fp32 AdamW's measured rate "
        f"({costs.CPU_ADAMW_PARAMETERS_PER_S_PER_THREAD:.2g} parameters/s per thread, "
        f"{costs.ADAMW_TRACED_BYTES_PER_PARAMETER:.0f} bytes each; torch 2.13.0)",
    ]
    return Offload(transfer_s=transfer_s, optimizer_s=optimizer_s, exposed_s=exposed_transfer + optimizer_s,
                   notes=tuple(notes))
