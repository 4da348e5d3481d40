"""The hand-off files: DeepSpeed accepts every ds_config, plan.json round-trips, configs load in their tools."""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import json
import shlex

import pytest
import yaml

from autoshard.errors import UsageError
from autoshard.export import (
    accelerate,
    export_plan,
    hf_trainer,
    launch,
    lightning,
    notes,
    render,
)
from autoshard.planner import plan_file
from autoshard.strategies import get, names
from autoshard.strategies.base import Candidate
from autoshard.strategies.deepspeed import config as deepspeed
from autoshard.strategies.deepspeed import export as deepspeed_export
from autoshard.strategies.fsdp import export as fsdp_export

DS_NAMES = [n for n in names() if n.startswith("deepspeed_stage_")]


def exported_for(plan, strategy: str, *, nodes: int = 1, precision: str | None = None,
                 checkpointing: bool = False) -> plan_file.ExportedPlan:
    """The plan re-targeted at ``strategy`` (settings in force from the strategy's own defaults)."""
    hw = dataclasses.replace(plan.hardware, nodes=nodes)
    cand = Candidate(strategy=strategy, micro_batch_size=4, activation_checkpointing=checkpointing)
    rec = dataclasses.replace(plan.recommended, candidate=cand, traits=get(strategy).traits, gradient_accumulation=2)
    e = plan_file.from_plan(dataclasses.replace(plan, recommended=rec, hardware=hw))
    return e if precision is None else dataclasses.replace(e, precision=precision)


@pytest.mark.parametrize("precision", ["bf16-mixed", "16-mixed", "32-true"])
@pytest.mark.parametrize("strategy", DS_NAMES)
def test_every_deepspeed_plan_passes_deepspeeds_config_validation(plan, strategy, precision):
    pytest.importorskip("deepspeed")
    e = exported_for(plan, strategy, nodes=2, precision=precision)
    config = json.loads(deepspeed.dumps(e))  # dumps validates
    s = get(strategy)
    assert config["zero_optimization"]["stage"] == s.stage
    assert config["train_batch_size"] == 4 * 2 * 16
    assert ("aio" in config) == ("nvme" in strategy)
    for key, device in (("offload_optimizer", s.offload_optimizer), ("offload_param", s.offload_param)):
        assert config["zero_optimization"].get(key, {}).get("device", "none") == device


def test_deepspeed_rejection_is_a_usage_error_naming_the_key():
    pytest.importorskip("deepspeed")
    config = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "train_batch_size": 1,
              "zero_optimization": {"stage": 2, "no_such_knob": 1}}
    with pytest.raises(UsageError, match="no_such_knob"):
        deepspeed.validate(config, world_size=1)
    with pytest.raises(UsageError, match="train_batch_size"):
        deepspeed.validate({**config, "zero_optimization": {"stage": 2}}, world_size=8)


@pytest.mark.parametrize("strategy", ["ddp", "fsdp", "fsdp_cpu_offload", "deepspeed_stage_3_offload_nvme"])
def test_plan_json_round_trips(plan, strategy, tmp_path):
    e = exported_for(plan, strategy, nodes=2)
    assert plan_file.read(plan_file.write(e, tmp_path / "plan.json")) == e


def test_a_plan_is_read_from_its_directory_or_a_tune_summary_and_recommends_answer_says_how_to_get_one(
        plan, tmp_path):
    """``autoshard export DIR/best`` was "Is a directory", a tune summary.json and recommend's --json answer were
    "not an autoshard plan" with a Python-only hint."""
    e = exported_for(plan, "ddp")
    plan_file.write(e, tmp_path / "plan.json")
    assert plan_file.read(tmp_path) == e
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps({"study_name": "s", "best_plan": e.to_dict(), "trials": []}))
    assert plan_file.read(summary) == e
    answer = tmp_path / "answer.json"
    answer.write_text(json.dumps({"recommended": {}, "candidates": []}))
    with pytest.raises(UsageError) as info:
        plan_file.read(answer)
    assert "recommend --json" in (info.value.hint or "") and "--output-dir DIR" in (info.value.hint or "")


