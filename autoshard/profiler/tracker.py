"""A storage-level memory tracker for one traced training step.

Every tensor storage that comes out of an ATen op is counted once, from the op that allocates it until the
storage is freed (a weak reference's callback). Works the same on fake tensors (nothing allocated) and on real
CPU tensors (used as ground truth in tests). The technique — weak references to ``UntypedStorage`` observed
from a ``TorchDispatchMode`` — follows ``torch.distributed._tools.mem_tracker`` (PyTorch 2.4+); the
categorisation here is autoshard's own:

* parameters, buffers and inputs are registered explicitly before the step;
* anything else starts as a temporary;
* a tensor autograd saves for backward (``saved_tensors_hooks`` pack hook) becomes an activation;
* a parameter's ``.grad`` becomes a gradient (post-accumulate-grad hook);
* optimizer state becomes optimizer state after ``step()``.

At every new peak the per-category totals are copied, so the breakdown *at the peak* is exact. Each phase also
keeps its highest point inside each repeated block and outside them all (:attr:`PeakSnapshot.within`): a deep
model profiled from shallow copies extrapolates each of these and takes the highest
(:mod:`autoshard.profiler.scaling`), as the peak of a phase may sit in another block in another copy.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import Enum
from functools import cache, partial
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_iter


class Category(str, Enum):
    """What a live storage is, for the breakdown."""

    PARAMETERS = "parameters"
    GRADIENTS = "gradients"
    OPTIMIZER = "optimizer_state"
    ACTIVATIONS = "activations"
    TEMPORARIES = "temporaries"
    BUFFERS = "buffers"
    INPUTS = "inputs"


# A storage keeps the category it was first given unless it is promoted along this order: a temporary that
# autograd saves becomes an activation, a temporary that becomes `.grad` a gradient, and so on. Parameters,
# buffers and inputs never change category (a saved weight is still a weight).
_PROMOTABLE_FROM = {Category.TEMPORARIES, Category.ACTIVATIONS}


@dataclass(slots=True)
class _Entry:
    nbytes: int
    category: Category


@dataclass(slots=True)
class PeakSnapshot:
    """The tracker's state at its highest total."""

    total_bytes: int = 0
    by_category: dict[Category, int] = field(default_factory=dict)
    phase: str = "setup"
    module: str = ""
    step: int = 0
    order: int = 0
    """The tracker's op count when taken: which of two snapshots of the same step came first."""
    within: dict[str, PeakSnapshot] = field(default_factory=dict)
    """For a phase's peak: the highest point of the phase inside each repeated block, by block name, and
    outside every block by :meth:`MemoryTracker.place` (``""`` before the phase's first block, ``"@name"``
    after block ``name``). One dict shared by the phase's snapshots, filled as the phase runs."""


