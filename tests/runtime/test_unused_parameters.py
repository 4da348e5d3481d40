"""Models whose training step leaves trainable parameters without a gradient train under every strategy.

Two models: a tiny LLaVA (``benchmarks/zoo_models.py``; with ``vision_feature_layer=-2`` its last CLIP layer and
the vision ``post_layernorm`` never reach the loss) and a plain torch ``(x, y)`` model whose forward skips its
auxiliary head. The profiler finds them after the traced backward (``.grad`` still ``None``), the DDP plan turns
on ``find_unused_parameters`` for them only, the exports say so, and 2-process gloo fits train them with DDP,
FSDP2 and DeepSpeed ZeRO-1/2/3.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch

import autoshard
from autoshard.export import hf_trainer, lightning, notes
from autoshard.planner import plan_file
from autoshard.models import load_source
from autoshard.models.source import ModelSource, call_model, default_loss
from autoshard.profiler.options import ProfileOptions
from autoshard.profiler.scaling import profile_source
from autoshard.profiler.step_facts import unused_modules
from tests.benchmark_scripts import load

REPO = Path(__file__).resolve().parents[2]
LLAVA = "llava-1.5-7b"
LLAVA_UNUSED = ("model.vision_tower.encoder.layers.2", "model.vision_tower.post_layernorm")
"""The tiny LLaVA has 3 CLIP layers and takes features from the second last (``vision_feature_layer=-2``)."""
SKIP_NET = textwrap.dedent('''
    """An (x, y) regressor whose forward skips its auxiliary head."""
    import torch
    from torch import nn


    class SkipNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU())
            self.head = nn.Linear(32, 1)
            self.aux_head = nn.Sequential(nn.Linear(32, 16), nn.ReLU(), nn.Linear(16, 4))

        def forward(self, x, y):
            return self.head(self.body(x)).squeeze(-1)


    def model():
        torch.manual_seed(0)
        return SkipNet()


    def batch(batch_size):
        g = torch.Generator().manual_seed(batch_size)
        x = torch.randn(batch_size, 8, generator=g)
        return x, x.sum(-1)


    def loss(output, batch):
        return torch.nn.functional.mse_loss(output, batch[1])
''')
SKIP_NET_UNUSED = ("aux_head",)
FIT_SCRIPT = textwrap.dedent("""
    import json, sys

    import torch

    import autoshard

    source, options = sys.argv[1], json.loads(sys.argv[2])
    result = autoshard.fit(source, max_steps=3, processes=2, batch_size=2, precision="32-true", log_every=1,
                           **options)
    initial = autoshard.load_source(source).build().state_dict() if source.endswith(".py") else {}
    moved = sorted(k for k, v in result.state_dict.items() if k in initial and not torch.equal(v, initial[k]))
    print("RESULT " + json.dumps({"losses": result.losses, "strategy": result.plan.strategy,
                                  "settings": result.plan.settings, "world_size": result.world_size,
                                  "notes": result.notes, "moved": moved}), flush=True)