@pytest.mark.parametrize("name", ["model.py", "plan.json"])
def test_a_model_file_given_as_a_plan_is_told_what_a_plan_is(tmp_path, name):
    # `autoshard export model.py` said "model.py is not valid JSON: Extra data: line 1 column 3 (char 2)"
    path = tmp_path / name
    path.write_text("import torch\n\ndef model():\n    return torch.nn.Linear(2, 2)\n")
    with pytest.raises(UsageError) as info:
        plan_file.read(path)
    assert str(info.value).startswith(f"{path} is not a plan.json (not JSON at all)")
    assert "`autoshard recommend MODEL --output-dir DIR` (it plans and exports in one go" in (info.value.hint or "")


@pytest.mark.parametrize("mutate, message", [
    (lambda d: "{not json", "not valid JSON"),
    (lambda d: {**d, "schema_version": 99}, "schema_version 99"),
    (lambda d: {**d, "kind": "other"}, "not an autoshard plan"),
    (lambda d: {k: v for k, v in d.items() if k != "micro_batch_size"}, "micro_batch_size"),
    (lambda d: {**d, "micro_batch_size": "4"}, "wrong type"),
    (lambda d: {**d, "micro_batch_size": 0}, ">= 1"),
    (lambda d: {**d, "hardware": {**d["hardware"], "nodes": True}}, "wrong type"),
    (lambda d: {**d, "global_batch_size": 7}, "global_batch_size"),
])
def test_malformed_plan_json_is_a_usage_error(plan, tmp_path, mutate, message):
    data = mutate(exported_for(plan, "ddp").to_dict())
    path = tmp_path / "plan.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    with pytest.raises(UsageError, match=message):
        plan_file.read(path)


@pytest.mark.parametrize("strategy, kind", [("ddp", "MULTI_GPU"), ("fsdp", "FSDP"), ("fsdp_shard_grad_op", "FSDP"),
                                            ("deepspeed_stage_2", "DEEPSPEED")])
def test_accelerate_yaml_loads_in_accelerate(plan, strategy, kind, tmp_path):
    e = exported_for(plan, strategy, nodes=2, checkpointing=True)
    path = tmp_path / "accelerate_config.yaml"
    path.write_text(accelerate.dumps(e))
    data = yaml.safe_load(path.read_text())
    assert data["distributed_type"] == kind and data["num_machines"] == 2 and data["num_processes"] == 16
    if strategy.startswith("fsdp"):
        assert data["fsdp_config"]["fsdp_reshard_after_forward"] is (strategy == "fsdp")
        assert data["fsdp_config"]["fsdp_activation_checkpointing"] is True
    if importlib.util.find_spec("accelerate") is None:
        pytest.skip("accelerate is not installed: checked with yaml.safe_load only")
    from accelerate.commands.config.config_args import load_config_from_file
    from accelerate.commands.launch import launch_command_parser

    loaded = load_config_from_file(str(path))  # refuses unknown top-level keys
    assert loaded.distributed_type.value == kind
    # Nested keys become `accelerate launch` options (commands/launch.py copies them onto args): each must exist.
    dests = {a.dest for a in launch_command_parser()._actions}
    nested = {**data.get("fsdp_config", {}), **data.get("deepspeed_config", {})}
    assert set(nested) <= dests


@pytest.mark.parametrize("strategy", ["ddp", "fsdp", "fsdp_hybrid", "fsdp_cpu_offload", "deepspeed_stage_3"])
@pytest.mark.parametrize("hook", ["none", "powersgd", "fp16_compress"])
def test_lightning_snippet_is_valid_python(plan, strategy, hook):
    e = exported_for(plan, strategy, nodes=2, checkpointing=True)
    if strategy == "ddp":
        e = dataclasses.replace(e, settings={**e.settings, "comm_hook": hook})
    source = lightning.snippet(e)
    ast.parse(source)
    assert "num_nodes=2" in source and "devices=8" in source and "accumulate_grad_batches=2" in source


