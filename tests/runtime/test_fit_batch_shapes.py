"""fit() on batch and output shapes people's code has that the conventions first missed (found by trying user
scripts, 2026-11-29): a Hugging Face model built with ``return_dict=False`` (its loss first in a tuple), an output
with no loss, batches whose size no attribute gives (a ``DataLoader`` with a batch sampler, a generator), a
dataclass batch under ``training_step``, an ``IterableDataset`` of single samples, and data that is not tensors."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import BatchSampler, DataLoader, IterableDataset, SequentialSampler, TensorDataset
from transformers import BertConfig, BertForSequenceClassification

from autoshard.errors import NoFeasiblePlan, UsageError, UserCodeError, WorkerError
from autoshard.runtime import fit
from autoshard.runtime.options import in_fit_arguments


def _bert(return_dict: bool) -> BertForSequenceClassification:
    torch.manual_seed(0)
    config = BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=16, num_labels=2, return_dict=return_dict)
    return BertForSequenceClassification(config)


def _bert_batches(labels: bool) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1, 64, (32, 8), generator=g)
    target = (ids[:, 0] > 32).long()  # learnable from the first token
    rows = [{"input_ids": ids[i:i + 8], **({"labels": target[i:i + 8]} if labels else {})} for i in range(0, 32, 8)]
    return rows * 3


def test_a_tuple_output_trains_on_its_loss_as_the_dict_output_does() -> None:
    """BertForSequenceClassification(return_dict=False) returns ``(loss, logits)``: its loss is the first element.
    It used to train on loss + mean(logits), whose loss fell below zero while nothing was learnt."""
    as_tuple = fit(_bert(False), _bert_batches(True), max_steps=6, optimizer="sgd", progress=False)
    as_dict = fit(_bert(True), _bert_batches(True), max_steps=6, optimizer="sgd", progress=False)
    assert as_tuple.losses == pytest.approx(as_dict.losses, rel=1e-5)
    assert all(0.3 < v < 1.2 for v in as_tuple.losses), as_tuple.losses  # cross entropy of 2 classes


def test_an_output_without_a_loss_is_refused_naming_what_it_is() -> None:
    with pytest.raises(UsageError, match=r"SequenceClassifierOutput with logits, with no loss \(a Hugging Face "
                                         r"model computes one when the batch has `labels`\)") as info:
        fit(_bert(True), _bert_batches(False), max_steps=1, optimizer="sgd", progress=False)
    assert "loss_fn=" in (info.value.hint or "")
    model = nn.Sequential(nn.Linear(8, 1))
    with pytest.raises(UsageError, match=r"the model's output is a tensor of shape \[batch, 1\], with no loss: "):
        fit(model, [torch.randn(4, 8)] * 2, max_steps=1, optimizer="sgd", progress=False)


def test_a_contrastive_model_without_a_loss_is_told_to_ask_for_one_with_return_loss() -> None:
    """CLIP computes its loss when the batch says return_loss=True, not from labels (a non-LM probe's CLIP was told
    to add labels)."""
    import transformers

    from autoshard.models.step import output_loss

    small = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2}
    torch.manual_seed(0)
    clip = transformers.CLIPModel(transformers.CLIPConfig(
        text_config={**small, "vocab_size": 64, "max_position_embeddings": 16},
        vision_config={**small, "image_size": 16, "patch_size": 8}, projection_dim=8))
    batch = {"input_ids": torch.randint(0, 64, (2, 8)), "pixel_values": torch.randn(2, 3, 16, 16)}
    with pytest.raises(UsageError, match=r"with no loss \(a Hugging Face model computes one when the batch has "
                                         r"`return_loss=True`\)"):
        output_loss(clip(**batch), batch)
    assert output_loss(clip(**batch, return_loss=True), {**batch, "return_loss": True}).dim() == 0


class _Scalar(nn.Module):
    """A forward that returns its loss."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x).pow(2).mean()


def test_a_forward_returning_its_loss_trains_on_it() -> None:
    result = fit(_Scalar(), [torch.randn(4, 8)] * 4, max_steps=4, optimizer="sgd", progress=False)
    assert result.losses[-1] < result.losses[0]


