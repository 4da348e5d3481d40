"""A mapping of equal-length tensors (a tokenizer's ``BatchEncoding``, a dict of columns) read as samples."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch.utils.data import Dataset


def column_rows(data: Any) -> dict[str, int] | None:
    """The rows of each tensor of a mapping whose every value is a tensor of one dimension or more (a tokenizer's
    ``BatchEncoding``, a dict of columns), else ``None``."""
    if not isinstance(data, Mapping) or not data:
        return None
    if not all(isinstance(v, torch.Tensor) and v.dim() > 0 for v in data.values()):
        return None
    return {str(k): int(v.shape[0]) for k, v in data.items()}


class ColumnSamples(Dataset[Any]):
    """A mapping of tensors of one row count read as samples: sample ``i`` is ``{key: tensor[i]}``, which the
    default collate stacks back into a dict batch."""

    def __init__(self, columns: Mapping[str, torch.Tensor]) -> None:
        self.columns = dict(columns)
        self.rows = len(next(iter(self.columns.values())))

    def __len__(self) -> int:
        return self.rows

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {k: v[index] for k, v in self.columns.items()}
