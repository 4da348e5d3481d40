"""A compact census of the kernels one traced training step runs: what a step-time model needs, not one MFU.

Recorded while FLOPs are counted (forward and backward of the first step, :mod:`autoshard.profiler.trace`), by
:class:`CensusCounter`, a ``FlopCounterMode`` that also files every op it sees:

* **matmul-class ops** (everything torch's FLOP table or :data:`autoshard.profiler.flops.FLOP_FORMULAS` counts:
  ``mm``, ``addmm``, ``bmm``, ``baddbmm``, ``_grouped_mm``, convolutions, the SDPA / flash kernels) by kind, dtype
  and **shape class**: the smallest of the GEMM's ``M``, ``N``, ``K`` rounded down to a power of two (for
  attention, the head dimension). A GEMM's arithmetic intensity is about its smallest dimension (``2MNK`` FLOPs
  over ``2(MK + KN + MN)`` bytes in 16 bits), so the class also says which side of a GPU's roofline it falls on
  (Williams et al. 2009, "Roofline", CACM 52(4)); and by **alignment**: the largest power of two (at most 16)
  dividing every leading dimension and offset of the GEMM's operands and result, in elements (GPT-2's vocabulary
  of 50,257 makes its LM head's GEMMs 1-aligned; tensor-core GEMMs need 16-byte-aligned ones to run at their
  rate, :func:`alignment`); each class keeps its FLOPs, the FLOPs its kernels compute (less where a causal
  attention kernel skips the blocks above the diagonal, :func:`causal_work_fraction`), the bytes its kernels read
  and write, and how many kernels it took;
* **FFTs** (``_fft_r2c``, ``_fft_c2r``, ``_fft_c2c``), filed as matmul-class kernels of kind ``fft`` with
  their FLOPs (:func:`autoshard.profiler.flops.fft_flops`) and bytes, their shape class the points of one
  transform: the step-time model takes the longer of their FLOPs at the fp32 rate and their bytes at the memory
  bandwidth, which at ``5·log2 N`` FLOPs per complex point is the bytes;
* **memory-bound ops** (every other op that launches a kernel): the bytes their tensors read and write, by the
  size of one kernel's traffic (a power of two), with their kernel count;
* the **kernel count** of the step, for a launch floor.

Views and allocations (no kernel) are left out. The census is exact for the trace and small (tens of classes),
so a profile carries it as data (``ModelProfile.census``) and depth extrapolation combines it like the FLOPs
(:meth:`OpCensus.combine`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

__all__ = ["ALIGNED", "ATTENTION_TILE", "CensusCounter", "MatmulClass", "MemoryClass", "OpCensus", "alignment",
           "causal_work_fraction", "dtype_name", "size_class"]

aten = torch.ops.aten

_DTYPES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32", torch.float64: "fp64",
           torch.float8_e4m3fn: "fp8", torch.float8_e5m2: "fp8"}

_NO_KERNEL = frozenset({
    aten.empty, aten.empty_like, aten.empty_strided, aten.new_empty, aten.new_empty_strided, aten._unsafe_view,
    aten.lift_fresh, aten.detach, aten.alias, aten.set_, aten.resize_, aten._local_scalar_dense,
    aten.sym_size, aten.sym_stride, aten.sym_numel, aten.sym_storage_offset, aten.is_same_size,
})
"""Ops that launch no kernel although their schema does not say they alias (allocations, metadata)."""

_TORCH_NAMESPACES = frozenset({"aten", "prims", "prim", "_c10d_functional", "c10d", "_dtensor", "profiler", ""})
"""Op namespaces of torch itself: an op of any other (a ``torch.library`` custom op) with no FLOP formula is
recorded as uncounted."""

ALIGNED = 16
"""Alignment (elements) the census records at most: 16 elements are 16 bytes of fp8, 32 of bf16 / fp16, 64 of
fp32, at least the 16 bytes tensor-core GEMMs need (NVIDIA, "Matrix Multiplication Background User's Guide",
Tensor Core requirements: dimensions and leading dimensions multiples of 16 bytes)."""


ATTENTION_TILE = 128
"""Rows and columns of the score tile a fused attention kernel computes at once: FlashAttention-2's blocks of 128
(T. Dao, "FlashAttention-2", arXiv 2307.08691, 2023, sec. 3.1 and 3.3: block sizes 64 or 128, 128 x 128 for the
common head dimensions); the causal fraction below counts whole tiles."""


def causal_work_fraction(q_len: int, k_len: int, tile: int = ATTENTION_TILE) -> float:
    """The share of the ``q_len x k_len`` score tiles a causal fused-attention kernel computes: it skips the tiles
    wholly above the diagonal and computes the others whole (Dao 2023, sec. 3.1.1: "we only need to compute about
    half of the blocks"), forward and backward alike. With ``n`` tiles a side, ``(n + 1) / (2n)``: 0.5625 at 1,024
    positions, 0.516 at 4,096; the kernels measured on an H200 (``docs/benchmarks/gpu_kernels.md``, bf16
    4x32x4096x128) took 0.555 of the full kernel's time causal, the diagonal tiles' masking on top.

    Example:
        >>> causal_work_fraction(4096, 4096), causal_work_fraction(128, 128), causal_work_fraction(1024, 1024)
        (0.515625, 1.0, 0.5625)
    """
    rows, cols = math.ceil(q_len / tile), math.ceil(k_len / tile)
    if rows <= 0 or cols <= 0:
        return 1.0
    # Top-left aligned (torch's is_causal): row tile i sees the columns up to its last position, i + 1 tiles while
    # those lie within k_len (the first ``whole`` rows), all ``cols`` after; summed in closed form (a loop over the
    # tiles took minutes at a billion positions).
    whole = min(rows, k_len // tile)
    computed = whole * (whole + 1) // 2 + (rows - whole) * cols
    return computed / (rows * cols)


def dtype_name(dtype: torch.dtype) -> str:
    """The hardware-spec name of a tensor dtype (``bf16``, ``fp16``, ``fp32``, ``fp8``); others by torch's name."""
    return _DTYPES.get(dtype, str(dtype).removeprefix("torch."))


def size_class(value: int) -> int:
    """The census's class of a size or dimension: ``value`` rounded down to a power of two (0 for 0).

    Example:
        >>> size_class(50257), size_class(4096), size_class(0)
        (32768, 4096, 0)
    """
    return 0 if value <= 0 else 1 << (int(value).bit_length() - 1)


@dataclass(frozen=True, kw_only=True, slots=True)
class MatmulClass:
    """Matmul-class kernels of one kind, dtype and shape class."""

    kind: str
    """``gemm`` (mm / addmm / bmm / baddbmm), ``grouped`` (``_grouped_mm``), ``conv`` or ``attention``."""
    dtype: str
    """Input dtype, as :func:`dtype_name` names it."""
    min_dim: int
    """The smallest of ``M``, ``N``, ``K`` (attention: the head dimension), rounded down to a power of two."""
    flops: int
    bytes: int
    """Bytes the kernels read (operands) and write (result)."""
    kernels: int
    alignment: int = ALIGNED
    """The largest power of two, at most :data:`ALIGNED`, dividing every leading dimension (and storage offset)
    of the kernels' operands and results, in elements (:func:`alignment`); convolutions and attention:
    :data:`ALIGNED`."""
    work_flops: int | None = None
    """FLOPs the kernels compute, where fewer than :attr:`flops` (which counts as torch's formulas and published
    MFU figures do): a causal fused-attention kernel's (:func:`causal_work_fraction`). ``None``: :attr:`flops`."""

    @property
    def priced_flops(self) -> int:
        """The FLOPs the kernels compute: what their time is priced by."""
        return self.flops if self.work_flops is None else self.work_flops

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {"kind": self.kind, "dtype": self.dtype, "min_dim": self.min_dim, "alignment": self.alignment,
                "flops": self.flops, "work_flops": self.priced_flops, "bytes": self.bytes, "kernels": self.kernels}


@dataclass(frozen=True, kw_only=True, slots=True)
class MemoryClass:
    """Memory-bound kernels whose traffic (reads + writes) per kernel lies in ``[size_bytes, 2·size_bytes)``."""

    size_bytes: int
    bytes: int
    kernels: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {"size_bytes": self.size_bytes, "bytes": self.bytes, "kernels": self.kernels}


@dataclass(frozen=True, kw_only=True, slots=True)
class OpCensus:
    """The kernels of one traced forward + backward (one micro-batch), grouped as the module docstring says."""

    matmuls: tuple[MatmulClass, ...] = ()
    memory: tuple[MemoryClass, ...] = ()

    @property
    def matmul_flops(self) -> int:
        """FLOPs of every matmul-class kernel (equal to what ``FlopCounterMode`` counts)."""
        return sum(c.flops for c in self.matmuls)

    @property
    def memory_bytes(self) -> int:
        """Bytes read and written by the memory-bound kernels."""
        return sum(c.bytes for c in self.memory)

    @property
    def kernels(self) -> int:
        """Kernels launched."""
        return sum(c.kernels for c in self.matmuls) + sum(c.kernels for c in self.memory)

    @classmethod
    def combine(cls, weights: Sequence[int], censuses: Sequence[OpCensus]) -> OpCensus:
        """``Σ weights[i] · censuses[i]`` class by class: the census at full depth from shallow traces, with the
        weights FLOPs are extrapolated with (:mod:`autoshard.profiler.scaling`). Classes that cancel out are
        dropped; a class left negative (the copies disagree) is clamped at zero.

        Example:
            >>> two = OpCensus(memory=(MemoryClass(size_bytes=1024, bytes=2000, kernels=2),))
            >>> three = OpCensus(memory=(MemoryClass(size_bytes=1024, bytes=3000, kernels=3),))
            >>> OpCensus.combine((-30, 31), (two, three)).memory[0].kernels  # 32 blocks from 2 and 3
            33
        """
        mm: dict[tuple[str, str, int, int], list[int]] = {}
        mem: dict[int, list[int]] = {}
        for w, census in zip(weights, censuses, strict=True):
            for m in census.matmuls:
                acc = mm.setdefault((m.kind, m.dtype, m.min_dim, m.alignment), [0, 0, 0, 0])
                acc[0] += w * m.flops
                acc[1] += w * m.bytes
                acc[2] += w * m.kernels
                acc[3] += w * m.priced_flops
            for c in census.memory:
                acc = mem.setdefault(c.size_bytes, [0, 0])
                acc[0] += w * c.bytes
                acc[1] += w * c.kernels
        return cls(
            matmuls=tuple(MatmulClass(kind=k, dtype=d, min_dim=n, alignment=a, flops=max(0, f), bytes=max(0, b),
                                      kernels=max(0, c), work_flops=None if wf == f else max(0, wf))
                          for (k, d, n, a), (f, b, c, wf) in sorted(mm.items()) if c > 0),
            memory=tuple(MemoryClass(size_bytes=s, bytes=max(0, b), kernels=max(0, c))
                         for s, (b, c) in sorted(mem.items()) if c > 0),
        )

    def in_dtype(self, traced: str, meant: str) -> OpCensus:
        """The census with the matmul classes traced in ``traced`` filed under ``meant``: for a step traced in one
        16-bit dtype on behalf of the other (same sizes, same kernels), priced at the other's peak.

        Example:
            >>> gemm = MatmulClass(kind="gemm", dtype="bf16", min_dim=64, flops=8, bytes=4, kernels=1)
            >>> OpCensus(matmuls=(gemm,)).in_dtype("bf16", "fp16").matmuls[0].dtype
            'fp16'
        """
        return OpCensus(matmuls=tuple(dataclasses.replace(m, dtype=meant) if m.dtype == traced else m
                                      for m in self.matmuls), memory=self.memory)

    def pooled(self) -> OpCensus:
        """The memory-bound kernels in one class of every size (``size_bytes`` 0), matmuls as they are: for a
        census whose kernels grow with the model rather than repeat with it (an optimizer step's foreach ops,
        one kernel over every parameter), so that copies of different depths combine.

        Example:
            >>> census = OpCensus(memory=(MemoryClass(size_bytes=1024, bytes=1500, kernels=1),
            ...                           MemoryClass(size_bytes=2**20, bytes=2**20, kernels=2)))
            >>> census.pooled().memory
            (MemoryClass(size_bytes=0, bytes=1050076, kernels=3),)
        """
        return OpCensus(matmuls=self.matmuls, memory=(
            MemoryClass(size_bytes=0, bytes=self.memory_bytes, kernels=sum(c.kernels for c in self.memory)),))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict, with the totals."""
        return {"matmuls": [m.to_dict() for m in self.matmuls], "memory": [c.to_dict() for c in self.memory],
                "matmul_flops": self.matmul_flops, "memory_bytes": self.memory_bytes, "kernels": self.kernels}


def _tensors(values: Iterable[Any]) -> Iterable[torch.Tensor]:
    for v in values:
        if isinstance(v, torch.Tensor):
            yield v
        elif isinstance(v, (list, tuple)):
            yield from (t for t in v if isinstance(t, torch.Tensor))


def _nbytes(values: Iterable[Any]) -> int:
    return sum(t.numel() * t.element_size() for t in _tensors(values))


def _kind(packet: Any) -> str:
    name = packet.__name__
    if name.startswith("_fft_"):
        return "fft"
    if "attention" in name:
        return "attention"
    if "conv" in name:
        return "conv"
    return "grouped" if "grouped" in name else "gemm"


def _min_dim(kind: str, packet: Any, args: tuple[Any, ...], out: Any) -> int:
    """The smallest GEMM dimension of a matmul-class op (attention: the head dimension)."""
    if kind == "attention":
        return int(_query_and_key(packet, args)[0].shape[-1])
    t = [a for a in args if isinstance(a, torch.Tensor)]
    if kind == "fft":  # _fft_*(self, dim, ...): the points of one transform, on the larger (complex or real) side
        dims = args[1]
        return int(max(math.prod(x.shape[d] for d in dims) for x in (t[0], *_tensors((out,)))))
    if kind == "conv":
        if "backward" in packet.__name__:  # convolution_backward(grad_out, input, weight, ...)
            grad_out, weight = t[0], t[2]
        else:
            grad_out, weight = (out[0] if isinstance(out, (tuple, list)) else out), t[1]
        m = grad_out.shape[0] * math.prod(grad_out.shape[2:])
        return int(min(m, weight.shape[0], math.prod(weight.shape[1:])))
    # mm / bmm / _grouped_mm (a, b, ...): (…, M, K) × (…, K, N); addmm / baddbmm (bias, a, b, ...).
    a, b = (t[1], t[2]) if packet in (aten.addmm, aten.baddbmm) and len(t) >= 3 else (t[0], t[1])
    m = a.shape[-2]
    if kind == "grouped" and a.dim() == 2 and b.dim() == 3:  # rows spread over G experts: M / G each on average
        m = max(1, m // b.shape[0])
    return int(min(m, a.shape[-1], b.shape[-1]))


def _recurrence(packet: Any, args: tuple[Any, ...]) -> tuple[int, int] | None:
    """For a recurrent layer (``mkldnn_rnn_layer`` and its backward, ``(input, w_ih, w_hh, b_ih, b_hh, hx, ...)``):
    its time steps, each a GEMM of the batch by the hidden state that waits for the one before (a kernel per step
    on a GPU), and the smallest dimension of those GEMMs. ``None`` for any other op."""
    if "rnn_layer" not in packet.__name__:
        return None
    t = [a for a in args if isinstance(a, torch.Tensor)]
    tokens, hx = t[0].numel() // t[0].shape[-1], t[5]
    batch = max(1, hx.shape[-2] if hx.dim() > 1 else 1)
    return max(1, tokens // batch), int(min(batch, hx.shape[-1]))


def _query_and_key(packet: Any, args: tuple[Any, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    """An attention op's query and key, ``(batch, heads, positions, head dim)``: its first two tensors, after the
    output's gradient in backward (``(grad_out, q, k, v, ...)``)."""
    t = [a for a in args if isinstance(a, torch.Tensor)]
    return (t[1], t[2]) if "backward" in packet.__name__ and len(t) > 2 else (t[0], t[1])


def _argument(packet: Any, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The value ``packet`` was called with for its schema argument ``name`` (its default if not passed; ``None``
    if no overload has one)."""
    for overload in packet.overloads():
        names = [a.name for a in getattr(packet, overload)._schema.arguments]
        if name in names:
            i = names.index(name)
            if name in kwargs:
                return kwargs[name]
            if i < len(args):
                return args[i]
            return getattr(packet, overload)._schema.arguments[i].default_value
    return None


def _work_flops(kind: str, packet: Any, args: tuple[Any, ...], kwargs: dict[str, Any], flops: int) -> int:
    """The FLOPs a matmul-class kernel computes: ``flops``, but for a causal fused-attention kernel (the SDPA
    kernels' ``is_causal``, forward and backward) the share of the score tiles it computes
    (:func:`causal_work_fraction`) of its scores' part (all of it: the projections are other ops)."""
    if kind != "attention" or not _argument(packet, "is_causal", args, kwargs):
        return flops
    q, k = _query_and_key(packet, args)
    return round(flops * causal_work_fraction(int(q.shape[-2]), int(k.shape[-2])))


def _contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))


def alignment(kind: str, args: tuple[Any, ...], out: Any) -> int:
    """The alignment of a GEMM (``gemm``, ``grouped``) in elements: the largest power of two, at most
    :data:`ALIGNED`, dividing the storage offset and every stride but the unit one of each operand and result
    (their leading dimensions, and a batched GEMM's batch strides). Convolutions and attention:
    :data:`ALIGNED` (cuDNN and the fused kernels pick their own layouts).

    A transposed operand counts by its own strides: ``mm(grad.t(), x)``, the weight gradient of a linear layer,
    has the leading dimension of ``grad``, the layer's output width. An operand unit-strided along neither of its
    last two dimensions (an expanded gradient) is copied to a contiguous one first, and counts as that copy.

    Example:
        >>> a, w = torch.empty(8, 768), torch.empty(50257, 768)
        >>> alignment("gemm", (a, w.t()), torch.empty(8, 50257))  # GPT-2's LM head: a 50,257-wide result
        1
        >>> alignment("gemm", (a, torch.empty(768, 50304)), torch.empty(8, 50304))
        16
    """
    if kind not in ("gemm", "grouped"):
        return ALIGNED
    g = ALIGNED
    for t in (*_tensors(args), *_tensors((out,))):
        if t.dim() < 2:
            continue  # a bias: read by the epilogue
        stride, offset = t.stride(), t.storage_offset()
        if 1 not in (stride[-1], stride[-2]) and t.shape[-1] > 1 and t.shape[-2] > 1:  # cuBLAS gets a copy
            stride, offset = _contiguous_strides(t.shape), 0
        strides = [st for st, n in zip(stride, t.shape, strict=True) if n > 1 and st != 1]
        for value in (*strides, offset):
            g = math.gcd(g, int(value))
    return g


class CensusCounter(FlopCounterMode):
    """``FlopCounterMode`` that also takes the census of every op it runs (:meth:`census`).

    FLOPs are counted exactly as the base class does (the same table, the same per-module totals); the census
    adds one dictionary update per op.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.block_of: Callable[[], str] | None = None
        """Which repeated block an op runs in (``""``: none); set, each op's FLOPs also go to
        :attr:`block_flops`."""
        self.block_flops: dict[str, int] = {}
        """FLOPs per repeated block, as :attr:`block_of` places the ops: in backward, the block whose gradient
        nodes run. ``FlopCounterMode``'s per-module totals count a backward op for every module whose backward
        has begun and not ended, and a module's backward ends only when its inputs' gradients are whole: a
        decoder block's cross-attention input (the encoder's output, shared by every decoder block) keeps
        every decoder block open until the last one's backward, so each would count the backward of all the
        blocks after it."""
        self._mm: dict[tuple[str, str, int, int], list[int]] = {}  # flops, bytes, kernels, work flops
        self._mem: dict[int, list[int]] = {}
        self._no_kernel: dict[Any, bool] = {}
        self._written: dict[Any, tuple[frozenset[int], frozenset[str]]] = {}
        self.uncounted: set[str] = set()
        """Ops of the user's own libraries (``torch.library`` custom ops, by qualified name) run without a FLOP
        formula: counted as 0 FLOPs (:func:`autoshard.profiler.flops.uncounted_line`)."""

    def _count_flops(self, func_packet: Any, out: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        formula = self.flop_registry.get(func_packet)
        if formula is not None:
            flops = formula(*args, **kwargs, out_val=out)
            for parent in set(self.mod_tracker.parents):
                self.flop_counts[parent][func_packet] += flops
            if self.block_of is not None:
                block = self.block_of()
                if block:
                    self.block_flops[block] = self.block_flops.get(block, 0) + flops
            kind = _kind(func_packet)
            first = next(iter(_tensors(args)), None)
            dtype = dtype_name(first.dtype) if first is not None else "unknown"
            steps, smallest = _recurrence(func_packet, args) or (1, _min_dim(kind, func_packet, args, out))
            key = (kind, dtype, size_class(smallest), alignment(kind, args, out))
            acc = self._mm.setdefault(key, [0, 0, 0, 0])
            acc[0] += flops
            acc[1] += _nbytes(args) + _nbytes((out,))
            acc[2] += steps
            acc[3] += _work_flops(kind, func_packet, args, kwargs, flops)
            return out
        name = getattr(func_packet, "_qualified_op_name", "")
        if name.partition("::")[0] not in _TORCH_NAMESPACES:
            self.uncounted.add(name)
        if self._launches_no_kernel(func_packet):
            return out
        traffic = _nbytes(args) + _nbytes(kwargs.values()) + _nbytes((out,))
        if next(iter(_tensors((out,))), None) is None:
            traffic += self._written_bytes(func_packet, args, kwargs)
        acc = self._mem.setdefault(size_class(traffic), [0, 0])
        acc[0] += traffic
        acc[1] += 1
        return out

    def _written_bytes(self, packet: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
        """Bytes an op that returns nothing writes in place: the arguments its schema marks as written
        (``Tensor(a!)[] self`` of ``_foreach_mul_``, the state lists of ``_fused_adamw_``). An in-place op that
        returns its ``self`` has that write counted as its output already."""
        written = self._written.get(packet)
        if written is None:
            names: set[str] = set()
            for overload in packet.overloads():
                names.update(a.name for a in getattr(packet, overload)._schema.arguments
                             if a.alias_info is not None and a.alias_info.is_write)
            schema = getattr(packet, packet.overloads()[0])._schema
            written = (frozenset(i for i, a in enumerate(schema.arguments) if a.name in names), frozenset(names))
            self._written[packet] = written
        positions, keywords = written
        return (_nbytes(a for i, a in enumerate(args) if i in positions)
                + _nbytes(v for k, v in kwargs.items() if k in keywords))

    def _launches_no_kernel(self, packet: Any) -> bool:
        known = self._no_kernel.get(packet)
        if known is None:
            known = packet in _NO_KERNEL or _is_view(packet)
            self._no_kernel[packet] = known
        return known

    def census(self) -> OpCensus:
        """The census of everything run under this counter so far."""
        return OpCensus(
            matmuls=tuple(MatmulClass(kind=k, dtype=d, min_dim=n, alignment=a, flops=f, bytes=b, kernels=c,
                                      work_flops=None if w == f else w)
                          for (k, d, n, a), (f, b, c, w) in sorted(self._mm.items())),
            memory=tuple(MemoryClass(size_bytes=s, bytes=b, kernels=c) for s, (b, c) in sorted(self._mem.items())),
        )


class TrafficCensus(CensusCounter):
    """The census without ``FlopCounterMode``'s module tracking (its hooks on every module's forward and
    backward): the planner's census at micro-batch 2, taken in an unmeasured step
    (:func:`autoshard.profiler.trace.trace_timelines`), costs less. Its FLOPs are totals only (no per-module
    split). Like the base class it decomposes the composite ops it has no formula for, so that it counts the ops
    the first micro-batch's census counts; that changes what a memory tracker sees, so it never runs in a
    measured step.

    Example:
        >>> with TrafficCensus(display=False) as census:
        ...     _ = torch.ones(4, 4) @ torch.ones(4, 4)
        >>> census.census().matmul_flops
        128
    """

    def __enter__(self) -> TrafficCensus:
        from torch.utils.flop_counter import _FlopCounterMode  # the dispatch mode FlopCounterMode enters

        self.flop_counts.clear()
        self.mode = _FlopCounterMode(self)
        self.mode.__enter__()
        return self

    def __exit__(self, *args: Any) -> None:
        if self.mode is not None:
            self.mode.__exit__(*args)
            self.mode = None


def _is_view(packet: Any) -> bool:
    """Whether ``packet`` launches no kernel: a ``prim`` or ``profiler`` op (metadata, markers), or an op whose
    tensor-returning overloads return aliases of an input they do not write (a view: ``slice``, ``t``, ...)."""
    if getattr(packet, "_qualified_op_name", "").startswith(("prim::", "profiler::")):
        return True  # metadata; record_function's markers (Optimizer.step wraps every step in one)
    try:
        schemas = [getattr(packet, name)._schema for name in packet.overloads()]
    except (AttributeError, RuntimeError):
        return False
    for schema in schemas:
        returns = schema.returns
        if returns and all("Tensor" in str(r.type) for r in returns):
            return all(r.alias_info is not None and not r.alias_info.is_write for r in returns)
    return False
