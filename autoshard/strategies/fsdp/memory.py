"""FSDP2 per-rank memory: the moments of a training step where FSDP2's buffers peak.

FSDP2 (``torch.distributed.fsdp.fully_shard``) keeps every parameter as a dim-0 shard and materialises one
wrapping unit at a time, so its peak is not "model states / N + activations": it depends on which unsharded
units, all-gather outputs and reduce-scatter buffers are alive at each moment. This module walks the step
unit by unit, in the order torch 2.13.0 allocates and frees (read from
``site-packages/torch/distributed/fsdp/_fully_shard/``: ``_fsdp_param.py``, ``_fsdp_param_group.py``,
``_fsdp_collectives.py``, ``_fsdp_state.py``), and adds the activations the single-device trace measured for the
same phase. ``docs/strategies/fsdp.md`` lists the rules with their line of source, and
``tests/strategies/test_fsdp.py`` checks the result against FSDP2 itself, traced under a fake process group.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from autoshard.strategies.workload import StepTrace, Workload


def size(t: int) -> int:
    """A unit's tensor's element count (a frozen tensor's is negated in :class:`Units`)."""
    return abs(t)


def trained(u: Sequence[int]) -> tuple[int, ...]:
    """The tensors of ``u`` that train: those FSDP2 reduces gradients of and the optimizer steps."""
    return tuple(t for t in u if t > 0)


@dataclass(frozen=True, kw_only=True, slots=True)
class Units:
    """The ``fully_shard`` units in forward order: the root (what no block holds) and the blocks. Each tensor is its
    element count, negated for a frozen one (``requires_grad=False``: sharded and gathered, never reduced nor
    stepped)."""

    root_before: tuple[int, ...]
    """Element counts of the root's tensors that come before the blocks in module order (embeddings)."""
    root_after: tuple[int, ...]
    """The root's tensors after the blocks (final norm, LM head): their gradients exist from the start of
    backward until the root's reduce-scatter at its very end."""
    blocks: tuple[tuple[int, ...], ...]
    """Each unit's tensors (one or more consecutive repeated blocks), in module order."""
    tied: tuple[int, ...] = ()
    """The root's tensors used both before and after the blocks (a tied embedding and LM head), as in
    :attr:`root_after`: autograd sums their two gradients out of place when the second arrives."""

    @property
    def root(self) -> tuple[int, ...]:
        """All of the root's tensors, in the order FSDP2 lists them (module order)."""
        return self.root_before + self.root_after


def wrapping_units(workload: Workload, blocks_per_unit: int = 1) -> Units:
    """Split the parameter tensors into the root and the block units the hand-off wraps.

    The workload records tensor sizes in module order and each block's total; each stack of blocks is found as a
    run of consecutive tensors whose sums match its block totals one after the other, the stacks in order. When
    no run matches (blocks interleaved with other modules), every block is taken as one tensor and the root as
    following them. A unit groups ``blocks_per_unit`` consecutive blocks of one stack, as the hand-off does.
    """
    numels = workload.module_parameter_numels or workload.parameter_numels
    counts = workload.block_parameter_counts
    sizes = workload.block_stacks or ((len(counts),) if counts else ())
    stacks = [list(counts[sum(sizes[:k]) : sum(sizes[: k + 1])]) for k in range(len(sizes))]
    found = _match_stacks(numels, stacks) if counts else None
    blocks_by_stack: list[list[tuple[int, ...]]]
    before: tuple[int, ...]
    if found is None:
        blocks_by_stack = [[(c,) for c in stack] for stack in stacks]
        root = list(numels)
        for c in counts:  # drop one tensor run per block from the root, best effort
            for t in (c, -c):
                if t in root:
                    root.remove(t)
                    break
        before, after = (), tuple(root)
    else:
        spans, blocks_by_stack = found
        before, after = tuple(numels[: spans[0][0]]), tuple(numels[spans[-1][1] :])
        # The root's tensors between two stacks (an encoder's final norm, a decoder's embeddings) get their
        # gradients during backward, once the later stack's have run: counted from its start, as the head's are
        # (an upper bound).
        between = tuple(t for (_, end), (nxt, _) in itertools.pairwise(spans) for t in numels[end:nxt])
        after = between + after
    # A tied embedding / LM head is listed before the blocks (first use) but gets its gradient from the head at
    # the start of backward: it belongs with the tensors after the blocks.
    tied: tuple[int, ...] = ()
    for numel in workload.tied_parameter_numels:
        numel = numel if numel in before else -numel
        if numel in before:
            i = before.index(numel)
            before, after, tied = before[:i] + before[i + 1 :], (numel, *after), (*tied, numel)
    grouped = [
        tuple(t for block in stack[i : i + blocks_per_unit] for t in block)
        for stack in blocks_by_stack
        for i in range(0, len(stack), blocks_per_unit)
    ]
    return Units(root_before=before, root_after=after, blocks=tuple(grouped), tied=tied)


def _match_stacks(
    numels: Sequence[int], stacks: Sequence[Sequence[int]]
) -> tuple[list[tuple[int, int]], list[list[tuple[int, ...]]]] | None:
    """Each stack's ``(start, end)`` in ``numels`` and its blocks' tensors, stacks matched in order."""
    spans: list[tuple[int, int]] = []
    blocks_by_stack: list[list[tuple[int, ...]]] = []
    position = 0
    for counts in stacks:
        for start in range(position, len(numels)):
            blocks = _match_run(numels, start, counts)
            if blocks is not None:
                break
        else:
            return None
        position = start + sum(len(b) for b in blocks)
        spans.append((start, position))
        blocks_by_stack.append(blocks)
    return spans, blocks_by_stack


def _match_run(numels: Sequence[int], start: int, counts: Sequence[int]) -> list[tuple[int, ...]] | None:
    """The tensors of blocks of ``counts`` parameters laid one after the other from ``start``, if they are."""
    i, blocks = start, []
    for count in counts:
        total, first = 0, i
        while i < len(numels) and total < count:
            total += size(numels[i])
            i += 1
        if total != count:
            return None
        blocks.append(tuple(numels[first:i]))
    return blocks


@dataclass(frozen=True, kw_only=True, slots=True)
class Layout:
    """How the step is sharded and in which dtypes (bytes per element)."""

    shard_size: int
    """Ranks a parameter is split over: the world, or one node's ranks for hybrid sharding."""
    hybrid: bool
    reshard_after_forward: bool | int
    """Blocks only: the root is never resharded after forward (``FSDPState._lazy_init``)."""
    offload: bool
    orig_bytes: int
    """The sharded parameters' (and gradients') dtype: the user's parameter dtype."""
    gather_bytes: int
    """``MixedPrecisionPolicy.param_dtype``: the unsharded parameters, all-gather buffers, unsharded grads."""
    reduce_bytes: int
    """``reduce_dtype``: the reduce-scatter input and output."""
    forward_prefetch: int
    """Blocks all-gathered ahead in forward (``set_modules_to_forward_prefetch``); 0 is FSDP2's default."""
    backward_prefetch: int
    """Blocks all-gathered ahead in backward; 1 is FSDP2's implicit default."""
    round_bytes: Callable[[int], int]
    """The allocator's rounding of one allocation (identity on CPU)."""
    optimizer: str
    """The optimizer's name (``adamw``, ``adam``, ``sgd``, ``adafactor``, ``adamw8bit``)."""
    foreach: bool
    """Whether the optimizer runs its multi-tensor (foreach) implementation on the shards."""
    frozen_bytes: float | None = None
    """The frozen parameters' element size as sharded: the dtype the user's module holds them in (a bf16 base
    under fp32 LoRA adapters trains under ``bf16-mixed`` as it is: FSDP2 requires one dtype among a unit's
    trainable parameters alone, ``FSDPParamGroup._init_mp_dtypes``); ``None``: :attr:`orig_bytes`."""
    frozen_gather_bytes: float | None = None
    """The frozen parameters' element size all-gathered: the policy's ``param_dtype`` when there is one, else their
    own (``FSDPParam.init_dtype_attrs``: no cast when the dtypes match); ``None``: :attr:`gather_bytes`."""
    reduce_scatter_copies_input: bool = False
    """gloo: ``ProcessGroupGloo``'s ``_reduce_scatter_base`` clones its input for the collective (seen in the
    allocator's trace as ``aten::clone`` under ``c10d::_reduce_scatter_base_``, torch 2.13.0); the clone goes
    with the collective's work, when the call returns. NCCL reduces in place."""

    def held(self, t: int) -> float:
        """Bytes per element of the tensor of ``t`` elements (negated: frozen) in its shard."""
        return self.orig_bytes if t > 0 or self.frozen_bytes is None else self.frozen_bytes

    def gathered_as(self, t: int) -> float:
        """Bytes per element of the tensor of ``t`` elements (negated: frozen) all-gathered and unsharded."""
        return self.gather_bytes if t > 0 or self.frozen_gather_bytes is None else self.frozen_gather_bytes

    def shard_bytes(self, t: int) -> float:
        """Bytes of rank 0's shard of the tensor of ``t`` elements (negated: frozen), in the dtype it is kept in."""
        return math.ceil(abs(t) / self.shard_size) * self.held(t)

    def casts(self, t: int) -> bool:
        """Whether the tensor's shard is cast before its all-gather (``FSDPParam.param_dtype`` set)."""
        return self.held(t) != self.gathered_as(t)


@dataclass(frozen=True, kw_only=True, slots=True)
class Moment:
    """Bytes alive at one moment of the step on one rank, by kind."""

    phase: str
    where: str
    parameters: int
    gradients: int
    optimizer: int
    activations: int
    buffers: int

    @property
    def total(self) -> int:
        """Sum of all kinds."""
        return self.parameters + self.gradients + self.optimizer + self.activations + self.buffers


@dataclass(frozen=True, kw_only=True, slots=True)
class StepActivations:
    """What the single-device trace says about non-model-state memory at the candidate's micro-batch."""

    inputs: int
    forward: int
    loss: int
    backward: int
    """Backward's highest non-state bytes, wherever in backward they fall."""
    per_block: tuple[int, ...]
    """Activations each unit saves in its forward."""
    per_block_backward: tuple[int, ...]
    """Activations of each unit while its backward runs: what it saved, or with checkpointing what its
    recomputation saves (the unit's activations in the trace without checkpointing)."""
    optimizer_scratch: int
    """The optimizer step's temporaries for the whole model (the 'amp' trace, fp32 parameters)."""
    loss_in_output: bool = False
    """The model's forward returns its loss (:attr:`ModelProfile.loss_in_output`): the root's pre-backward hook,
    registered on forward's outputs, runs at the very start of backward and all-gathers the last unit ahead
    (``FSDPParamGroup.pre_backward`` → ``_backward_prefetch``) while the loss's gradients are computed."""

    @classmethod
    def from_traces(cls, half: StepTrace, amp: StepTrace, micro_batch: int, units: Units, blocks_per_unit: int,
                    *, unchecked: StepTrace | None = None) -> StepActivations:
        """Read the 'half' trace (the step FSDP2's bf16 compute runs), the 'amp' trace's optimizer step and,
        under checkpointing, the 'half' trace without it (``unchecked``) for what a recomputed unit holds."""
        phases = half.phases(micro_batch)
        grouped = _unit_activations(half, micro_batch, blocks_per_unit, len(units.blocks))
        live = grouped if unchecked is None else _unit_activations(unchecked, micro_batch, blocks_per_unit,
                                                                   len(units.blocks))
        opt = amp.phases(micro_batch).get("optimizer")

        def act(phase: str) -> int:
            b = phases.get(phase)
            return 0 if b is None else b.activations + b.temporaries + b.inputs

        # Backward's highest non-state bytes bound what a running unit holds: wherever they fall, not at the
        # trace's highest total (at depth that is backward's end, where the unsharded trace's gradients crowd
        # out the activations FSDP's sharded gradients leave room for).
        highest_backward = half.activation_bytes("backward", micro_batch) if "backward" in phases else 0
        inputs = phases["forward"].inputs if "forward" in phases else 0
        return cls(
            inputs=inputs, forward=act("forward"), loss=act("loss"), backward=max(act("backward"), highest_backward),
            per_block=grouped, per_block_backward=live,
            optimizer_scratch=0 if opt is None else opt.activations + opt.temporaries,
            loss_in_output=half.at_1.loss_in_output,
        )


def _unit_activations(trace: StepTrace, micro_batch: int, blocks_per_unit: int, units: int) -> tuple[int, ...]:
    """Activations each unit saves in forward at ``micro_batch`` (its blocks' together)."""
    per = trace.block_activation_bytes(micro_batch)
    grouped = tuple(sum(per[i : i + blocks_per_unit]) for i in range(0, len(per), blocks_per_unit))
    return grouped if len(grouped) == units else (0,) * units


def step_moments(units: Units, layout: Layout, acts: StepActivations, optimizer_bytes_per_parameter: float,
                 model_buffer_bytes: int, *, accumulating: bool = False) -> list[Moment]:
    """Every moment where FSDP2's memory can peak, forward to optimizer step, for the rank holding shard 0.

    Rank 0 holds the largest (padded) shard of every tensor: ``FSDPParam._init_sharded_param`` pads dim 0 to a
    multiple of the shard size and rank 0's chunk is always full.

    ``accumulating``: the sharded gradients carried into forward (as with gradients zeroed, not set to None, between
    steps), or several micro-batches per optimizer step, each reduce-scattered (as ``fit()``'s FSDP backend
    runs them): every unit's sharded gradient exists from the first micro-batch's backward to the step, and later
    micro-batches add into it in place (``foreach_reduce``: ``sharded_param.grad += new_sharded_grad``, torch
    2.13), so from the second micro-batch on all of them are alive through forward and backward.
    """
    n, rnd = layout.shard_size, layout.round_bytes
    c, r, o = layout.gather_bytes, layout.reduce_bytes, layout.orig_bytes
    gath = layout.gathered_as  # per tensor: a frozen one may be in a dtype of its own
    units_all = (units.root, *units.blocks)
    # Each quantity below is a function of a unit's tensor sizes alone, and a model's blocks are alike: each is
    # worked out once per distinct unit (llama-2-70b's 80 blocks: once, not 80 × 80 / 2 times for `earlier`).

    @functools.cache
    def shard(u: tuple[int, ...]) -> int:  # padded shard elements of a unit (ceil per tensor ~ dim-0 padding)
        return sum(math.ceil(size(t) / n) for t in u)

    @functools.cache
    def gathered(u: tuple[int, ...]) -> int:  # per-parameter all_gather_outputs: padded, one tensor each
        return sum(rnd(math.ceil(math.ceil(size(t) / n) * n * gath(t))) for t in u)

    @functools.cache
    def shard_gathered(u: tuple[int, ...]) -> int:  # a rank's all-gather input bytes (uint8 when dtypes mix)
        return math.ceil(sum(math.ceil(size(t) / n) * gath(t) for t in u))

    @functools.cache
    def flat(u: tuple[int, ...]) -> int:  # foreach_all_gather's all_gather_output: one flat tensor
        return rnd(shard_gathered(u) * n) if n > 1 else 0  # one rank: no collective (FSDPParamGroup.unshard)

    @functools.cache
    def copy_in(u: tuple[int, ...]) -> int:  # foreach_all_gather's inputs on the device
        cast = tuple(t for t in u if layout.casts(t))
        if n == 1:  # wait_for_unshard copies each parameter's (cast) all_gather_inputs[0], one at a time
            return max((rnd(math.ceil(size(t) * gath(t))) for t in (u if layout.offload else cast)), default=0)
        if layout.offload:  # sharded_param_data.to(device) then the cast, per parameter
            return rnd(shard_gathered(u)) + max(
                (rnd(math.ceil(layout.shard_bytes(t))) for t in cast), default=0)
        # _get_param_all_gather_inputs: one flat copy of the parameters cast to the policy's dtype
        return rnd(shard_gathered(cast)) if cast else 0

    # Frozen tensors get no gradient: foreach_reduce reduces only the unit's parameters that have one (none: no
    # reduce-scatter), and the optimizer holds state for the others alone.
    @functools.cache
    def grads(u: tuple[int, ...]) -> int:  # unsharded gradients autograd produces, in the compute dtype
        return sum(rnd(t * c) for t in trained(u))

    @functools.cache
    def last_grad(u: tuple[int, ...]) -> int:  # the `unsharded_grad` loop in foreach_reduce runs only if n > 1
        return rnd(trained(u)[-1] * c) if n > 1 and trained(u) else 0

    @functools.cache
    def rs_in(u: tuple[int, ...]) -> int:
        return rnd(shard(trained(u)) * n * r) if trained(u) else 0

    @functools.cache
    def rs_copy(u: tuple[int, ...]) -> int:  # the backend's copy of the input, alive during the collective
        return rs_in(u) if layout.reduce_scatter_copies_input else 0

    @functools.cache
    def rs_out(u: tuple[int, ...]) -> int:  # reduce_output, then its cast to the parameter dtype
        g = trained(u)
        return (rnd(shard(g) * r) + (rnd(shard(g) * o) if r != o else 0)) if g else 0

    @functools.cache
    def sharded_grad(u: tuple[int, ...]) -> int:  # views of the reduce-scatter output (offload: moved to CPU)
        return 0 if layout.offload or not trained(u) else rnd(shard(trained(u)) * o)

    @functools.cache
    def ar_held(u: tuple[int, ...]) -> int:  # HSDP keeps the reduce-dtype buffer in _all_reduce_state
        return rnd(shard(trained(u)) * r) if layout.hybrid and r != o and trained(u) else 0

    @functools.cache
    def kept(u: tuple[int, ...]) -> int:  # what a block keeps between its forward and its backward
        raf = layout.reshard_after_forward
        if raf is True:
            return 0
        if raf is False:
            return gathered(u)
        return sum(rnd(math.ceil(math.ceil(size(t) / n) * n // raf * gath(t))) for t in u)  # over `raf` ranks

    params = 0 if layout.offload else sum(rnd(math.ceil(layout.shard_bytes(t))) for u in units_all for t in u)
    optimizer = 0 if layout.offload else sum(
        rnd(round(optimizer_bytes_per_parameter * math.ceil(t / n))) for u in units_all for t in trained(u))
    root, blocks = units.root, units.blocks
    g_root = gathered(root) if root else 0
    base = dict(parameters=params, optimizer=optimizer)
    out: list[Moment] = []
    # Accumulating: the sharded gradients of earlier micro-batches, all alive through forward (``carried``) and,
    # reduced into in place, not added again as backward reduces each unit (``done_grads`` starts full).
    carried = sum(sharded_grad(u) for u in units_all) if accumulating else 0

    def add(phase: str, where: str, buffers: int, activations: int, gradients: int = 0) -> None:
        kept_grads = carried if phase in ("forward", "loss") else 0
        out.append(Moment(phase=phase, where=where, gradients=gradients + kept_grads,
                          activations=max(acts.inputs, activations), buffers=buffers + model_buffer_bytes, **base))

    # -- forward: the root is all-gathered first and stays unsharded until its post-backward.
    if root:
        add("forward", "root all-gather", flat(root) + copy_in(root), acts.inputs)
        add("forward", "root copy-out", flat(root) + g_root, acts.inputs)
    held = flat(root) if root else 0  # comm_ctx.all_gather_state: the previous unit's flat output
    kept_so_far, saved = 0, acts.inputs
    for k, block in enumerate(blocks):
        ahead = sum(flat(b) for b in blocks[k + 1 : k + 1 + layout.forward_prefetch])
        add("forward", f"block {k} all-gather", g_root + held + kept_so_far + flat(block) + copy_in(block), saved)
        # wait_for_unshard drops comm_ctx.all_gather_state, but its local `prev_all_gather_state` keeps the
        # previous flat output alive through this unit's copy-out.
        add("forward", f"block {k} copy-out", g_root + held + kept_so_far + flat(block) + gathered(block), saved)
        saved += acts.per_block[k]
        add("forward", f"block {k}", g_root + kept_so_far + flat(block) + gathered(block) + ahead, saved)
        held = flat(block)
        kept_so_far += kept(block)
    add("forward", "head", g_root + kept_so_far + held, acts.forward)
    add("loss", "loss", g_root + kept_so_far, acts.loss)

    # -- backward: head gradients live until the root's reduce-scatter; blocks run last to first.
    # The start of backward holds what the loss phase left plus the loss's gradients (the logits' gradient of a
    # causal LM): at most backward's highest non-state bytes, which is where they fall in a model whose loss
    # gradients outweigh any one block's recomputation. (Bounding it by the loss phase's high point instead
    # dropped them: a model that computes its loss in forward has no loss phase.)
    # With the loss in forward's output, the root's pre-backward hook fires first and prefetches the last unit(s),
    # alive through the loss's gradients; a loss computed outside has its gradients computed before the hook.
    prefetched = sum(flat(b) for b in blocks[len(blocks) - layout.backward_prefetch :]) if (
        root and acts.loss_in_output and layout.reshard_after_forward is not False and layout.backward_prefetch
    ) else 0
    add("backward", "start", g_root + kept_so_far + prefetched, acts.backward, gradients=carried)
    head_grads = grads(units.root_after)
    kept_before = list(itertools.accumulate((kept(b) for b in blocks), initial=0))
    done_grads, held_ar, held_rs = carried, 0, 0
    for k in range(len(blocks) - 1, -1, -1):
        block = blocks[k]
        earlier = kept_before[k]
        ahead = 0 if layout.reshard_after_forward is False else sum(
            flat(b) for b in blocks[max(0, k - layout.backward_prefetch) : k])
        # While unit k runs its backward: what the units below it saved, and all of its own (recomputed, under
        # checkpointing); never more than the trace's own backward peak.
        below = acts.inputs + sum(acts.per_block[:k])
        running = min(acts.backward, below + acts.per_block_backward[k])
        common = g_root + earlier + ahead + held_ar
        add("backward", f"block {k}", common + gathered(block) + held_rs, running,
            gradients=head_grads + done_grads + grads(block))
        # post_backward: reshard, free the previous unit's reduce-scatter input, then foreach_reduce: copy the
        # gradients into the reduce-scatter input, drop them, allocate the output. Until foreach_reduce
        # returns, its loop variable `unsharded_grad` keeps the unit's last gradient alive.
        before = head_grads + done_grads
        add("backward", f"block {k} reduce-scatter copy-in", common + rs_in(block), below,
            gradients=before + grads(block))
        add("backward", f"block {k} reduce-scatter", common + rs_in(block) + rs_copy(block) + rs_out(block), below,
            gradients=before + last_grad(block))
        done_grads += 0 if accumulating else sharded_grad(block)
        held_ar += ar_held(block)
        held_rs = rs_in(block)
    if root:
        root_grads = grads(root)
        add("backward", "root post-backward", g_root + held_rs + held_ar, acts.inputs,
            gradients=root_grads + done_grads)
        if grads(units.tied):
            # A tied weight's second gradient (the embedding's, at the end of backward) meets the first (the
            # head's, held since the start): autograd's input buffer sums them out of place, so the two and
            # their sum are alive at once (real FSDP2 on 2 gloo ranks and its fake-PG trace alike, torch 2.13).
            add("backward", "root tied-gradient sum", g_root + held_rs + held_ar, acts.inputs,
                gradients=root_grads + 2 * grads(units.tied) + done_grads)
        add("backward", "root reduce-scatter copy-in", held_ar + rs_in(root), acts.inputs,
            gradients=root_grads + done_grads)
        add("backward", "root reduce-scatter", held_ar + rs_in(root) + rs_copy(root) + rs_out(root), acts.inputs,
            gradients=last_grad(root) + done_grads)
        done_grads += 0 if accumulating else sharded_grad(root)

    # -- optimizer: on the shards (offload: on the CPU, nothing on the GPU but the batch and buffers).
    scratch = 0 if layout.offload else optimizer_scratch_bytes(units, layout, acts.optimizer_scratch)
    add("optimizer", "optimizer step", 0, acts.inputs + scratch, gradients=done_grads)
    return out


def optimizer_scratch_bytes(units: Units, layout: Layout, traced_scratch: int) -> int:
    """Temporaries of one optimizer step over rank 0's shards.

    Adam/AdamW (torch/optim/adam.py, torch 2.13.0): the single-tensor loop computes
    ``denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)`` per parameter — two temporaries of its
    shard at once — while the previous parameter's ``denom`` is still bound to the variable, so the high point is
    the largest ``previous + 2 × current`` in parameter order; the foreach path holds
    ``exp_avg_sq_sqrt = torch._foreach_sqrt(exp_avg_sqs)``, one list of all shards. SGD with momentum updates in
    place either way. Other optimizers: the traced step's temporaries for the whole model / the shard group size.
    """
    n, rnd = layout.shard_size, layout.round_bytes
    shards = [rnd(math.ceil(t / n) * layout.orig_bytes)
              for t in trained((*units.root_before, *(t for u in units.blocks for t in u), *units.root_after))]
    if layout.optimizer in ("adam", "adamw"):
        if layout.foreach:
            return sum(shards)
        return max((prev + 2 * cur for prev, cur in zip([0, *shards], shards, strict=False)), default=0)
    if layout.optimizer == "sgd":
        return 0
    return math.ceil(traced_scratch / n)


def cpu_offload_bytes_per_rank(units: Units, layout: Layout, acts: StepActivations,
                               optimizer_bytes_per_parameter: float) -> int:
    """Host RAM one rank uses with ``CPUOffloadPolicy``: sharded parameters and gradients (pinned by default),
    optimizer state and the optimizer step's temporaries, all on the shard."""
    n = layout.shard_size
    everything = (*units.root, *(t for u in units.blocks for t in u))
    held = sum(layout.shard_bytes(t) for t in everything)
    stepped = sum(math.ceil(t / n) for t in trained(everything))
    states = held + stepped * (layout.orig_bytes + optimizer_bytes_per_parameter)
    return round(states) + optimizer_scratch_bytes(units, layout, acts.optimizer_scratch)
