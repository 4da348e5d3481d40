"""transformers' attention masks in a trace as in the run it stands for.

Before building a decoder's attention mask, transformers asks whether the batch packs several sequences into one
row (``find_packed_sequence_indices`` in ``transformers/masking_utils.py``, 5.x): from the position ids, and only
where it can read them — a fake tensor counts as a graph being traced (``is_tracing``), so it answers "maybe
packed". The trace then builds an explicit ``(b, 1, s, s)`` mask where the real run, its positions counting up
from 0 in every row, passes none: SDPA then runs with ``is_causal=True`` and, for grouped-query attention, with
``enable_gqa=True`` (``use_gqa_in_sdpa``) instead of key and value heads repeated to the query heads
(``repeat_kv``). The two differ in memory — the repeated keys and values are saved for backward in every layer,
the mask once — and in the kernel CUDA picks (no fused kernel takes fp32 grouped-query attention:
:mod:`autoshard.profiler.cuda_attention`).

:func:`as_run` answers "not packed" for fake position ids while a trace runs, as the real run of the traced batch
does: autoshard's batches carry no position ids, so transformers counts them up from the cache position. A batch
that names its own ``position_ids`` (packed sequences) is left to transformers.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from torch._subclasses.fake_tensor import is_fake

__all__ = ["as_run"]

_MODULE = "transformers.masking_utils"


def _unpacked_when_fake(original: Callable[[torch.Tensor], Any]) -> Callable[[torch.Tensor], Any]:
    @functools.wraps(original)
    def find_packed_sequence_indices(position_ids: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        if is_fake(position_ids):
            return None
        return original(position_ids, *args, **kwargs)

    return find_packed_sequence_indices


def _names_position_ids(batch: object) -> bool:
    return isinstance(batch, Mapping) and "position_ids" in batch  # a dict, transformers' BatchEncoding


@contextlib.contextmanager
def as_run(batch: object = None) -> Iterator[None]:
    """Inside the block, transformers reads fake position ids as one sequence per row (unless ``batch`` names its
    own ``position_ids``). Nothing changes where transformers is not imported or has no such function.

    Example:
        >>> with as_run({"input_ids": None}):
        ...     pass
    """
    masking = sys.modules.get(_MODULE)
    original = getattr(masking, "find_packed_sequence_indices", None)
    if masking is None or original is None or _names_position_ids(batch):
        yield
        return
    masking.find_packed_sequence_indices = _unpacked_when_fake(original)  # type: ignore[attr-defined]
    try:
        yield
    finally:
        masking.find_packed_sequence_indices = original  # type: ignore[attr-defined]