def _regression(n: int = 96) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 8, generator=g)
    return x, x @ torch.randn(8, 1, generator=g)


def test_a_batch_sampler_loader_is_planned_at_the_size_of_its_batches() -> None:
    """A DataLoader built with ``batch_sampler=`` has no ``batch_size``: the planner chose micro-batch 1024 for
    batches of 32, and the run reported 32x the samples it trained."""
    x, y = _regression()
    loader = DataLoader(TensorDataset(x, y), batch_sampler=BatchSampler(SequentialSampler(range(96)), 32, False))
    result = fit(nn.Sequential(nn.Linear(8, 1)), loader, loss_fn=F.mse_loss, max_steps=3, optimizer="sgd",
                 progress=False)
    assert result.plan.micro_batch_size == 32
    assert any(n.startswith("Micro-batch 32: the size of the first batch of the DataLoader") for n in result.notes)


def _generator(x: torch.Tensor, y: torch.Tensor) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    for i in range(0, len(x), 32):
        yield x[i:i + 32], y[i:i + 32]


def test_a_generator_is_planned_at_its_first_batch_and_a_contrary_batch_size_refused() -> None:
    x, y = _regression()
    result = fit(nn.Sequential(nn.Linear(8, 1)), _generator(x, y), loss_fn=F.mse_loss, max_steps=3,
                 optimizer="sgd", progress=False)
    assert result.plan.micro_batch_size == 32 and len(result.steps) == 3
    with pytest.raises(UsageError, match="batch_size=64, and the first batch of the data holds 32 samples"):
        fit(nn.Sequential(nn.Linear(8, 1)), _generator(x, y), loss_fn=F.mse_loss, batch_size=64, max_steps=1,
            progress=False)


@dataclasses.dataclass(frozen=True)
class _Pair:
    x: torch.Tensor
    y: torch.Tensor


def test_a_dataclass_batch_trains_with_a_training_step() -> None:
    x, y = _regression()
    loader = DataLoader(TensorDataset(x, y), batch_size=16,
                        collate_fn=lambda rows: _Pair(*(torch.stack(column) for column in zip(*rows, strict=True))))
    result = fit(nn.Sequential(nn.Linear(8, 1)), loader, max_steps=6, optimizer="sgd", progress=False,
                 training_step=lambda model, batch: F.mse_loss(model(batch.x), batch.y))
    assert result.plan.micro_batch_size == 16 and result.losses[-1] < result.losses[0]


class _Samples(IterableDataset):
    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        x, y = _regression(32)
        return iter(zip(x, y, strict=True))


def test_an_iterable_dataset_of_single_samples_is_told_to_batch_them() -> None:
    # Refused before tracing now, as with batch_size= (the model's failure on the sample was the headline).
    with pytest.raises(UsageError, match=r"^the first item of the data is no batch \(its tensors differ in their "
                                         r"first dimension, as one sample's do\)") as info:
        fit(nn.Sequential(nn.Linear(8, 1)), _Samples(), loss_fn=F.mse_loss, max_steps=1, progress=False)
    assert "DataLoader(data, batch_size=...)" in (info.value.hint or "")


def test_batch_size_over_a_stream_of_single_samples_is_refused_before_tracing() -> None:
    # It was passed over, and the trace failed inside the model: "a and b must have same reduction dim".
    with pytest.raises(UsageError, match="batch_size=16, and the first item of the data is no batch") as info:
        fit(nn.Sequential(nn.Linear(8, 1)), _Samples(), loss_fn=F.mse_loss, max_steps=1, batch_size=16,
            progress=False)
    assert "DataLoader(data, batch_size=16)" in (info.value.hint or "")


@pytest.mark.parametrize("data, message", [
    ([["a cat", "a dog"]] * 2, r"the data's first batch is a list with no tensor in it \(str\)"),
    (["a cat", "a dog"], r"the data's first batch is a str; expected a tensor"),
])
def test_data_that_is_not_tensors_is_named_as_the_users_data(data: list, message: str) -> None:
    with pytest.raises(UserCodeError, match=message) as info:
        fit(nn.Sequential(nn.Linear(8, 1)), data, loss_fn=F.mse_loss, max_steps=1, progress=False)
    assert "Tokenize or convert the data to tensors" in (info.value.hint or "")


