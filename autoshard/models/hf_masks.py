"""transformers' attention masks under fake tensors, as a real run with autoshard's batches builds them.

With SDPA, transformers skips building a ``[batch, 1, q, kv]`` attention mask when the 2D padding mask has no
padding: the kernel's ``is_causal`` (or no mask) does the job (``transformers.masking_utils``:
``_ignore_causal_mask_sdpa``, ``_ignore_bidirectional_mask_sdpa``). To know that, it reads the mask's values, and
a fake tensor has none, so under fake tensors it builds the mask whatever the values (``is_tracing`` counts a fake
tensor as tracing). BART's decoder makes its padding mask itself, ``torch.ones(batch, length)``: a real step skips
the 4D mask, autoshard's trace kept two of them (``[4, 1, 128, 128]`` fp32 each in a tiny BART: +1.4 % of its
peak; ``[b, 1, s, s]`` grows with the square of the sequence).

autoshard's batches for a Hugging Face config have no padding, so every padding mask such a model builds from them
is all ones: :func:`call_without_padding` runs the forward with those two checks answered as for a mask without
padding, for fake masks only (a real mask is read as before).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from torch import nn

from autoshard.models.source import Batch, call_model

_SKIP_CHECKS = ("_ignore_causal_mask_sdpa", "_ignore_bidirectional_mask_sdpa")
"""The functions of ``transformers.masking_utils`` that decide, from the padding mask (their first argument),
whether SDPA needs a 4D mask."""


def _is_fake(value: Any) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(value, FakeTensor)


def _answered_without_padding(check: Callable[..., bool]) -> Callable[..., bool]:
    def decide(padding_mask: Any, *args: Any, **kwargs: Any) -> bool:
        return check(None if _is_fake(padding_mask) else padding_mask, *args, **kwargs)

    return decide


@contextlib.contextmanager
def masks_without_padding() -> Iterator[None]:
    """Inside, transformers decides whether SDPA needs a 4D mask for a fake padding mask as for one without
    padding (a mask of ones), and as before for a real one. Nothing changes where transformers or its
    ``masking_utils`` is absent."""
    try:
        from transformers import masking_utils
    except ImportError:
        yield
        return
    saved = {name: getattr(masking_utils, name) for name in _SKIP_CHECKS if hasattr(masking_utils, name)}
    for name, check in saved.items():
        setattr(masking_utils, name, _answered_without_padding(check))
    try:
        yield
    finally:
        for name, check in saved.items():
            setattr(masking_utils, name, check)


def call_without_padding(model: nn.Module, batch: Batch) -> Any:
    """:func:`~autoshard.models.source.call_model` inside :func:`masks_without_padding`: a Hugging Face config's
    ``call_fn``, its batches having no padding."""
    with masks_without_padding():
        return call_model(model, batch)
