"""Trace two full training steps of a model and account for every byte and FLOP.

The same code runs on fake tensors (``fake=True``: nothing is allocated, a 70B model traces on a laptop) and
on real CPU tensors (``fake=False``: the ground truth the fake trace is tested against).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch._guards import detect_fake_mode
from torch.utils._pytree import tree_iter

import autoshard
from autoshard.errors import UserCodeError
from autoshard.models.hf_build import kv_cache_off, used_by_spec_augment_alone
from autoshard.models.source import (
    ModelSource,
    call_model,
    cast_floats,
    default_loss,
)
from autoshard.profiler import batch_checks, fake_ops, flops, gpu, hf_masks
from autoshard.profiler.blocks import RepeatedBlocks, find_repeated_blocks
from autoshard.profiler.build_constants import fake_leftovers, real_schedules
from autoshard.profiler.checkpointing import FULL, ActivationCheckpointing, op_selective_context, parse_checkpointing
from autoshard.profiler.collection import gc_paused, older_objects_frozen, warm_up_checkpoint
from autoshard.profiler.embeddings import refuse_sparse_gradients
from autoshard.profiler.experts import routed_expert_parameters, routing_of
from autoshard.profiler.guard import TIME_LIMIT_S, fake_tensor_log_quiet, guard, mark_backward, time_limit
from autoshard.profiler.op_census import CensusCounter, TrafficCensus
from autoshard.profiler.optimizers import make_optimizer
from autoshard.profiler.options import Precision, ProfileOptions
from autoshard.profiler.precision_cast import cast_floating_tensors, fake_module_conversions
from autoshard.profiler.result import MemoryBreakdown, ModelProfile
from autoshard.profiler.step_facts import (
    StepFacts,
    block_profiles,
    flops_by_module,
    unique_params,
    unique_storages,
    unused_modules,
)
from autoshard.profiler.timeline import Timeline
from autoshard.profiler.tracker import Category, MemoryTracker, PeakSnapshot

STEPS = 2
"""Optimizer steps traced: the first creates the optimizer state (and is where FLOPs are counted), the second is
the steady state whose memory is reported."""
UNUSED_NAMES_SHOWN = 4
"""Unused modules a profile names (:attr:`ModelProfile.unused_modules`); the count covers them all."""


def trace(source: ModelSource, options: ProfileOptions, *, fake: bool = True) -> ModelProfile:
    """Trace :data:`STEPS` training steps of ``source`` and return its profile (see :func:`trace_with_phases`)."""
    return trace_with_phases(source, options, fake=fake)[0]


def trace_with_phases(
    source: ModelSource, options: ProfileOptions, *, fake: bool = True, count_flops: bool = True
) -> tuple[ModelProfile, dict[str, PeakSnapshot]]:
    """:func:`trace_timeline` without the timeline."""
    profile, phases, _ = trace_timeline(source, options, fake=fake, count_flops=count_flops, record=False)
    return profile, phases


def trace_timeline(
    source: ModelSource, options: ProfileOptions, *, fake: bool = True, count_flops: bool = True,
    record: bool = True, time_limit_s: float = TIME_LIMIT_S,
) -> tuple[ModelProfile, dict[str, PeakSnapshot], Timeline]:
    """Trace :data:`STEPS` training steps of ``source`` and return its profile.

    Args:
        source: the model source.
        options: batch size, precision, optimizer, checkpointing, target device.
        fake: trace under ``FakeTensorMode`` (no allocation). ``False`` runs real CPU tensors.
        count_flops: count FLOPs in a full first step; when ``False`` the FLOP fields are 0 and the first,
            unmeasured step only creates the optimizer state (:func:`_warm_start`), about half the trace time.

        record: record the memory timeline (:mod:`autoshard.profiler.timeline`).
        time_limit_s: stop with a ProfileError once the steps have run this long (checked between ops).

    Returns:
        The profile for one device holding the whole model, the highest point of each phase, and the
        timeline (empty unless ``record``).

    Raises:
        ProfileError: an op cannot be traced under fake tensors, or the trace ran past ``time_limit_s``.
        UserCodeError: the user's model, batch, loss or optimizer raised.
    """
    return trace_timelines(source, options, (options.batch_size,), fake=fake, count_flops=count_flops,
                           record=record, time_limit_s=time_limit_s)[0]


def trace_timelines(
    source: ModelSource, options: ProfileOptions, batch_sizes: tuple[int, ...], *, fake: bool = True,
    count_flops: bool = True, record: bool = True, time_limit_s: float = TIME_LIMIT_S,
    allocation_log: list[tuple[int, int]] | None = None, block_positions: tuple[int, ...] | None = None,
    census_twice: bool = False,
) -> list[tuple[ModelProfile, dict[str, PeakSnapshot], Timeline]]:
    """:func:`trace_timeline` at each micro-batch of ``batch_sizes`` (``options.batch_size`` is ignored), in one
    session: the model is built and its optimizer state created once, then one measured step runs per micro-batch.

    A measured step starts from what the step before it left: the parameters, the optimizer state and no
    gradients (``zero_grad(set_to_none=True)``; zeroed ones with ``options.set_grads_to_none=False``), with
    Python's garbage collected, as after the warm-up step of a
    trace of its own; its peaks and timeline are its own. ``tests/profiler/test_trace.py`` checks each profile
    equals the one traced alone. FLOPs (``count_flops``) are counted at the first micro-batch only. With
    ``allocation_log`` (a list), every allocation and free is appended to it (:mod:`autoshard.profiler.cuda_reserve`)
    and the first step is a whole step even without ``count_flops``. ``block_positions``: for a shallow copy of a
    deeper model under ``every-N`` checkpointing, where its blocks sit in that model (which of them ``every-N``
    wraps; :mod:`autoshard.profiler.depth_checkpointing`). ``census_twice``: with ``count_flops``, take the op
    census at the second micro-batch too, in an unmeasured step before its measured one
    (:class:`~autoshard.profiler.op_census.TrafficCensus`: the census as the first micro-batch's is taken, less the
    module tracking): what of a step's memory traffic comes once per micro-batch (autocast's weight casts) and
    what with each sample is told apart from the two (:func:`autoshard.strategies.step_time.estimate`).
    """
    import gc

    started = time.perf_counter()
    seq_len = source.resolved_seq_len(options.seq_len)
    mode: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
    if fake:
        from torch._subclasses.fake_tensor import FakeTensorMode

        mode = FakeTensorMode(allow_non_fake_inputs=True)
    steps = []
    # fake_ops: shape rules for ops whose meta kernel refuses what the real kernels run (fp32 grouped_mm).
    # The CUDA-semantics kernels stay registered for the session (registering them takes ~10 ms, and each step's
    # forward and backward would register and remove them again).
    kernels = gpu.kernels_registered() if options.target == "cuda" else contextlib.nullcontext()
    conversions = fake_module_conversions() if fake else contextlib.nullcontext()  # a forward's Module.to too
    with older_objects_frozen(), fake_ops.installed() if fake else contextlib.nullcontext(), kernels, mode, \
            fake_tensor_log_quiet(), conversions, batch_checks.lifted():
        model = _build(source, options)
        refuse_sparse_gradients(model)  # the tracer measures dense tensors: said before the first op
        model.train()
        blocks = find_repeated_blocks(model)
        with real_schedules():  # bitsandbytes builds its quantization maps with torch.linspace(...).tolist()
            optimizer = make_optimizer(source, options, model)
        tracker = MemoryTracker(gpu.round_allocation_bytes if options.target == "cuda" else None,
                                record_events=record)
        tracker.norm_stats_fp32 = "always" if options.target == "cuda" else "mixed"
        tracker.allocation_log = allocation_log
        tracker.on_ops = time_limit(source, tracker, time_limit_s * len(batch_sizes))
        semantics = gpu.semantics(options) if options.target == "cuda" else None
        if options.activation_checkpointing and blocks is not None:
            _checkpoint_blocks(model, blocks, semantics, checkpointing_of(options), tracker, block_positions)
        with gc_paused():
            for i, batch_size in enumerate(batch_sizes):
                at = dataclasses.replace(options, batch_size=batch_size)
                if i:
                    gc.collect()
                    tracker.restart()
                batch = source.batch(batch_size, seq_len=options.seq_len)
                if options.precision is Precision.BF16_TRUE:
                    batch = cast_floats(batch, torch.bfloat16)
                with hf_masks.as_run(batch):  # no mask where the run passes none (unpacked positions)
                    facts = _run_steps(source, at, model, batch, optimizer, tracker, blocks,
                                       count_flops and not i, semantics=semantics,
                                       warm=not i or (count_flops and census_twice and i == 1),
                                       census=count_flops and census_twice and i == 1)
                del batch
                steps.append((at, facts, tracker.peak, dict(tracker.phase_peaks), tracker.events,
                              time.perf_counter() - started))
                started = time.perf_counter()
    # Outside the fake mode: the timelines are real tensors.
    return [(_profile(source, at, seq_len, model, blocks, peak, phase_peaks, facts, seconds), phase_peaks,
             Timeline.from_events(events))
            for at, facts, peak, phase_peaks, events, seconds in steps]


def _profile(source: ModelSource, options: ProfileOptions, seq_len: int | None, model: nn.Module,
             blocks: RepeatedBlocks | None, peak: PeakSnapshot, phase_peaks: dict[str, PeakSnapshot],
             facts: StepFacts, seconds: float) -> ModelProfile:
    """The profile of a traced step: the model, the tracker's peaks, the step's facts."""
    params = unique_storages(p for p in model.parameters())
    trainable = unique_params(p for p in model.parameters() if p.requires_grad)
    param_bytes = sum(s.nbytes() for s in params.values())
    buffer_bytes = sum(s.nbytes() for s in unique_storages(model.buffers()).values())
    overheads = gpu.overheads() if options.target == "cuda" else ()
    in_allocator = sum(o.bytes for o in overheads if o.in_allocator)
    accumulation = options.grad_accumulation
    blocks_traced = block_profiles(model, blocks, facts)
    return ModelProfile(
        model=source.name,
        source_kind=source.kind,
        options=options,
        seq_len=seq_len,
        parameter_count=sum(p.numel() for p in unique_params(model.parameters()).values()),
        trainable_parameter_count=sum(p.numel() for p in trainable.values()),
        parameter_bytes=param_bytes,
        gradient_bytes=facts.gradient_bytes,
        optimizer_state_bytes=facts.optimizer_state_bytes,
        buffer_bytes=buffer_bytes,
        peak_bytes=peak.total_bytes + in_allocator,
        peak_phase=peak.phase,
        peak_module=peak.module,
        peak_breakdown=MemoryBreakdown.from_categories(peak.by_category),
        phase_peaks=_phase_peaks(phase_peaks),
        overheads=overheads,
        forward_flops=facts.forward_flops,
        backward_flops=facts.total_flops - facts.forward_flops,
        flops_per_step=facts.total_flops * accumulation,
        tokens_per_step=None if seq_len is None else options.batch_size * seq_len * accumulation,
        samples_per_step=options.batch_size * accumulation,
        block_classes=() if blocks is None else blocks.class_names,
        blocks=blocks_traced,
        gpu_model=gpu.MODELLED if options.target == "cuda" else (),
        extrapolated_from_layers=None,
        trace_seconds=seconds,
        torch_version=torch.__version__,
        autoshard_version=autoshard.__version__,
        census=facts.census,
        optimizer_census=facts.optimizer_census,
        unused_parameter_count=sum(p.numel() for p in facts.unused.values()),
        unused_parameter_bytes=sum(p.numel() * p.element_size() for p in facts.unused.values()),
        unused_modules=unused_modules(model, set(facts.unused))[:UNUSED_NAMES_SHOWN],
        written_modules=unused_modules(model, facts.written, trainable=False)[:UNUSED_NAMES_SHOWN],
        uncounted_ops=facts.uncounted_ops,
        loss_in_output=facts.loss_in_output,
        routed_expert_parameter_count=routed_expert_parameters(model),
        expert_routing=routing_of(source.metadata, model),
    )


def _phase_peaks(snapshots: dict[str, PeakSnapshot]) -> tuple[tuple[str, MemoryBreakdown], ...]:
    return tuple(
        (phase, MemoryBreakdown.from_categories(s.by_category)) for phase, s in snapshots.items() if phase != "setup"
    )


def _build(source: ModelSource, options: ProfileOptions) -> nn.Module:
    """Build the model; for ``bf16-true`` under a bf16 default dtype, as Lightning's ``bf16-true`` does. The
    schedules a constructor reads back work on fake tensors (:func:`real_schedules`); so do its ``Module.to``
    calls, under the caller's :func:`fake_module_conversions`, which lasts the whole trace."""
    bf16_true = options.precision is Precision.BF16_TRUE
    previous = torch.get_default_dtype()
    if bf16_true:
        torch.set_default_dtype(torch.bfloat16)
    try:
        with real_schedules():
            model = source.build()
    finally:
        torch.set_default_dtype(previous)
    mode = detect_fake_mode()
    if mode is not None:
        fake_leftovers(model, mode)
    if not bf16_true:
        return model
    # Buffers some models keep in fp32 (transformers' RoPE inv_freq) become bf16, as under Lightning's
    # module.to(bf16); Module.to itself cannot swap fake tensors (see precision_cast).
    cast_floating_tensors(model, torch.bfloat16)
    return model


