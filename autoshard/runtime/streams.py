"""Whether a stream of batches (a generator, an ``IterableDataset``, a ``DataLoader`` over one) is the whole data on
every rank, or each rank's own share already.

Lightning and plain torch DDP users write an ``IterableDataset`` that splits itself by rank (it yields item ``i``
where ``i % WORLD_SIZE == RANK``). Dealt out again, rank ``r`` taking every ``n``-th batch of its share, half the
data was lost at two ranks. A stream is whole on every rank exactly when every rank reads the same items, so the
ranks compare a digest of the first item each reads: the same everywhere, the stream is whole and dealt out; any
difference, each rank's stream is its share and trains whole.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import torch

from autoshard.runtime.distributed import RunContext, all_true, broadcast_json

EMPTY = "empty"
"""The digest of a stream with no first item."""


def digest(item: Any) -> str:
    """A digest of ``item``'s content: dicts, lists and tuples recursively, tensors by dtype, shape and bytes,
    anything else by its ``repr``.

    Example:
        >>> digest({"x": torch.ones(2)}) == digest({"x": torch.ones(2)}), digest(torch.ones(2)) == digest(torch.ones(3))
        (True, False)
    """
    sha = hashlib.sha256()
    _update(sha, item)
    return sha.hexdigest()


def _update(sha: Any, value: Any) -> None:
    if isinstance(value, torch.Tensor):
        sha.update(f"tensor {value.dtype} {tuple(value.shape)};".encode())
        sha.update(value.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    elif isinstance(value, Mapping):
        sha.update(f"{type(value).__name__} {len(value)}{{".encode())
        for key, item in value.items():
            _update(sha, key)
            _update(sha, item)
        sha.update(b"}")
    elif isinstance(value, (list, tuple)):
        sha.update(f"{type(value).__name__} {len(value)}[".encode())
        for item in value:
            _update(sha, item)
        sha.update(b"]")
    else:
        sha.update(f"{type(value).__name__} {value!r};".encode())


def split_by_rank(first: str, ctx: RunContext) -> bool:
    """Whether the ranks' streams are each rank's own share: the digest ``first`` of this rank's first item (or
    :data:`EMPTY`) differs from rank 0's on some rank. Collective: every rank calls it, at its stream's start."""
    return not all_true(first == broadcast_json(first, ctx), ctx)
