"""fit()'s arguments that cannot work, refused in the calling process before planning or any worker starts:
planning arguments that contradict a given plan, GPU hardware on a machine without those GPUs, a list of
strategies, checkpointing that saves nothing, and inputs and targets passed side by side as ``(x, y)``."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import autoshard
from autoshard.errors import UsageError
from autoshard.planner import plan_file
from autoshard.runtime import fit
from autoshard.runtime.data_checks import check_not_columns
from autoshard.runtime.planning import model_fingerprint
from tests.runtime.regression import batches


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))


def _cpu_plan(model: nn.Module, *, ranks: int = 1) -> plan_file.ExportedPlan:
    """A ddp plan for ``ranks`` CPU processes at micro-batch 4, 32-true (the regression batches' size)."""
    return plan_file.ExportedPlan(
        strategy="ddp", family="ddp", micro_batch_size=4, gradient_accumulation=1, activation_checkpointing=False,
        settings={"bucket_cap_mb": 25.0, "comm_hook": "none", "gradient_as_bucket_view": False,
                  "static_graph": False, "find_unused_parameters": False},
        precision="32-true", optimizer="sgd", seq_len=None, model=model_fingerprint(model, "mlp"),
        hardware=plan_file.HardwareFingerprint(gpu=None, gpu_memory_bytes=None, gpus_per_node=ranks, nodes=1,
                                               device_type="cpu", backend="gloo", nvme_path=None))


def _no_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make starting workers, or training in this process, fail the test."""
    import importlib

    from autoshard.runtime import workers

    fit_module = importlib.import_module("autoshard.runtime.fit")  # the package re-exports the function as fit

    def started(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("training started")

    monkeypatch.setattr(workers, "spawn", started)
    monkeypatch.setattr(fit_module, "_single", started)


# -- 1. arguments that contradict a given plan ------------------------------------------------------------------


@pytest.mark.parametrize(("kwargs", "said", "planned"), [
    ({"strategy": "fsdp"}, "strategy='fsdp'", "strategy ddp"),
    ({"batch_size": 2}, "batch_size=2", "micro-batch 4"),
    ({"seq_len": 32}, "seq_len=32", "no seq_len"),
    ({"precision": "bf16-true"}, "precision='bf16-true'", "precision 32-true"),
    ({"hardware": "dgx-h100"}, "hardware='dgx-h100' (8 h100-sxm-80gb GPUs", "{ranks} CPU process"),
    ({"strategy": "fsdp", "batch_size": 2}, "strategy='fsdp', batch_size=2", "strategy ddp, micro-batch 4"),
])
@pytest.mark.parametrize("ranks", [1, 2])
def test_an_argument_contradicting_a_given_plan_is_refused_before_any_worker_starts(
        monkeypatch: pytest.MonkeyPatch, kwargs: dict[str, Any], said: str, planned: str, ranks: int) -> None:
    _no_workers(monkeypatch)
    model = _mlp()
    with pytest.raises(UsageError) as info:
        fit(model, batches(), loss_fn=F.mse_loss, plan=_cpu_plan(model, ranks=ranks), max_steps=1, progress=False,
            **kwargs)
    assert said in info.value.message and f"was made for {planned.format(ranks=ranks)}" in info.value.message
    assert "Drop " + ", ".join(f"{name}=" for name in kwargs) in (info.value.hint or "")


def test_arguments_equal_to_the_plans_and_the_ones_that_replace_it_train() -> None:
    model = _mlp()
    given: dict[str, Any] = {"strategy": "ddp", "batch_size": 4, "precision": "32"}  # "32" is 32-true
    if not torch.cuda.is_available():  # the plan is for this machine's CPU
        given["hardware"] = autoshard.detect_hardware(gpus=1)
    result = fit(model, batches(), loss_fn=F.mse_loss, plan=_cpu_plan(model), max_steps=1, progress=False,
                 activation_checkpointing="full", optimizer_impl="foreach", **given)
    assert result.plan.strategy == "ddp" and result.plan.micro_batch_size == 4
    assert result.plan.optimizer_impl == "foreach" and result.plan.activation_checkpointing  # replaced, as before


def test_a_plan_for_one_rank_says_rank_in_the_singular() -> None:
    model = _mlp()
    with pytest.raises(UsageError, match="it is for 1 rank and this run has 2"):
        fit(model, batches(), loss_fn=F.mse_loss, plan=_cpu_plan(model), processes=2, max_steps=1, progress=False)


# -- 2. GPU hardware this machine does not have ------------------------------------------------------------------


@pytest.mark.parametrize("have", [0, 1])
def test_gpu_hardware_this_machine_lacks_is_refused_before_planning(monkeypatch: pytest.MonkeyPatch,
                                                                    have: int) -> None:
    import autoshard.planner.machine

    def planned(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("planning started")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: have > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: have)
    monkeypatch.setattr(autoshard.planner.machine, "plan_for", planned)
    _no_workers(monkeypatch)
    data = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
    with pytest.raises(UsageError, match=f"hardware='dgx-h100' describes 8 CUDA GPUs per node, and this process "
                                         f"sees {have}") as info:
        fit(_mlp(), data, loss_fn=F.mse_loss, hardware="dgx-h100", max_steps=1, progress=False)
    assert "Drop hardware=" in (info.value.hint or "")


@pytest.mark.parametrize(("nodes", "have", "said"), [
    (1, 1, "is for 8 CUDA ranks, and this process sees 1 CUDA GPU"),
    (2, 8, "is for 16 CUDA ranks (2 nodes × 8 GPUs), and this process sees 8 CUDA GPUs"),
])
def test_a_given_cuda_plan_for_more_gpus_than_this_machine_sees_is_refused_before_any_worker_starts(
        monkeypatch: pytest.MonkeyPatch, nodes: int, have: int, said: str) -> None:
    """Each of the plan's ranks failed alone in its worker on a device it could not see (CUDA's invalid ordinal)."""
    model = _mlp()
    plan = _cpu_plan(model)
    plan = dataclasses.replace(plan, hardware=dataclasses.replace(
        plan.hardware, gpu="NVIDIA H100 80GB HBM3", gpu_memory_bytes=80 * 2**30, gpus_per_node=8, nodes=nodes,
        device_type="cuda", backend="nccl"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: have)
    _no_workers(monkeypatch)
    with pytest.raises(UsageError, match=re.escape(said)) as info:
        fit(model, batches(), loss_fn=F.mse_loss, plan=plan, max_steps=1, progress=False)
    assert "torchrun or srun" in (info.value.hint or "") and "plan='auto'" in (info.value.hint or "")


# -- 3. a list of strategies -------------------------------------------------------------------------------------


def test_a_list_of_strategies_is_refused_naming_strategies_of_recommend_and_tune() -> None:
    data = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
    with pytest.raises(UsageError, match=r"strategy= takes one strategy name, but got list \['fsdp'\]: "
                                         r"recommend\(\) and tune\(\) take strategies="):
        autoshard.fit(_mlp(), data, loss_fn=F.mse_loss, strategy=["fsdp"], max_steps=1,  # type: ignore[arg-type]
                      progress=False)
    with pytest.raises(UsageError, match="strategy= takes one strategy name"):  # before any trial
        autoshard.fit("tiny-gpt2", strategy=["fsdp"], max_steps=1, tune={"trials": 1},  # type: ignore[arg-type]
                      progress=False)


def test_a_misspelt_strategy_is_refused_before_planning(capsys: pytest.CaptureFixture[str]) -> None:
    data = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
    with pytest.raises(UsageError, match=r"strategy='zero2': unknown strategy 'zero2'\. Did you mean "
                                         r"deepspeed_stage_2\?"):
        autoshard.fit(_mlp(), data, loss_fn=F.mse_loss, strategy="zero2", max_steps=1)
    assert "planning" not in capsys.readouterr().err  # it was said after the model had been traced


def test_an_error_inside_tune_is_not_reworded_as_the_tune_dicts(monkeypatch: pytest.MonkeyPatch) -> None:
    """``except TypeError`` around tune() said "got an argument tune() does not take" of any TypeError inside."""
    import autoshard.tuning

    def tune(model: Any, **kwargs: Any) -> Any:
        raise TypeError("unhashable type: 'list'")

    monkeypatch.setattr(autoshard.tuning, "tune", tune)
    with pytest.raises(TypeError, match="unhashable type") as info:
        autoshard.fit("tiny-gpt2", max_steps=1, tune=True, progress=False)
    assert not isinstance(info.value, UsageError)


# -- 4, 5. checkpointing= ----------------------------------------------------------------------------------------


def test_checkpointing_every_without_a_directory_is_refused() -> None:
    with pytest.raises(UsageError, match=r"checkpointing\.every needs checkpointing\.dir") as info:
        fit(_mlp(), batches(), loss_fn=F.mse_loss, max_steps=2, progress=False,
            checkpointing=autoshard.Checkpointing(every=1))
    assert "Checkpointing(dir=..., every=...)" in (info.value.hint or "")


@pytest.mark.parametrize(("value", "shown", "not_shown"), [
    ("runs/x", "Checkpointing(dir='runs/x')", "activation_checkpointing='runs/x'"),
    (True, "activation_checkpointing=True", "dir=True"),
    ("every-2", "activation_checkpointing='every-2'", "dir='every-2'"),
])
def test_a_value_given_as_checkpointing_is_shown_only_where_it_means_something(value: Any, shown: str,
                                                                              not_shown: str) -> None:
    with pytest.raises(UsageError, match="saves training state") as info:
        fit(_mlp(), batches(), loss_fn=F.mse_loss, max_steps=1, checkpointing=value)
    assert shown in (info.value.hint or "") and not_shown not in (info.value.hint or "")


# -- 7. inputs and targets side by side --------------------------------------------------------------------------


def _xy(n: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.randn(n, 8, generator=g), torch.randn(n, 1, generator=g)


@pytest.mark.parametrize("argument", ["data", "eval_data"])
@pytest.mark.parametrize("given", [
    lambda x, y: (x, y), lambda x, y: [x, y], lambda x, y: (x, y.squeeze(1).long()),
    lambda x, y: (x, y, torch.ones(len(x))),
])
def test_inputs_and_targets_given_side_by_side_are_refused_with_a_tensor_dataset(argument: str, given: Any) -> None:
    x, y = _xy()
    data = given(x, y)
    kwargs = {"data": batches(), argument: data}
    with pytest.raises(UsageError, match=f"{argument} is a {type(data).__name__} of {len(data)} tensors of 64 "
                                         r"rows \(shapes \[64, 8\]") as info:
        fit(_mlp(), loss_fn=F.mse_loss, max_steps=1, progress=False, **kwargs)
    assert "TensorDataset(x, y" in (info.value.hint or "")


@pytest.mark.parametrize("data", [
    [(torch.randn(4, 8), torch.randn(4, 1)) for _ in range(2)],  # batches as (x, y) tuples
    [{"x": torch.randn(4, 8)} for _ in range(2)],  # dict batches
    [torch.randn(8) for _ in range(3)],  # sample tensors
    [torch.randn(4, 8), torch.randn(4, 8)],  # two batches of one shape
    [torch.randn(4, 8), torch.randn(2, 8)],  # two batches, the last short
    [torch.randn(4, 8) for _ in range(4)],  # more batches than inputs, targets and weights
    [torch.randint(0, 9, (4, 16)), torch.randint(0, 9, (4, 12))],  # token batches padded to different lengths
    [torch.randn(4, 16, 8), torch.randn(4, 12, 8)],  # feature batches padded to different lengths
    (torch.randn(4, 8),),
])
def test_batches_samples_and_tensors_of_one_shape_are_not_taken_for_inputs_and_targets(data: Any) -> None:
    check_not_columns(data)


def test_a_list_of_batches_of_one_shape_still_trains() -> None:
    x, _ = _xy(8)
    result = fit(nn.Linear(8, 8), [x[:4], x[4:]], loss_fn=F.mse_loss, epochs=1, progress=False)
    assert len(result.steps) == 2


def test_the_tensor_dataset_the_refusal_suggests_trains() -> None:
    x, y = _xy()
    result = fit(_mlp(), TensorDataset(x, y), loss_fn=F.mse_loss, batch_size=16, epochs=1, progress=False)
    assert len(result.steps) == 4 and result.steps[0].samples_per_s > 0


# -- 6. data that is not batches, and eval_data checked before training -------------------------------------------


@pytest.mark.parametrize("argument", ["data", "eval_data"])
@pytest.mark.parametrize(("given", "said"), [
    (3, "is an int, which is neither a Dataset nor an iterable of batches"),
    ("train.csv", r"is a str \('train.csv'\): fit\(\) takes batches, not a file name"),
    ({"x": torch.randn(64, 8), "y": torch.randn(8, 1)},
     r"is a dict of tensors with different numbers of rows \(x: 64, y: 8\)"),
    ({"train": TensorDataset(torch.randn(8, 8)), "test": TensorDataset(torch.randn(8, 8))},
     r"is a dict \(keys 'train', 'test'\): fit\(\) would read its keys as batches"),
])
def test_data_that_is_not_batches_is_refused_naming_the_argument(argument: str, given: Any, said: str,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    _no_workers(monkeypatch)
    kwargs = {"data": batches(), argument: given}
    with pytest.raises(UsageError, match=f"^{argument} {said}"):
        fit(_mlp(), loss_fn=F.mse_loss, max_steps=1, progress=False, **kwargs)


class _Labelled(nn.Module):
    """A forward taking its inputs and labels by keyword and returning the loss, as Hugging Face models do."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 1)

    def forward(self, x: torch.Tensor, labels: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        out = self.linear(x)
        return {"loss": F.mse_loss(out, labels)} if labels is not None else {"logits": out}


def test_a_dict_of_columns_trains_as_samples_like_a_tokenizers_output() -> None:
    from transformers import BatchEncoding

    x, y = _xy()
    text = [f"sample {i}" for i in range(len(x))]  # a column the forward does not take: it reaches the loss only
    for data in ({"x": x, "labels": y}, BatchEncoding({"x": x, "labels": y}), {"x": x, "labels": y, "text": text}):
        result = fit(_Labelled(), data, batch_size=16, epochs=1, progress=False)
        assert len(result.steps) == 4  # 64 rows at 16: the rows are samples, not the keys batches
        assert any("row i of each is one sample" in n for n in result.notes), result.notes


def test_a_module_without_data_is_refused_for_that_whatever_max_steps_says(monkeypatch: pytest.MonkeyPatch) -> None:
    _no_workers(monkeypatch)
    for kwargs in ({}, {"max_steps": 2}):
        with pytest.raises(UsageError, match=r"^fit\(module\) with no data has nothing to train on"):
            fit(_mlp(), loss_fn=F.mse_loss, progress=False, **kwargs)


def test_an_eval_batch_the_model_cannot_take_is_refused_before_the_first_step() -> None:
    from autoshard.errors import UserCodeError

    from torch._subclasses.fake_tensor import is_fake

    trained: list[int] = []  # the loss of a real (not traced) training batch

    def loss_fn(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        trained.extend([] if is_fake(out) else [1])
        return F.mse_loss(out, y)

    with pytest.raises(UserCodeError, match=r"^eval_data: the model failed on the first batch .*8x5") as info:
        fit(_mlp(), batches(), loss_fn=loss_fn, max_steps=5, progress=False,
            eval_data=[(torch.randn(8, 5), torch.randn(8, 1))])
    assert trained == [] and "forward takes" in (info.value.hint or "")


def test_eval_batches_without_the_labels_the_training_data_has_are_named_as_eval_data() -> None:
    """A ViT trained on pixels and labels, scored on pixels alone: "the model's output ... with no loss" read as a
    fault of the model, not of eval_data (a non-LM probe)."""
    import transformers

    torch.manual_seed(0)
    vit = transformers.ViTForImageClassification(transformers.ViTConfig(
        image_size=16, patch_size=8, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=64, num_labels=3))
    data = {"pixel_values": torch.randn(8, 3, 16, 16), "labels": torch.randint(0, 3, (8,))}
    with pytest.raises(UsageError, match=r"^eval_data: its first batch: the model's output is "
                                         r"ImageClassifierOutput with logits, with no loss"):
        fit(vit, data, eval_data={"pixel_values": torch.randn(4, 3, 16, 16)}, batch_size=4, max_steps=1,
            optimizer="sgd", progress=False)


def test_fit_leaves_the_callers_random_state_as_it_found_it() -> None:
    torch.manual_seed(123)
    model = _mlp_unseeded()
    before = torch.get_rng_state()
    fit(model, batches(), loss_fn=F.mse_loss, max_steps=2, progress=False)
    assert torch.equal(torch.get_rng_state(), before)  # it used to be left at seed 0's (fit's own seed)


def _mlp_unseeded() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))


