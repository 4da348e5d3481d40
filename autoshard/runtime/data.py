"""This rank's share of the training data, epoch by epoch.

* a map-style ``Dataset`` is batched at the plan's micro-batch with a ``DistributedSampler``;
* a ``DataLoader`` over a map-style dataset keeps its batch size, workers and collate function, and gets a
  ``DistributedSampler`` (shuffled when the loader shuffled);
* any other iterable of batches (a list, a generator, a loader over an ``IterableDataset``) is dealt out in turn:
  rank ``r`` takes batches ``r, r + n, r + 2n, ...``, and a round that cannot give every rank a batch is dropped;
* ``None``: the model source's own example batches, drawn afresh each step (for benchmarks and smoke runs).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, cast

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
from autoshard.models.source import batch_rows
from autoshard.runtime.collate import stacked
from autoshard.runtime.columns import ColumnSamples, column_rows
from autoshard.runtime.distributed import RunContext


class DataFeed:
    """Batches for one rank.

    Args:
        data: see the module docstring.
        micro_batch_size: batch size for a bare ``Dataset``.
        ctx: this rank.
        seed: the sampler's shuffling seed (the same on every rank).
        synthetic: ``batch_fn()`` for ``data=None``.
    """

    def __init__(self, data: Any, *, micro_batch_size: int, ctx: RunContext, seed: int,
                 synthetic: Callable[[], Any] | None = None, scoring: bool = False) -> None:
        self.ctx = ctx
        self.scoring = scoring
        """Held-out data: a dataset is sharded in order and whole (the ``DistributedSampler`` pads each rank's
        share to the same length with repeated samples, at most ``world_size - 1``; the last batch may be short)."""
        self._synthetic = synthetic
        self._sampler: DistributedSampler[Any] | None = None
        self._iterable: Iterable[Any] | None = None
        self._loader: DataLoader[Any] | None = None
        self.one_pass = False
        """A generator or iterator: it can be read once."""
        if data is None:
            if synthetic is None:
                raise UsageError("no data given, and the model source has no example batch to train on.",
                                 hint="Pass data= (a Dataset, DataLoader or iterable of batches).")
            return
        if isinstance(data, DataLoader) and ctx.world_size == 1 and scoring and data.persistent_workers \
                and _map_style(data.dataset) and _rebuildable(data):
            # Its own loader: a loader with persistent workers serves one iterator at a time, and scoring the
            # training data's loader mid-epoch restarted the training iterator (another order from there).
            self._loader = DataLoader(data.dataset, batch_size=data.batch_size, num_workers=data.num_workers,
                                      collate_fn=data.collate_fn, pin_memory=data.pin_memory,
                                      worker_init_fn=data.worker_init_fn)
        elif isinstance(data, DataLoader) and ctx.world_size == 1:
            self._iterable = data  # one rank: the loader as the user made it
        elif isinstance(data, DataLoader) and _map_style(data.dataset) and _rebuildable(data):
            self._loader = self._distributed_loader(data.dataset, data.batch_size or micro_batch_size, seed,
                                                    shuffle=isinstance(data.sampler, RandomSampler), like=data)
        elif isinstance(data, Dataset) and _map_style(data) and not isinstance(data, DataLoader):
            self._loader = self._distributed_loader(data, micro_batch_size, seed, shuffle=True, like=None)
        else:
            check(data)
            self.one_pass = iter(data) is data
            self._iterable = data

    def _distributed_loader(self, dataset: Any, batch_size: int, seed: int, *, shuffle: bool,
                            like: DataLoader[Any] | None) -> DataLoader[Any]:
        sampler: DistributedSampler[Any] = DistributedSampler(dataset, num_replicas=self.ctx.world_size,
                                                              rank=self.ctx.rank, shuffle=shuffle and not self.scoring,
                                                              seed=seed, drop_last=not self.scoring)
        self._sampler = sampler
        extra: dict[str, Any] = {"collate_fn": stacked}  # torch's default_collate, its size error in the user's terms
        if like is not None:
            extra = {"num_workers": like.num_workers, "collate_fn": like.collate_fn, "pin_memory": like.pin_memory,
                     "worker_init_fn": like.worker_init_fn, "persistent_workers": like.persistent_workers}
            if like.num_workers > 0:
                extra["prefetch_factor"] = like.prefetch_factor
        return DataLoader(dataset, batch_size=batch_size, sampler=sampler, drop_last=not self.scoring, **extra)

    @property
    def dealt_from_whole(self) -> str | None:
        """Why every rank iterates the user's ``DataLoader`` whole and keeps its share of the batches (a sampler
        or batch sampler of its own, an iterable dataset), or ``None``: each rank then loads and collates every
        batch, ``ranks`` times the loading work, which a note says (a migration probe's weighted sampler)."""
        loader = self._iterable
        if not isinstance(loader, DataLoader) or self.ctx.world_size == 1:
            return None
        if not _map_style(loader.dataset):
            return f"over an {type(loader.dataset).__name__}, an iterable dataset"
        if loader.batch_size is None or type(loader.batch_sampler) is not BatchSampler:
            return f"with a batch sampler of its own ({type(loader.batch_sampler).__name__})"
        return f"with a sampler of its own ({type(loader.sampler).__name__})"

    @property
    def endless(self) -> bool:
        """Synthetic batches: the data never runs out."""
        return self._synthetic is not None and self._loader is None and self._iterable is None

    @property
    def samples_dropped(self) -> int:
        """Samples of a dataset that no micro-batch of an epoch holds: the ``DistributedSampler``'s ``drop_last``
        leaves out what does not fill a micro-batch on every rank (0 for data batched already, and for scoring)."""
        loader = self._loader
        if loader is None or self.scoring or not _map_style(loader.dataset) or loader.batch_size is None:
            return 0
        return len(loader.dataset) - len(loader) * loader.batch_size * self.ctx.world_size  # type: ignore[arg-type]

    @property
    def left_out(self) -> int:
        """Batches of a list or iterable of batches (of known length) that an epoch never reaches: those of an
        incomplete last round over the ranks (every rank takes one batch per round, so that they step, or score,
        together)."""
        iterable = self._iterable
        if self._loader is not None or iterable is None or self.ctx.world_size == 1 or not hasattr(
                iterable, "__len__") or isinstance(iterable, (IterableDataset, DataLoader)):
            return 0
        return len(iterable) % self.ctx.world_size  # type: ignore[arg-type]

    @property
    def batches_per_epoch(self) -> int | None:
        """This rank's batches per epoch, when known (equal on every rank)."""
        if self._loader is not None:
            return len(self._loader)
        iterable = self._iterable
        if iterable is None or not hasattr(iterable, "__len__") or isinstance(iterable, IterableDataset):
            return None
        if isinstance(iterable, DataLoader) and not _map_style(iterable.dataset):
            return None  # a loader over an IterableDataset: its length is the dataset's claim
        return len(iterable) // self.ctx.world_size  # type: ignore[arg-type]

    def epoch(self, epoch: int, *, skip: int = 0) -> Iterator[Any]:
        """This rank's batches of ``epoch``, after skipping the first ``skip`` (resuming mid-epoch).

        Raises:
            UsageError: a one-pass iterable is asked for a second epoch.
        """
        if self.endless:
            synthetic = cast(Callable[[], Any], self._synthetic)  # endless: a synthetic batch maker
            return iter(synthetic, object())  # never exhausted: max_steps ends the run
        if self._loader is not None:
            if self._sampler is not None:
                self._sampler.set_epoch(epoch)
            return itertools.islice(iter(self._loader), skip, None)
        if self.one_pass and epoch > 0:
            raise UsageError("data is a one-pass iterator (a generator), and training asks for a second epoch.",
                             hint="Pass a list, a Dataset or a DataLoader, or set max_steps within one pass.")
        return itertools.islice(self._dealt(), skip, None)

    def _dealt(self) -> Iterator[Any]:
        n, r = self.ctx.world_size, self.ctx.rank
        it = iter(self._iterable)  # type: ignore[arg-type]
        while True:
            round_ = list(itertools.islice(it, n))
            if len(round_) < n:
                return
            yield round_[r]


class SampleList(Dataset[Any]):
    """A list (or tuple) of single samples, read as a map-style dataset: batched at the plan's micro-batch and
    sharded like any ``Dataset``."""

    def __init__(self, samples: list[Any] | tuple[Any, ...] | torch.Tensor) -> None:
        self.samples = samples

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> Any:
        return self.samples[index]


def as_samples(data: Any) -> SampleList | None:
    """``data`` as a dataset of single samples when it is a non-empty list or tuple whose first element collates
    into a batch of one, else ``None``."""
    from torch.utils.data import default_collate

    if type(data) not in (list, tuple) or not data:
        return None
    try:
        default_collate([data[0]])
    except (TypeError, RuntimeError):
        return None
    return SampleList(data)


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
        raise UsageError(f"{name} is {_article(kind)} {kind}, which is neither a Dataset nor an iterable of batches.",
                         hint="Pass a torch Dataset, a DataLoader, or a list/generator of batches.")


def _article(word: str) -> str:
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


_SAMPLES_CHECKED = 8
"""Samples of a map-style dataset stacked before any worker starts, to refuse samples of different sizes there."""


def peek(data: Any) -> tuple[Any, Any]:
    """One example batch from ``data`` and ``data`` to use from now on (a generator's first item is put back).

    Raises:
        UsageError: ``data`` is empty.
    """
    if isinstance(data, Dataset) and not isinstance(data, (DataLoader, IterableDataset)) and _map_style(data):
        from torch.utils.data import default_collate

        if len(data) == 0:  # type: ignore[arg-type]
            raise UsageError("the dataset is empty.")
        # Samples of different sizes fail to stack in the workers, after planning: the first few are stacked here,
        # in the launching process (a dataset of token sequences of varying length, without a collate_fn).
        stacked([data[i] for i in range(min(len(data), _SAMPLES_CHECKED))])  # type: ignore[arg-type]
        return default_collate([data[0]]), data
    it = iter(data)
    try:
        first = next(it)
    except StopIteration:
        raise UsageError("data yielded no batch.", hint="Check the dataset / loader is not empty.") from None
    if it is data:  # a one-pass iterator: chain the batch back in front
        return first, itertools.chain([first], it)
    return first, data


def unbatched_samples(data: Any, name: str = "data") -> tuple[Any, tuple[str, ...]]:
    """A tensor (its rows the samples, as ``TensorDataset`` reads one), a mapping of tensors of one row count (a
    tokenizer's output: row ``i`` of each, one sample) and ``DataLoader(dataset, batch_size=None)`` (automatic
    batching off: each item one sample, as the dataset gives it) as a map-style dataset, which ``fit()`` batches
    at the planned micro-batch, with a note; anything else as it is. Fed as batches, a sample of shape ``[8]`` was
    planned as a batch of 8 samples of one element, and the trace of a model taking ``[8]`` failed (blamed on the
    user's code); a mapping's keys were fed as batches."""
    from torch.utils.data import SequentialSampler
    from torch.utils.data._utils.collate import default_convert

    if isinstance(data, torch.Tensor) and data.dim() > 0:  # iterated, its rows were fed to the model as batches
        return SampleList(data), (f"{name} is a tensor of shape {list(data.shape)}: each row along its first "
                                  "dimension is one sample, batched at the planned micro-batch as a Dataset's. "
                                  "Pass a list of batches (or a DataLoader) to feed it as batches.",)
    rows = column_rows(data)
    if rows is not None and len(set(rows.values())) == 1:
        keys = ", ".join(list(rows)[:4]) + (", ..." if len(rows) > 4 else "")
        return ColumnSamples(data), (f"{name} is a {type(data).__name__} of {len(rows)} column(s) of "
                                     f"{next(iter(rows.values()))} rows ({keys}): row i of each is one sample, "
                                     "batched at the planned micro-batch as a Dataset's (a dict batch).",)
    if not (isinstance(data, DataLoader) and data.batch_size is None and data.batch_sampler is None
            and _map_style(data.dataset) and data.collate_fn is default_convert
            and isinstance(data.sampler, (RandomSampler, SequentialSampler))):
        return data, ()
    return data.dataset, (f"{name} is a DataLoader with batch_size=None (each item one sample): its dataset is "
                          f"batched at the planned micro-batch, as a Dataset given as {name} is.",)


def _map_style(dataset: Any) -> bool:
    return hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__") and not isinstance(dataset,
                                                                                               IterableDataset)