class MemoryTracker(TorchDispatchMode):
    """Counts live tensor storages by category while active.

    Args:
        round_bytes: maps a storage's size to the bytes it occupies on the target device (identity on CPU;
            the CUDA caching allocator's rounding for a GPU).
    """

    def __init__(self, round_bytes: Callable[[int], int] | None = None, *, record_events: bool = False) -> None:
        super().__init__()
        self.record_events = record_events
        self.events: list[tuple[str, tuple[int, ...], str]] = []
        """With ``record_events``: after every allocation and re-classification, the phase, the per-category
        totals (in :class:`Category` order) and the enclosing block (:meth:`block`). Used to find the peak at
        other micro-batches exactly."""
        self._round = round_bytes or (lambda n: n)
        self.allocation_log: list[tuple[int, int]] | None = None
        """When set to a list: every storage counted as ``(key, bytes)`` and every free as ``(key, -1)``, in order,
        from set-up on (warm-up step included): the sequence :func:`autoshard.profiler.cuda_reserve.replay` runs
        through the CUDA caching allocator."""
        self._live: dict[int, _Entry] = {}
        self._refs: dict[int, weakref.ref[Any]] = {}
        self.totals: dict[Category, int] = {c: 0 for c in Category}
        self.total_bytes = 0
        self.peak = PeakSnapshot(by_category=dict(self.totals))
        self.phase_peaks: dict[str, PeakSnapshot] = {}
        """The highest point reached in each phase (used to extrapolate across block counts), with the highest
        point inside each block (:attr:`PeakSnapshot.within`)."""
        self.phase = "setup"
        self.step = 0
        self.module_stack: list[str] = []
        self.saved_by_scope: dict[str, int] = {}
        """Bytes newly classified as activations while each scope (block name) was innermost."""
        self._scope: str | None = None
        self._blocks: set[str] = set()
        self._block_of: dict[str, str] = {}
        self._last_block: tuple[str, int, str] = ("", -1, "")
        """The phase, step and block of the last point inside a block (:meth:`place`)."""
        self.measuring = True
        """Peaks and events are only taken while set (the tracer clears it for the warm-up step)."""
        self.stand_in_scalars = False
        self.norm_stats_fp32 = "never"
        """When fake kernels get the dtype of a normalisation's saved statistics wrong (they return the input's
        16-bit dtype): ``"always"`` counts them as fp32 (CUDA: accumulate type), ``"mixed"`` only when the weight
        is fp32 and the input 16-bit (CPU's mixed-type kernels), ``"never"`` takes the fake dtype."""
        """When set, reading a fake tensor's value (``.item()``) returns a stand-in instead of failing."""
        self.on_ops: Callable[[], None] | None = None
        """Called before every :data:`OPS_PER_CHECK`-th op (the tracer's time limit: it may raise)."""
        self.op_count = 0
        self.backward_module: str | None = None
        """The module whose backward is running, as far as the tracer knows (``module_stack`` in forward)."""
        self.failure: tuple[str, str] | None = None
        """The last op that raised while active and the innermost module running it (``""`` if unknown)."""
        self.watched: dict[int, str] = {}
        """Parameters by storage id, whose in-place writes in forward or backward are recorded in :attr:`written`
        (an EMA updated in forward, an embedding's ``max_norm``): FSDP2 and ZeRO-3 run forward on gathered copies."""
        self.written: set[str] = set()

    def restart(self) -> None:
        """Forget the peaks, the events and the per-step state, keeping the live storages: the next step is
        measured as if it were the first measured step of a trace of its own (``trace_timelines``)."""
        self.events = []
        self.peak = PeakSnapshot(by_category={c: 0 for c in Category})
        self.phase_peaks = {}
        self.phase = "setup"
        self.step = 0
        self.module_stack.clear()
        self.saved_by_scope = {}
        self._scope = None
        self._last_block = ("", -1, "")
        self.measuring = True
        self.backward_module = None
        self.failure = None

    @property
    def scope(self) -> str | None:
        """The repeated block running forward (its name), or ``None``; set by the tracer's module hooks."""
        return self._scope

    @scope.setter
    def scope(self, name: str | None) -> None:
        self._scope = name
        if name is not None and name not in self._blocks:
            self._blocks.add(name)
            self._block_of.clear()

    def place(self) -> str:
        """:meth:`block`, or outside every block ``"@"`` and the block the phase last ran in (``""`` before its
        first): a phase's points outside its blocks fall before, between and after them (the start and the end
        of backward), and each such stretch is a place of its own whose height depends on the blocks around it
        (:func:`autoshard.profiler.depth_names.place`)."""
        block = self.block()
        if block:
            self._last_block = (self.phase, self.step, block)
            return block
        phase, step, last = self._last_block
        return f"@{last}" if (phase, step) == (self.phase, self.step) else ""

    def block(self) -> str:
        """The repeated block the step is in (``""``: outside every block): :attr:`scope` in forward and in
        recomputation, in backward the block enclosing :attr:`backward_module` (every block has run forward,
        and so been a scope, before its backward)."""
        if self._scope is not None:
            return self._scope
        module = self.backward_module
        if self.phase != "backward" or not module:
            return ""
        found = self._block_of.get(module)
        if found is None:
            found, name = "", module
            while name:
                if name in self._blocks:
                    found = name
                    break
                name = name.rpartition(".")[0]
            self._block_of[module] = found
        return found

    # -- registration -------------------------------------------------------------------------------------
    def track(self, tensor: torch.Tensor, category: Category, *, promote: bool = True) -> None:
        """Count ``tensor``'s storage as ``category`` (re-classifying it if it is tracked and promotable)."""
        if not isinstance(tensor, torch.Tensor) or (tensor.device.type == "meta" and not _is_fake(tensor)):
            return
        storage = tensor.untyped_storage()
        key = id(storage)
        entry = self._live.get(key)
        if entry is None:
            nbytes = self._round(storage.nbytes())
            entry = _Entry(nbytes, category)
            self._live[key] = entry
            self._refs[key] = weakref.ref(storage, partial(self._on_free, key))
            if self.allocation_log is not None:
                self.allocation_log.append((key, nbytes))
            self.totals[category] += nbytes
            self.total_bytes += nbytes
            self._maybe_peak()
        elif promote and entry.category in _PROMOTABLE_FROM and entry.category is not category:
            if category is Category.ACTIVATIONS and self.scope is not None:
                self.saved_by_scope[self.scope] = self.saved_by_scope.get(self.scope, 0) + entry.nbytes
            self.totals[entry.category] -= entry.nbytes
            self.totals[category] += entry.nbytes
            entry.category = category
            if self.record_events and self.measuring:
                self._record()

    def track_all(self, tensors: Iterable[torch.Tensor], category: Category) -> None:
        """:meth:`track` each tensor."""
        for t in tensors:
            self.track(t, category)

    def category_of(self, tensor: torch.Tensor) -> Category | None:
        """The category ``tensor``'s storage is counted as, or ``None`` if untracked."""
        entry = self._live.get(id(tensor.untyped_storage()))
        return None if entry is None else entry.category

    # -- internals ----------------------------------------------------------------------------------------
    def _on_free(self, key: int, _ref: Any) -> None:
        entry = self._live.pop(key, None)
        self._refs.pop(key, None)
        if entry is not None:
            if self.allocation_log is not None:
                self.allocation_log.append((key, -1))
            self.totals[entry.category] -= entry.nbytes
            self.total_bytes -= entry.nbytes

    def _record(self) -> None:
        self.events.append((self.phase, tuple(self.totals[c] for c in Category), self.place()))

    def _maybe_peak(self) -> None:
        if not self.measuring:
            return
        if self.record_events:
            self._record()
        phase_peak = self.phase_peaks.get(self.phase)
        within: dict[str, PeakSnapshot] = {} if phase_peak is None else phase_peak.within
        block = self.place()
        block_peak = within.get(block)
        if block_peak is None or self._higher(block_peak):
            snapshot = PeakSnapshot(self.total_bytes, dict(self.totals), self.phase, self._module_name(), self.step,
                                    self.op_count, within)
            within[block] = snapshot
            if phase_peak is None or self._higher(phase_peak):
                self.phase_peaks[self.phase] = snapshot
                if self._higher(self.peak):
                    self.peak = snapshot

    def _higher(self, snapshot: PeakSnapshot) -> bool:
        # A later step reaching the same height replaces the earlier one: in the first step the optimizer
        # state being created still counts as temporaries, in later steps it is classified.
        return self.total_bytes > snapshot.total_bytes or (
            self.total_bytes == snapshot.total_bytes and self.step > snapshot.step
        )

    def _module_name(self) -> str:
        return self.module_stack[-1] if self.module_stack else ""

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        if func is torch.ops.aten._local_scalar_dense.default and _is_fake(args[0]):
            known = getattr(args[0], _KNOWN_VALUE, None)
            if known is not None:  # a random draw's upper bound, or a comparison of it (see _LAYERDROP_OPS)
                return known
            if self.stand_in_scalars:
                # A fake tensor has no value to read. Optimizers read scalars (step counts, norms) that never
                # change what they allocate, so a stand-in value lets e.g. Adafactor be traced.
                return _stand_in(args[0].dtype)
        self.op_count += 1
        if self.on_ops is not None and self.op_count % OPS_PER_CHECK == 0:
            self.on_ops()
        if self.watched and self.phase in _WRITES_WATCHED and _written_arguments(func):
            self._note_writes(func, args)
        if _writes_lists_in_place(func) and _all_fake(args):
            # A fake in-place foreach op (the optimizer's `_foreach_mul_`...) allocates nothing and returns
            # nothing: its fake kernel only runs a meta kernel per tensor to check shapes, a third of a GPU
            # trace's optimizer step. Version counters are bumped above this mode, as without it.
            return None
        try:
            out = func(*args, **(kwargs or {}))
        except Exception:
            self.failure = (str(func), self._module_name() or self.backward_module or "")
            raise
        if func in _LAYERDROP_OPS and isinstance(out, torch.Tensor) and out.dim() == 0 and _is_fake(out):
            _propagate_known_value(func, out, args)
        if func in _NORM_OPS and self.norm_stats_fp32 != "never" and _is_fake(args[0]):
            self._norm_outputs(out, args, weight_index=2 if func is torch.ops.aten.native_layer_norm.default else 1)
        for t in tree_iter(out):
            if isinstance(t, torch.Tensor):
                self._after_op(t)
        if func._overloadpacket is torch.ops.aten.resize_ or func is torch.ops.aten.set_.source_Storage:
            self._resync(args[0])
        return out

    def _note_writes(self, func: Any, args: tuple[Any, ...]) -> None:
        for i in _written_arguments(func):
            if i < len(args):
                for t in tree_iter(args[i]):
                    if isinstance(t, torch.Tensor):
                        name = self.watched.get(id(t.untyped_storage()))
                        if name is not None:
                            self.written.add(name)

    def _norm_outputs(self, out: Any, args: tuple[Any, ...], *, weight_index: int) -> None:
        """Count a 16-bit normalisation's saved mean / inverse std as fp32, as the real kernels allocate them
        (CUDA ``layer_norm`` / ``batch_norm`` use the accumulate type; CPU does for fp32 weights)."""
        x, weight = args[0], args[weight_index] if len(args) > weight_index else None
        if x.dtype not in (torch.float16, torch.bfloat16):
            return
        if self.norm_stats_fp32 == "mixed" and not (isinstance(weight, torch.Tensor) and weight.dtype == torch.float32):
            return
        for stat in out[1:3]:
            if isinstance(stat, torch.Tensor) and stat.dtype == x.dtype:
                self._after_op(stat, nbytes=stat.untyped_storage().nbytes() * 2)

    def _after_op(self, t: torch.Tensor, *, nbytes: int | None = None) -> None:
        storage = t.untyped_storage()
        key = id(storage)
        if key in self._live:
            return
        nbytes = self._round(storage.nbytes() if nbytes is None else nbytes)
        self._live[key] = _Entry(nbytes, Category.TEMPORARIES)
        self._refs[key] = weakref.ref(storage, partial(self._on_free, key))
        if self.allocation_log is not None:
            self.allocation_log.append((key, nbytes))
        self.totals[Category.TEMPORARIES] += nbytes
        self.total_bytes += nbytes
        self._maybe_peak()

    def _resync(self, t: torch.Tensor) -> None:
        """A storage changed size in place (``resize_``): update its bytes."""
        entry = self._live.get(id(t.untyped_storage()))
        if entry is None:
            return
        nbytes = self._round(t.untyped_storage().nbytes())
        delta = nbytes - entry.nbytes
        if self.allocation_log is not None:  # the allocator gives a resized storage a new block
            self.allocation_log += [(id(t.untyped_storage()), -1), (id(t.untyped_storage()), nbytes)]
        entry.nbytes = nbytes
        self.totals[entry.category] += delta
        self.total_bytes += delta
        self._maybe_peak()


