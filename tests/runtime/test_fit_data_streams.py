"""How fit() shares data out among the ranks, as a new-user probe found it wanting: a stream split by rank dealt out
again (half the data lost), ranks disagreeing where an epoch of streams of different lengths ends, a user's random
sampler repeating its order every epoch, ``DataLoader(batch_size=None)`` read as samples, a list of single samples
refused as ``eval_data``, and notes that were silent or wrong.

The two-process cases run once, in ``data_streams_script.py`` (one subprocess, a fit() per case)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, IterableDataset, SubsetRandomSampler, TensorDataset

from autoshard.runtime import fit
from autoshard.runtime.data import DataFeed
from autoshard.runtime.data_notes import before_training, ordinal
from autoshard.runtime.distributed import RunContext
from autoshard.runtime.streams import digest

REPO = Path(__file__).resolve().parents[2]
CASES = ("split", "whole", "premade", "eval-samples", "user-sampler")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Each case's RESULT, and what each rank's model was fed: ``{case: {"result": ..., "0": [...], "1": [...]}}``."""
    log = tmp_path_factory.mktemp("data-streams")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p))
    done = subprocess.run([sys.executable, str(REPO / "tests/runtime/data_streams_script.py"), str(log), *CASES],
                          cwd=log, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    out: dict[str, Any] = {}
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            result = json.loads(line.removeprefix("RESULT "))
            fed = {rank: [json.loads(r) for r in (log / f"{result['case']}_r{rank}.jsonl").read_text().splitlines()]
                   if (log / f"{result['case']}_r{rank}.jsonl").is_file() else [] for rank in ("0", "1")}
            out[result["case"]] = {"result": result, **fed}
    assert sorted(out) == sorted(CASES), done.stdout[-2000:]
    return out


def _trained(run: dict[str, Any], rank: str) -> list[list[int]]:
    return [r["ids"] for r in run[rank] if r["mode"] == "train"]


def test_a_stream_split_by_rank_is_trained_whole_by_each_rank(runs: dict[str, Any]) -> None:
    """Dealt out again, rank r taking every 2nd batch of its own share, half the data was lost."""
    run = runs["split"]
    assert "error" not in run["result"], run["result"]
    epoch = [ids for rank in "01" for ids in _trained(run, rank)[:6]]  # each rank's first epoch: 6 batches
    seen = sorted(i for ids in epoch for i in ids)
    assert seen == sorted(set(seen)) and len(seen) == 48, seen  # 50 samples, two of them in rank 0's 7th and 8th
    assert {i % 4 for ids in _trained(run, "0") for i in ids} == {0, 1}  # rank 0's own share, whole
    assert any(n.startswith("data: the DataLoader over a SplitByRank gave the ranks different first batches")
               for n in run["result"]["notes"]), run["result"]["notes"]


def test_a_loader_with_the_users_distributed_sampler_gives_each_rank_its_own_share(runs: dict[str, Any]) -> None:
    """Dealt out as a loader with a sampler of its own, each rank took every 2nd batch of the sampler's rank-0
    share: 8 of the 16 samples an epoch, half of them on both ranks' copies of the same share."""
    run = runs["user-sampler"]
    assert "error" not in run["result"], run["result"]
    assert run["result"]["epochs"] == [0] * 4 + [1] * 4, run["result"]
    first = [_trained(run, rank)[:4] for rank in "01"]
    seen = sorted(i for share in first for ids in share for i in ids)
    assert seen == list(range(16)), first  # each sample once an epoch, over both ranks
    assert _trained(run, "0")[4:] != first[0]  # reshuffled for the next epoch, as the sampler's set_epoch does


def test_ranks_end_an_epoch_of_streams_of_different_lengths_together(runs: dict[str, Any]) -> None:
    """Rank 0's stream holds 8 batches, rank 1's 6: rank 0's epoch-0 tail was paired with rank 1's epoch 1. Every
    rank now ends the epoch at the 6th batch, and the next starts from each stream's beginning on every rank."""
    run = runs["split"]
    assert run["result"]["epochs"] == [0] * 6 + [1] * 6, run["result"]
    for rank in "01":
        trained = _trained(run, rank)
        assert len(trained) == 12 and trained[6:] == trained[:6], trained


def test_a_whole_stream_is_still_dealt_out_and_said_so(runs: dict[str, Any]) -> None:
    run = runs["whole"]
    assert [sorted(i for ids in _trained(run, r) for i in ids) for r in "01"] == [
        [0, 1, 2, 3, 8, 9, 10, 11], [4, 5, 6, 7, 12, 13, 14, 15]]  # 5 batches: rounds of 2, the 5th dropped
    assert any(n.startswith("data: the DataLoader over a Whole gave every rank the same first batch") and
               "every 2nd batch" in n for n in run["result"]["notes"]), run["result"]["notes"]


def test_a_loader_without_automatic_batching_trains_its_items_as_batches_shared_by_rank(runs: dict[str, Any]) -> None:
    """DataLoader(batch_size=None): each item is a batch (torch's meaning). fit() stacked them into [5, 4, L]
    batches, and refused their different lengths telling the user to pass a DataLoader, which they had."""
    run = runs["premade"]
    assert "error" not in run["result"], run["result"]
    shapes = [r["shape"] for rank in "01" for r in run[rank] if r["mode"] == "train"]
    assert len(shapes) == 10 and all(len(s) == 2 and s[0] == 4 for s in shapes), shapes
    assert sorted(i for rank in "01" for ids in _trained(run, rank) for i in ids) == list(range(40))
    assert run["result"]["micro_batch"] == 4


def test_eval_data_as_a_list_of_single_samples_is_batched_as_data_would_be(runs: dict[str, Any]) -> None:
    """data= reads such a list as samples; eval_data= fed its elements as batches, and the model's IndexError came
    from inside the workers."""
    run = runs["eval-samples"]
    assert "error" not in run["result"], run["result"]
    scored = sorted(i for rank in "01" for r in run[rank] if r["mode"] == "eval" for i in r["ids"])
    assert set(scored) == set(range(40, 49)), scored
    assert any(n.startswith("eval_data is a list whose elements are single samples") for n in run["result"]["notes"])


# -- one process, and the parts ----------------------------------------------------------------------------------


class _Recorder(nn.Linear):
    """``nn.Linear(8, 1)`` that keeps the ids (``x[:, 0]``) of every batch it trains on."""

    def __init__(self) -> None:
        super().__init__(8, 1)
        self.seen: list[list[int]] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training and type(x) is torch.Tensor and x.device.type == "cpu":
            self.seen.append(x[:, 0].long().tolist())
        return super().forward(x)


def _ids_dataset(n: int) -> TensorDataset:
    x = torch.randn(n, 8, generator=torch.Generator().manual_seed(0))
    x[:, 0] = torch.arange(n)
    return TensorDataset(x, torch.zeros(n, 1))


def test_a_users_random_sampler_draws_a_new_order_each_epoch_as_a_plain_loop_does() -> None:
    """The first batch was drawn under a saved RNG state, then the state put back: epoch 1 repeated epoch 0."""
    loader = DataLoader(_ids_dataset(48), batch_size=4, sampler=SubsetRandomSampler(range(32)))
    model = _Recorder()
    fit(model, loader, loss_fn=F.mse_loss, epochs=3, optimizer="sgd", progress=False)
    epochs = [model.seen[8 * e:8 * e + 8] for e in range(3)]
    torch.manual_seed(0)  # fit() seeds torch with seed=0 as training starts
    plain = [[b[0][:, 0].long().tolist() for b in loader] for _ in range(3)]
    assert epochs[0] != epochs[1] != epochs[2]
    assert epochs == plain


class _Samples(IterableDataset):
    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(_ids_dataset(16))


def test_eval_batches_longer_than_the_plans_seq_len_are_warned_of_once() -> None:
    class Tokens(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb, self.lin = nn.Embedding(16, 8), nn.Linear(8, 8)

        def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
            return self.lin(self.emb(input_ids)).mean()

    train = [{"input_ids": torch.randint(0, 16, (2, 8))} for _ in range(2)]
    held_out = [{"input_ids": torch.randint(0, 16, (2, 16))} for _ in range(2)]
    with pytest.warns(UserWarning, match=r"^eval_data: a batch holds sequences of 16 tokens, and the plan is for 8"):
        fit(Tokens(), train, eval_data=held_out, max_steps=1, progress=False)


def _ctx(world_size: int, rank: int = 0) -> RunContext:
    return RunContext(rank=rank, world_size=world_size, local_rank=rank, local_world_size=world_size,
                      device=torch.device("cpu"), backend="gloo", owns_group=False)


def test_a_loader_without_automatic_batching_shares_its_items_out_by_rank() -> None:
    loader = DataLoader([torch.full((4, 2), float(k)) for k in range(7)], batch_size=None, shuffle=True)
    feeds = [DataFeed(loader, micro_batch_size=4, ctx=_ctx(2, r), seed=0) for r in (0, 1)]
    shares = [[int(b[0, 0]) for b in f.epoch(0)] for f in feeds]
    assert all(len(s) == 3 for s in shares) and len(set(shares[0]) | set(shares[1])) == 6
    assert feeds[0].left_out == 1 and feeds[0].batches_per_epoch == 3
    assert before_training(feeds[0], 4, loader_given=True)[0].startswith(
        "data: 1 of the DataLoader's items (each a batch: batch_size=None) are not trained each epoch")


def test_a_lists_incomplete_last_round_of_batches_is_said_in_training() -> None:
    batches = [(torch.zeros(4, 2), torch.zeros(4, 1)) for _ in range(5)]
    notes = before_training(DataFeed(batches, micro_batch_size=4, ctx=_ctx(2), seed=0), 4, loader_given=False)
    assert notes == ["data: its last 1 batch(es) make an incomplete round over the 2 ranks and are not trained "
                     "(every rank takes one batch per round, so that they step together); pass the samples as a "
                     "Dataset (or a DataLoader over one) to use them all."]


@pytest.mark.parametrize(("samples", "loader_given", "advice"), [
    (42, True, "to keep them all, make the batch size × 2 rank(s) divide the 42 samples (e.g. "
               "DataLoader(..., batch_size=3))"),
    (42, False, "(e.g. batch_size=3)"),
    (41, False, "the 41 samples do not divide among the 2 ranks"),
])
def test_samples_left_out_are_said_with_a_batch_size_that_keeps_them(samples: int, loader_given: bool,
                                                                     advice: str) -> None:
    feed = DataFeed(_ids_dataset(samples), micro_batch_size=4, ctx=_ctx(2), seed=0)
    note = before_training(feed, 4, loader_given=loader_given)[0]
    assert note.startswith(f"data: {samples - 40} sample(s) of each epoch are left out") and advice in note, note
    assert "divides the data" not in note


def test_ordinals_and_articles_read_as_english() -> None:
    assert [ordinal(n) for n in (2, 3, 4, 11, 21)] == ["2nd", "3rd", "4th", "11th", "21st"]
    feed = DataFeed(DataLoader(_Samples(), batch_size=4), micro_batch_size=4, ctx=_ctx(2), seed=0)
    assert feed.stream == "the DataLoader over a _Samples"


def test_the_digest_of_a_first_batch_tells_content_not_identity() -> None:
    batch = {"x": torch.arange(6.0).reshape(2, 3), "y": [torch.tensor(1), "a"]}
    same = {"x": torch.arange(6.0).reshape(2, 3).clone(), "y": [torch.tensor(1), "a"]}
    assert digest(batch) == digest(same)
    for other in ({"x": torch.arange(6.0).reshape(3, 2), "y": batch["y"]},
                  {"x": torch.arange(6).reshape(2, 3), "y": batch["y"]},
                  {"x": batch["x"], "y": [torch.tensor(2), "a"]}):
        assert digest(other) != digest(batch)