def test_a_tuple_filling_a_forward_that_requires_nothing_is_said_argument_by_argument() -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2))
    ids = torch.randint(0, 128, (4, 17))

    def loss_fn(out: Any, batch: Any) -> torch.Tensor:
        return F.cross_entropy(out.logits.flatten(0, 1), batch[1].flatten())

    result = fit(model, [(ids[:, :-1], ids[:, 1:])] * 2, loss_fn=loss_fn, max_steps=1, progress=False)
    said = [n for n in result.notes if "by position" in n]
    assert said and "input_ids=batch[0], attention_mask=batch[1]" in said[0], result.notes


def test_epochs_ending_the_run_before_max_steps_is_said() -> None:
    x, y = _xy()
    loader = DataLoader(TensorDataset(x, y), batch_size=16)
    result = fit(_mlp(), loader, loss_fn=F.mse_loss, max_steps=10, epochs=1, progress=False)
    assert len(result.steps) == 4
    assert any(n.startswith("epochs=1 ends the run after 4 optimizer step(s), before max_steps=10") for n in result.notes)
    quiet = fit(_mlp(), loader, loss_fn=F.mse_loss, max_steps=3, epochs=1, progress=False)
    assert not any(n.startswith("epochs=") for n in quiet.notes)


def test_a_loss_that_turns_nan_is_warned_of_once() -> None:
    x, y = _xy()
    y[:16] = float("nan")  # the first batch's targets: its loss is NaN, and the weights after it too
    loader = DataLoader(TensorDataset(x, y), batch_size=16)
    with pytest.warns(UserWarning, match=r"^step 1: the loss is nan") as caught:
        fit(_mlp(), loader, loss_fn=F.mse_loss, epochs=1, log_every=1, progress=False)
    assert sum("the loss is nan" in str(w.message) for w in caught) == 1