@pytest.mark.parametrize("strategy", ["ddp", "fsdp", "fsdp_shard_grad_op", "fsdp_cpu_offload", "deepspeed_stage_2"])
def test_hf_trainer_arguments_parse_in_transformers(plan, strategy, tmp_path, monkeypatch):
    e = exported_for(plan, strategy, precision="32-true")  # bf16 needs a GPU in TrainingArguments
    args = hf_trainer.arguments(e)
    assert args[:4] == ["--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "2"]
    if importlib.util.find_spec("transformers") is None:
        pytest.skip("transformers is not installed")
    if strategy.startswith("deepspeed"):
        pytest.skip("TrainingArguments(deepspeed=...) sets up DeepSpeed for a GPU run")
    from transformers import HfArgumentParser, TrainingArguments

    monkeypatch.chdir(tmp_path)
    if e.family == "fsdp":
        (tmp_path / "fsdp_config.json").write_text(fsdp_export.EXPORTER.files(e, validate=False)["fsdp_config.json"])
    (parsed,) = HfArgumentParser(TrainingArguments).parse_args_into_dataclasses(["--output_dir", "o", *args])
    assert parsed.gradient_accumulation_steps == 2
    if e.family == "fsdp":
        assert parsed.fsdp_config["reshard_after_forward"] is (strategy != "fsdp_shard_grad_op")
        assert parsed.fsdp_config["cpu_offload"] is (strategy == "fsdp_cpu_offload")


@pytest.mark.parametrize("nodes", [1, 4])
def test_the_hf_trainer_command_launches_one_process_per_gpu(plan, nodes):
    """hf_trainer_args.txt was `python train.py ...` for a 4-node plan: one process of 32 (probe)."""
    from torch.distributed.run import get_args_parser

    line = hf_trainer.command_line(exported_for(plan, "deepspeed_stage_3", nodes=nodes))
    words = shlex.split(line)
    assert words[0] == "torchrun"
    parsed = get_args_parser().parse_args(words[1:])
    assert (parsed.nnodes, parsed.nproc_per_node, parsed.training_script) == (str(nodes), "8", "train.py")
    assert parsed.training_script_args[:2] == ["--per_device_train_batch_size", "4"]
    one = dataclasses.replace(exported_for(plan, "ddp"), hardware=dataclasses.replace(
        exported_for(plan, "ddp").hardware, nodes=1, gpus_per_node=1))
    assert hf_trainer.command_line(one).startswith("python train.py --per_device_train_batch_size")


@pytest.mark.parametrize("nodes", [1, 4])
def test_sbatch_and_launchers_have_the_plans_node_and_gpu_counts(plan, nodes):
    e = exported_for(plan, "deepspeed_stage_3", nodes=nodes)
    script = launch.sbatch(e)
    assert f"#SBATCH --nodes={nodes}\n" in script and "#SBATCH --gpus-per-node=8\n" in script
    assert "#SBATCH --ntasks-per-node=1\n" in script and "srun torchrun" in script
    from torch.distributed.run import get_args_parser

    for multi in (False, True):
        cmd = launch.torchrun(e, multi_node=multi).replace('"', "").split()[1:]
        parsed = get_args_parser().parse_args(cmd)
        assert parsed.nproc_per_node == "8" and parsed.nnodes == ("1" if not multi else str(nodes))
    if importlib.util.find_spec("deepspeed") is not None:
        from deepspeed.launcher.runner import parse_args

        parsed = parse_args(deepspeed_export.launcher(e, multi_node=True).replace('"', "").split()[1:])
        assert parsed.num_nodes == nodes and parsed.num_gpus == 8
    # the one-node line of a plan for several said it trains a fraction of the global batch (team-tuning probe);
    # DeepSpeed refuses to start there instead (ds_config.json's train_batch_size: a multi-node probe)
    said = f"multiply gradient_accumulation_steps by {nodes} there, or divide train_batch_size by {nodes}"
    assert (said in launch.launch_script(e)) is (nodes > 1)
    assert "each step trains 1/" not in launch.launch_script(e)
    fraction = f"each step trains 1/{nodes} of the planned global batch"
    assert (fraction in launch.launch_script(exported_for(plan, "ddp", nodes=nodes))) is (nodes > 1)


def test_export_writes_deepspeed_files_only_for_deepspeed(plan, tmp_path):
    pytest.importorskip("deepspeed")
    ddp = {p.name for p in export_plan(exported_for(plan, "ddp"), tmp_path / "ddp")}
    ds = {p.name for p in export_plan(exported_for(plan, "deepspeed_stage_2"), tmp_path / "ds")}
    assert "ds_config.json" not in ddp and "ds_config.json" in ds
    assert {p.name for p in (tmp_path / "ds").iterdir()} == ds


def test_export_refuses_to_clobber_a_different_file_unless_forced(plan, tmp_path):
    e = exported_for(plan, "ddp")
    written = export_plan(e, tmp_path)
    assert export_plan(e, tmp_path) == written  # identical files are fine
    (tmp_path / "launch.sh").write_text("my own script\n")
    other = dataclasses.replace(e, micro_batch_size=2)
    with pytest.raises(UsageError, match="launch.sh"):
        export_plan(other, tmp_path)
    assert (tmp_path / "launch.sh").read_text() == "my own script\n"
    assert plan_file.read(tmp_path / "plan.json") == e  # nothing was written
    export_plan(other, tmp_path, force=True)
    assert plan_file.read(tmp_path / "plan.json") == other


def test_another_plans_files_are_not_left_beside_this_ones(plan, tmp_path):
    """A ZeRO-3 export forced over by a DDP one left its ds_config.json, which reads as the DDP plan's."""
    pytest.importorskip("deepspeed")
    export_plan(exported_for(plan, "deepspeed_stage_2"), tmp_path)
    ddp = exported_for(plan, "ddp")
    with pytest.raises(UsageError, match=r"ds_config\.json: left by another export, which this plan's does not"):
        export_plan(ddp, tmp_path)
    written = export_plan(ddp, tmp_path, force=True)
    assert {p.name for p in tmp_path.iterdir()} == {p.name for p in written}
    (tmp_path / "notes.txt").write_text("mine\n")  # a file no export writes is the user's
    export_plan(exported_for(plan, "deepspeed_stage_2"), tmp_path, force=True)
    assert (tmp_path / "notes.txt").read_text() == "mine\n"


def test_an_output_directory_that_cannot_be_made_is_a_usage_error(plan, tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(UsageError, match=r"cannot write the exported files into .*: Not a directory"):
        export_plan(exported_for(plan, "ddp"), tmp_path / "file" / "sub")


def test_export_accepts_a_plan_and_renders_readme_notes(plan):
    files = render(plan_file.from_plan(plan))
    assert "Gradient clipping" in files["README.md"]
    assert json.loads(files["plan.json"])["strategy"] == plan.recommended.strategy


def test_a_bf16_true_plan_tells_the_user_to_cast_the_model(plan):
    """accelerate's mixed_precision 'no' and the HF Trainer's --bf16 (autocast) leave an fp32 model fp32: twice the
    planned parameter memory, with nothing said (a new user's report)."""
    e = exported_for(plan, "ddp")
    said = [n for n in notes(dataclasses.replace(e, precision="bf16-true")) if n.startswith("The plan keeps the model")]
    assert len(said) == 1 and "model.to(torch.bfloat16)" in said[0]
    assert not any(n.startswith("The plan keeps the model") for n in notes(dataclasses.replace(e, precision="bf16-mixed")))


def test_a_multi_process_cpu_plan_says_how_its_processes_start(plan):
    """accelerate launch ran the MULTI_CPU config of a 2-process CPU plan as one process (simple_launcher)."""
    e = exported_for(plan, "ddp")
    cpu = dataclasses.replace(e, hardware=dataclasses.replace(e.hardware, device_type="cpu", gpus_per_node=2))
    assert any(n.startswith("CPU processes: accelerate launch starts 2 of them only through MPI")
               for n in notes(cpu))
    assert not any(n.startswith("CPU processes") for n in notes(e))
    # DeepSpeed: accelerate launch starts both, but each Accelerator(cpu=True) took itself for the only process
    ds = exported_for(plan, "deepspeed_stage_2")
    ds_cpu = dataclasses.replace(ds, hardware=dataclasses.replace(ds.hardware, device_type="cpu", gpus_per_node=2))
    said = [n for n in notes(ds_cpu) if n.startswith("CPU processes")]
    assert len(said) == 1 and "accelerate cannot run this DeepSpeed plan on them" in said[0]


def test_exports_stdout_is_the_file_list_alone_when_deepspeed_checks_the_config(plan, tmp_path):
    """DeepSpeed's logger writes "Setting accelerator to CPU" to the stdout of its first import; the check of
    ds_config.json keeps it on stderr, so `autoshard export ... > files.txt` lists the files and nothing else."""
    pytest.importorskip("deepspeed")
    import subprocess
    import sys

    plan_file.write(exported_for(plan, "deepspeed_stage_2"), tmp_path / "plan.json")
    done = subprocess.run([sys.executable, "-m", "autoshard", "export", str(tmp_path / "plan.json"),
                           "--output-dir", str(tmp_path / "out")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    listed = done.stdout.splitlines()
    assert str(tmp_path / "out" / "ds_config.json") in listed
    assert all((tmp_path / "out").joinpath(line.rsplit("/", 1)[-1]).is_file() for line in listed), done.stdout
    # Nor is it on stderr: the check runs nothing on a device, and a laptop's export printed it as a warning.
    assert "Setting accelerator to" not in done.stderr, done.stderr


def test_what_a_new_user_met_running_the_exports(plan, tmp_path):
    """A CPU plan's HF Trainer flags failed on --bf16 without --use_cpu; a DDP plan accumulating micro-batches
    never told Accelerate to; an FSDP plan's GradientAccumulationPlugin was left as num_steps=...; export of a
    tune directory said only "Is a directory"."""
    e = exported_for(plan, "ddp", precision="bf16-mixed")
    cpu = dataclasses.replace(e, hardware=dataclasses.replace(e.hardware, device_type="cpu", gpu=None))
    assert "--use_cpu" in hf_trainer.arguments(cpu) and "--use_cpu" not in hf_trainer.arguments(e)
    two = dataclasses.replace(e, gradient_accumulation=2)
    assert any("gradient_accumulation_steps=2" in n and "accelerator.accumulate" in n for n in notes(two))
    fsdp = dataclasses.replace(exported_for(plan, "fsdp"), gradient_accumulation=3)
    assert any("GradientAccumulationPlugin(num_steps=3, sync_each_batch=True)" in n for n in notes(fsdp))
    (tmp_path / "tune" / "best").mkdir(parents=True)
    with pytest.raises(UsageError, match="is a directory without a plan.json") as info:
        plan_file.read(tmp_path / "tune")
    assert info.value.hint == f"Give {tmp_path / 'tune' / 'best'} (an autoshard tune output)."


def test_the_fsdp_notes_say_how_each_file_saves_checkpoints(plan):
    """The Accelerate config saves sharded checkpoints while fsdp_config.json left the HF Trainer at its default
    FULL_STATE_DICT, with nothing said (a new user's report): the note says which does what, and what the Trainer's
    full checkpoints gather on rank 0's host."""
    e = exported_for(plan, "fsdp")
    files = render(e)
    assert yaml.safe_load(files["accelerate_config.yaml"])["fsdp_config"]["fsdp_state_dict_type"] == \
        "SHARDED_STATE_DICT"
    assert "state_dict_type" not in json.loads(files["fsdp_config.json"])
    said = [n for n in notes(e) if n.startswith("Checkpoints:")]
    assert len(said) == 1
    assert f"({e.model.parameter_count * 4 / 2**30:,.1f} GiB of weights)" in said[0]
    cast = [n for n in notes(dataclasses.replace(e, precision="bf16-true")) if n.startswith("Checkpoints:")]
    assert f"({e.model.parameter_count * 2 / 2**30:,.1f} GiB of weights)" in cast[0]
    assert not any(n.startswith("Checkpoints:") for n in notes(exported_for(plan, "ddp")))
