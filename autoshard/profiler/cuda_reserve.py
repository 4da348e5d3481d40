"""What the CUDA caching allocator reserves for a sequence of allocations: ``max_memory_reserved``.

``torch.cuda.max_memory_allocated`` counts the blocks handed out; ``max_memory_reserved`` counts the segments the
allocator took from ``cudaMalloc`` to carve them from, which a freed block does not give back. How far the second
exceeds the first depends on the order and sizes of every allocation and free, so it is predicted here by replaying
the traced step's own sequence (:attr:`autoshard.profiler.tracker.MemoryTracker.allocation_log`) through the
allocator's rules, as ``DeviceCachingAllocator`` in c10/cuda/CUDACachingAllocator.cpp applies them with its default
settings (read from the upstream source, pytorch/pytorch @ 001074d; the CPU wheel carries no CUDA sources):

* sizes are rounded up to 512 B (:func:`~autoshard.profiler.cuda_allocator.round_allocation_bytes`); requests up to
  1 MiB come from the small pool, larger ones from the large pool (``get_pool``);
* a request takes the smallest free block of its pool that fits, the lowest address among equals
  (``get_free_block``: ``lower_bound`` on blocks ordered by stream, size, address);
* with none, a new segment is allocated: 2 MiB for a small request, 20 MiB for one under 10 MiB, else the request
  rounded up to 2 MiB (``get_allocation_size``);
* the block found is split when the rest is at least 512 B (small pool) or more than 1 MiB (large pool), the rest
  staying free at the higher address (``should_split``, ``alloc_found_block``);
* a freed block merges with free neighbours of its segment (``free_block``, ``try_merge_blocks``); segments are never
  returned, except that when ``cudaMalloc`` would exceed the device, every wholly free segment is released and the
  allocation retried (``release_cached_blocks``), and if it still does not fit the allocation fails (an OOM).

``expandable_segments:True`` is modelled too (:class:`CachingAllocator`). Not modelled: streams other than the one
the step runs on (FSDP's and DeepSpeed's communication streams and ``record_stream``), ``max_split_size_mb`` /
``garbage_collection_threshold`` / ``roundup_power2_divisions`` (``PYTORCH_ALLOC_CONF``; the defaults are assumed),
expandable segments' unmapping of free pages when the device is full, and kernels' workspaces that no traced
tensor shows.
Checked against the allocator's rules here; against a GPU's ``max_memory_reserved`` by the GPU campaign
(``benchmarks/memory_accuracy.py`` on CUDA).
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from autoshard.profiler.cuda_allocator import CUBLAS_WORKSPACES_PER_STEP, cublas_workspace_bytes, round_allocation_bytes
from autoshard.profiler.result import ReserveReplay

if TYPE_CHECKING:
    from autoshard.models.source import ModelSource
    from autoshard.profiler.options import ProfileOptions

__all__ = ["CachingAllocator", "OutOfMemory", "ReserveReplay", "allocation_size", "min_capacity", "replay",
           "trace_reserved"]

_MIB = 2**20
SMALL_SIZE = _MIB
"""``kSmallSize``: "largest 'small' allocation is 1 MiB"."""
SMALL_BUFFER = 2 * _MIB
"""``kSmallBuffer``: "'small' allocations are packed in 2 MiB blocks"."""
LARGE_BUFFER = 20 * _MIB
"""``kLargeBuffer``: "'large' allocations may be packed in 20 MiB blocks"."""
MIN_LARGE_ALLOC = 10 * _MIB
"""``kMinLargeAlloc``: "allocations between 1 and 10 MiB may use kLargeBuffer"."""
ROUND_LARGE = 2 * _MIB
"""``kRoundLarge``: "round up large allocations to 2 MiB"."""
SPLIT_SMALL_MIN = 512
"""``kMinBlockSize``: a small-pool block is split when at least this much would remain."""


_EXPANDABLE_SPACE = 2**50
"""Where the large pool's expandable segment starts: its virtual range never meets the small pool's."""


def allocation_size(nbytes: int) -> int:
    """The segment ``cudaMalloc`` is asked for when no cached block fits a (rounded) request of ``nbytes``.

    Example:
        >>> [allocation_size(n) // 2**20 for n in (512, 2**20, 2**20 + 512, 10 * 2**20, 21 * 2**20 + 1)]
        [2, 2, 20, 10, 22]
    """
    if nbytes <= SMALL_SIZE:
        return SMALL_BUFFER
    if nbytes < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return -(-nbytes // ROUND_LARGE) * ROUND_LARGE


class OutOfMemory(Exception):
    """The allocator could not serve a request within the device's capacity, even after releasing its cache."""


@dataclass(slots=True, eq=False)
class _Block:
    address: int
    size: int
    small: bool
    allocated: bool = False
    prev: _Block | None = None
    next: _Block | None = None

    @property
    def whole_segment(self) -> bool:
        return self.prev is None and self.next is None


@dataclass(slots=True)
class _Pool:
    base: int = 0
    """Expandable segments: where this pool's one segment starts (its virtual address range)."""
    last: _Block | None = None
    """Expandable segments: the block that ends where the mapped part of the segment ends."""
    free: list[tuple[int, int]] = field(default_factory=list)
    """``(size, address)`` of the free blocks, sorted: the allocator's ``BlockPool::blocks`` for one stream."""
    blocks: dict[int, _Block] = field(default_factory=dict)
    """The free blocks by address."""

    def insert(self, block: _Block) -> None:
        bisect.insort(self.free, (block.size, block.address))
        self.blocks[block.address] = block

    def remove(self, block: _Block) -> None:
        i = bisect.bisect_left(self.free, (block.size, block.address))
        del self.free[i]
        del self.blocks[block.address]

    def best_fit(self, nbytes: int) -> _Block | None:
        i = bisect.bisect_left(self.free, (nbytes, -1))
        if i == len(self.free):
            return None
        block = self.blocks[self.free[i][1]]
        self.remove(block)
        return block


class CachingAllocator:
    """The caching allocator of one device and one stream, without the device: it hands out addresses and counts.

    With ``expandable_segments`` (``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``; Note [Expandable Segments]
    in CUDACachingAllocator.cpp) each pool has one segment per stream whose physical pages are mapped as needed:
    when no mapped free block fits, pages are mapped at the segment's end, 2 MiB at a time for the small pool
    and 20 MiB for the large one, joining the free block there if there is one (``find_expandable_block``,
    ``try_allocate_expandable_block``, ``map_block``); a block of either pool is then split whenever 512 B or more
    would remain (``should_split``).

    Args:
        capacity_bytes: device memory the segments may take in all (``None``: unlimited, no OOM). Not modelled
            with ``expandable_segments`` (which unmaps free pages to make room).
        expandable_segments: model ``expandable_segments:True`` instead of ``cudaMalloc`` segments.

    Example:
        >>> a = CachingAllocator()
        >>> x = a.malloc(3 * 2**20)            # a 20 MiB segment, split
        >>> y = a.malloc(4 * 2**20)            # the rest of it
        >>> a.free(x); a.reserved_bytes // 2**20, a.allocated_bytes // 2**20
        (20, 4)
    """

    def __init__(self, capacity_bytes: int | None = None, *, expandable_segments: bool = False) -> None:
        if capacity_bytes is not None and capacity_bytes < 0:
            raise ValueError(f"capacity_bytes must be >= 0 or None, but got {capacity_bytes=}.")
        if capacity_bytes is not None and expandable_segments:
            raise ValueError("capacity_bytes is not modelled with expandable_segments (which unmaps free pages to "
                             "make room): pass one or the other.")
        self.capacity_bytes = capacity_bytes
        self.expandable_segments = expandable_segments
        self._small = _Pool()
        self._large = _Pool(base=_EXPANDABLE_SPACE)
        self._live: dict[int, _Block] = {}
        self._next_address = 0
        self.allocated_bytes = 0
        self.reserved_bytes = 0
        self.peak_allocated_bytes = 0
        self.peak_reserved_bytes = 0
        self.segments = 0
        self.cache_releases = 0
        """Times every wholly free segment was released to make room (``release_cached_blocks``)."""

    def malloc(self, nbytes: int) -> int:
        """Allocate ``nbytes``; the block's address (a handle for :meth:`free`). Zero bytes allocate nothing.

        Raises:
            OutOfMemory: with ``capacity_bytes``, when no segment can be added even with the cache released.
        """
        size = round_allocation_bytes(nbytes)
        if size == 0:
            return -1
        small = size <= SMALL_SIZE
        pool = self._small if small else self._large
        block = pool.best_fit(size) or (self._grow(pool, size, small) if self.expandable_segments
                                        else self._new_segment(size, small))
        remaining = block.size - size
        if remaining >= SPLIT_SMALL_MIN if small or self.expandable_segments else remaining > SMALL_SIZE:
            rest = _Block(block.address + size, remaining, small, prev=block, next=block.next)
            if block.next is not None:
                block.next.prev = rest
            block.next = rest
            block.size = size
            if pool.last is block:
                pool.last = rest
            pool.insert(rest)
        block.allocated = True
        self._live[block.address] = block
        self.allocated_bytes += block.size
        self.peak_allocated_bytes = max(self.peak_allocated_bytes, self.allocated_bytes)
        return block.address

    def free(self, address: int) -> None:
        """Free the block at ``address`` (from :meth:`malloc`; ``-1``, a zero-byte allocation, is ignored)."""
        if address == -1:
            return
        block = self._live.pop(address)
        block.allocated = False
        self.allocated_bytes -= block.size
        pool = self._small if block.small else self._large
        for neighbour in (block.prev, block.next):
            if neighbour is not None and not neighbour.allocated:
                pool.remove(neighbour)
                if neighbour is block.prev:
                    block.address, block.prev = neighbour.address, neighbour.prev
                    if block.prev is not None:
                        block.prev.next = block
                else:
                    block.next = neighbour.next
                    if block.next is not None:
                        block.next.prev = block
                    if pool.last is neighbour:
                        pool.last = block
                block.size += neighbour.size
        pool.insert(block)

    def _grow(self, pool: _Pool, size: int, small: bool) -> _Block:
        """Map pages at the end of the pool's expandable segment for ``size``, with the free block there if any."""
        page = SMALL_BUFFER if small else LARGE_BUFFER
        tail = pool.last if pool.last is not None and not pool.last.allocated else None
        if tail is not None:
            pool.remove(tail)
        mapped = -(-(size - (0 if tail is None else tail.size)) // page) * page
        self.reserved_bytes += mapped
        self.peak_reserved_bytes = max(self.peak_reserved_bytes, self.reserved_bytes)
        if tail is not None:
            tail.size += mapped
            return tail
        if pool.last is None:
            self.segments += 1
        start = pool.base if pool.last is None else pool.last.address + pool.last.size
        block = _Block(start, mapped, small, prev=pool.last)
        if pool.last is not None:
            pool.last.next = block
        pool.last = block
        return block

    def _new_segment(self, size: int, small: bool) -> _Block:
        segment = allocation_size(size)
        if self.capacity_bytes is not None and self.reserved_bytes + segment > self.capacity_bytes:
            self._release_cache()
            if self.reserved_bytes + segment > self.capacity_bytes:
                raise OutOfMemory(f"{segment} B segment with {self.reserved_bytes} B reserved, "
                                  f"{self.allocated_bytes} B allocated, on a {self.capacity_bytes} B device")
        block = _Block(self._next_address, segment, small)
        self._next_address += segment
        self.reserved_bytes += segment
        self.peak_reserved_bytes = max(self.peak_reserved_bytes, self.reserved_bytes)
        self.segments += 1
        return block

    def _release_cache(self) -> None:
        self.cache_releases += 1
        for pool in (self._small, self._large):
            for block in [b for b in pool.blocks.values() if b.whole_segment]:
                pool.remove(block)
                self.reserved_bytes -= block.size
                self.segments -= 1


def replay(log: Iterable[tuple[int, int]], *, resident_bytes: Iterable[int] = (),
           capacity_bytes: int | None = None, expandable_segments: bool = False) -> ReserveReplay:
    """Replay an allocation log through the caching allocator.

    Args:
        log: ``(key, nbytes)`` for an allocation of ``nbytes`` (>= 0) under ``key``, ``(key, -1)`` for its free,
            in the order they happened (:attr:`~autoshard.profiler.tracker.MemoryTracker.allocation_log`). A key
            may be reused once freed.
        resident_bytes: allocations made first and never freed (the cuBLAS workspaces).
        capacity_bytes: the device's memory for segments (``None``: unlimited).
        expandable_segments: replay under ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``.

    Returns:
        The peaks; with a capacity, whether the sequence ran out of memory.

    Raises:
        ValueError: a free of a key that is not allocated, or an allocation under a key still allocated.

    Example:
        >>> r = replay([(1, 12 * 2**20), (1, -1), (2, 14 * 2**20)])  # the freed 12 MiB cannot hold 14 MiB
        >>> r.peak_reserved_bytes // 2**20, r.peak_allocated_bytes // 2**20
        (26, 14)
    """
    allocator = CachingAllocator(capacity_bytes, expandable_segments=expandable_segments)
    live: dict[int, int] = {}
    out_of_memory = False
    try:
        for nbytes in resident_bytes:
            allocator.malloc(nbytes)
        for key, nbytes in log:
            if nbytes < 0:
                if key not in live:
                    raise ValueError(f"the log frees key {key}, which is not allocated")
                allocator.free(live.pop(key))
            else:
                if key in live:
                    raise ValueError(f"the log allocates key {key}, which is still allocated")
                live[key] = allocator.malloc(nbytes)
    except OutOfMemory:
        out_of_memory = True
    return ReserveReplay(peak_reserved_bytes=allocator.peak_reserved_bytes,
                         peak_allocated_bytes=allocator.peak_allocated_bytes, segments=allocator.segments,
                         cache_releases=allocator.cache_releases, out_of_memory=out_of_memory)


def min_capacity(log: Sequence[tuple[int, int]], *, resident_bytes: Sequence[int] = (),
                 resolution_bytes: int = ROUND_LARGE) -> int:
    """The least segment memory at which ``log`` replays without running out of memory.

    With a capacity the allocator releases every wholly free segment when ``cudaMalloc`` would exceed it and
    retries, so a step can run on less than its unconstrained reserved peak; free space inside split segments
    cannot be released. Found by bisection between the allocated peak and that reserved peak (which always
    suffices) to ``resolution_bytes``; the answer is a capacity the replay was seen to pass at.

    Example:
        >>> log = [(1, 12 * 2**20), (1, -1), (2, 14 * 2**20)]  # 26 MiB reserved unconstrained
        >>> min_capacity(log) // 2**20  # the freed 12 MiB segment is released for the 14 MiB one
        14
    """
    unconstrained = replay(log, resident_bytes=resident_bytes)
    low, high = unconstrained.peak_allocated_bytes, unconstrained.peak_reserved_bytes
    if not replay(log, resident_bytes=resident_bytes, capacity_bytes=low).out_of_memory:
        return low
    while high - low > resolution_bytes:
        middle = (low + high) // 2
        if replay(log, resident_bytes=resident_bytes, capacity_bytes=middle).out_of_memory:
            low = middle
        else:
            high = middle
    return high


def trace_reserved(source: ModelSource, options: ProfileOptions, *, compute_capability: tuple[int, int] = (9, 0),
                   capacity_bytes: int | None = None) -> ReserveReplay:
    """Trace ``source`` whole at ``options`` (target ``cuda``) and replay its allocations: the reserved peak of
    the run the GPU campaign measures (model built, batch and optimizer made, a warm-up step and a measured one),
    with the default allocator and with ``expandable_segments:True``, and the least device memory the default
    allocator runs it in (:func:`min_capacity`).

    The trace's own warm-up is a whole step here (the profiler otherwise shortens it when FLOPs are not counted),
    since the cache the measured step starts from is what that step left. The cuBLAS workspaces
    (:func:`~autoshard.profiler.cuda_allocator.cublas_workspace_bytes`, one per handle) are allocated first.

    Args:
        source: the model source (traced as given: no extrapolation).
        options: batch, sequence, precision, optimizer, checkpointing; ``target`` must be ``"cuda"``.
        compute_capability: of the GPU, for the workspace size (default: Hopper).
        capacity_bytes: the device's memory (``None``: unlimited).

    Raises:
        ValueError: ``options.target`` is not ``"cuda"``.
        ProfileError, UserCodeError: as :func:`autoshard.profiler.trace.trace_timeline`.
    """
    from autoshard.profiler.trace import trace_timelines

    if options.target != "cuda":
        raise ValueError(f"the caching allocator is CUDA's: options.target must be 'cuda', but got {options.target=}.")
    log: list[tuple[int, int]] = []
    trace_timelines(source, options, (options.batch_size,), count_flops=False, record=False, allocation_log=log)
    workspaces = (cublas_workspace_bytes(compute_capability),) * CUBLAS_WORKSPACES_PER_STEP
    expandable = replay(log, resident_bytes=workspaces, expandable_segments=True)
    return dataclasses.replace(replay(log, resident_bytes=workspaces, capacity_bytes=capacity_bytes),
                               peak_reserved_expandable_bytes=expandable.peak_reserved_bytes,
                               min_capacity_bytes=min_capacity(log, resident_bytes=workspaces))