def _run_steps(
    source: ModelSource,
    options: ProfileOptions,
    model: nn.Module,
    batch: Any,
    optimizer: torch.optim.Optimizer,
    tracker: MemoryTracker,
    blocks: RepeatedBlocks | None,
    count_flops: bool = True,
    *,
    semantics: gpu.CudaSemanticsLike | None,
    warm: bool = True,
    census: bool = False,
) -> StepFacts:
    """Run the steps on a built model (checkpointing already applied): the unmeasured first step when ``warm``,
    then the measured one. ``census``: the first step is an unmeasured one taking the op census of its first
    micro-batch (without FLOP counting's module tracking)."""
    facts = StepFacts()
    tracker.watched = {id(p.untyped_storage()): name for name, p in model.named_parameters()}
    tracker.written = facts.written
    loss_fn = source.loss_fn or default_loss
    names = {id(m): n for n, m in model.named_modules()}
    block_names = set(blocks.names) if blocks else set()

    def pack(t: torch.Tensor) -> torch.Tensor:
        tracker.track(t, Category.ACTIVATIONS)
        return t

    def on_grad(p: torch.Tensor) -> None:
        if p.grad is not None:
            tracker.track(p.grad, Category.GRADIENTS)

    def on_step(opt: torch.optim.Optimizer, *_: Any) -> None:
        for state in opt.state.values():
            for v in state.values():
                if isinstance(v, torch.Tensor):
                    tracker.track(v, Category.OPTIMIZER)

    def pre_forward(module: nn.Module, _args: Any) -> None:
        name = names.get(id(module), type(module).__name__)
        tracker.module_stack.append(name)
        if name in block_names:
            tracker.scope = name

    def post_forward(module: nn.Module, _args: Any, out: Any) -> None:
        if tracker.module_stack:
            name = tracker.module_stack.pop()
            mark_backward(out, name, tracker)
            if name in block_names:
                tracker.scope = None

    tracker.track_all(model.parameters(), Category.PARAMETERS)
    tracker.track_all(model.buffers(), Category.BUFFERS)
    tracker.track_all((t for t in tree_iter(batch) if isinstance(t, torch.Tensor)), Category.INPUTS)
    handles = [p.register_post_accumulate_grad_hook(on_grad) for p in model.parameters() if p.requires_grad]
    handles.append(optimizer.register_step_post_hook(on_step))
    handles.append(nn.modules.module.register_module_forward_pre_hook(pre_forward))
    handles.append(nn.modules.module.register_module_forward_hook(post_forward, always_call=True))
    accumulation = options.grad_accumulation
    try:
        with tracker, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            for step in range(0 if warm else 1, STEPS):
                tracker.step = step
                # The first step creates the optimizer state and counts FLOPs (whose module tracking keeps
                # some tensors alive longer); memory is measured on the steady-state steps after it.
                tracker.measuring = step > 0
                if step == 0 and not (count_flops or census) and tracker.allocation_log is None:  # a replay needs it
                    _warm_start(model, optimizer, source, tracker, set_to_none=options.set_grads_to_none)
                    continue
                first_forward = True
                traced = _micro_batches_traced(accumulation, step, replay=tracker.allocation_log is not None)
                for micro in range(traced):
                    count = count_flops and step == 0 and micro == 0
                    flops_total = flops.counter(census=True) if count else None
                    if census and step == 0 and micro == 0:
                        flops_total = TrafficCensus(display=False, custom_mapping=flops.FLOP_FORMULAS)
                    if isinstance(flops_total, CensusCounter):
                        flops_total.block_of = tracker.block  # backward by the block running, not by ModTracker
                    with flops_total or contextlib.nullcontext():
                        flops_fwd = flops.counter() if count else None
                        tracker.phase = "forward"
                        tracker.saved_by_scope.clear()
                        with flops_fwd or contextlib.nullcontext():
                            loss = _forward(model, batch, loss_fn, source, options, semantics, tracker, facts)
                        if first_forward and not facts.block_activation_bytes:
                            facts.block_activation_bytes = dict(tracker.saved_by_scope)
                        first_forward = False
                        if accumulation > 1:
                            loss = loss / accumulation
                        tracker.phase = "backward"
                        with semantics.backward() if semantics else contextlib.nullcontext():
                            guard(loss.backward, source, tracker, "backward")
                        tracker.backward_module = None
                        del loss
                    if flops_fwd is not None and flops_total is not None:  # they exist exactly when count
                        facts.forward_flops = flops_fwd.get_total_flops()
                        facts.total_flops = flops_total.get_total_flops()
                        facts.block_forward_flops = flops_by_module(flops_fwd, model)
                        if isinstance(flops_total, CensusCounter):
                            facts.census = flops_total.census()
                            facts.block_total_flops = dict(flops_total.block_flops)
                            facts.uncounted_ops = tuple(sorted(flops_total.uncounted))
                        else:
                            facts.block_total_flops = flops_by_module(flops_total, model)
                    elif isinstance(flops_total, TrafficCensus):
                        facts.census = flops_total.census()
                if census and step == 0:  # the census is of forward and backward: the optimizer's state exists
                    optimizer.zero_grad(set_to_none=options.set_grads_to_none)
                    continue
                facts.gradient_bytes = tracker.totals[Category.GRADIENTS]
                # SpecAugment's mask embedding has no gradient here only because the trace turned SpecAugment off.
                facts.unused = {n: p for n, p in model.named_parameters() if p.requires_grad and p.grad is None
                                and not used_by_spec_augment_alone(model, n)}
                tracker.phase = "optimizer"
                tracker.stand_in_scalars = True
                # The kernels of a steady-state optimizer step (the state exists), counted where FLOPs are.
                step_census = flops.counter(census=True) if count_flops and step == STEPS - 1 else None
                with step_census or contextlib.nullcontext():
                    guard(optimizer.step, source, tracker, "optimizer step")
                if isinstance(step_census, CensusCounter):
                    facts.optimizer_census = step_census.census().pooled()
                tracker.stand_in_scalars = False
                facts.optimizer_state_bytes = tracker.totals[Category.OPTIMIZER]
                tracker.phase = "zero_grad"
                optimizer.zero_grad(set_to_none=options.set_grads_to_none)
    finally:
        for h in handles:
            h.remove()
        tracker.module_stack.clear()
    return facts