def test_a_strategy_given_as_the_plan_is_pointed_to_strategy(monkeypatch: pytest.MonkeyPatch) -> None:
    _no_workers(monkeypatch)
    with pytest.raises(UsageError, match=r"^plan='fsdp' names a strategy") as info:
        fit(_mlp(), batches(), loss_fn=F.mse_loss, max_steps=1, plan="fsdp", progress=False)
    assert "strategy='fsdp'" in (info.value.hint or "")


def test_a_module_without_any_parameter_is_told_so_not_to_unfreeze() -> None:
    from autoshard.errors import UserCodeError

    with pytest.raises(UserCodeError, match="has no trainable parameters") as info:
        fit(nn.ReLU(), batches(), loss_fn=F.mse_loss, max_steps=1, progress=False)
    assert "no parameters at all" in (info.value.hint or "") and "Unfreeze" not in (info.value.hint or "")


def test_a_precision_alias_is_planned_and_said_by_its_name() -> None:
    result = fit(_mlp(), batches(), loss_fn=F.mse_loss, max_steps=1, precision="fp32", progress=False)
    assert result.plan.precision == "32-true"
    assert any(n.startswith("Planned ") and n.endswith(", 32-true.") for n in result.notes), result.notes


def test_samples_a_dataset_leaves_out_of_each_epoch_are_said() -> None:
    x, y = _xy(20)
    result = fit(_mlp(), TensorDataset(x, y), loss_fn=F.mse_loss, batch_size=8, epochs=1, progress=False)
    assert len(result.steps) == 2
    assert any(n.startswith("data: 4 sample(s) of each epoch are left out") for n in result.notes), result.notes
    whole = fit(_mlp(), TensorDataset(x[:16], y[:16]), loss_fn=F.mse_loss, batch_size=8, epochs=1, progress=False)
    assert not any(n.startswith("data: ") for n in whole.notes)


