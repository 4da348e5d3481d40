"""The settings published runs use (issue #16) in the files a plan exports, read back by their consumers."""

from __future__ import annotations

import dataclasses

import pytest

from autoshard.export import hf_trainer, notes
from tests.planner.test_plan_file_settings import PLAN


@pytest.mark.parametrize(("impl", "optim"), [("fused", "adamw_torch_fused"), ("foreach", "adamw_torch")])
def test_hf_trainer_runs_the_plans_adamw_implementation(impl: str, optim: str) -> None:
    pytest.importorskip("transformers")
    exported = dataclasses.replace(PLAN, optimizer_impl=impl)
    args = hf_trainer.training_arguments(exported, output_dir="out", use_cpu=True)
    assert args.optim == optim


@pytest.mark.parametrize(("optimizer", "cls", "state"), [("sgd", "SGD", {"momentum": 0.9}),
                                                          ("adafactor", "Adafactor", {"relative_step": False})])
def test_the_trainer_builds_the_optimizer_the_plan_priced(optimizer: str, cls: str, state: dict) -> None:
    """The flags named no optimizer but AdamW: a plan for SGD trained with the Trainer's AdamW holds two fp32
    states a parameter the plan never counted."""
    pytest.importorskip("transformers")
    from transformers import Trainer

    exported = dataclasses.replace(PLAN, optimizer=optimizer, optimizer_impl=None)
    args = hf_trainer.training_arguments(exported, output_dir="out", use_cpu=True)
    built, kwargs = Trainer.get_optimizer_cls_and_kwargs(args)
    assert built.__name__ == cls and state.items() <= kwargs.items()


def test_an_implementation_the_trainer_cannot_name_is_left_to_the_script() -> None:
    exported = dataclasses.replace(PLAN, optimizer_impl="for-loop")
    assert "--optim" not in hf_trainer.arguments(exported)
    assert any("foreach=False" in n for n in notes(exported))


@pytest.mark.parametrize(("mode", "switch"), [(None, True), ("full", True), ("op", False), ("every-2", False)])
def test_only_full_checkpointing_turns_on_the_trainers_switch(mode: str | None, switch: bool) -> None:
    exported = dataclasses.replace(PLAN, activation_checkpointing=True, checkpointing=mode)
    assert ("--activation_checkpointing" in hf_trainer.arguments(exported)) is switch
    selective = [n for n in notes(exported) if "cannot express" in n]
    assert bool(selective) is not switch
    if selective:
        assert f'checkpoint_blocks(model, autoshard.profiler.blocks.find_repeated_blocks(model).names, "{mode}")' \
            in selective[0]


def test_a_plan_with_an_unknown_checkpointing_is_refused() -> None:
    from autoshard.errors import UsageError

    with pytest.raises(UsageError, match="unknown activation checkpointing"):
        dataclasses.replace(PLAN, activation_checkpointing=True, checkpointing="sometimes")


@pytest.mark.parametrize("family", ["ddp", "fsdp"])
def test_the_trainer_flags_use_the_names_the_installed_transformers_has_not_deprecated(family: str) -> None:
    """transformers 5.24 warned on the exported --gradient_checkpointing ("deprecated and will be removed in v6")
    and on --fsdp "full_shard auto_wrap" ("Passing `fsdp` as a string is deprecated and will be removed in
    Transformers v5.20"): both are read here as that transformers reads them, with no warning."""
    transformers = pytest.importorskip("transformers")
    import logging
    import warnings

    from autoshard.export.trainer_flags import checkpointing_flag

    exported = dataclasses.replace(PLAN, activation_checkpointing=True, checkpointing="full")
    if family == "fsdp":
        from autoshard.strategies import get

        exported = dataclasses.replace(exported, strategy="fsdp", family="fsdp", traits=get("fsdp").traits,
                                       settings={"reshard_after_forward": True, "reduce_dtype": "fp32"})
    flags = hf_trainer.arguments(exported)
    said: list[str] = []

    class Catch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            said.append(record.getMessage())

    logger = transformers.utils.logging.get_logger("transformers.training_args")
    logger.addHandler(handler := Catch())
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", FutureWarning)
            args = hf_trainer.training_arguments(exported, output_dir="out", use_cpu=True)
    finally:
        logger.removeHandler(handler)
    assert not [m for m in said if "deprecated" in m]
    if family == "fsdp":
        assert flags[flags.index("--fsdp") + 1] == "--fsdp_config" and args.fsdp
        assert args.fsdp_config["reshard_after_forward"] is True
    else:
        assert checkpointing_flag() == "--activation_checkpointing" in flags
        assert args.activation_checkpointing is True