def _micro_batches_traced(accumulation: int, step: int, *, replay: bool) -> int:
    """How many of a step's ``accumulation`` micro-batches are run.

    The first step is not measured and counts FLOPs on its first micro-batch: one builds the optimizer state as
    all would. In the measured step the first micro-batch's backward allocates the gradients and every later one
    adds into them, so the second's allocations are those of all the rest and two give the step's peak (the FLOPs
    and tokens are multiplied by ``accumulation``). A replay through the caching allocator runs them all: its
    pools could still change after the second.
    """
    if replay:
        return accumulation
    return 1 if step == 0 else min(accumulation, 2)


def _warm_start(model: nn.Module, optimizer: torch.optim.Optimizer, source: ModelSource,
                tracker: MemoryTracker, *, set_to_none: bool = True) -> None:
    """Create the optimizer state without a forward and backward: zero gradients, one step, ``zero_grad``.

    The first step is never measured; when it need not count FLOPs, this gives the measured step the same
    starting state as a full first step does (tests/profiler/test_trace.py checks the peaks are identical) in
    a fraction of the time.
    """
    tracker.phase = "warm_start"
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.grad = torch.zeros_like(p)
    tracker.stand_in_scalars = True
    guard(optimizer.step, source, tracker, "optimizer step")
    tracker.stand_in_scalars = False
    optimizer.zero_grad(set_to_none=set_to_none)


