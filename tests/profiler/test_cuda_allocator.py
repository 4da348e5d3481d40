"""The CUDA caching allocator's rounding and cuBLAS workspaces (autoshard.profiler.cuda_allocator)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from autoshard.profiler.cuda_allocator import (
    BLOCK_BYTES,
    CUBLAS_WORKSPACES_PER_STEP,
    cublas_workspace_bytes,
    overheads,
    round_allocation_bytes,
)

MiB = 1024 * 1024


@pytest.mark.parametrize(
    ("nbytes", "expected"),
    [
        (0, 0),  # allocate() skips malloc for size 0
        (1, 512),
        (511, 512),
        (512, 512),
        (513, 1024),
        (4 * MiB + 1, 4 * MiB + 512),
        (3 * 1000 * 1000 * 4, 12_000_256),  # a 1000x1000x3 fp32 tensor
    ],
)
def test_allocations_round_up_to_512_byte_blocks(nbytes: int, expected: int) -> None:
    assert round_allocation_bytes(nbytes) == expected


@pytest.mark.parametrize(
    ("nbytes", "divisions", "expected"),
    [
        (1100 * 1024, 4, MiB + MiB // 4),
        (MiB, 4, MiB),  # powers of two are kept
        (MiB + 1, 1, MiB + 512),  # one division: off
        (1500, 4, 1536),  # not above 512 * divisions: plain rounding
        (5 * MiB + 7, 8, 5 * MiB + MiB // 2),
        (5 * MiB + 7, 6, 6 * MiB),  # 6 divisions act as 4 (power-of-two floor)
    ],
)
def test_roundup_power2_divisions_rounds_to_the_next_division(nbytes: int, divisions: int, expected: int) -> None:
    assert round_allocation_bytes(nbytes, roundup_power2_divisions=divisions) == expected


@pytest.mark.parametrize("divisions", [2, 4, 8, 16])
def test_roundup_power2_divisions_is_the_smallest_division_boundary_not_below_the_request(divisions: int) -> None:
    steps = 1 << (divisions.bit_length() - 1)
    for nbytes in range(BLOCK_BYTES * divisions + 1, 1 << 16, 97):
        floor = 1 << (nbytes.bit_length() - 1)
        boundaries = [floor + i * floor // steps for i in range(steps + 1)]
        assert round_allocation_bytes(nbytes, roundup_power2_divisions=divisions) == min(
            b for b in boundaries if b >= nbytes
        )


@pytest.mark.parametrize(("nbytes", "divisions"), [(-1, 0), (8, -2)])
def test_negative_arguments_are_rejected(nbytes: int, divisions: int) -> None:
    with pytest.raises(ValueError, match="must be >= 0"):
        round_allocation_bytes(nbytes, roundup_power2_divisions=divisions)


_ALLOCATOR_HEADER = Path(torch.__file__).parent / "include" / "c10" / "core" / "AllocatorConfig.h"


@pytest.mark.skipif(not _ALLOCATOR_HEADER.exists(), reason="torch installed without C++ headers")
def test_block_size_is_the_installed_allocators_kMinBlockSize() -> None:
    match = re.search(r"constexpr size_t kMinBlockSize = (\d+);", _ALLOCATOR_HEADER.read_text())
    assert match is not None and int(match.group(1)) == BLOCK_BYTES


@pytest.mark.parametrize(
    ("compute_capability", "expected"),
    [
        ((7, 0), 8 * MiB + 128 * 1024),  # V100
        ((7, 5), 8 * MiB + 128 * 1024),  # T4
        ((8, 0), 8 * MiB + 128 * 1024),  # A100
        ((8, 9), 8 * MiB + 128 * 1024),  # L4, RTX 4090
        ((9, 0), 32 * MiB),  # H100, H200
        ((10, 0), 32 * MiB),  # B200
        ((12, 0), 32 * MiB),  # RTX 5090
    ],
)
def test_cublas_workspace_default_by_compute_capability(compute_capability: tuple[int, int], expected: int) -> None:
    workspace = cublas_workspace_bytes(compute_capability)
    assert workspace == expected
    assert round_allocation_bytes(workspace) == workspace


@pytest.mark.parametrize("compute_capability", [(9,), (9, 0, 0), (9, -1), (True, 0), "9.0", (9.0, 0)])
def test_malformed_compute_capability_is_rejected(compute_capability: object) -> None:
    with pytest.raises(ValueError, match="compute_capability"):
        cublas_workspace_bytes(compute_capability)  # type: ignore[arg-type]


def test_overheads_count_one_cublas_workspace_per_handle_in_the_allocator() -> None:
    (workspaces,) = overheads((9, 0))
    assert workspaces.in_allocator
    assert workspaces.bytes == CUBLAS_WORKSPACES_PER_STEP * 32 * MiB
    assert "CublasHandlePool.cpp" in workspaces.to_dict()["source"]