OPS_PER_CHECK = 64
"""How often (in ops) :attr:`MemoryTracker.on_ops` is called: a clock read every op would cost little, but
nothing needs it more often."""

_NORM_OPS = {
    torch.ops.aten.native_layer_norm.default,
    torch.ops.aten.native_batch_norm.default,
    torch.ops.aten._native_batch_norm_legit.default,
    torch.ops.aten._native_batch_norm_legit_functional.default,
}
"""Normalisations whose outputs 1 and 2 are the saved statistics (mean, inverse std)."""


_WRITES_WATCHED = frozenset({"forward", "loss", "backward"})
"""The phases whose in-place writes to parameters :class:`MemoryTracker` records (not the optimizer's)."""


@cache
def _written_arguments(func: torch._ops.OpOverload) -> tuple[int, ...]:
    """Positions of the arguments ``func`` writes in place (``Tensor(a!)``, ``Tensor(a!)[]``).

    Example:
        >>> _written_arguments(torch.ops.aten.lerp_.Scalar), _written_arguments(torch.ops.aten.add.Tensor)
        ((0,), ())
    """
    schema = getattr(func, "_schema", None)
    if schema is None:
        return ()
    return tuple(i for i, a in enumerate(schema.arguments)
                 if not a.kwarg_only and a.alias_info is not None and a.alias_info.is_write)


