"""What the CUDA caching allocator adds to a trace of tensors.

Two things a list of tensor sizes does not show: every allocation is rounded up to the
allocator's block size, and cuBLAS keeps a workspace per (handle, stream) that it allocates
through the same allocator, so ``torch.cuda.memory_allocated`` counts it.

Not modelled here (they depend on the allocator's history, not on one request): blocks handed
out unsplit (a free block is not split when less than 512 B would remain in the small pool or
at most 1 MiB in the large pool, ``should_split``), segment sizes (2 MiB small segments, 20 MiB
or 2 MiB-rounded large ones) which make ``memory_reserved`` exceed ``memory_allocated``, and
``expandable_segments``.
"""

from __future__ import annotations

from autoshard.profiler.result import Overhead

__all__ = [
    "BLOCK_BYTES",
    "CUBLAS_WORKSPACES_PER_STEP",
    "cublas_workspace_bytes",
    "overheads",
    "round_allocation_bytes",
]

BLOCK_BYTES = 512
"""``kMinBlockSize``: "all sizes are rounded to at least 512 bytes" (c10/core/AllocatorConfig.h, torch 2.13.0)."""

CUBLAS_WORKSPACES_PER_STEP = 2
"""cuBLAS handles are per thread (``DeviceThreadHandlePool``) and workspaces per (handle, stream)
(aten/src/ATen/cuda/CublasHandlePool.cpp); forward runs on the caller's thread, backward on the
autograd engine's device thread (torch/csrc/autograd/engine.cpp), so a single-stream training
step holds two. Derived from source, not yet measured on a GPU."""

_SMALL_WORKSPACE_BYTES = 4096 * 1024 * 2 + 16 * 1024 * 8
"""``:4096:2:16:8``, the default outside the architectures below (CublasHandlePool.cpp)."""
_LARGE_WORKSPACE_BYTES = 4096 * 8 * 1024
"""32 MiB "for Hopper and Blackwell" (CublasHandlePool.cpp)."""
_LARGE_WORKSPACE_MAJORS = (9, 10, 12)


