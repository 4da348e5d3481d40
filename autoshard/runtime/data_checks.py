"""Checks of the data ``fit()`` is given, made in the launching process before any worker starts: what it is, and
whether it can give every rank whole batches."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

import torch
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    Dataset,
    DistributedSampler,
    IterableDataset,
    RandomSampler,
    SequentialSampler,
)

from autoshard.errors import UsageError
from autoshard.models.source import batch_rows, batch_values
from autoshard.runtime.columns import column_rows


def check(data: Any, name: str = "data") -> None:
    """Refuse what is neither a dataset nor an iterable of batches, and the iterables whose items are not batches:
    a string or path (iterated, its characters), and a mapping of tensors whose row counts differ (iterated, its
    keys; one of a single row count is read as samples, :func:`unbatched_samples`).

    Raises:
        UsageError: with what it is (as the argument ``name``) and what to pass instead.

    Example:
        >>> check({"input_ids": torch.zeros(32, 16), "labels": torch.zeros(8)}, "eval_data")
        Traceback (most recent call last):
        ...
        autoshard.errors.UsageError: eval_data is a dict of tensors with different numbers of rows (input_ids: 32, \
labels: 8): neither samples (one row each) nor batches.
        Pass tensors of one row per sample (a TensorDataset's), or a list of batches.
    """
    kind = type(data).__name__
    if isinstance(data, (str, bytes, os.PathLike)):
        raise UsageError(f"{name} is a {kind} ({str(data)[:60]!r}): fit() takes batches, not a file name.",
                         hint="Load the file into tensors first (e.g. a Dataset), and pass that.")
    rows = column_rows(data)
    if rows is None and isinstance(data, Mapping):  # iterated, its keys would be the batches
        keys = ", ".join(map(repr, list(data)[:4])) + (", ..." if len(data) > 4 else "")
        raise UsageError(f"{name} is a {kind} (keys {keys or 'none'}): fit() would read its keys as batches.",
                         hint=f"Pass one of its values if it holds datasets (e.g. {name}['train']), a Dataset, a list "
                              "of dict batches, or a dict of tensor columns of one row count.")
    if rows is not None and len(set(rows.values())) > 1:
        counts = ", ".join(f"{k}: {n}" for k, n in list(rows.items())[:4])
        raise UsageError(f"{name} is a {kind} of tensors with different numbers of rows ({counts}): neither samples "
                         "(one row each) nor batches.",
                         hint="Pass tensors of one row per sample (a TensorDataset's), or a list of batches.")
    if not isinstance(data, (Dataset, Iterable)):
        raise UsageError(f"{name} is {article(kind)} {kind}, which is neither a Dataset nor an iterable of batches.",
                         hint="Pass a torch Dataset, a DataLoader, or a list/generator of batches.")


def article(word: str) -> str:
    """``an`` before a vowel, else ``a``."""
    return "an" if word[:1].lower() in "aeiou" else "a"


def check_not_columns(data: Any, name: str = "data") -> None:
    """Refuse inputs and targets given side by side, ``(x, y)`` as Keras's ``fit(x, y)`` takes them: a list or tuple
    of two or three tensors with one first dimension that batches would not be: of different dtypes or numbers of
    dimensions (inputs and class labels), or floating-point with different last dimensions (inputs and regression
    targets). Read as batches, ``x`` trained as the first and ``y`` failed as the second, at step 2. Batches of token
    ids padded to different lengths differ only in their sequence dimension, and are not refused; nor are tensors
    of one shape (samples, same-size batches), which cannot be told from inputs and targets of one shape. Two or
    three floating-point batches whose last dimension differs are, and pass as a generator.

    Raises:
        UsageError: with the ``TensorDataset`` that pairs them.
    """
    if type(data) not in (list, tuple) or not 2 <= len(data) <= 3 or not all(
            isinstance(t, torch.Tensor) and t.dim() > 0 for t in data):
        return
    shapes = [tuple(t.shape) for t in data]
    if len({s[0] for s in shapes}) > 1 or len(set(shapes)) == 1:
        return
    kinds = len({t.dtype for t in data}) > 1 or len({t.dim() for t in data}) > 1
    if not kinds and not (data[0].is_floating_point() and len({s[-1] for s in shapes}) > 1):
        return
    letters = ", ".join("xyw"[:len(data)])
    raise UsageError(f"{name} is a {type(data).__name__} of {len(data)} tensors of {shapes[0][0]} rows (shapes "
                     f"{', '.join(str(list(s)) for s in shapes)}): fit() would read them as {len(data)} batches, "
                     "not as inputs and targets.",
                     hint=f"Pass DataLoader(TensorDataset({letters}), batch_size=...) or TensorDataset({letters}) "
                          "(torch.utils.data); batches padded to different lengths pass as a generator: iter([...]).")

def map_style(dataset: Any) -> bool:
    return hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__") and not isinstance(dataset,
                                                                                               IterableDataset)


def rebuildable(loader: DataLoader[Any]) -> bool:
    """A loader whose batching autoshard can reproduce with a distributed sampler (no custom batch sampler): over
    torch's random or sequential sampler, or a ``DistributedSampler`` of the user's (rebuilt for each rank, as a
    script under ``torchrun`` builds one per rank; dealt out as it was, each rank's share was halved again)."""
    return (loader.batch_size is not None and type(loader.batch_sampler) is BatchSampler
            and isinstance(loader.sampler, (RandomSampler, SequentialSampler, DistributedSampler)))


def shuffles(loader: DataLoader[Any]) -> bool:
    """Whether a rebuildable ``loader``'s sampler shuffles."""
    sampler = loader.sampler
    return isinstance(sampler, RandomSampler) or (isinstance(sampler, DistributedSampler) and sampler.shuffle)


def samples_per_rank(data: Any, world_size: int) -> int | None:
    """Each rank's whole share of a map-style dataset (``fit()`` batches it with a ``DistributedSampler``,
    ``drop_last``): the largest micro-batch that trains at all. ``None`` for data batched already.

    Raises:
        UsageError: a rank's share is empty.
    """
    if not isinstance(data, Dataset) or isinstance(data, IterableDataset):
        return None
    try:
        samples = len(data)  # type: ignore[arg-type]
    except TypeError:
        return None
    if samples < world_size:
        raise UsageError(f"the dataset has {samples} samples for {world_size} ranks: a rank would have none.",
                         hint="Pass more data, or fewer processes (processes=).")
    return samples // world_size


def check_batch_fits_data(batch_size: int | None, per_rank: int | None, *, plan: str | None = None) -> None:
    """Raise :class:`UsageError` when ``batch_size`` (``fit(batch_size=)``, or the micro-batch of the plan from
    ``plan``) is more than each rank's ``per_rank`` samples."""
    if batch_size is None or per_rank is None or batch_size <= per_rank:
        return
    if plan is not None:
        raise UsageError(f"the plan ({plan}) trains micro-batches of {batch_size}, and each rank's share of the data "
                         f"is {per_rank} samples: no whole micro-batch, nothing would train.",
                         hint="Plan for this data (plan='auto' takes at most each rank's share), or pass more data.")
    raise UsageError(f"batch_size={batch_size}, and each rank's share of the data is {per_rank} samples: "
                     "no whole batch, nothing would train.",
                     hint=f"Pass batch_size={per_rank} or less, or more data.")


def check_loader_fits_ranks(data: Any, world: int) -> None:
    """Refuse a ``DataLoader`` over a map-style dataset that gives each of ``world`` ranks no whole batch (re-sharded
    with a ``DistributedSampler`` that drops the incomplete batch, or dealt out a batch per rank in turn), before
    any process starts: it would train nothing.

    Raises:
        UsageError: with the numbers.
    """
    if not isinstance(data, DataLoader) or world == 1 or not map_style(data.dataset) or not data.batch_size:
        return
    samples = len(data.dataset)  # type: ignore[arg-type]  # map-style: it has a length
    batches = samples // world // data.batch_size if rebuildable(data) else len(data) // world
    if batches == 0:
        raise UsageError(f"the DataLoader's {samples} samples give each of the {world} ranks no whole batch of "
                         f"{data.batch_size}: nothing would train.",
                         hint="Pass more data, a DataLoader with a smaller batch_size, or fewer processes.")


def check_global_batch(global_batch: int | None, world: int, micro: int | None, data: Any, *,
                       epochs: int | None) -> None:
    """Refuse a ``global_batch_size`` that cannot be trained as asked, before anything is planned: not a whole
    number of samples per rank, not a whole number of the fixed ``micro``-batches per rank, or (when the run ends
    after ``epochs``; ``None``: ``max_steps`` ends it) more samples per rank than those epochs of ``data`` hold (a
    map-style dataset, or a ``DataLoader`` over one), so no optimizer step.

    Raises:
        UsageError: with the nearest sizes that work.
    """
    if global_batch is None:
        return
    if global_batch % world:
        raise UsageError(f"global_batch_size={global_batch} does not divide among the {world} ranks.",
                         hint=f"Pass a multiple of {world}, e.g. global_batch_size="
                              f"{world * max(1, global_batch // world)}.")
    per_step = global_batch // world
    dataset = data.dataset if isinstance(data, DataLoader) else data
    if isinstance(data, DataLoader) and data.batch_size is None:  # its items are batches: their samples unknown
        dataset = None
    per_rank = None if epochs is None else samples_per_rank(dataset, world)
    if micro is not None and per_step % micro:
        raise UsageError(f"global_batch_size={global_batch} is {per_step} samples per rank per optimizer step, not a "
                         f"whole number of micro-batches of {micro}.",
                         hint=f"Pass a multiple of {micro * world} (micro-batch {micro} × {world} rank(s)), e.g. "
                              f"global_batch_size={micro * world * max(1, per_step // micro)}.")
    if epochs is not None and per_rank is not None and per_step > per_rank * epochs:
        over = f" × {epochs} epochs" if epochs > 1 else ""
        raise UsageError(f"global_batch_size={global_batch} is {per_step} samples per rank per optimizer step, and "
                         f"each rank's share of the data is {per_rank} samples{over}: not one whole step.",
                         hint="Pass more data, more epochs, max_steps= (steps then run on over the epochs), or a "
                              "smaller global_batch_size.")


def batched_as_it_comes(data: Any) -> bool:
    """Whether ``data`` yields batches ``fit()`` trains as they come, whose size no attribute gives: a
    ``DataLoader`` with a batch sampler of its own (no ``batch_size``), an ``IterableDataset`` or a generator. Not a
    map-style dataset (``fit()`` batches it), a ``DataLoader`` with a ``batch_size``, nor a list (its first element
    may be a single sample: :func:`as_samples`)."""
    if isinstance(data, DataLoader):
        return data.batch_size is None
    return not isinstance(data, (list, tuple)) and not (isinstance(data, Dataset) and map_style(data))


def size_as_it_comes(data: Any, example: Any, batch_size: int | None, notes: list[str]) -> int | None:
    """The micro-batch of data that no attribute sizes (:func:`batched_as_it_comes`): its
    first batch's, noted, so that the plan prices the batches that will train.

    Raises:
        UsageError: ``batch_size=`` says otherwise: fit() trains the batches as they come; or the first item is one
            sample (:func:`one_sample`), which fit() would have fed to the model as a batch.
    """
    rows = batch_rows(example)
    what = _stream_name(data)
    if rows is None and batch_size is not None:  # a stream of single samples: batch_size= cannot batch it
        raise UsageError(f"batch_size={batch_size}, and the first item of {what} is no batch (its tensors differ "
                         "in their first dimension): fit() trains on a stream's items as they come, and does not "
                         "batch them.",
                         hint=f"Batch the stream with DataLoader(data, batch_size={batch_size}) and drop batch_size=, "
                              "or pass a map-style Dataset, which fit() batches at batch_size.")
    if rows is None and one_sample(example):  # traced as a batch, it failed in the model, blamed on its code
        raise UsageError(f"the first item of {what} is no batch (its tensors differ in their first dimension, as one "
                         "sample's do): fit() trains on a stream's items as they come, and does not batch them.",
                         hint="Batch the stream with DataLoader(data, batch_size=...), or pass a map-style Dataset, "
                              "which fit() batches at the planned micro-batch.")
    if rows is None:
        return None
    if batch_size is not None and batch_size != rows:
        raise UsageError(f"batch_size={batch_size}, and the first batch of {what} holds {rows} samples: fit() trains "
                         "on the batches as they come.",
                         hint="Drop batch_size= (the batches' own size is the micro-batch), or batch the data at "
                              f"{batch_size}.")
    if batch_size is None:
        notes.append(f"Micro-batch {rows}: the size of the first batch of {what}, which fit() trains as they come; "
                     "batches of another size train too, at their own memory and speed.")
    return rows


def _stream_name(data: Any) -> str:
    """``data`` as :func:`size_as_it_comes` names it: a ``DataLoader`` without automatic batching, or with a batch
    sampler of its own, says which."""
    if not isinstance(data, DataLoader):
        return "the data"
    if data.batch_sampler is None:
        return "the DataLoader (batch_size=None: each item a batch)"
    return "the DataLoader (no batch_size: a batch sampler of its own)"


def one_sample(item: Any) -> bool:
    """Whether ``item`` can only be one sample: two or more tensors, none of more than one dimension, no two of one
    first dimension (a feature vector and its target, ``(x[8], y[1])``). A batch's tensors share their rows; a
    packed batch (``text[tokens], offsets[batch], label[batch]``) has two that do, and a graph's ``[2, edges]``
    is 2-D.

    Example:
        >>> one_sample((torch.zeros(8), torch.zeros(1))), one_sample((torch.zeros(30), torch.zeros(4), torch.zeros(4)))
        (True, False)
    """
    tensors = [t for t in batch_values(item) or [] if isinstance(t, torch.Tensor)]
    firsts = [t.shape[0] for t in tensors if t.dim() == 1]
    return len(tensors) >= 2 and all(t.dim() <= 1 for t in tensors) and len(set(firsts)) == len(firsts)