def _forward(
    model: nn.Module,
    batch: Any,
    loss_fn: Callable[[Any, Any], torch.Tensor],
    source: ModelSource,
    options: ProfileOptions,
    semantics: gpu.CudaSemanticsLike | None,
    tracker: MemoryTracker,
    facts: StepFacts,
) -> torch.Tensor:
    if semantics is not None:
        context: contextlib.AbstractContextManager[Any] = semantics.forward()
    elif options.precision.autocast_dtype is not None:
        context = torch.autocast("cpu", dtype=options.precision.autocast_dtype)
    else:
        context = contextlib.nullcontext()
    with context:
        output = guard(functools.partial(source.call_fn or call_model, model, batch), source, tracker, "forward")
        if options.fp32_output:
            # The 16-bit output is freed once cast, as after FSDP2's root cast (nothing saves it for backward).
            output = cast_floats(output, torch.float32)
        held = (*tree_iter(output), getattr(output, "loss", None))  # a plain dataclass's .loss: not a pytree
        facts.loss_in_output = any(isinstance(t, torch.Tensor) and t.requires_grad and t.numel() == 1 for t in held)
        tracker.phase = "loss"
        loss = guard(functools.partial(loss_fn, output, batch), source, tracker, "loss")
    del output
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        raise UserCodeError(
            f"the loss of {source.name} is {_describe(loss)}, expected a scalar tensor.",
            hint="Return the loss as a 0-dim tensor from training_step(model, batch), not a dict or tuple (log "
                 "what else it computes outside the step)." if str(source.metadata.get("feeding", "")).startswith(
                     "training_step") else
            "Return a 0-dim tensor from loss(output, batch), e.g. `F.cross_entropy(...)`.",
        )
    if not loss.requires_grad:
        raise UserCodeError(
            f"the loss of {source.name} does not require grad: nothing would be trained.",
            hint="Check that the loss is computed from the model's output and that parameters require grad.",
        )
    return loss