def test_a_strategy_the_hardware_cannot_run_is_hinted_in_fits_arguments() -> None:
    if torch.cuda.is_available():
        pytest.skip("CPU offload is refused only without a GPU")
    with pytest.raises(NoFeasiblePlan) as info:
        fit(nn.Sequential(nn.Linear(8, 1)), [_regression(8)] * 2, loss_fn=F.mse_loss, strategy="fsdp_cpu_offload",
            max_steps=1, progress=False)
    assert "without a GPU" in info.value.message
    assert "--" not in (info.value.hint or "") and "hardware=" in (info.value.hint or "")
    assert in_fit_arguments("(--strategies; strategy= in fit()) or another optimizer (--optimizer), NVMe offload "
                            "(--nvme PATH)") == "(strategy=) or another optimizer (optimizer=), NVMe offload (an " \
                                               "NVMe path in hardware=)"
    assert "--" not in in_fit_arguments("try more nodes (--nodes), a host with more RAM (--cpu-memory)")  # type: ignore[operator]


def _regression_batches(*sizes: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(n, 8, generator=g), torch.randn(n, 1, generator=g)) for n in sizes]


def test_a_steps_samples_are_the_rows_its_batches_held_not_the_plans_micro_batch() -> None:
    """A list's last, shorter batch (and any batch of another size) is counted as it was: samples_per_s x
    step_time_s was the plan's micro-batch for every step, 8x the truth when a plan's micro-batch was not the
    data's."""
    torch.manual_seed(0)
    result = fit(nn.Linear(8, 1), _regression_batches(16, 16, 6), loss_fn=F.mse_loss, epochs=1,
                 optimizer="sgd", progress=False)
    assert [round(s.samples_per_s * s.step_time_s) for s in result.steps] == [16, 16, 6]


def test_a_list_of_batches_with_a_contrary_batch_size_or_plan_is_refused(tmp_path) -> None:
    """fit() trains a list's batches as they are: batch_size=64 or a plan for micro-batch 64 priced another run
    (a DataLoader's batch size is refused the same way)."""
    from autoshard.planner import plan_file

    batches = _regression_batches(16, 16, 16)
    with pytest.raises(UsageError, match=r"batch_size=64, and the first batch of the list given as data holds 16"):
        fit(nn.Linear(8, 1), batches, loss_fn=F.mse_loss, batch_size=64, max_steps=1, progress=False)
    planned = fit(nn.Linear(8, 1), batches, loss_fn=F.mse_loss, max_steps=1, progress=False)
    other = dataclasses.replace(planned.plan, micro_batch_size=64)
    path = plan_file.write(other, tmp_path / "plan.json")
    with pytest.raises(UsageError, match=r"holds 16 samples, and the plan \(.*\) was made for micro-batch 64"):
        fit(nn.Linear(8, 1), batches, loss_fn=F.mse_loss, plan=str(path), max_steps=1, progress=False)
    forced = fit(nn.Linear(8, 1), batches, loss_fn=F.mse_loss, plan=str(path), force=True, max_steps=2,
                 progress=False)
    assert any("trained on the list's batches of 16 samples" in n for n in forced.notes)
    assert [round(s.samples_per_s * s.step_time_s) for s in forced.steps] == [16, 16]


def test_a_plan_for_the_whole_model_given_to_its_fine_tuned_copy_says_the_trained_parameters_differ(tmp_path) -> None:
    from autoshard.planner import plan_file

    batches = _regression_batches(16, 16)
    whole = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 1))
    planned = fit(whole, batches, loss_fn=F.mse_loss, max_steps=1, progress=False)
    path = plan_file.write(planned.plan, tmp_path / "plan.json")
    tuned = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 1))
    tuned[0].requires_grad_(False)
    with pytest.raises(UsageError, match=r"\(81 parameters, .*\(as many parameters, laid out or trained otherwise: "
                                         r"the layout counts the parameters that train"):
        fit(tuned, batches, loss_fn=F.mse_loss, plan=str(path), max_steps=1, progress=False)


