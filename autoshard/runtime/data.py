"""This rank's share of the training data, epoch by epoch.

* a map-style ``Dataset`` is batched at the plan's micro-batch with a ``DistributedSampler``;
* a ``DataLoader`` over a map-style dataset keeps its batch size, workers and collate function, and gets a
  ``DistributedSampler`` (shuffled when the loader shuffled); one with ``batch_size=None`` (automatic batching off:
  each item is a batch, as torch reads it) gets a ``DistributedSampler`` over its items, which stay batches;
* a list of batches, or a ``DataLoader`` with a sampler of its own, is dealt out in turn: rank ``r`` takes batches
  ``r, r + n, r + 2n, ...``, and a round that cannot give every rank a batch is dropped;
* a stream (a generator, an ``IterableDataset``, a loader over one) is dealt out so when it is whole on every rank,
  and trained whole by each rank when it is each rank's own share already (:mod:`.streams`);
* ``None``: the model source's own example batches, drawn afresh each step (for benchmarks and smoke runs).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
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
from autoshard.runtime import streams
from autoshard.runtime.collate import stacked
from autoshard.runtime.columns import ColumnSamples, column_rows
from autoshard.runtime.data_checks import article, check, map_style, rebuildable, shuffles
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
        self.split_by_rank: bool | None = None
        """A stream's kind, found at its first batch (:mod:`.streams`): each rank's own share (``True``), whole on
        every rank and dealt out (``False``); ``None`` until then, and for data of known length."""
        if data is None:
            if synthetic is None:
                raise UsageError("no data given, and the model source has no example batch to train on.",
                                 hint="Pass data= (a Dataset, DataLoader or iterable of batches).")
            return
        if isinstance(data, DataLoader) and ctx.world_size == 1 and scoring and data.persistent_workers \
                and map_style(data.dataset) and rebuildable(data):
            # Its own loader: a loader with persistent workers serves one iterator at a time, and scoring the
            # training data's loader mid-epoch restarted the training iterator (another order from there).
            self._loader = DataLoader(data.dataset, batch_size=data.batch_size, num_workers=data.num_workers,
                                      collate_fn=data.collate_fn, pin_memory=data.pin_memory,
                                      worker_init_fn=data.worker_init_fn)
        elif isinstance(data, DataLoader) and ctx.world_size == 1:
            self._iterable = data  # one rank: the loader as the user made it
        elif isinstance(data, DataLoader) and map_style(data.dataset) and (
                rebuildable(data) or items_are_batches(data)):
            self._loader = self._distributed_loader(data.dataset, data.batch_size, seed,
                                                    shuffle=shuffles(data), like=data)
        elif isinstance(data, Dataset) and map_style(data) and not isinstance(data, DataLoader):
            self._loader = self._distributed_loader(data, micro_batch_size, seed, shuffle=True, like=None)
        else:
            check(data)
            self.one_pass = iter(data) is data
            self._iterable = data

    def _distributed_loader(self, dataset: Any, batch_size: int | None, seed: int, *, shuffle: bool,
                            like: DataLoader[Any] | None) -> DataLoader[Any]:
        """A loader over this rank's share of ``dataset``; ``batch_size=None`` (a loader's whose items are batches)
        shares out the items as they are."""
        drop_last = not self.scoring
        sampler: DistributedSampler[Any] = DistributedSampler(dataset, num_replicas=self.ctx.world_size,
                                                              rank=self.ctx.rank, shuffle=shuffle and not self.scoring,
                                                              seed=seed, drop_last=drop_last)
        self._sampler = sampler
        extra: dict[str, Any] = {"collate_fn": stacked}  # torch's default_collate, its size error in the user's terms
        if like is not None:
            extra = {"num_workers": like.num_workers, "collate_fn": like.collate_fn, "pin_memory": like.pin_memory,
                     "worker_init_fn": like.worker_init_fn, "persistent_workers": like.persistent_workers}
            if like.num_workers > 0:
                extra["prefetch_factor"] = like.prefetch_factor
        if batch_size is not None:  # torch refuses drop_last without automatic batching
            extra["drop_last"] = drop_last
        return DataLoader(dataset, batch_size=batch_size, sampler=sampler, **extra)

    @property
    def dealt_from_whole(self) -> str | None:
        """Why every rank iterates the user's ``DataLoader`` whole and keeps its share of the batches (a sampler
        or batch sampler of its own over a map-style dataset), or ``None``: each rank then loads and collates every
        batch, ``ranks`` times the loading work, which a note says (a migration probe's weighted sampler). A
        loader over an iterable dataset is a stream, said once its first batch is read (:attr:`split_by_rank`)."""
        loader = self._iterable
        if not isinstance(loader, DataLoader) or self.ctx.world_size == 1 or not map_style(loader.dataset):
            return None
        if loader.batch_size is None or type(loader.batch_sampler) is not BatchSampler:
            return f"with a batch sampler of its own ({type(loader.batch_sampler).__name__})"
        return f"with a sampler of its own ({type(loader.sampler).__name__})"

    @property
    def stream(self) -> str | None:
        """What a stream is, as a note names it (``a DataLoader over a SelfSharded``, ``a generator``), or ``None``
        for data of known length."""
        iterable = self._iterable
        if iterable is None or self._known_length:
            return None
        if isinstance(iterable, DataLoader):
            kind = type(iterable.dataset).__name__
            return f"the DataLoader over {article(kind)} {kind}"
        kind = type(iterable).__name__
        return f"{article(kind)} {kind}"

    @property
    def endless(self) -> bool:
        """Synthetic batches: the data never runs out."""
        return self._synthetic is not None and self._loader is None and self._iterable is None

    @property
    def samples_dropped(self) -> int:
        """Samples of a dataset that no micro-batch of an epoch holds: the ``DistributedSampler``'s ``drop_last``
        leaves out what does not fill a micro-batch on every rank (0 for data batched already, and for scoring)."""
        loader = self._loader
        if loader is None or self.scoring or not map_style(loader.dataset) or loader.batch_size is None:
            return 0
        return len(loader.dataset) - len(loader) * loader.batch_size * self.ctx.world_size  # type: ignore[arg-type]

    @property
    def samples(self) -> int | None:
        """The samples of a dataset this feed batches (``None`` for data batched already)."""
        loader = self._loader
        if loader is None or loader.batch_size is None:
            return None
        return len(loader.dataset)  # type: ignore[arg-type]  # map-style: it has a length

    @property
    def shuffled(self) -> bool:
        """Whether a dataset's samples are shuffled each epoch."""
        return self._sampler is not None and self._sampler.shuffle

    @property
    def batches_are_items(self) -> bool:
        """A ``DataLoader(batch_size=None)``'s items, each a batch, shared out among the ranks."""
        return self._loader is not None and self._loader.batch_size is None

    @property
    def left_out(self) -> int:
        """Batches of a list of batches, or items of a ``DataLoader(batch_size=None)`` (each a batch), that an
        epoch never reaches: those of an incomplete last round over the ranks (every rank takes one batch per
        round, so that they step, or score, together)."""
        loader, iterable, world = self._loader, self._iterable, self.ctx.world_size
        if self.batches_are_items and not self.scoring:
            return len(loader.dataset) - len(loader) * world  # type: ignore[arg-type,union-attr]  # map-style
        if loader is not None or iterable is None or world == 1 or not hasattr(iterable, "__len__") or isinstance(
                iterable, (IterableDataset, DataLoader)):
            return 0
        return len(iterable) % world  # type: ignore[arg-type]

    @property
    def _known_length(self) -> bool:
        iterable = self._iterable
        if not hasattr(iterable, "__len__") or isinstance(iterable, IterableDataset):
            return False
        return not (isinstance(iterable, DataLoader) and not map_style(iterable.dataset))

    @property
    def batches_per_epoch(self) -> int | None:
        """This rank's batches per epoch, when known (equal on every rank)."""
        if self._loader is not None:
            return len(self._loader)
        if self._iterable is None or not self._known_length:
            return None  # a loader over an IterableDataset: its length is the dataset's claim
        return len(self._iterable) // self.ctx.world_size  # type: ignore[arg-type]

    def epoch(self, epoch: int, *, skip: int = 0) -> Iterator[Any]:
        """This rank's batches of ``epoch``, after skipping the first ``skip`` (resuming mid-epoch). A stream's
        first batch is collective at several ranks (:mod:`.streams`): every rank draws it.

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
        round_ = list(itertools.islice(it, n))
        if self.split_by_rank is None and n > 1 and not self._known_length:
            first = streams.digest(round_[0]) if round_ else streams.EMPTY
            self.split_by_rank = streams.split_by_rank(first, self.ctx)
        if self.split_by_rank:  # this rank's own share: all of it, in order
            yield from round_
            yield from it
            return
        while len(round_) == n:
            yield round_[r]
            round_ = list(itertools.islice(it, n))


def items_are_batches(loader: DataLoader[Any]) -> bool:
    """Whether ``loader`` is ``DataLoader(dataset, batch_size=None)`` over a map-style dataset with torch's own
    sampler: automatic batching off, each item a batch (torch's "Disable automatic batching"), which ``fit()``
    shares out among the ranks item by item."""
    return (loader.batch_size is None and loader.batch_sampler is None and map_style(loader.dataset)
            and isinstance(loader.sampler, (RandomSampler, SequentialSampler)))


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


_SAMPLES_CHECKED = 8
"""Samples of a map-style dataset stacked before any worker starts, to refuse samples of different sizes there."""


def peek(data: Any) -> tuple[Any, Any]:
    """One example batch from ``data`` and ``data`` to use from now on (a generator's first item is put back).

    Raises:
        UsageError: ``data`` is empty.
    """
    if isinstance(data, Dataset) and not isinstance(data, (DataLoader, IterableDataset)) and map_style(data):
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
    """A tensor (its rows the samples, as ``TensorDataset`` reads one) and a mapping of tensors of one row count (a
    tokenizer's output: row ``i`` of each, one sample) as a map-style dataset, which ``fit()`` batches at the
    planned micro-batch, with a note; anything else as it is. Fed as batches, a sample of shape ``[8]`` was planned
    as a batch of 8 samples of one element, and the trace of a model taking ``[8]`` failed (blamed on the user's
    code); a mapping's keys were fed as batches. A ``DataLoader(dataset, batch_size=None)`` stays a loader whose
    items are batches, as torch reads it (:func:`items_are_batches`)."""
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
    return data, ()


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