def _rebuildable(loader: DataLoader[Any]) -> bool:
    """A loader whose batching autoshard can reproduce with a distributed sampler (no custom batch sampler)."""
    return (loader.batch_size is not None and type(loader.batch_sampler) is BatchSampler
            and isinstance(loader.sampler, (RandomSampler, SequentialSampler)))


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
    if not isinstance(data, DataLoader) or world == 1 or not _map_style(data.dataset) or not data.batch_size:
        return
    samples = len(data.dataset)  # type: ignore[arg-type]  # map-style: it has a length
    batches = samples // world // data.batch_size if _rebuildable(data) else len(data) // world
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


def loader_batch_size(data: Any) -> int | None:
    """The samples per batch of a ``DataLoader`` that batches by a fixed size, else ``None``."""
    return data.batch_size if isinstance(data, DataLoader) else None


def fixed_batch_size(data: Any) -> int | None:
    """The micro-batch ``data`` already has: a ``DataLoader``'s batch size, or the first dimension of a list of
    batches' first batch (``None`` when its tensors disagree or there is none)."""
    if isinstance(data, DataLoader):
        return data.batch_size
    if isinstance(data, (list, tuple)) and data:
        return batch_rows(data[0])
    return None


def repeated_first_sample(batch: Any, n: int) -> Any:
    """A batch of ``n`` copies of ``batch``'s first sample: each tensor's first row repeated, and a list of samples
    held in the batch (variable-size images, a detection model's targets: as many elements as the batch has
    samples) ``n`` times its first element. A list is of samples when it has as many elements as the batch's
    tensors have rows, or, with no such tensor, when it holds tensors of differing shapes (and lists as long as
    it are too).

    Example:
        >>> images = [torch.zeros(3, 24, 32), torch.zeros(3, 40, 32)]
        >>> out = repeated_first_sample((images, torch.tensor([0, 1])), 3)
        >>> [tuple(t.shape) for t in out[0]], out[1].tolist()
        ([(3, 24, 32), (3, 24, 32), (3, 24, 32)], [0, 0, 0])
    """
    from autoshard.models.source import map_tensors

    def repeat(t: Any) -> Any:
        if not isinstance(t, torch.Tensor) or t.dim() == 0:
            return t
        return t[:1].repeat(n, *([1] * (t.dim() - 1)))

    if type(batch) not in (dict, list, tuple):  # a tensor, a dataclass, a named tuple, a BatchEncoding: as a whole
        return map_tensors(repeat, batch)
    parts = list(batch.values()) if isinstance(batch, dict) else list(batch)
    rows = batch_rows(batch)
    if rows is None:
        ragged = [len(v) for v in parts if isinstance(v, list) and len(v) > 1
                  and all(isinstance(t, torch.Tensor) for t in v) and len({tuple(t.shape) for t in v}) > 1]
        rows = ragged[0] if ragged else None

    def expand(value: Any) -> Any:
        if isinstance(value, list) and value and len(value) == rows:
            return [value[0]] * n
        return map_tensors(repeat, value)

    if isinstance(batch, dict):
        return {k: expand(v) for k, v in batch.items()}
    return type(batch)(expand(v) for v in batch)


