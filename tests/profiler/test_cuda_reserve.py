"""autoshard/profiler/cuda_reserve.py: the caching allocator's rules (c10/cuda/CUDACachingAllocator.cpp) replayed.

Each rule is held to the source's constants and behaviour; whether the traced step's sequence is the real
program's is tests/test_benchmark_reserve_replay.py; whether the rules give a GPU's ``max_memory_reserved`` is the
GPU campaign's (benchmarks/memory_accuracy.py on CUDA).
"""

from __future__ import annotations

import pytest

import autoshard
from autoshard.profiler.cuda_allocator import cublas_workspace_bytes
from autoshard.profiler.cuda_reserve import (
    CachingAllocator,
    OutOfMemory,
    allocation_size,
    min_capacity,
    replay,
    trace_reserved,
)
from autoshard.profiler.options import ProfileOptions

MIB = 2**20


@pytest.mark.parametrize(("request_bytes", "segment_bytes"), [
    (1, 2 * MIB),                      # small pool: packed in 2 MiB segments
    (MIB, 2 * MIB),                    # kSmallSize is still small
    (MIB + 512, 20 * MIB),             # 1-10 MiB: a 20 MiB segment to split
    (10 * MIB - 512, 20 * MIB),
    (10 * MIB, 10 * MIB),              # kMinLargeAlloc and up: rounded to 2 MiB
    (21 * MIB + 1, 22 * MIB),
])
def test_segment_sizes_follow_get_allocation_size(request_bytes: int, segment_bytes: int) -> None:
    assert allocation_size(request_bytes) == segment_bytes


def test_small_requests_pack_into_2_mib_segments() -> None:
    a = CachingAllocator()
    for _ in range(4):
        a.malloc(512 * 1024)
    assert (a.segments, a.reserved_bytes) == (1, 2 * MIB)
    a.malloc(1)  # rounded to 512 B: no room left in the first segment
    assert (a.segments, a.reserved_bytes, a.allocated_bytes) == (2, 4 * MIB, 2 * MIB + 512)


def test_mid_sized_requests_share_a_split_20_mib_segment() -> None:
    a = CachingAllocator()
    a.malloc(3 * MIB)
    a.malloc(9 * MIB)
    a.malloc(6 * MIB)  # 8 MiB were left: fits
    assert (a.segments, a.reserved_bytes) == (1, 20 * MIB)
    a.malloc(3 * MIB)  # 2 MiB left: a second segment
    assert a.reserved_bytes == 40 * MIB


def test_a_freed_block_too_small_for_the_next_request_stays_reserved() -> None:
    r = replay([(1, 12 * MIB), (1, -1), (2, 14 * MIB)])
    assert (r.peak_reserved_bytes, r.peak_allocated_bytes, r.segments) == (26 * MIB, 14 * MIB, 2)


def test_best_fit_takes_the_smallest_free_block_and_hands_it_out_whole_when_the_rest_is_1_mib_or_less() -> None:
    a = CachingAllocator()
    big, small = a.malloc(30 * MIB), a.malloc(14 * MIB)
    a.free(big)
    a.free(small)
    a.malloc(13 * MIB)  # fits both; the 14 MiB block is the smaller: 1 MiB would remain, not more, so no split
    assert (a.reserved_bytes, a.allocated_bytes) == (44 * MIB, 14 * MIB)
    a.malloc(25 * MIB)  # the 30 MiB block, split: 5 MiB stay free
    a.malloc(5 * MIB)
    assert (a.segments, a.allocated_bytes) == (2, 44 * MIB)


def test_small_pool_splits_down_to_512_bytes() -> None:
    a = CachingAllocator()
    a.malloc(MIB)
    a.malloc(MIB - 512)
    a.malloc(512)  # the segment's last 512 B were split off, not handed out with the block before
    assert (a.segments, a.allocated_bytes) == (1, 2 * MIB)


def test_freed_neighbours_merge_into_one_block() -> None:
    a = CachingAllocator()
    x, y, z = a.malloc(4 * MIB), a.malloc(4 * MIB), a.malloc(4 * MIB)  # one 20 MiB segment, 8 MiB rest
    a.free(x)
    a.free(z)  # merges with the free rest behind it: 12 MiB
    a.free(y)  # merges both sides: the whole segment again
    a.malloc(20 * MIB)
    assert (a.segments, a.reserved_bytes) == (1, 20 * MIB)


def test_pools_do_not_lend_to_each_other() -> None:
    a = CachingAllocator()
    a.free(a.malloc(4 * MIB))  # a free 20 MiB large-pool segment
    a.malloc(4096)  # small request: its own 2 MiB segment
    assert a.reserved_bytes == 22 * MIB


def test_at_capacity_wholly_free_segments_are_released_before_running_out() -> None:
    a = CachingAllocator(capacity_bytes=40 * MIB)
    a.free(a.malloc(30 * MIB))  # cached, unsplit
    a.malloc(38 * MIB)  # cannot be cut from 30: the cache is released, then it fits
    assert (a.reserved_bytes, a.cache_releases) == (38 * MIB, 1)
    with pytest.raises(OutOfMemory):
        a.malloc(4 * MIB)


def test_replay_reports_an_out_of_memory_and_what_it_had_reached() -> None:
    r = replay([(1, 30 * MIB), (2, 30 * MIB)], capacity_bytes=40 * MIB)
    assert r.out_of_memory and r.peak_reserved_bytes == 30 * MIB