def _describe(obj: Any) -> str:
    if isinstance(obj, torch.Tensor):
        return f"a tensor of shape {tuple(obj.shape)}"
    return f"a {type(obj).__name__}"


def checkpointing_of(options: ProfileOptions) -> ActivationCheckpointing:
    """``options.checkpointing``, typed (``ProfileOptions`` makes it a :class:`ActivationCheckpointing`)."""
    return parse_checkpointing(options.checkpointing)


def _checkpoint_blocks(model: nn.Module, blocks: RepeatedBlocks, semantics: gpu.CudaSemanticsLike | None,
                       choice: ActivationCheckpointing = FULL, tracker: MemoryTracker | None = None,
                       positions: tuple[int, ...] | None = None) -> None:
    """Recompute the blocks ``choice`` names in backward (non-reentrant ``torch.utils.checkpoint``), keeping
    module names; under ``op``, with torchtitan's selective policy, whose saved outputs ``tracker`` counts as
    activations of the block. ``positions``: a shallow copy's blocks' places in the model it stands for
    (:meth:`ActivationCheckpointing.checkpointed`)."""
    from torch.utils.checkpoint import checkpoint

    warm_up_checkpoint()
    chosen = choice.checkpointed(blocks.names, positions)
    if chosen:
        kv_cache_off(model)  # a recomputed block would append to the KV cache again (hf_build's docstring)
    extra: dict[str, Any] = {}
    if choice.mode == "op":
        def saved(output: Any) -> None:
            for t in tree_iter(output):
                if tracker is not None and isinstance(t, torch.Tensor):
                    tracker.track(t, Category.ACTIVATIONS)

        extra["context_fn"] = op_selective_context(saved)
    for name in chosen:
        block = model.get_submodule(name)
        inner = block.forward

        def forward(*args: Any, _inner: Callable[..., Any] = inner, **kwargs: Any) -> Any:
            run = _inner if semantics is None else semantics.recomputable(_inner)
            return checkpoint(run, *args, use_reentrant=False, **extra, **kwargs)

        block.forward = forward


