"""Device memory outside the caching allocator: the CUDA context, and what ``nvidia-smi`` shows in all.

``torch.cuda.max_memory_allocated`` counts the blocks the caching allocator hands out; ``nvidia-smi`` (and
published "memory used" figures) count everything the process holds on the device: the allocator's reserved
segments (``max_memory_reserved``) plus the CUDA context (the driver's state and the kernels loaded into it),
which no allocator statistic sees.

The context's size is not derivable from source: it depends on the driver, the CUDA version, the GPU and
above all on module loading. CUDA 11.7 added lazy loading and PyTorch sets ``CUDA_MODULE_LOADING=LAZY`` unless
the user set it (pytorch/pytorch#86509, PyTorch 1.13), so only the kernels a process runs are loaded. Each
figure below is a measurement with where it was made; :func:`context_overhead` picks one for a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from autoshard.profiler.cuda_reserve import ROUND_LARGE
from autoshard.profiler.result import Overhead

_MIB = 2**20


@dataclass(frozen=True, slots=True)
class ContextMeasurement:
    """One published measurement of a CUDA context."""

    bytes: int
    gpu: str
    compute_capability: tuple[int, int] | None
    """``None`` where the source does not name the GPU."""
    cuda: str
    torch: str
    lazy_loading: bool
    source: str


MEASUREMENTS: tuple[ContextMeasurement, ...] = (
    ContextMeasurement(
        bytes=426 * _MIB, gpu="RTX 6000 Ada", compute_capability=(8, 9), cuda="13.0", torch="2.10.0",
        lazy_loading=True,
        source="unslothai/unsloth-zoo#1053 (2026-08): nvidia-smi 426 MiB after torch.cuda.mem_get_info(0) "
               "created the context, allocated / reserved 0"),
    ContextMeasurement(
        bytes=287_047_680, gpu="unnamed", compute_capability=None, cuda="11.7", torch="1.13", lazy_loading=True,
        source="pytorch/pytorch#86509: cudaMemGetInfo total - free = 287,047,680 B with CUDA_MODULE_LOADING=LAZY "
               "after one 6.4 MB tensor (its allocator segment included)"),
    ContextMeasurement(
        bytes=666_632_192, gpu="unnamed", compute_capability=None, cuda="11.7", torch="1.13", lazy_loading=False,
        source="pytorch/pytorch#86509: the same with CUDA_MODULE_LOADING=DEFAULT (eager): 666,632,192 B"),
    ContextMeasurement(
        bytes=1341 * _MIB, gpu="Tesla V100-SXM2-16GB", compute_capability=(7, 0), cuda="11.2 (driver 460.91.03)",
        torch="not stated (January 2022)", lazy_loading=False,
        source="transformers docs/source/en/perf_train_gpu_one.mdx @ 98513df: pynvml used 1343 MiB after "
               "torch.ones((1, 1)).to('cuda') on an idle GPU, less the allocator's 2 MiB segment for that tensor"),
)
"""Newest first. None is from a Hopper GPU yet: the GPU campaign (issue #16) should add one."""


def context_measurement(compute_capability: tuple[int, int], *, lazy_loading: bool = True) -> ContextMeasurement:
    """The measurement to use for a GPU: one made on the same compute capability if any, else the newest
    with the same module loading.

    Example:
        >>> context_measurement((9, 0)).gpu, context_measurement((9, 0), lazy_loading=False).cuda
        ('RTX 6000 Ada', '11.7')
        >>> context_measurement((7, 0), lazy_loading=False).gpu  # measured on this compute capability
        'Tesla V100-SXM2-16GB'
        >>> context_measurement((7, 0)).gpu  # none lazy on sm_70: the newest lazy one
        'RTX 6000 Ada'
    """
    same = [m for m in MEASUREMENTS if m.lazy_loading == lazy_loading]
    exact = [m for m in same if m.compute_capability == compute_capability]
    return (exact or same)[0]


def context_overhead(compute_capability: tuple[int, int], *, lazy_loading: bool = True) -> Overhead:
    """The CUDA context as an :class:`Overhead` outside the allocator, its source naming where it was measured
    and whether that was this GPU."""
    m = context_measurement(compute_capability, lazy_loading=lazy_loading)
    cc = "sm_%d%d" % compute_capability  # noqa: UP031 — two ints into one token
    where = "this compute capability" if m.compute_capability == compute_capability else (
        f"not measured on {cc}; nearest published figure")
    return Overhead(name="CUDA context", bytes=m.bytes, in_allocator=False,
                    source=f"{m.source}; {m.gpu}, CUDA {m.cuda}, PyTorch {m.torch} ({where})")


def reserve_lower_bound_bytes(allocated_bytes: int) -> int:
    """The least the allocator can hold beyond ``allocated_bytes`` at that moment: the rounding up to whole
    segments of whole 2 MiB units (``ROUND_LARGE``; small requests take 2 MiB segments, 1-10 MiB ones 20 MiB
    segments). What fragmentation adds depends on the order of allocations: ``cuda_reserve`` replays it.

    Example:
        >>> reserve_lower_bound_bytes(3 * 2**20), reserve_lower_bound_bytes(0)
        (1048576, 0)
    """
    return -(-allocated_bytes // ROUND_LARGE) * ROUND_LARGE - allocated_bytes
