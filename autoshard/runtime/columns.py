"""A mapping of equal-length tensors (a tokenizer's ``BatchEncoding``, a dict of columns) read as samples."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch.utils.data import Dataset


def column_rows(data: Any) -> dict[str, int] | None:
    """The rows of each column of a mapping of columns — every value a tensor of one dimension or more, or a list
    (a ``text`` column beside the token ids), at least one a tensor: a tokenizer's ``BatchEncoding``, a dict of
    columns — else ``None``.

    Example:
        >>> column_rows({"input_ids": torch.zeros(4, 8), "text": ["a", "b", "c", "d"]})
        {'input_ids': 4, 'text': 4}
        >>> column_rows({"train": [1, 2]}), column_rows({"lr": 0.1})
        (None, None)
    """
    if not isinstance(data, Mapping) or not data:
        return None
    values = list(data.values())
    if not all((isinstance(v, torch.Tensor) and v.dim() > 0) or isinstance(v, (list, tuple)) for v in values):
        return None
    if not any(isinstance(v, torch.Tensor) for v in values):
        return None
    return {str(k): int(v.shape[0]) if isinstance(v, torch.Tensor) else len(v) for k, v in data.items()}


class ColumnSamples(Dataset[Any]):
    """A mapping of tensors of one row count read as samples: sample ``i`` is ``{key: tensor[i]}``, which the
    default collate stacks back into a dict batch."""

    def __init__(self, columns: Mapping[str, Any]) -> None:
        self.columns = dict(columns)
        self.rows = len(next(iter(self.columns.values())))  # every column has as many (column_rows)

    def __len__(self) -> int:
        return self.rows

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {k: v[index] for k, v in self.columns.items()}