def test_an_optimizer_instance_with_groups_is_refused_before_planning_with_the_factory_that_keeps_them(
        monkeypatch) -> None:
    """It was refused by the workers, after planning, as 'cannot be rebuilt over the sharded parameters', under DDP
    too, with a hint whose factory could not name the groups."""
    def planned(*args, **kwargs):
        raise AssertionError("planned before the optimizer was checked")

    monkeypatch.setattr("autoshard.planner.machine.plan_for", planned)
    model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 1))
    groups = torch.optim.AdamW([{"params": model[0].parameters()}, {"params": model[1].parameters(), "lr": 1e-4}])
    with pytest.raises(UsageError, match="has 2 parameter groups") as info:
        fit(model, _regression_batches(16, 16), loss_fn=F.mse_loss, optimizer=groups, max_steps=1, progress=False)
    assert "model.named_parameters()" in (info.value.hint or "")
    monkeypatch.undo()
    result = fit(model, _regression_batches(16, 16), loss_fn=F.mse_loss, max_steps=1, progress=False,
                 optimizer=lambda params: torch.optim.AdamW([{"params": model[0].parameters()},
                                                             {"params": model[1].parameters(), "lr": 1e-4}]))
    assert len(result.steps) == 1


class _WholeDict(nn.Module):
    """A forward that takes the batch dictionary whole, as vision code often does."""

    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(8, 2)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return nn.functional.cross_entropy(self.head(batch["image"]), batch["label"])


def test_a_forward_taking_the_dictionary_whole_gets_it_whole() -> None:
    """``forward(self, batch)`` with dictionary batches was fed ``model(**batch)``: "missing 1 required positional
    argument: 'batch'"."""
    from autoshard.models.step import describe

    data = [{"image": torch.randn(16, 8), "label": torch.randint(0, 2, (16,))} for _ in range(4)]
    result = fit(_WholeDict(), data, max_steps=4, optimizer="sgd", progress=False)
    assert len(result.losses) == 4 and all(0.2 < v < 2.0 for v in result.losses)
    assert describe(_WholeDict(), data[0]) == "model(batch), output.loss"
    assert describe(nn.Linear(8, 2), {"input": data[0]["image"]}).startswith("model(**batch)")  # a key it takes


def test_a_failure_on_a_dataloaders_short_last_batch_says_so() -> None:
    """BatchNorm on the one sample a DataLoader's last batch held: a bare ValueError after eight steps."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.Linear(16, 2))
    data = DataLoader(TensorDataset(torch.randn(33, 8), torch.randint(0, 2, (33,))), batch_size=16)
    with pytest.raises(UserCodeError, match=r"failed at step 3 on a batch of 1 sample\(s\), where the others hold "
                                            r"16: ValueError: Expected more than 1 value per channel") as info:
        fit(model, data, loss_fn=F.cross_entropy, epochs=1, optimizer="sgd", progress=False)
    assert "drop_last=True" in (info.value.hint or "")


class _Ragged(nn.Module):
    """A forward over a list of images of different heights, as detection and segmentation models take."""

    def __init__(self) -> None:
        super().__init__()
        self.conv, self.head = nn.Conv2d(3, 8, 3, padding=1), nn.Linear(8, 2)

    def forward(self, images: list[torch.Tensor]) -> torch.Tensor:
        return self.head(torch.stack([self.conv(im[None]).mean((0, 2, 3)) for im in images]))


def test_a_list_of_variable_size_images_is_planned_by_the_image_not_by_its_channels() -> None:
    """Planning repeated each image's first row (its channels) as if it were a batch: "expected input[1, 1, 24, 32]
    to have 3 channels", blamed on the user's code."""
    g = torch.Generator().manual_seed(0)
    data = [([torch.randn(3, 16 + 8 * (j % 3), 16, generator=g) for j in range(4)],
             torch.randint(0, 2, (4,), generator=g)) for _ in range(3)]
    result = fit(_Ragged(), data, loss_fn=F.cross_entropy, max_steps=3, optimizer="sgd", progress=False)
    assert len(result.losses) == 3 and result.plan.micro_batch_size == 4


