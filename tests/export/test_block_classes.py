"""Exports name every repeated block class, and the tools that read them resolve each one against the model:
T5 wraps T5Block (not its two stacks), BART both its encoder and its decoder layers."""

from __future__ import annotations

import ast
import dataclasses
import json

import pytest
import torch
import transformers as tf
import yaml

import autoshard
from autoshard.export import accelerate, hf_trainer, lightning, notes
from autoshard.planner import plan_file
from autoshard.runtime.planning import model_fingerprint
from autoshard.strategies.fsdp import export as fsdp_export


@pytest.fixture(scope="module")
def t5_plan() -> plan_file.ExportedPlan:
    plan = autoshard.recommend("tiny-t5", hardware="dgx-h100", seq_len=32, batch_size=2, strategies=["fsdp"])
    return dataclasses.replace(plan_file.from_plan(plan), activation_checkpointing=True)


def _bart() -> torch.nn.Module:
    config = tf.BartConfig(vocab_size=128, d_model=32, encoder_layers=2, decoder_layers=3, encoder_attention_heads=4,
                           decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
                           max_position_embeddings=64)
    with torch.device("meta"):
        return tf.BartForConditionalGeneration(config)


def _bart_plan(model: torch.nn.Module) -> plan_file.ExportedPlan:
    """An FSDP plan carrying the model's fingerprint as fit() computes it (runtime.planning)."""
    return plan_file.ExportedPlan(
        strategy="fsdp", family="fsdp", micro_batch_size=1, gradient_accumulation=1, activation_checkpointing=True,
        settings={"reshard_after_forward": True}, precision="bf16-mixed", optimizer="adamw", seq_len=16,
        model=model_fingerprint(model, "bart"),
        hardware=plan_file.HardwareFingerprint(gpu="h100", gpu_memory_bytes=80 * 2**30, gpus_per_node=8, nodes=1,
                                               device_type="cuda", backend="nccl", nvme_path=None))


def test_t5_plan_wraps_t5block_in_every_export(t5_plan):
    assert t5_plan.model.block_classes == ("T5Block",)
    config = fsdp_export.accelerate_fsdp_config(t5_plan)
    assert config["fsdp_transformer_layer_cls_to_wrap"] == "T5Block"
    assert fsdp_export.trainer_fsdp_config(t5_plan)["transformer_layer_cls_to_wrap"] == ["T5Block"]
    snippet = lightning.snippet(t5_plan)
    assert "BLOCKS = {'T5Block'}" in snippet and "apply_activation_checkpointing(module" in snippet
    assert any("every T5Block" in n for n in notes(t5_plan))


def test_plan_json_keeps_the_class_list_and_reads_files_from_before_block_sets(tmp_path):
    e = _bart_plan(_bart())
    assert e.model.block_class == "BartEncoderLayer,BartDecoderLayer"
    assert plan_file.loads(plan_file.dumps(e)) == e
    # A plan.json written before block sets: one class in "block_class", the same schema.
    old = json.loads(plan_file.dumps(e))
    old["model"]["block_class"] = "GPT2Block"
    assert plan_file.loads(json.dumps(old)).model.block_classes == ("GPT2Block",)


def test_accelerate_resolves_every_exported_class_against_the_model(tmp_path, monkeypatch):
    from accelerate.commands.launch import (
        _validate_launch_command,
        launch_command_parser,
    )
    from accelerate.utils import FullyShardedDataParallelPlugin
    from accelerate.utils.fsdp_utils import fsdp2_prepare_auto_wrap_policy
    from accelerate.utils.launch import prepare_multi_gpu_env

    model = _bart()
    path = tmp_path / "accelerate_config.yaml"
    path.write_text(accelerate.dumps(_bart_plan(model)))
    assert yaml.safe_load(path.read_text())["fsdp_config"]["fsdp_transformer_layer_cls_to_wrap"] == (
        "BartEncoderLayer,BartDecoderLayer")
    # What `accelerate launch --config_file` hands the training processes, then what their plugin wraps.
    args, _, _ = _validate_launch_command(launch_command_parser().parse_args(["--config_file", str(path), "t.py"]))
    for key, value in prepare_multi_gpu_env(args).items():
        if key.startswith(("FSDP_", "ACCELERATE_")):
            monkeypatch.setenv(key, value)
    plugin = FullyShardedDataParallelPlugin()
    assert plugin.transformer_cls_names_to_wrap == ["BartEncoderLayer", "BartDecoderLayer"]
    policy = fsdp2_prepare_auto_wrap_policy(plugin, model)  # raises if a class is not in the model
    wrapped = [name for name, m in model.named_modules() if policy(m)]
    config = model.config
    assert len(wrapped) == config.encoder_layers + config.decoder_layers
    assert {type(model.get_submodule(n)).__name__ for n in wrapped} == {"BartEncoderLayer", "BartDecoderLayer"}


def test_hf_trainer_fsdp_config_lists_both_classes_and_parses(tmp_path, monkeypatch):
    from transformers import HfArgumentParser, TrainingArguments

    e = dataclasses.replace(_bart_plan(_bart()), precision="32-true")  # bf16 needs a GPU in TrainingArguments
    monkeypatch.chdir(tmp_path)
    (tmp_path / "fsdp_config.json").write_text(fsdp_export.EXPORTER.files(e, validate=False)["fsdp_config.json"])
    (parsed,) = HfArgumentParser(TrainingArguments).parse_args_into_dataclasses(
        ["--output_dir", "o", *hf_trainer.arguments(e)])
    assert parsed.fsdp_config["transformer_layer_cls_to_wrap"] == ["BartEncoderLayer", "BartDecoderLayer"]


def test_lightning_snippet_shards_and_checkpoints_every_class_by_name():
    source = lightning.snippet(_bart_plan(_bart()))
    tree = ast.parse(source)
    blocks = next(node.value for node in ast.walk(tree) if isinstance(node, ast.Assign)
                  and getattr(node.targets[0], "id", None) == "BLOCKS")
    assert isinstance(blocks, ast.Set)
    assert {n.value for n in blocks.elts} == {"BartEncoderLayer", "BartDecoderLayer"}
    assert "apply_activation_checkpointing(module, check_fn=lambda m: type(m).__name__ in BLOCKS)" in source
