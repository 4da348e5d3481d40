"""What a CUDA GPU does differently from the CPU trace, gathered in one place.

The trace runs on CPU tensors; :mod:`autoshard.profiler.cuda_semantics` makes the step allocate what CUDA
kernels would, and :mod:`autoshard.profiler.cuda_allocator` supplies the caching allocator's rounding and the
fixed overheads. ``docs/gpu-faithfulness.md`` lists every item and its source.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from autoshard.profiler.options import ProfileOptions
from autoshard.profiler.result import Overhead

MODELLED: tuple[str, ...] = (
    "sdpa: flash / memory-efficient attention (no seq x seq matrix, dropout regenerated in backward)",
    "sdpa: value head dim != query head dim (DeepSeek MLA) runs memory-efficient attention, as on CUDA",
    "grouped_mm: fp32 / fp16 routed experts as CUDA's per-group mm fallback (allocates only the output)",
    "autocast: CUDA autocast op lists and weight-cast cache",
    "dropout: fused native_dropout (1-byte bool mask)",
    "softmax: fp16 -> fp32 softmax without an fp32 copy of the input",
    "norms: layer_norm / batch_norm save fp32 statistics for 16-bit inputs (the fake kernels say 16-bit)",
    "optimizer: foreach=True default on CUDA",
    "allocator: 512-byte rounding of every allocation",
    "overheads: cuBLAS workspace (in the allocator)",
    "overheads: CUDA context outside the allocator (a published measurement, cuda_context.py)",
)
"""Not modelled yet (see docs/gpu-faithfulness.md): blocks the caching allocator hands out unsplit and its
fragmentation (only segment rounding is counted), kernel-internal workspaces, cuDNN/RNN kernels."""


def round_allocation_bytes(nbytes: int) -> int:
    """Bytes the CUDA caching allocator hands out for a request of ``nbytes``."""
    from autoshard.profiler.cuda_allocator import round_allocation_bytes as impl

    return impl(nbytes)


class CudaSemanticsLike(Protocol):
    """What the tracer needs from the CUDA emulation."""

    def forward(self) -> contextlib.AbstractContextManager[Any]: ...

    def backward(self) -> contextlib.AbstractContextManager[Any]: ...

    def recomputable(self, fn: Callable[..., Any]) -> Callable[..., Any]: ...


def semantics(options: ProfileOptions) -> CudaSemanticsLike:
    """The CUDA emulation for ``options``' precision."""
    return _Semantics(options.precision.autocast_dtype)


def kernels_registered() -> contextlib.AbstractContextManager[None]:
    """The CUDA emulation's kernels registered for a whole block (:func:`cuda_semantics.kernels_registered`)."""
    from autoshard.profiler.cuda_semantics import kernels_registered as registered

    return registered()


def overheads(compute_capability: tuple[int, int] = (9, 0)) -> tuple[Overhead, ...]:
    """Fixed per-process costs on a CUDA device, for the given compute capability (default: Hopper): the
    cuBLAS workspaces in the allocator, the CUDA context outside it."""
    from autoshard.profiler import cuda_allocator, cuda_context

    return (*cuda_allocator.overheads(compute_capability), cuda_context.context_overhead(compute_capability))


class _Semantics:
    """Adapter from :class:`~autoshard.profiler.cuda_semantics.CudaSemantics` to the tracer's needs.

    Autocast is on for forward and loss only, as in a training loop; during backward the mode stays active so
    that checkpointed blocks recompute with the cast decisions they had in forward.
    """

    def __init__(self, autocast_dtype: Any) -> None:
        from autoshard.profiler.cuda_semantics import CudaSemantics

        self._mode = CudaSemantics(autocast_dtype)
        self._autocast_dtype = autocast_dtype

    @contextlib.contextmanager
    def forward(self) -> Iterator[None]:
        with self._mode:
            yield

    @contextlib.contextmanager
    def backward(self) -> Iterator[None]:
        with self._mode, self._mode.autocast_disabled():
            yield

    def recomputable(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        enabled = self._mode.autocast_is_enabled()

        def run(*args: Any, **kwargs: Any) -> Any:
            with self._mode.autocast_enabled(enabled):
                return fn(*args, **kwargs)

        return run