def test_a_batch_larger_per_sample_than_the_first_is_warned_of_once() -> None:
    """Four batches of 16 x 16 images, then four of 32 x 32 (four times the memory per sample): trained without a
    word, on a plan made for the first."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 2))
    data = [(torch.randn(4, 3, s, s), torch.randint(0, 2, (4,))) for s in (16,) * 4 + (32,) * 4]
    with pytest.warns(UserWarning, match=r"step 5: a batch holds 4 x the elements per sample") as caught:
        fit(model, data, loss_fn=F.cross_entropy, max_steps=8, optimizer="sgd", progress=False)
    assert sum("elements per sample" in str(w.message) for w in caught) == 1


class _Detector(nn.Module):
    """A forward whose targets have a default and are asserted in training, as torchvision's detection models."""

    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(4, 2)

    def forward(self, images: torch.Tensor, targets: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        assert targets is not None, "targets should not be none when in training mode"
        return {"loss": F.cross_entropy(self.head(images), targets)}


def test_a_forward_whose_targets_have_a_default_is_told_they_were_not_fed() -> None:
    """(images, targets) batches feed model(images) when targets has a default: the assertion in the model's own
    code said nothing of why."""
    data = [(torch.randn(8, 4), torch.randint(0, 2, (8,))) for _ in range(2)]
    with pytest.raises(UserCodeError, match="targets should not be none") as info:
        fit(_Detector(), data, max_steps=1, optimizer="sgd", progress=False)
    assert "not its targets, which has a default" in (info.value.hint or "")
    assert "training_step=" in (info.value.hint or "")
    result = fit(_Detector(), data, max_steps=2, optimizer="sgd", progress=False,
                 training_step=lambda model, batch: model(*batch)["loss"])
    assert len(result.losses) == 2


def test_a_batch_the_model_cannot_take_is_said_to_have_failed_while_planning() -> None:
    """The error comes from the planning trace, on the batch cut to a micro-batch the planner tries ([1, 7] here):
    the hint says so, or the user looks for a batch of one they never made (a probe asked)."""
    loader = DataLoader(TensorDataset(torch.randn(64, 7), torch.randint(0, 4, (64,))), batch_size=8)
    with pytest.raises(UserCodeError) as info:
        fit(nn.Linear(8, 4), loader, loss_fn=F.cross_entropy, max_steps=1, progress=False)
    assert "forward raised RuntimeError" in str(info.value)
    assert "while autoshard traced a step to plan" in (info.value.hint or "")


def test_samples_of_different_lengths_are_refused_with_padding_named() -> None:
    # torch's "stack expects each tensor to be equal size" came from inside training, after planning.
    lengths = [15, 19, 12, 15, 17, 15, 16, 15]
    samples = [{"x": torch.randn(n), "y": torch.randn(1)} for n in lengths]
    with pytest.raises(UsageError, match="the data's samples differ in size") as info:
        fit(nn.Sequential(nn.Linear(15, 1)), samples, batch_size=4, max_steps=2, progress=False,
            training_step=lambda model, batch: F.mse_loss(model(batch["x"]), batch["y"]))
    assert "DataCollatorWithPadding" in (info.value.hint or "")


def test_a_dataset_of_samples_of_different_lengths_is_refused_before_any_worker_starts() -> None:
    """A Dataset of variable-length token sequences without a collate_fn was refused by a worker, after planning,
    naming whichever rank failed first (a non-LM probe's token classifier)."""
    from torch.utils.data import Dataset

    class Sequences(Dataset):
        def __len__(self) -> int:
            return 16

        def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
            return {"input_ids": torch.arange(10 + i % 3), "labels": torch.zeros(10 + i % 3, dtype=torch.long)}

    with pytest.raises(UsageError, match="^the data's samples differ in size") as info:  # no "rank N:" in front
        fit(nn.Embedding(16, 4), Sequences(), batch_size=4, max_steps=1, processes=2, progress=False,
            training_step=lambda model, batch: model(batch["input_ids"]).mean())
    assert not isinstance(info.value, WorkerError)


def test_a_loss_failing_on_a_tuple_fed_whole_to_an_hf_forward_says_how_the_tuple_was_bound() -> None:
    """(pixels, labels) tuples to an HF ViT with a loss_fn: forward takes both by position (all its arguments have
    defaults), loss_fn gets the whole batch and fails; the binding was said in a note only when planning succeeded
    (a non-LM probe)."""
    import transformers

    torch.manual_seed(0)
    vit = transformers.ViTForImageClassification(transformers.ViTConfig(
        image_size=16, patch_size=8, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=64, num_labels=3))
    data = TensorDataset(torch.randn(8, 3, 16, 16), torch.randint(0, 3, (8,)))
    with pytest.raises(UserCodeError) as info:
        fit(vit, data, batch_size=4, max_steps=1, optimizer="sgd", progress=False,
            loss_fn=lambda out, y: F.cross_entropy(out.logits, y))
    assert "pixel_values=batch[0], labels=batch[1]" in (info.value.hint or "")
    assert "pass dict batches naming each" in (info.value.hint or "")


def test_a_list_of_single_samples_trains_with_the_plan_made_for_it() -> None:
    """plan="auto" read this list as samples; with its own plan passed back, the 32 tokens of each sample were read
    as a batch of 32, refused against micro-batch 4, and force=True failed inside the model."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=32))
    ids = torch.randint(0, 64, (16, 32), generator=torch.Generator().manual_seed(0))
    samples = [{"input_ids": row, "labels": row} for row in ids]
    first = fit(model, samples, batch_size=4, max_steps=1, progress=False)
    again = fit(model, samples, plan=first.plan, max_steps=1, progress=False)
    assert any(n.startswith("data is a list of single samples") for n in again.notes), again.notes
    batches = [{"input_ids": ids[i:i + 8], "labels": ids[i:i + 8]} for i in (0, 8)]  # batches of 8: refused
    with pytest.raises(UsageError, match="holds 8 samples, and the plan"):
        fit(model, batches, plan=first.plan, max_steps=1, progress=False)


class _TwoInputs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.image, self.text = nn.Linear(8, 4), nn.Linear(6, 4)

    def forward(self, image: torch.Tensor, text: torch.Tensor) -> torch.Tensor:
        return self.image(image) + self.text(text)


def test_nested_inputs_and_targets_are_hinted_with_the_training_step_that_feeds_them() -> None:
    batch = ((torch.randn(4, 8), torch.randn(4, 6)), torch.randn(4, 4))
    with pytest.raises(UserCodeError) as info:
        fit(_TwoInputs(), [batch] * 2, loss_fn=F.mse_loss, max_steps=1, progress=False)
    assert "its first element is itself a tuple" in (info.value.hint or "")
    result = fit(_TwoInputs(), [batch] * 2, max_steps=1, progress=False,  # what the hint says trains
                 training_step=lambda model, b: F.mse_loss(model(*b[0]), b[1]))
    assert len(result.losses) == 1


class _NanoGPTStyle(nn.Module):
    """Returns ``(logits, loss)`` as nanoGPT's GPT does when given targets (``(logits, loss_a, loss_b)`` with
    ``two=True``)."""

    def __init__(self, two: bool = False) -> None:
        super().__init__()
        self.net, self.two = nn.Linear(8, 4), two

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        logits = self.net(x)
        loss = F.cross_entropy(logits, y)
        return (logits, loss, loss * 2) if self.two else (logits, loss)


def test_a_tuple_whose_only_scalar_is_not_first_trains_on_it_and_two_are_not_guessed_between() -> None:
    # a probe's (logits, loss) model was refused with "a tuple of 2 ... with no loss" (profile had taken it)
    data = [(torch.randn(4, 8), torch.randint(0, 4, (4,))) for _ in range(3)]
    result = fit(_NanoGPTStyle(), data, max_steps=3, progress=False)
    assert len(result.losses) == 3 and all(0 < loss < 10 for loss in result.losses)
    with pytest.raises(UsageError, match="with no loss"):
        fit(_NanoGPTStyle(two=True), data, max_steps=1, progress=False)