def test_min_capacity_counts_on_releasing_wholly_free_segments() -> None:
    log = [(1, 12 * MIB), (1, -1), (2, 14 * MIB)]
    assert replay(log).peak_reserved_bytes == 26 * MIB
    assert min_capacity(log) == 14 * MIB  # the free 12 MiB segment is given back for the 14 MiB one


def test_min_capacity_is_the_reserved_peak_when_the_free_space_is_in_split_segments() -> None:
    # One 20 MiB segment cut into a (4), b (12) and 4 free; a freed: 8 MiB free in two pieces, neither releasable.
    log = [(1, 4 * MIB), (2, 12 * MIB), (1, -1), (3, 6 * MIB)]
    unconstrained = replay(log)
    assert (unconstrained.peak_reserved_bytes, unconstrained.peak_allocated_bytes) == (40 * MIB, 18 * MIB)
    assert min_capacity(log) == 40 * MIB
    assert replay(log, capacity_bytes=38 * MIB).out_of_memory


def test_resident_allocations_come_first_and_stay() -> None:
    r = replay([(1, 10 * MIB), (1, -1)], resident_bytes=[cublas_workspace_bytes((8, 0))] * 2)
    # 2 x (8 MiB + 128 KiB) share one 20 MiB segment, then a 10 MiB segment of its own
    assert (r.peak_reserved_bytes, r.segments) == (30 * MIB, 2)


def test_expandable_segments_map_pages_at_the_end_joining_the_free_tail() -> None:
    a = CachingAllocator(expandable_segments=True)
    a.malloc(3 * MIB)  # one 20 MiB page of the large pool's segment
    assert (a.reserved_bytes, a.segments) == (20 * MIB, 1)
    a.malloc(30 * MIB)  # 17 MiB free at the end: 13 MiB more needed, one more 20 MiB page
    assert (a.reserved_bytes, a.allocated_bytes, a.segments) == (40 * MIB, 33 * MIB, 1)
    a.malloc(4096)  # the small pool's own segment, 2 MiB pages
    assert (a.reserved_bytes, a.segments) == (42 * MIB, 2)


def test_expandable_segments_reuse_what_separate_segments_cannot() -> None:
    log = [(1, 12 * MIB), (1, -1), (2, 14 * MIB)]
    assert replay(log).peak_reserved_bytes == 26 * MIB  # two cudaMalloc segments
    assert replay(log, expandable_segments=True).peak_reserved_bytes == 20 * MIB  # one page holds both in turn


def test_expandable_segments_split_large_blocks_down_to_512_bytes() -> None:
    a = CachingAllocator(expandable_segments=True)
    a.free(a.malloc(14 * MIB))  # 20 MiB mapped, all free again
    a.malloc(13 * MIB)
    assert a.allocated_bytes == 13 * MIB  # split: the default allocator would hand out more
    a.malloc(7 * MIB - 512)  # 512 B stay free in the large pool: split all the same
    assert (a.reserved_bytes, a.allocated_bytes) == (20 * MIB, 20 * MIB - 512)


def test_expandable_segments_take_no_capacity() -> None:
    with pytest.raises(ValueError, match="not modelled with expandable_segments"):
        CachingAllocator(capacity_bytes=MIB, expandable_segments=True)


def test_zero_byte_allocations_take_nothing() -> None:
    r = replay([(1, 0), (2, 0), (1, -1)])
    assert (r.peak_reserved_bytes, r.peak_allocated_bytes) == (0, 0)


@pytest.mark.parametrize(("log", "message"), [
    ([(1, -1)], "frees key 1, which is not allocated"),
    ([(1, 512), (1, 512)], "allocates key 1, which is still allocated"),
])
def test_an_inconsistent_log_is_refused(log: list[tuple[int, int]], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        replay(log)


def test_a_negative_capacity_is_refused() -> None:
    with pytest.raises(ValueError, match="capacity_bytes must be >= 0"):
        CachingAllocator(capacity_bytes=-1)


def test_trace_reserved_replays_a_whole_traced_step_for_cuda() -> None:
    source = autoshard.load_source("tiny-gpt2")
    options = ProfileOptions(batch_size=2, seq_len=64, precision="bf16-mixed", target="cuda")
    r = trace_reserved(source, options, compute_capability=(9, 0))
    profile = autoshard.profile(source, batch_size=2, seq_len=64, precision="bf16-mixed", target="cuda",
                                extrapolate=False)
    workspaces = 2 * cublas_workspace_bytes((9, 0))
    # The replay covers the warm-up step and the measured one; the profile's peak is the measured step's.
    assert r.peak_allocated_bytes >= profile.peak_bytes - 1024 * 1024
    assert r.peak_reserved_bytes >= r.peak_allocated_bytes >= workspaces
    assert r.peak_reserved_bytes % (2 * MIB) == 0 and not r.out_of_memory
    assert r.peak_reserved_expandable_bytes is not None
    assert r.peak_reserved_expandable_bytes >= r.peak_allocated_bytes
    assert r.min_capacity_bytes is not None
    assert r.peak_allocated_bytes <= r.min_capacity_bytes <= r.peak_reserved_bytes


def test_trace_reserved_is_for_cuda_targets_only() -> None:
    with pytest.raises(ValueError, match=r"options\.target must be 'cuda'"):
        trace_reserved(autoshard.load_source("tiny-gpt2"), ProfileOptions(batch_size=1, target="cpu"))


def test_profile_reserved_needs_a_cuda_target_and_says_so_before_tracing() -> None:
    from autoshard.errors import UsageError

    with pytest.raises(UsageError, match=r"needs target='cuda'"):
        autoshard.profile("no-such-model-is-never-loaded", batch_size=1, target="cpu", reserved=True)
