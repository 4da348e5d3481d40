"""What ``fit()``'s notes say about how the data was shared out among the ranks: what an epoch leaves out, what
each rank loads, and what a stream was found to be."""

from __future__ import annotations

from autoshard.runtime.data import DataFeed


def ordinal(n: int) -> str:
    """``n`` as an ordinal number.

    Example:
        >>> [ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 112)]
        ['1st', '2nd', '3rd', '4th', '11th', '12th', '13th', '21st', '22nd', '112th']
    """
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def before_training(feed: DataFeed, micro_batch_size: int, *, loader_given: bool) -> list[str]:
    """The notes on the training data known before its first batch: the samples a dataset's epoch leaves out, the
    batches a list's epoch leaves out, and a ``DataLoader`` every rank iterates whole (``loader_given``: the user
    passed a ``DataLoader``, whose batch size is theirs to change)."""
    world = feed.ctx.world_size
    notes = []
    if feed.samples_dropped and feed.samples is not None:
        notes.append(_samples_left_out(feed, micro_batch_size, loader_given=loader_given))
    if feed.left_out:
        notes.append(_batches_left_out(feed, "data", "trained"))
    if feed.dealt_from_whole is not None:
        notes.append(f"data: the DataLoader {feed.dealt_from_whole} cannot be split among the ranks by a "
                     f"DistributedSampler, so each of the {world} ranks iterates it whole and trains on every "
                     f"{ordinal(world)} batch: every rank loads and collates all the batches ({world}× the loading "
                     "work; more num_workers cuts it).")
    return notes


def eval_left_out(feed: DataFeed) -> list[str]:
    """The note on the batches of ``eval_data`` that no scoring reaches, if any."""
    return [_batches_left_out(feed, "eval_data", "scored")] if feed.left_out else []


def stream_found(feed: DataFeed, name: str) -> list[str]:
    """The note on what a stream was found to be at its first batch (:attr:`DataFeed.split_by_rank`): ``name``'s
    whole data on every rank, dealt out, or each rank's own share, trained whole. None before its first batch."""
    stream, world = feed.stream, feed.ctx.world_size
    if stream is None or feed.split_by_rank is None:
        return []
    verb = "trains on" if name == "data" else "scores"
    if feed.split_by_rank:
        return [f"{name}: {stream} gave the ranks different first batches, so each rank's stream was read as its own "
                f"share (split by rank, as torch DDP and Lightning datasets split themselves): each of the {world} "
                f"ranks {verb} every batch its stream yields, and a pass ends on every rank when any rank's stream "
                "ends (what the others have left of it is dropped)."]
    return [f"{name}: {stream} gave every rank the same first batch, so it was read as the whole data on each rank: "
            f"each of the {world} ranks iterates it whole and {verb} every {ordinal(world)} batch ({world}× the "
            "loading work). A stream that yields only its rank's share (split by RANK and WORLD_SIZE) is told by "
            "its first batch, and each rank then takes its stream whole."]


def unstepped(micro_batches: int, samples: int, accumulation: int) -> list[str]:
    """The note on the micro-batches the data's end left in an incomplete accumulation (a probe's 100 samples at
    micro-batch 8 × 5 trained 80, and the 20 left went unsaid)."""
    if not micro_batches:
        return []
    return [f"data: the last {micro_batches} micro-batch(es) ({samples} sample(s) on each rank) made an incomplete "
            f"accumulation of {accumulation} when the data ended, and were not stepped (their gradients were "
            f"computed and dropped); to train them, make the micro-batches each rank takes a multiple of "
            f"{accumulation}, or give a global batch that needs no accumulation."]


def _samples_left_out(feed: DataFeed, micro_batch_size: int, *, loader_given: bool) -> str:
    samples, world, dropped = feed.samples, feed.ctx.world_size, feed.samples_dropped
    which = "a different few each epoch" if feed.shuffled else "the same last ones each epoch"
    keeps = _keeping_all(samples or 0, world, micro_batch_size)
    example = f"DataLoader(..., batch_size={keeps})" if loader_given else f"batch_size={keeps}"
    advice = (f"to keep them all, make the batch size × {world} rank(s) divide the {samples} samples (e.g. {example})"
              if keeps is not None else f"the {samples} samples do not divide among the {world} ranks")
    return (f"data: {dropped} sample(s) of each epoch are left out: micro-batches of {micro_batch_size} on each of "
            f"the {world} rank(s) hold {samples - dropped if samples else 0}, and what fills no whole micro-batch on "
            f"every rank is dropped ({which}); {advice}.")


def _keeping_all(samples: int, world: int, micro_batch_size: int) -> int | None:
    """The largest batch size up to ``micro_batch_size`` whose batches over ``world`` ranks divide ``samples``."""
    return next((b for b in range(micro_batch_size, 0, -1) if samples % (b * world) == 0), None)


def _batches_left_out(feed: DataFeed, name: str, done: str) -> str:
    world = feed.ctx.world_size
    if feed.batches_are_items:
        return (f"{name}: {feed.left_out} of the DataLoader's items (each a batch: batch_size=None) are not {done} "
                f"each epoch: the items are shared out among the {world} ranks, one each per round, and an "
                "incomplete last round is dropped.")
    return (f"{name}: its last {feed.left_out} batch(es) make an incomplete round over the {world} ranks and are not "
            f"{done} (every rank takes one batch per round, so that they step together); pass the samples as a "
            "Dataset (or a DataLoader over one) to use them all.")