@cache
def _writes_lists_in_place(func: torch._ops.OpOverload) -> bool:
    """Whether ``func`` is an ATen foreach op that writes its first tensor list in place and returns nothing
    (``_foreach_add_.List(Tensor(a!)[] self, Tensor[] other, *, Scalar alpha=1) -> ()``)."""
    schema = func._schema
    if func.namespace != "aten" or not schema.name.startswith("aten::_foreach_") or schema.returns:
        return False
    first = schema.arguments[0] if schema.arguments else None
    return first is not None and first.alias_info is not None and first.alias_info.is_write


def _all_fake(args: tuple[Any, ...]) -> bool:
    """Whether every tensor in ``args`` (tensors and lists of tensors) is fake and carries no constant.

    A fake tensor made from a Python number (an optimizer's ``step`` counter) keeps its value as a constant, which
    the fake kernel updates: ``_foreach_add_(state_steps, 1)`` must run, or Adam's bias correction divides by
    ``1 - beta1 ** 0 = 0``.
    """
    from torch._subclasses.fake_tensor import FakeTensor

    for arg in args:
        for t in arg if isinstance(arg, (list, tuple)) else (arg,):
            if isinstance(t, torch.Tensor) and (not isinstance(t, FakeTensor) or t.constant is not None):
                return False
    return True