def test_a_module_on_the_meta_device_is_refused_before_planning(monkeypatch: pytest.MonkeyPatch) -> None:
    _no_workers(monkeypatch)
    with torch.device("meta"):
        model = _mlp_unseeded()
    with pytest.raises(UsageError, match=r"^model's 0.weight and 3 more are on the meta device") as info:
        fit(model, batches(), loss_fn=F.mse_loss, max_steps=1, progress=False)
    assert "to_empty" in (info.value.hint or "")


def test_seq_len_with_a_module_and_its_data_is_refused_before_planning(monkeypatch: pytest.MonkeyPatch) -> None:
    """seq_len= sizes a source's example batches: with a module and data it was refused from inside the trace as
    "its inputs are not a token sequence (they are sized by its config, e.g. image_size)" for a causal LM (a
    long-context probe)."""
    monkeypatch.setattr("autoshard.runtime.planning.resolve", lambda *a, **k: pytest.fail("planned"))
    with pytest.raises(UsageError) as info:
        fit(_mlp(), batches(), max_steps=1, seq_len=128)
    assert info.value.message.startswith("seq_len=128 sizes a model source's own example batches")
    assert "Sequential trains on data=" in info.value.message and "Drop seq_len=" in (info.value.hint or "")


def test_a_second_fit_while_another_thread_runs_one_is_refused() -> None:
    """Two fit(processes=2) calls from two threads returned one call's training to both (80 steps for a call of 5),
    or aborted a rank in gloo, reported as a kill for host memory (a concurrency probe)."""
    import threading

    from torch.optim.lr_scheduler import LambdaLR

    started, release = threading.Event(), threading.Event()
    outcome: list[Any] = []

    def scheduler(optimizer: torch.optim.Optimizer) -> LambdaLR:
        started.set()
        release.wait(60)
        return LambdaLR(optimizer, lambda step: 1.0)

    def first() -> None:
        outcome.append(fit(_mlp(), batches(), loss_fn=F.mse_loss, max_steps=2, optimizer="sgd", progress=False,
                           lr_scheduler=scheduler))

    thread = threading.Thread(target=first)
    thread.start()
    try:
        assert started.wait(120)
        with pytest.raises(UsageError, match=r"^fit\(\) is already running in another thread of this process"):
            fit(_mlp(), batches(), loss_fn=F.mse_loss, max_steps=1, optimizer="sgd", progress=False)
    finally:
        release.set()
        thread.join(120)
    assert len(outcome[0].steps) == 2
    assert len(fit(_mlp(), batches(), loss_fn=F.mse_loss, max_steps=1, optimizer="sgd", progress=False).steps) == 1


@pytest.mark.parametrize(("strategy", "precision", "said"), [
    ("fsdp", "bf16-mixed", True), ("ddp", "bf16-mixed", False), ("fsdp", "32-true", False)])
def test_float_labels_that_forward_takes_in_16_bits_are_said(strategy: str, precision: str, said: bool) -> None:
    """A BERT regression on labels near 1000 under FSDP2 bf16-mixed stood at one loss every step (its labels,
    cast to bf16 with the forward's inputs), without a word; docs/fit.md said it, the run did not (a probe)."""
    import transformers

    torch.manual_seed(0)
    bert = transformers.BertForSequenceClassification(transformers.BertConfig(
        vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
        num_labels=1, problem_type="regression"))
    ids = torch.randint(0, 64, (8, 8))
    result = fit(bert, {"input_ids": ids, "labels": 1000 + ids.float().mean(1)}, batch_size=4, max_steps=1,
                 strategy=strategy, precision=precision, optimizer="sgd", progress=False)
    notes = [n for n in result.notes if n.startswith("The batch's labels (fp32) go into forward")]
    assert len(notes) == int(said)
    if said:
        assert "casts every floating input of forward to bf16" in notes[0] and "loss_fn" in notes[0]