def round_allocation_bytes(nbytes: int, *, roundup_power2_divisions: int = 0) -> int:
    """Bytes the CUDA caching allocator hands out for a request of ``nbytes``.

    ``round_size`` in c10/cuda/CUDACachingAllocator.cpp: a request is rounded up to a multiple
    of 512 bytes (at least 512); a zero-byte request allocates nothing (``allocate`` skips
    ``malloc`` when ``size == 0``). With ``roundup_power2_divisions`` > 1 (the
    ``PYTORCH_ALLOC_CONF=roundup_power2_divisions:N`` setting, default 0 i.e. off, set in
    ``AcceleratorAllocatorConfig``'s constructor), sizes above ``512 * N`` are rounded up to the
    next of N equal divisions between powers of two (``roundup_power2_next_division``).

    Args:
        nbytes: the tensor's storage size in bytes.
        roundup_power2_divisions: N of ``roundup_power2_divisions:N``; 0 or 1 means off.

    Returns:
        The size of the block the allocator counts in ``memory_allocated``.

    Raises:
        ValueError: if ``nbytes`` or ``roundup_power2_divisions`` is negative.

    Example:
        >>> round_allocation_bytes(4), round_allocation_bytes(513), round_allocation_bytes(0)
        (512, 1024, 0)
        >>> round_allocation_bytes(1100 * 1024, roundup_power2_divisions=4)  # 1 MiB + 1/4
        1310720
    """
    if nbytes < 0:
        raise ValueError(f"nbytes must be >= 0, but got {nbytes=}.")
    if roundup_power2_divisions < 0:
        raise ValueError(f"roundup_power2_divisions must be >= 0, but got {roundup_power2_divisions=}.")
    if nbytes == 0:
        return 0
    if nbytes < BLOCK_BYTES:
        return BLOCK_BYTES
    if roundup_power2_divisions > 1 and nbytes > BLOCK_BYTES * roundup_power2_divisions:
        return _roundup_power2_next_division(nbytes, roundup_power2_divisions)
    return -(-nbytes // BLOCK_BYTES) * BLOCK_BYTES


def _roundup_power2_next_division(size: int, divisions: int) -> int:
    # roundup_power2_next_division in CUDACachingAllocator.cpp: split [2^k, 2^(k+1)) into
    # 2^floor(log2(divisions)) equal steps and round up to the next step.
    if size & (size - 1) == 0:
        return size
    power2_floor = 1 << (size.bit_length() - 1)
    step = power2_floor >> (divisions.bit_length() - 1)
    if step == 0:
        return power2_floor << 1
    floor = size & ~(step - 1)
    return size if floor == size else floor + step


def cublas_workspace_bytes(compute_capability: tuple[int, int]) -> int:
    """Default cuBLAS workspace per (handle, stream), allocated through the caching allocator.

    ``parseChosenWorkspaceSize`` in aten/src/ATen/cuda/CublasHandlePool.cpp: 32 MiB on compute
    capability major 9, 10 or 12 (Hopper, Blackwell), else ``:4096:2:16:8`` = 8 MiB + 128 KiB.
    cuBLASLt adds nothing by default: ``TORCH_CUBLASLT_UNIFIED_WORKSPACE`` is on in open-source
    builds and cuBLASLt then reuses the cuBLAS workspace of the same handle and stream (the
    ``torch.backends.cuda.blas_workspace_size`` docstring in torch 2.13.0 says so).

    Unverified: the CUDA sources are not in the CPU wheel; the rule above is from the upstream
    CublasHandlePool.cpp revision whose API matches the installed 2.13.0 header
    ``ATen/cuda/CUDAContextLight.h``. A later revision also gives major 11 the 32 MiB size. The
    ``CUBLAS_WORKSPACE_CONFIG`` variable and ``torch.backends.cuda.cublas_workspace_size()``
    override the default; this function returns the default only.

    Args:
        compute_capability: ``(major, minor)``, e.g. ``(9, 0)`` for H100.

    Returns:
        Workspace bytes (a multiple of 512, so rounding adds nothing).

    Raises:
        ValueError: if ``compute_capability`` is not two non-negative ints.

    Example:
        >>> cublas_workspace_bytes((9, 0)), cublas_workspace_bytes((8, 0))
        (33554432, 8519680)
    """
    _check_compute_capability(compute_capability)
    major, _ = compute_capability
    return _LARGE_WORKSPACE_BYTES if major in _LARGE_WORKSPACE_MAJORS else _SMALL_WORKSPACE_BYTES


def overheads(compute_capability: tuple[int, int]) -> tuple[Overhead, ...]:
    """Allocations of a training step on one GPU that no traced tensor accounts for.

    Only the cuBLAS workspaces (:data:`CUBLAS_WORKSPACES_PER_STEP` of
    :func:`cublas_workspace_bytes`). The CUDA context (outside the allocator) is not included:
    its size depends on the driver, the CUDA version and lazy module loading and cannot be
    derived from source; it has to be measured on the GPU.

    Args:
        compute_capability: ``(major, minor)`` of the target GPU.

    Returns:
        The overheads, each with its source.

    Raises:
        ValueError: if ``compute_capability`` is not two non-negative ints.
    """
    workspace_bytes = cublas_workspace_bytes(compute_capability)
    return (
        Overhead(
            name="cuBLAS workspaces",
            bytes=CUBLAS_WORKSPACES_PER_STEP * workspace_bytes,
            in_allocator=True,
            source=(
                f"{CUBLAS_WORKSPACES_PER_STEP} x {workspace_bytes} B, one per cuBLAS handle (forward thread, "
                "autograd device thread): aten/src/ATen/cuda/CublasHandlePool.cpp, torch 2.13"
            ),
        ),
    )


def _check_compute_capability(compute_capability: tuple[int, int]) -> None:
    if (
        not isinstance(compute_capability, tuple)
        or len(compute_capability) != 2
        or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in compute_capability)
    ):
        raise ValueError(f"compute_capability must be (major, minor) ints, but got {compute_capability=}.")
