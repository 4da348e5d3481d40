"""Typed, JSON-ready results of profiling one training step."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from autoshard.profiler.checkpointing import parse_checkpointing
from autoshard.profiler.experts import ExpertRouting, active_parameters
from autoshard.profiler.op_census import OpCensus
from autoshard.profiler.options import ProfileOptions


@dataclass(frozen=True, kw_only=True, slots=True)
class MemoryBreakdown:
    """Bytes by kind, at one moment of the step."""

    parameters: int
    gradients: int
    optimizer_state: int
    activations: int
    """Tensors autograd saved for backward (and not already counted as parameters or inputs)."""
    temporaries: int
    """Everything else alive: op outputs not saved, gradients of activations in flight, optimizer scratch."""
    buffers: int
    inputs: int
    """The batch."""

    @property
    def total(self) -> int:
        """Sum of all kinds."""
        return (
            self.parameters
            + self.gradients
            + self.optimizer_state
            + self.activations
            + self.temporaries
            + self.buffers
            + self.inputs
        )

    def to_dict(self) -> dict[str, int]:
        """JSON-ready dict, with ``total``."""
        d = asdict(self)
        d["total"] = self.total
        return d


    @classmethod
    def from_categories(cls, by_category: dict[Any, int]) -> MemoryBreakdown:
        """Build from the tracker's per-category totals (keys are ``Category`` members or their values)."""
        values = {getattr(k, "value", k): v for k, v in by_category.items()}
        return cls(
            parameters=values["parameters"],
            gradients=values["gradients"],
            optimizer_state=values["optimizer_state"],
            activations=values["activations"],
            temporaries=values["temporaries"],
            buffers=values["buffers"],
            inputs=values["inputs"],
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class Overhead:
    """A fixed cost on the target device that the tensor trace cannot see."""

    name: str
    bytes: int
    in_allocator: bool
    """Whether ``torch.cuda.max_memory_allocated`` counts it (cuBLAS workspace: yes; CUDA context: no)."""
    source: str
    """Where the figure comes from."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return asdict(self)


@dataclass(frozen=True, kw_only=True, slots=True)
class BlockProfile:
    """One instance of the repeated block."""

    name: str
    parameters: int
    """Parameter count."""
    parameter_bytes: int
    activation_bytes: int
    """Bytes saved for backward by ops run inside this block in one forward."""
    forward_flops: int
    backward_flops: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return asdict(self)


@dataclass(frozen=True, kw_only=True, slots=True)
class DepthRecord:
    """How a profile covered a model whose blocks are not all alike, or why it traced every block."""

    kinds: tuple[str, ...]
    """The kinds of block in order of first appearance, e.g. ``DeepseekV3DecoderLayer[mlp=DeepseekV3MoE]``
    (:func:`autoshard.models.hf_layers.layer_kinds`); empty when not known."""
    counts: tuple[int, ...]
    """How many blocks of each kind the model has."""
    traced_counts: tuple[tuple[int, ...], ...]
    """Per traced shallow stack, how many blocks of each kind it had; empty when every block was traced."""
    note: str
    """One line for people: what was traced and why."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return asdict(self)


@dataclass(frozen=True, kw_only=True, slots=True)
class ReserveReplay:
    """What replaying a step's allocations through the CUDA caching allocator gave
    (:mod:`autoshard.profiler.cuda_reserve`)."""

    peak_reserved_bytes: int
    """``max_memory_reserved``: the most the allocator's segments held at once."""
    peak_allocated_bytes: int
    """``max_memory_allocated`` over the same sequence (the warm-up step included)."""
    segments: int
    """Segments held at the end."""
    cache_releases: int
    """Times every wholly free segment was released to make room (only with a capacity)."""
    out_of_memory: bool
    """With a capacity: an allocation failed even after releasing the cache (the replay stopped there)."""
    peak_reserved_expandable_bytes: int | None = None
    """The same allocations replayed under ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`` (one growing
    segment per pool), when replayed so."""
    min_capacity_bytes: int | None = None
    """The least memory the allocator's segments may take for the replay to run without running out, the cache
    released whenever ``cudaMalloc`` would exceed it (:func:`autoshard.profiler.cuda_reserve.min_capacity`), when
    searched: below :attr:`peak_reserved_bytes` when freeing wholly free segments makes room, up to it when the
    free space is all in split ones."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return asdict(self)


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelProfile:
    """What one training step of a model costs on one device holding the whole model."""

    model: str
    """Model name."""
    source_kind: str
    """``"file"``, ``"hf-config"`` or ``"catalog"``."""
    options: ProfileOptions
    seq_len: int | None
    """The sequence length actually traced (``None`` for non-token models)."""
    parameter_count: int
    trainable_parameter_count: int
    parameter_bytes: int
    """Bytes of parameters as stored (in the precision's parameter dtype)."""
    gradient_bytes: int
    """Bytes of gradients after backward."""
    optimizer_state_bytes: int
    """Bytes of optimizer state after the second step."""
    buffer_bytes: int
    peak_bytes: int
    """Peak bytes the allocator hands out (``max_memory_allocated`` on CUDA), overheads in the allocator
    included."""
    peak_phase: str
    """Where the peak happens: ``forward``, ``backward``, ``optimizer`` or ``zero_grad``."""
    peak_module: str
    """The innermost module running at the peak, when in forward."""
    peak_breakdown: MemoryBreakdown
    """Tensor bytes by kind at the peak (overheads not included)."""
    phase_peaks: tuple[tuple[str, MemoryBreakdown], ...]
    """The highest point of each phase (``forward``, ``loss``, ``backward``, ``optimizer``, ``zero_grad``), by kind.
    Sharding scales each kind differently, so a strategy's peak may fall in another phase than this one's."""
    overheads: tuple[Overhead, ...]
    forward_flops: int
    """FLOPs of one forward pass (one micro-batch)."""
    backward_flops: int
    """FLOPs of one backward pass, recomputation under checkpointing included."""
    flops_per_step: int
    """FLOPs of one optimizer step: (forward + backward) × gradient-accumulation micro-batches."""
    tokens_per_step: int | None
    samples_per_step: int
    block_classes: tuple[str, ...]
    """The repeated block classes in module order (e.g. ``("LlamaDecoderLayer",)``; an encoder-decoder may have
    two), empty when nothing repeats (:func:`autoshard.profiler.blocks.find_repeated_blocks`)."""
    blocks: tuple[BlockProfile, ...]
    """Every repeated block, stack after stack, each stack in execution order."""
    gpu_model: tuple[str, ...]
    """The CUDA behaviours modelled in this trace (empty for ``target="cpu"``)."""
    extrapolated_from_layers: tuple[int, ...] | None
    """When set, the profile was traced at these block counts and extrapolated linearly."""
    trace_seconds: float = field(compare=False)
    """How long the trace took: two profiles of the same step are equal whatever their timing."""
    torch_version: str
    autoshard_version: str
    depth: DepthRecord | None = None
    """Set when the blocks are not all alike (the kinds traced, :mod:`autoshard.profiler.scaling`), or when
    every block was traced although the source can be rebuilt shallower (with the reason)."""
    unused_parameter_count: int = 0
    """Trainable parameters the step leaves without a gradient (``.grad`` still ``None`` after backward), e.g.
    LLaVA's last vision layer under ``vision_feature_layer=-2``: DDP must look for them each step
    (``find_unused_parameters``)."""
    unused_parameter_bytes: int = 0
    """Bytes of those parameters as stored."""
    unused_modules: tuple[str, ...] = ()
    """A few of them for display, in module order: the outermost modules whose trainable parameters are all
    unused, else the parameters themselves."""
    written_modules: tuple[str, ...] = ()
    """Modules whose parameters the step's forward or backward wrote in place (an EMA updated in forward, an
    embedding's ``max_norm``), a few by module as :attr:`unused_modules`: FSDP2 and ZeRO-3 run forward on gathered
    copies, where such writes are lost."""
    uncounted_ops: tuple[str, ...] = ()
    """Custom ops (``torch.library``, by qualified name) the step ran without a FLOP formula: counted as 0 FLOPs
    and no compute time (:func:`autoshard.profiler.flops.uncounted_line`)."""
    loss_in_output: bool = False
    """The model's forward returns its loss (a one-element tensor that requires grad in its output: a Hugging Face
    ``.loss`` when labels are passed): backward starts at the model's output, so FSDP2's root pre-backward hook
    (which all-gathers the last unit ahead) runs before the loss's gradients are computed, not after."""
    census: OpCensus | None = None
    """The kernels of one micro-batch's forward + backward by class (:mod:`autoshard.profiler.op_census`), what
    the step-time model prices; ``None`` when FLOPs were not counted."""
    optimizer_census: OpCensus | None = None
    """The kernels of one steady-state optimizer step (the optimizer implementation traced: foreach, for-loop or
    fused), pooled over kernel sizes (:meth:`OpCensus.pooled`), what the step-time model prices after backward;
    ``None`` when FLOPs were not counted."""
    routed_expert_parameter_count: int = 0
    """Parameters of a mixture-of-experts model's routed experts (:mod:`autoshard.profiler.experts`), 0 for a
    dense model."""
    expert_routing: ExpertRouting | None = None
    """Routed experts per MoE layer and experts per token, where the model states them."""
    reserved: ReserveReplay | None = None
    """With ``profile(reserved=True)`` on a CUDA target: the step's allocations, the model traced whole, replayed
    through the caching allocator (segments, splitting, fragmentation); ``None`` otherwise."""
    scope: tuple[str, ...] = ()
    """What the profile leaves out or assumes about the model source ("Scope:" / "Assumed:" sentences,
    :func:`autoshard.models.scope.scope_lines`): e.g. MoE experts that transformers' code computes densely, or
    multi-token-prediction layers it does not build."""

    @property
    def block_class(self) -> str | None:
        """The block classes comma-separated (as accelerate's ``fsdp_transformer_layer_cls_to_wrap`` takes
        them), ``None`` when nothing repeats; one class name for a decoder, as before block sets."""
        return ",".join(self.block_classes) or None

    @property
    def checkpointed_blocks(self) -> int:
        """Blocks the traced step wraps in activation checkpointing (0 without it)."""
        choice = parse_checkpointing(self.options.checkpointing)
        return len(choice.checkpointed([b.name for b in self.blocks]))

    @property
    def active_parameter_count(self) -> int | None:
        """Parameters one token's step uses (a mixture-of-experts model: the routed experts' share ``k / E``
        only), ``None`` for a dense model."""
        return active_parameters(self.parameter_count, self.routed_expert_parameter_count, self.expert_routing)

    @property
    def model_state_bytes(self) -> int:
        """Parameters + gradients + optimizer state."""
        return self.parameter_bytes + self.gradient_bytes + self.optimizer_state_bytes

    @property
    def peak_with_overheads_bytes(self) -> int:
        """Peak bytes on the device, overheads outside the allocator (CUDA context) included."""
        return self.peak_bytes + sum(o.bytes for o in self.overheads if not o.in_allocator)

    @property
    def reserve_bytes(self) -> int:
        """What the CUDA caching allocator holds beyond :attr:`peak_bytes`: with :attr:`reserved`, the replayed
        reserved peak less the allocated peak; else at least the rounding up to whole segments (fragmentation not
        predicted). 0 for a CPU profile."""
        if not self.overheads:  # a CPU profile: no caching allocator
            return 0
        from autoshard.profiler.cuda_context import reserve_lower_bound_bytes

        lower = reserve_lower_bound_bytes(self.peak_bytes)
        return lower if self.reserved is None else max(lower, self.reserved.peak_reserved_bytes - self.peak_bytes)

    @property
    def device_total_bytes(self) -> int:
        """An ``nvidia-smi``-style total: allocated peak + the allocator's reserve (:attr:`reserve_bytes`) +
        overheads outside the allocator (the CUDA context)."""
        return self.peak_with_overheads_bytes + self.reserve_bytes

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (sizes in bytes); documented in ``docs/profile.md``."""
        return {
            "model": self.model,
            "source_kind": self.source_kind,
            "options": self.options.to_dict(),
            "seq_len": self.seq_len,
            "parameter_count": self.parameter_count,
            "trainable_parameter_count": self.trainable_parameter_count,
            "active_parameter_count": self.active_parameter_count,
            "routed_expert_parameter_count": self.routed_expert_parameter_count,
            "expert_routing": None if self.expert_routing is None else self.expert_routing.to_dict(),
            "parameter_bytes": self.parameter_bytes,
            "gradient_bytes": self.gradient_bytes,
            "optimizer_state_bytes": self.optimizer_state_bytes,
            "buffer_bytes": self.buffer_bytes,
            "model_state_bytes": self.model_state_bytes,
            "peak_bytes": self.peak_bytes,
            "peak_with_overheads_bytes": self.peak_with_overheads_bytes,
            "reserve_bytes": self.reserve_bytes,
            "device_total_bytes": self.device_total_bytes,
            "peak_phase": self.peak_phase,
            "peak_module": self.peak_module,
            "peak_breakdown": self.peak_breakdown.to_dict(),
            "phase_peaks": {phase: b.to_dict() for phase, b in self.phase_peaks},
            "overheads": [o.to_dict() for o in self.overheads],
            "forward_flops": self.forward_flops,
            "backward_flops": self.backward_flops,
            "flops_per_step": self.flops_per_step,
            "tokens_per_step": self.tokens_per_step,
            "samples_per_step": self.samples_per_step,
            "block_class": self.block_class,
            "block_classes": list(self.block_classes),
            "blocks": [b.to_dict() for b in self.blocks],
            "gpu_model": list(self.gpu_model),
            "extrapolated_from_layers": (
                None if self.extrapolated_from_layers is None else list(self.extrapolated_from_layers)
            ),
            "trace_seconds": self.trace_seconds,
            "torch_version": self.torch_version,
            "autoshard_version": self.autoshard_version,
            "depth": None if self.depth is None else self.depth.to_dict(),
            "unused_parameter_count": self.unused_parameter_count,
            "unused_parameter_bytes": self.unused_parameter_bytes,
            "unused_modules": list(self.unused_modules),
            "written_modules": list(self.written_modules),
            "uncounted_ops": list(self.uncounted_ops),
            "loss_in_output": self.loss_in_output,
            "census": None if self.census is None else self.census.to_dict(),
            "optimizer_census": None if self.optimizer_census is None else self.optimizer_census.to_dict(),
            "reserved": None if self.reserved is None else self.reserved.to_dict(),
            "scope": list(self.scope),
        }
