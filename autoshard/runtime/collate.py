"""How ``fit()`` batches the samples of a list or a dataset it was given: torch's ``default_collate``."""

from __future__ import annotations

from typing import Any

from autoshard.errors import UsageError


def stacked(samples: list[Any]) -> Any:
    """torch's ``default_collate`` (what ``fit()`` batches a list or a dataset of samples with), refusing samples of
    different sizes in the user's terms: torch's own "stack expects each tensor to be equal size" came from inside
    training, after planning, with no word on padding.

    Raises:
        UsageError: the samples' tensors differ in size.
    """
    from torch.utils.data import default_collate

    try:
        return default_collate(samples)
    except RuntimeError as exc:
        if "equal size" not in str(exc):
            raise
        raise UsageError(f"the data's samples differ in size, and fit() batches them by stacking ({exc}).",
                         hint="Pad them to one length (e.g. a tokenizer's padding='max_length'), or pass a DataLoader "
                              "whose collate_fn pads each batch (transformers' DataCollatorWithPadding).") from None