_KNOWN_VALUE = "_autoshard_known_value"
"""Attribute of a fake 0-d tensor whose value the trace decides (see :data:`_LAYERDROP_OPS`)."""

_COMPARISONS: dict[Any, Callable[[float, float], bool]] = {
    torch.ops.aten.lt.Scalar: lambda a, b: a < b, torch.ops.aten.le.Scalar: lambda a, b: a <= b,
    torch.ops.aten.gt.Scalar: lambda a, b: a > b, torch.ops.aten.ge.Scalar: lambda a, b: a >= b,
}
_LAYERDROP_OPS = frozenset({torch.ops.aten.rand.default, *_COMPARISONS})
"""LayerDrop (Fan et al. 2019) as transformers writes it: ``p = torch.rand([])``, then ``if p < layerdrop:`` skip
the layer; transformers 5.17 draws even when ``layerdrop`` is 0 (5.24 only when it is above 0), which a trace
without data could not read. A 0-d draw reads as 1.0, the top of ``rand``'s range, so no layer is skipped: the
most memory and work a step can take. Its comparisons with a number are worked out from it."""


def _propagate_known_value(func: Any, out: torch.Tensor, args: tuple[Any, ...]) -> None:
    if func is torch.ops.aten.rand.default:
        setattr(out, _KNOWN_VALUE, 1.0)
        return
    left = getattr(args[0], _KNOWN_VALUE, None) if isinstance(args[0], torch.Tensor) else None
    if left is not None and len(args) > 1 and isinstance(args[1], (int, float)):
        setattr(out, _KNOWN_VALUE, _COMPARISONS[func](left, args[1]))


def _stand_in(dtype: torch.dtype) -> bool | int | float:
    if dtype is torch.bool:
        return True
    return 1.0 if dtype.is_floating_point else 1


def _is_fake(t: torch.Tensor) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(t, FakeTensor)
