"""What every strategy's model needs to know about the model and its step: :class:`Workload`.

A workload is built from profiles of the real step (``autoshard.profiler``) at micro-batches 1, 2 and 3 — the
memory timelines at 2 and 3 give the exact peak of every phase at any larger micro-batch
(:mod:`autoshard.profiler.timeline`) — for each compute mode the strategies use and with and without activation
checkpointing, plus the parameter layout (tensor sizes, the repeated block's size) that sharding rules need.

Compute modes:

* ``"amp"`` — the user's precision as profiled (``bf16-mixed``: fp32 weights, autocast compute). DDP runs this.
* ``"half"`` — weights gathered / kept in 16 bits for compute, no autocast (``bf16-true`` traced): what FSDP2's
  ``MixedPrecisionPolicy(param_dtype=bf16)`` and DeepSpeed's ``bf16`` / ``fp16`` modes run. For ``32-true`` and
  ``bf16-true`` both modes are the same trace.
* ``"half_fp32_output"`` — ``16-mixed`` only: ``"half"`` with the model's output cast to fp32 before the loss,
  what FSDP2 runs under ``fit()`` (``MixedPrecisionPolicy(output_dtype=float32)`` on the root, so the scaled loss
  stays finite). DeepSpeed's fp16 mode computes the loss on the 16-bit output, as ``"half"`` does.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autoshard.models.source import ModelSource
from autoshard.profiler.checkpointing import FULL, ActivationCheckpointing
from autoshard.profiler.options import Float32MatmulPrecision, OptimizerImpl, Precision
from autoshard.strategies.module_census import module_blocks, module_census
from autoshard.strategies.shard_refusals import (  # re-exported: the planner reads the words
    COMPLEX_FAILS,
    SCALAR_FAILS,
    STRIDED_FAILS,
    complex_parameters,
    scalar_parameters,
    some,
    strided_parameters,
)
from autoshard.strategies.step_trace import StepTrace

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from torch import nn

    from autoshard.profiler.blocks import RepeatedBlocks

MODES = ("amp", "half", "half_fp32_output")
BATCH_SIZES = (1, 2, 3)
"""Micro-batches traced for every compute mode and checkpointing choice (see :class:`StepTrace`)."""
STEP_PHASES = ("forward", "loss", "backward", "optimizer", "zero_grad")


@dataclass(frozen=True, kw_only=True, slots=True)
class Workload:
    """A model's training step, as the strategies see it."""

    model: str
    precision: Precision
    optimizer: str
    seq_len: int | None
    parameter_count: int
    trainable_parameter_count: int
    parameter_numels: tuple[int, ...]
    """Element counts of every (unique) trainable parameter tensor, in module order."""
    block_classes: tuple[str, ...]
    """The repeated block classes (the FSDP wrapping unit), in module order; empty when nothing repeats."""
    block_parameter_counts: tuple[int, ...]
    """Parameters of each repeated block instance (the FSDP / ZeRO-3 unit), stack after stack."""
    optimizer_state_bytes_per_parameter: float
    """Optimizer state per trainable parameter in the profiled precision (AdamW fp32: 8 plus a step scalar)."""
    buffer_bytes: int
    target: str
    """``cuda`` or ``cpu``: what the traces model."""
    cuda_overhead_bytes: int
    """Fixed allocator-side overheads per process on CUDA (cuBLAS workspaces)."""
    cuda_context_bytes: int = 0
    """Device memory per process outside the allocator on CUDA (the CUDA context); 0 for CPU answers."""
    traces: tuple[StepTrace, ...]
    tied_parameter_numels: tuple[int, ...] = ()
    """Element counts of parameters used both before and after the repeated blocks (a tied embedding and LM
    head): their gradients appear at the start of backward, although module order lists them first."""
    module_parameter_numels: tuple[int, ...] = ()
    """Every unique parameter tensor in module order, a frozen one (``requires_grad=False``) as its element count
    negated: FSDP2 shards and gathers them all, and reduces and steps only those that train. Empty when every
    parameter trains (:attr:`parameter_numels` is then the same list)."""
    frozen_parameter_bytes: int = 0
    """Bytes of the frozen parameters in the dtypes the user's module holds them in (a bf16 base under fp32 LoRA
    adapters: 2 per element), from the same meta build as :attr:`module_parameter_numels`; 0 when every parameter
    trains, or not known (a workload written down): the strategies then take the trainable parameters' dtype."""
    checkpoints_itself: bool = False
    """The model's own code checkpoints its blocks (Hugging Face's ``gradient_checkpointing_enable()`` called in a
    ``model.py``): every traced step recomputes them, whatever checkpointing the planner weighs."""
    block_stacks: tuple[int, ...] = ()
    """Blocks in each stack, in order (:func:`autoshard.profiler.blocks.block_stacks`): an encoder-decoder has
    two. FSDP units of several blocks stay within a stack. Empty: one stack of every block."""
    active_parameter_count: int | None = None
    """Parameters one token's step uses, for a mixture-of-experts model (:attr:`ModelProfile.active_parameter_count`);
    ``None`` for a dense one."""
    unused_parameter_count: int = 0
    """Trainable parameters the step leaves without a gradient (:attr:`ModelProfile.unused_parameter_count`):
    DDP must search the autograd graph for them every step."""
    unused_modules: tuple[str, ...] = ()
    """A few of them by module, for explanations (:attr:`ModelProfile.unused_modules`)."""
    optimizer_impl: OptimizerImpl | None = None
    """The optimizer implementation the user named (``None``: torch's default, which the traces model)."""
    float32_matmul_precision: Float32MatmulPrecision = "highest"
    """``torch.set_float32_matmul_precision`` of the training run: ``high`` or ``medium`` let fp32 matmuls run on
    TF32 tensor cores, which only the step time sees (the traces are the same; the planner sets it on a cached
    workload)."""
    grad_clip_norm: float | None = None
    """The norm the run clips the gradients' global 2-norm to before each optimizer step (``None``: no clipping):
    a norm and a scaling pass over each rank's gradients, which only the step time sees (set like
    :attr:`float32_matmul_precision`)."""
    set_grads_to_none: bool = True
    """``zero_grad(set_to_none=True)`` between steps (torch >= 2.0's default, and ``fit()``'s): ``False`` zeroes the
    gradients in place, so they stay allocated through the next forward (the HF Trainer's ``model.zero_grad()``
    before torch 2.0), which only DDP's and FSDP2's memory sees (the traces are the same; set like
    :attr:`grad_clip_norm`; DeepSpeed's engines keep their own gradient buffers and do not read it)."""
    checkpoint_mode: ActivationCheckpointing = FULL
    """What the traces with ``checkpointing=True`` recompute (``full``, ``every-N`` or ``op``)."""
    module_largest_parameters: tuple[int, ...] = ()
    """For each module a forward can run (every module but the ``ModuleList`` / ``ModuleDict`` containers), in
    module order, the element count of its largest own parameter, 0 for a module that owns none
    (:func:`~autoshard.strategies.module_census.module_census`): what ZeRO-3's hooks, registered on every module,
    cost depends on. Empty: not known (a workload written down), priced by the gathered parameter tensors alone."""
    half_refused: str | None = None
    """Why the model cannot train with its parameters in 16 bits, as FSDP2's mixed precision and DeepSpeed run it
    (its forward failed in the 16-bit trace while the autocast one ran: an fp32 tensor it makes itself meets a
    16-bit weight); ``None`` when it can. Only DDP is planned then."""
    scalar_parameters: tuple[str, ...] = ()
    """Names of the model's 0-d parameters (CLIP's ``logit_scale``), which neither FSDP2 nor DeepSpeed can take:
    see :attr:`shard_refused`."""
    complex_parameters: tuple[str, ...] = ()
    """Names of the model's complex parameters when it has real floating-point ones too (a spectral layer's
    ``complex64`` weight beside float convolutions), which neither FSDP2 nor DeepSpeed can train: see
    :attr:`shard_refused`."""
    written_modules: tuple[str, ...] = ()
    """Modules whose parameters forward or backward writes in place (:attr:`ModelProfile.written_modules`)."""
    uncounted_ops: tuple[str, ...] = ()
    """Custom ops run without a FLOP formula (:attr:`ModelProfile.uncounted_ops`): their work is not priced."""
    strided_parameters: tuple[str, ...] = ()
    """Names of the model's non-contiguous parameters (convolution weights made ``channels_last`` by
    ``model.to(memory_format=torch.channels_last)``), which neither FSDP2 nor DeepSpeed can take: see
    :attr:`shard_refused`."""
    renormed_embeddings: tuple[str, ...] = ()
    """Names of the trainable embedding tables with ``max_norm`` set, which forward renormalises in place: only one
    process holding the whole model trains them as written (:mod:`autoshard.profiler.embeddings`)."""
    module_blocks: tuple[int, ...] = ()
    """For each module of :attr:`module_largest_parameters`, in the same order, the index of the repeated block it
    lies in (the block itself included; the order of :attr:`block_parameter_counts`), -1 outside every block
    (:func:`~autoshard.strategies.module_census.module_blocks`): the modules whose forward activation checkpointing
    runs again. Empty: not known."""

    @property
    def checkpointing_choices(self) -> tuple[bool, ...]:
        """The checkpointing choices traced (``False`` / ``True``, in that order): the candidates to weigh. A
        workload without traces (one written down, not traced) weighs both."""
        if not self.traces:
            return (False, True)
        traced = {t.checkpointing for t in self.traces}
        return tuple(c for c in (False, True) if c in traced)

    @property
    def frozen_bytes_per_element(self) -> float | None:
        """The frozen parameters' bytes per element as the module holds them (their mean when their dtypes
        differ); ``None`` when every parameter trains or their dtype is not known."""
        frozen = -sum(t for t in self.module_parameter_numels if t < 0)
        return self.frozen_parameter_bytes / frozen if frozen and self.frozen_parameter_bytes else None

    @property
    def block_class(self) -> str | None:
        """The block classes comma-separated (accelerate's ``fsdp_transformer_layer_cls_to_wrap`` form),
        ``None`` when nothing repeats."""
        return ",".join(self.block_classes) or None

    @property
    def tokens_per_sample(self) -> int | None:
        """Tokens in one sample (``None`` for non-token models)."""
        return self.seq_len

    @property
    def largest_unit_parameters(self) -> int:
        """Parameters of the largest wrapping unit: the largest block, or everything outside the blocks if more."""
        blocks = max(self.block_parameter_counts, default=0)
        return max(blocks, self.parameter_count - sum(self.block_parameter_counts))

    def grads_kept_through_forward(self, gradient_accumulation: int) -> bool:
        """Whether a replicated or sharded ``.grad`` stays allocated through forward and backward adds into it:
        several micro-batches per optimizer step, or gradients zeroed rather than set to None between steps
        (:attr:`set_grads_to_none`). DDP's and FSDP2's memory models ask it; DeepSpeed keeps its own buffers."""
        return gradient_accumulation > 1 or not self.set_grads_to_none

    def trace(self, mode: str, checkpointing: bool) -> StepTrace:
        """The traces for ``mode`` (``amp`` or ``half``); checkpointing falls back to off when nothing repeats.

        Raises:
            ValueError: unknown mode.
        """
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, but got {mode=}.")
        for t in self.traces:
            if t.mode == mode and t.checkpointing == (checkpointing and self.block_class is not None):
                return t
        raise LookupError(f"no trace for {mode=}, {checkpointing=}")

    @property
    def shard_refused(self) -> str | None:
        """Why FSDP2 and DeepSpeed cannot train the model, or ``None``: complex parameters beside real ones (a
        probe's, found by each backend's failure on the first batch, which blamed the data), or a 0-d parameter.
        ``fully_shard`` refuses
        one (``ValueError: fully_shard doesn't support scalar parameters``, torch 2.13), and DeepSpeed's engine
        broadcasts every parameter viewed as bytes at start (``_broadcast_model``: ``p.data.view(torch.uint8)``,
        which a 0-d tensor cannot be; deepspeed 0.19.8)."""
        if self.complex_parameters:
            return (f"FSDP2 and DeepSpeed {COMPLEX_FAILS} ({some(self.complex_parameters)}): FSDP2 asserts one "
                    "parameter dtype per group, and DeepSpeed flattens the parameters into one buffer (a float bias "
                    "became complex under ZeRO-2, ZeRO-3 asserted one dtype).")
        if self.strided_parameters:
            return (f"FSDP2 and DeepSpeed {STRIDED_FAILS} ({some(self.strided_parameters)}, e.g. channels_last): "
                    "fully_shard raises NotImplementedError on one, and DeepSpeed's engine views every parameter as "
                    "bytes at start, which needs a unit last stride. Keep the parameters contiguous to shard the "
                    "model (convert the inputs alone to channels_last; cuDNN picks its layouts from them).")
        if not self.scalar_parameters:
            return None
        names = some(self.scalar_parameters)
        first = self.scalar_parameters[0]
        return (f"FSDP2 and DeepSpeed {SCALAR_FAILS} ({names}): torch's fully_shard refuses one, and "
                "DeepSpeed's engine fails on it at start. Make it a 1-element tensor to shard the model, e.g. "
                f"model.{first} = nn.Parameter(model.{first}.data.reshape(1)) before planning.")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (the traces themselves are not included)."""
        return {
            "model": self.model,
            "precision": self.precision.value,
            "optimizer": self.optimizer,
            "optimizer_impl": self.optimizer_impl,
            "float32_matmul_precision": self.float32_matmul_precision,
            "grad_clip_norm": self.grad_clip_norm,
            "set_grads_to_none": self.set_grads_to_none,
            "checkpointing": str(self.checkpoint_mode),
            "seq_len": self.seq_len,
            "parameter_count": self.parameter_count,
            "trainable_parameter_count": self.trainable_parameter_count,
            "active_parameter_count": self.active_parameter_count,
            "block_class": self.block_class,
            "block_classes": list(self.block_classes),
            "blocks": len(self.block_parameter_counts),
            "largest_unit_parameters": self.largest_unit_parameters,
            "unused_parameter_count": self.unused_parameter_count,
        }


def compute_dtype(precision: Precision) -> str:
    """The hardware-spec dtype whose peak the step's matmuls run at (PyTorch keeps fp32 matmuls off TF32 by
    default: ``torch.backends.cuda.matmul.allow_tf32 = False`` since 1.12)."""
    return {Precision.FP32: "fp32", Precision.FP16_MIXED: "fp16"}.get(precision, "bf16")


def tf32_matmuls(workload: Workload) -> bool:
    """Whether the run lets fp32 matmuls use TF32 (``torch.set_float32_matmul_precision`` ``high`` or
    ``medium``: CUDA's ``allow_tf32`` for matmuls follows it)."""
    return workload.float32_matmul_precision != "highest"


def fsdp_half_mode(precision: Precision) -> str:
    """The compute mode FSDP2 runs for a user precision: ``"half_fp32_output"`` for ``16-mixed``, else ``"half"``."""
    return "half_fp32_output" if precision is Precision.FP16_MIXED else "half"


def half_precision(precision: Precision) -> Precision:
    """The precision the ``half`` compute mode traces for a user precision."""
    if precision in (Precision.BF16_MIXED, Precision.FP16_MIXED, Precision.BF16_TRUE):
        # fp16 and bf16 have the same sizes; bf16-true stands for both.
        return Precision.BF16_TRUE
    return precision


def parameter_layout(module: nn.Module) -> tuple[tuple[int, ...], RepeatedBlocks | None, tuple[int, ...]]:
    """Element counts of the unique trainable parameters (module order), the repeated blocks, and each block's
    parameter count: what a plan's model fingerprint is computed from."""
    from autoshard.profiler.blocks import find_repeated_blocks

    seen: set[int] = set()
    numels = []
    for p in module.parameters():
        if p.requires_grad and id(p) not in seen:
            seen.add(id(p))
            numels.append(p.numel())
    blocks = find_repeated_blocks(module)
    block_counts: tuple[int, ...] = ()
    if blocks is not None:
        block_counts = tuple(
            sum(p.numel() for p in {id(q): q for q in module.get_submodule(n).parameters()}.values())
            for n in blocks.names
        )
    return tuple(numels), blocks, block_counts


def frozen_marked_numels(module: nn.Module) -> tuple[int, ...]:
    """Element counts of the unique parameters in module order, a frozen one's negated; ``()`` when all train.

    Example:
        >>> from torch import nn
        >>> net = nn.Sequential(nn.Linear(2, 3), nn.Linear(3, 1))
        >>> _ = net[0].requires_grad_(False)
        >>> frozen_marked_numels(net)
        (-6, -3, 3, 1)
    """
    unique = {id(p): p for p in module.parameters()}.values()
    if all(p.requires_grad for p in unique):
        return ()
    return tuple(p.numel() if p.requires_grad else -p.numel() for p in unique)


def frozen_parameter_bytes(module: nn.Module) -> int:
    """Bytes of the unique frozen parameters in their own dtypes (0 when all train).

    Example:
        >>> import torch
        >>> from torch import nn
        >>> net = nn.Sequential(nn.Linear(2, 3).to(torch.bfloat16), nn.Linear(3, 1))
        >>> _ = net[0].requires_grad_(False)
        >>> frozen_parameter_bytes(net)
        18
    """
    unique = {id(p): p for p in module.parameters()}.values()
    return sum(p.numel() * p.element_size() for p in unique if not p.requires_grad)


def first_trainable(numels: Sequence[int]) -> int:
    """Index of the first trainable parameter in :func:`frozen_marked_numels`' order (its length when none trains):
    a frozen parameter after it is used again in backward, to reach the trainable ones before it.

    Example:
        >>> first_trainable((-6, -3, 3, 1)), first_trainable((-6,))
        (2, 1)
    """
    return next((i for i, n in enumerate(numels) if n > 0), len(numels))


TraceKey = tuple[Precision, bool, bool]
"""One tracing session: the precision traced, the output cast to fp32 before the loss, checkpointing."""


def build_workload(
    source: ModelSource,
    *,
    precision: Precision | str = Precision.BF16_MIXED,
    optimizer: str = "adamw",
    seq_len: int | None = None,
    checkpointing: tuple[bool, ...] = (False, True),
    target: str = "cuda",
    progress: Callable[[int, int], None] | None = None,
    optimizer_impl: OptimizerImpl | None = None,
    checkpoint_mode: ActivationCheckpointing = FULL,
    jobs: int | None = None,
) -> Workload:
    """Trace what the strategies need: for each mode and checkpointing choice, micro-batches 1, 2 and 3.

    Args:
        source: the model source.
        precision: the user's training precision.
        optimizer: optimizer name.
        seq_len: sequence length (token models).
        checkpointing: which checkpointing choices to trace (``True`` is skipped when nothing repeats).
        target: ``"cuda"`` for GPU answers; ``"cpu"`` to predict CPU (gloo) runs, as the tests measure them.
        progress: called as ``progress(done, total)`` after each tracing session (the CLI shows it while it waits).
        optimizer_impl: the optimizer implementation (``None``: torch's default on ``target``).
        checkpoint_mode: what ``True`` in ``checkpointing`` recomputes (``full``, ``every-N`` or ``op``).
        jobs: processes tracing at once (``None``: one per usable core, at most one per session). Sessions past
            the first run in forked children (:mod:`autoshard.forked`) where forking is safe, else one after
            the other; the workload is the same either way.
    """
    from autoshard.profiler.depth_plan import meta_model
    from autoshard.profiler.embeddings import renormed_embeddings
    from autoshard.profiler.options import parse_precision
    from autoshard.strategies.trace_sessions import TraceSessions, jobs_for

    precision = parse_precision(precision)
    # mode -> (traced precision, output cast to fp32 before the loss)
    modes = {"amp": (precision, False), "half": (half_precision(precision), False)}
    if precision is Precision.FP16_MIXED:
        modes["half_fp32_output"] = (half_precision(precision), True)
    # Modes traced in the same precision share their sessions (bf16-true, 32-true); the first is the base.
    keys = list(dict.fromkeys((p, out, ckpt) for p, out in modes.values() for ckpt in checkpointing))
    sessions = TraceSessions(source=source, seq_len=seq_len, optimizer=optimizer, target=target,
                             optimizer_impl=optimizer_impl, checkpoint_mode=checkpoint_mode)
    traced, half_refused, modes = sessions.run_or_amp_alone(keys, modes, jobs_for(jobs, len(keys)), progress)
    base = traced[keys[0]].at_1
    choices = [c for c in checkpointing if not c or base.block_class is not None] or [False]
    # Only checkpointing asked for, and nothing repeats: the sessions without it are traced now.
    missing = [k for k in dict.fromkeys((p, out, c) for p, out in modes.values() for c in choices) if k not in traced]
    traced.update(sessions.run(missing, 1) if missing else {})
    traces = tuple(_census_for(dataclasses.replace(traced[(p, out, ckpt)], mode=mode), precision)
                   for mode, (p, out) in modes.items() for ckpt in choices)
    # Parameter layout from a meta build (no allocation; the one the depth plan made, when it made one), unique
    # tensors only.
    module = meta_model(source)
    numels, blocks, block_counts = parameter_layout(module)
    trainable = base.trainable_parameter_count or 1
    return Workload(
        model=source.name,
        precision=precision,
        optimizer=optimizer,
        seq_len=base.seq_len,
        parameter_count=base.parameter_count,
        trainable_parameter_count=base.trainable_parameter_count,
        parameter_numels=tuple(numels),
        block_classes=base.block_classes,
        block_parameter_counts=block_counts,
        block_stacks=() if blocks is None else tuple(len(s) for s in blocks.stacks),
        tied_parameter_numels=_tied_around_blocks(module, blocks),
        module_parameter_numels=frozen_marked_numels(module),
        frozen_parameter_bytes=frozen_parameter_bytes(module),
        checkpoints_itself=any(getattr(m, "gradient_checkpointing", False) is True for m in module.modules()),
        optimizer_state_bytes_per_parameter=base.optimizer_state_bytes / trainable,
        buffer_bytes=base.buffer_bytes,
        target=target,
        cuda_overhead_bytes=sum(o.bytes for o in base.overheads if o.in_allocator),
        cuda_context_bytes=sum(o.bytes for o in base.overheads if not o.in_allocator),
        traces=traces,
        active_parameter_count=base.active_parameter_count,
        unused_parameter_count=base.unused_parameter_count,
        unused_modules=base.unused_modules,
        written_modules=base.written_modules,
        uncounted_ops=base.uncounted_ops,
        optimizer_impl=optimizer_impl,
        checkpoint_mode=checkpoint_mode,
        module_largest_parameters=module_census(module),
        module_blocks=module_blocks(module, () if blocks is None else blocks.names),
        half_refused=half_refused,
        scalar_parameters=scalar_parameters(module),
        complex_parameters=complex_parameters(module),
        strided_parameters=strided_parameters(module),
        renormed_embeddings=renormed_embeddings(module),
    )



def _census_for(trace: StepTrace, precision: Precision) -> StepTrace:
    """``trace`` with its op census in the user's 16-bit dtype: ``16-mixed``'s half modes are traced in bf16
    (:func:`half_precision`), but their kernels run in fp16, and a GPU without bf16 (V100, T4) has only an fp16
    peak to price them at."""
    if precision is not Precision.FP16_MIXED or trace.precision is not Precision.BF16_TRUE:
        return trace
    profiles = {}
    for name in ("at_1", "at_2"):
        profile = getattr(trace, name)
        profiles[name] = dataclasses.replace(
            profile, census=None if profile.census is None else profile.census.in_dtype("bf16", "fp16"),
            optimizer_census=None if profile.optimizer_census is None
            else profile.optimizer_census.in_dtype("bf16", "fp16"))
    return dataclasses.replace(trace, **profiles)


def _tied_around_blocks(module: Any, blocks: Any) -> tuple[int, ...]:
    """Parameters reached through a module before the first repeated block and one after the last (module
    order), e.g. GPT-2's embedding tied to its LM head."""
    if blocks is None:
        return ()
    order = {name: i for i, (name, _) in enumerate(module.named_modules())}
    first = order[blocks.names[0]]
    last = blocks.names[-1]
    last_end = max(i for name, i in order.items() if name == last or name.startswith(last + "."))
    uses: dict[int, list[int]] = {}
    numel: dict[int, int] = {}
    for mod_name, sub in module.named_modules(remove_duplicate=False):
        for p in sub.parameters(recurse=False):
            uses.setdefault(id(p), []).append(order.get(mod_name, -1))
            numel[id(p)] = p.numel()
    return tuple(
        numel[k] for k, at in uses.items() if any(i < first for i in at) and any(i > last_end for i in at)
    )