""")


@pytest.fixture(scope="module")
def llava_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("transformers")
    folder = tmp_path_factory.mktemp("llava")
    load("zoo_models").get(LLAVA).config("tiny").save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def skip_net(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("skipnet") / "model.py"
    path.write_text(SKIP_NET, encoding="utf-8")
    return path


def _real_unused(source: ModelSource, seq_len: int | None) -> tuple[set[str], int]:
    """What eager PyTorch says: the trainable parameters with no ``.grad`` after one real backward, and their
    element count."""
    model = source.build()
    model.train()
    batch = source.batch(2, seq_len=seq_len)
    output = call_model(model, batch)
    (source.loss_fn or default_loss)(output, batch).backward()
    unused = {n: p for n, p in model.named_parameters() if p.requires_grad and p.grad is None}
    return set(unused), sum(p.numel() for p in unused.values())


@pytest.mark.parametrize("which", ["llava", "skip_net"])
def test_profile_records_the_parameters_the_real_backward_leaves_without_gradient(
    which: str, request: pytest.FixtureRequest
) -> None:
    path = request.getfixturevalue("llava_dir" if which == "llava" else which)
    seq_len = load("zoo_models").get(LLAVA).sequence("tiny") if which == "llava" else None
    source = load_source(path)
    names, numel = _real_unused(source, seq_len)
    p = autoshard.profile(path, batch_size=2, seq_len=seq_len, precision="32-true", target="cpu")
    assert numel > 0
    assert p.unused_parameter_count == numel
    assert p.unused_parameter_bytes == 4 * numel  # fp32
    assert p.gradient_bytes == p.parameter_bytes - p.unused_parameter_bytes
    assert p.unused_modules == (LLAVA_UNUSED if which == "llava" else SKIP_NET_UNUSED)
    assert all(any(n == m or n.startswith(m + ".") for m in p.unused_modules) for n in names)
    d = p.to_dict()
    assert (d["unused_parameter_count"], d["unused_modules"]) == (numel, list(p.unused_modules))


def test_a_model_using_every_parameter_records_none() -> None:
    p = autoshard.profile("tiny-gpt2", batch_size=1, seq_len=16, target="cpu")
    assert (p.unused_parameter_count, p.unused_parameter_bytes, p.unused_modules) == (0, 0, ())


def test_profile_command_names_the_unused_parameters(skip_net: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from autoshard.cli import main

    assert main(["profile", str(skip_net), "--batch-size", "2", "--target", "cpu", "--precision", "32-true"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # rich wraps long lines
    assert "Unused in the step: 596 parameters (aux_head): DDP runs with find_unused_parameters" in out


@pytest.mark.parametrize(("unused", "expected"), [
    (set(), ()),
    ({"0.bias"}, ("0.bias",)),  # part of a module: the parameter itself
    ({"0.weight", "0.bias"}, ("0",)),
    ({"1.0.weight", "1.0.bias", "1.1.weight", "1.1.bias"}, ("1",)),  # the outermost module all unused
    ({"1.1.weight", "1.1.bias", "0.weight"}, ("0.weight", "1.1")),  # module order
])
def test_unused_modules_names_the_outermost_wholly_unused_module(unused: set[str], expected: tuple[str, ...]) -> None:
    net = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.LayerNorm(2)))
    assert unused_modules(net, unused) == expected


class _Stack(torch.nn.Module):
    """Blocks that each carry an unused gate, and an unused head: unused parameters in the deepened stack and
    outside it."""

    def __init__(self, layers: int) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(_Block() for _ in range(layers))
        self.head = torch.nn.Linear(16, 1)
        self.aux_head = torch.nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x)


class _Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(16, 16)
        self.gate = torch.nn.Linear(16, 16, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


def _stack_source(layers: int) -> ModelSource:
    return ModelSource(name="stack", kind="catalog", origin="test", build_fn=lambda: _Stack(layers),
                       batch_fn=lambda n: torch.ones(n, 16), num_layers=layers, with_num_layers=_stack_source)


def test_extrapolated_profile_counts_the_unused_parameters_of_every_block() -> None:
    options = ProfileOptions(batch_size=1, target="cpu")
    source = _stack_source(14)
    full = profile_source(source, options, extrapolate=False)
    shallow = profile_source(source, options, extrapolate=True)
    assert shallow.extrapolated_from_layers == (2, 3) and shallow.depth is None
    assert full.unused_parameter_count == 14 * 16 * 16 + 16 * 3 + 3
    assert (shallow.unused_parameter_count, shallow.unused_parameter_bytes) == (
        full.unused_parameter_count, full.unused_parameter_bytes)
    # Names from the last copy, renamed to the blocks they stand for.
    assert shallow.unused_modules == ("blocks.0.gate", "blocks.1.gate", "blocks.13.gate", "aux_head")


def _recommend(source: Any, **kw: Any) -> Any:
    return autoshard.recommend(source, hardware="dgx-h100", batch_size=2, precision="32-true", **kw)


def test_ddp_plan_finds_unused_parameters_only_when_the_step_leaves_some(skip_net: Path, llava_dir: Path) -> None:
    seq_len = load("zoo_models").get(LLAVA).sequence("tiny")
    for source, kw, expected in ((skip_net, {}, True), (llava_dir, {"seq_len": seq_len}, True),
                                 ("tiny-gpt2", {"seq_len": 16}, False)):
        plan = _recommend(source, strategies=["ddp", "fsdp"], **kw)
        ddp = next(e for e in plan.candidates if e.strategy == "ddp")
        assert plan.workload.unused_parameter_count > 0 if expected else plan.workload.unused_parameter_count == 0
        exported = plan_file.from_plan(dataclasses.replace(plan, recommended=ddp))
        assert exported.settings["find_unused_parameters"] is expected, source
        said = [r for r in ddp.reasons if r.startswith("[ddp-unused-parameters]")]
        assert bool(said) is expected, ddp.reasons
        if expected:
            assert "extra traversal of the autograd graph every step" in said[0]
            assert "find_unused_parameters=True because the step leaves" in " ".join(ddp.cost.notes)
        assert not any("ddp-unused" in r for e in plan.candidates if e.family != "ddp" for r in e.reasons)


def test_an_explicit_setting_overrides_what_the_workload_needs(skip_net: Path) -> None:
    from autoshard.strategies import get
    from autoshard.strategies.base import Candidate

    plan = _recommend(skip_net, strategies=["ddp"])
    ddp = get("ddp")
    chosen = Candidate(strategy="ddp", micro_batch_size=2, activation_checkpointing=False,
                       settings={"find_unused_parameters": False})
    assert ddp.settings(plan.hardware, chosen, plan.workload)["find_unused_parameters"] is False
    assert ddp.settings(plan.hardware, dataclasses.replace(chosen, settings={}), plan.workload)[
        "find_unused_parameters"] is True
    assert ddp.settings(plan.hardware, dataclasses.replace(chosen, settings={}))["find_unused_parameters"] is False


def test_exports_carry_find_unused_parameters(skip_net: Path, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    import ast

    exported = plan_file.from_plan(_recommend(skip_net, strategies=["ddp"]))
    assert exported.settings["find_unused_parameters"] is True
    # plan.json round-trips; one written before the setting existed still loads (the backend's default: off).
    assert plan_file.read(plan_file.write(exported, tmp_path / "plan.json")) == exported
    old = exported.to_dict()
    old["settings"] = {k: v for k, v in old["settings"].items() if k != "find_unused_parameters"}
    assert "find_unused_parameters" not in plan_file.loads(json.dumps(old)).settings
    source = lightning.snippet(exported)
    ast.parse(source)
    assert "find_unused_parameters=True" in source
    assert any("DistributedDataParallelKwargs(" in n and "find_unused_parameters=True" in n for n in notes(exported))
    args = hf_trainer.arguments(exported)
    assert args[args.index("--ddp_find_unused_parameters") + 1] == "true"
    if importlib.util.find_spec("transformers") is None:
        pytest.skip("transformers is not installed")
    from transformers import HfArgumentParser, TrainingArguments

    monkeypatch.chdir(tmp_path)
    (parsed,) = HfArgumentParser(TrainingArguments).parse_args_into_dataclasses(["--output_dir", "o", *args])
    assert parsed.ddp_find_unused_parameters is True
    no_unused = dataclasses.replace(exported, settings={**exported.settings, "find_unused_parameters": False})
    (parsed,) = HfArgumentParser(TrainingArguments).parse_args_into_dataclasses(
        ["--output_dir", "o", *hf_trainer.arguments(no_unused)])
    assert parsed.ddp_find_unused_parameters is False
    assert not any("find_unused_parameters=True" in n for n in notes(no_unused))


def _fit(source: Path, options: dict[str, Any], cwd: Path) -> dict[str, Any]:
    script = cwd / "train.py"
    script.write_text(FIT_SCRIPT, encoding="utf-8")
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p))
    env.pop("RANK", None)
    env.pop("WORLD_SIZE", None)
    proc = subprocess.run([sys.executable, str(script), str(source), json.dumps(options)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=400, check=False)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    (line,) = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    result = json.loads(line.removeprefix("RESULT "))
    assert result["world_size"] == 2 and len(result["losses"]) == 3
    assert all(math.isfinite(loss) for loss in result["losses"]), result["losses"]
    return result


def test_fit_trains_a_model_that_skips_its_head_under_ddp(skip_net: Path, tmp_path: Path) -> None:
    result = _fit(skip_net, {"strategy": "ddp"}, tmp_path)
    assert result["strategy"] == "ddp" and result["settings"]["find_unused_parameters"] is True
    assert result["moved"] and not any(k.startswith("aux_head") for k in result["moved"])  # no gradient: left alone
    assert not any("Unused parameters under ZeRO" in n for n in result["notes"])


def test_zero_moves_the_parameters_without_a_gradient_and_the_plan_says_so(skip_net: Path, tmp_path: Path) -> None:
    # a probe: a head the step never uses drifted under ZeRO-1 and ZeRO-3 (AdamW's weight decay on a zero gradient,
    # DeepSpeed's flat partitions), where DDP and FSDP2 left it alone; recommend had said ZeRO needs nothing for it
    pytest.importorskip("deepspeed")
    result = _fit(skip_net, {"strategy": "deepspeed_stage_1", "optimizer": "adamw"}, tmp_path)
    assert {"aux_head.0.weight", "aux_head.2.weight"} <= set(result["moved"])
    [said] = [n for n in result["notes"] if n.startswith("Unused parameters under ZeRO")]
    assert "(aux_head)" in said and "weight decay and momentum still change them" in said
    plan = _recommend(skip_net, strategies=["fsdp"])
    assert not any(line.startswith("Unused parameters") for line in plan.explanation)


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddp", "fsdp", "deepspeed_stage_1", "deepspeed_stage_2", "deepspeed_stage_3"])
def test_fit_trains_llava_with_unused_vision_layers_under_every_strategy(
    strategy: str, llava_dir: Path, tmp_path: Path
) -> None:
    if strategy.startswith("deepspeed"):
        pytest.importorskip("deepspeed")
    seq_len = load("zoo_models").get(LLAVA).sequence("tiny")
    result = _fit(llava_dir, {"strategy": strategy, "seq_len": seq_len}, tmp_path)
    assert result["strategy"] == strategy
    assert result["settings"].get("find_unused_parameters", strategy == "ddp") is (strategy == "ddp")