def batched_as_it_comes(data: Any) -> bool:
    """Whether ``data`` yields batches ``fit()`` trains as they come, whose size no attribute gives: a
    ``DataLoader`` with a batch sampler of its own (no ``batch_size``), an ``IterableDataset`` or a generator. Not a
    map-style dataset (``fit()`` batches it), a ``DataLoader`` with a ``batch_size``, nor a list (its first element
    may be a single sample: :func:`as_samples`)."""
    if isinstance(data, DataLoader):
        return data.batch_size is None
    return not isinstance(data, (list, tuple)) and not (isinstance(data, Dataset) and _map_style(data))


def size_as_it_comes(data: Any, example: Any, batch_size: int | None, notes: list[str]) -> int | None:
    """The micro-batch of data that no attribute sizes (:func:`batched_as_it_comes`): its
    first batch's, noted, so that the plan prices the batches that will train.

    Raises:
        UsageError: ``batch_size=`` says otherwise: fit() trains the batches as they come.
    """
    rows = batch_rows(example)
    what = "the DataLoader (no batch_size: a batch sampler of its own)" if getattr(data, "batch_sampler", None) \
        else "the data"
    if rows is None:
        if batch_size is not None:  # a stream of single samples: batch_size= cannot batch it
            raise UsageError(f"batch_size={batch_size}, and the first item of {what} is no batch (its tensors "
                             "differ in their first dimension): fit() trains on a stream's items as they come, and "
                             "does not batch them.",
                             hint=f"Batch the stream with DataLoader(data, batch_size={batch_size}) and drop "
                                  "batch_size=, or pass a map-style Dataset, which fit() batches at batch_size.")
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

