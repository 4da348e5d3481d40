"""FSDP2 memory on Hugging Face architectures built from transformers' own config classes, against FSDP2 itself.

The same proof as ``test_fsdp.py`` (the real ``fully_shard`` on a fake process group, every tensor it allocates
and frees counted), on models this project did not write: grouped-query attention, tied and untied heads, a
mixture of experts, GPT-2's ``Conv1D``, OPT's learned positions. Their forward computes the loss from the labels
in the batch, as a Hugging Face training run does.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from autoshard.models import load_source
from autoshard.strategies import Workload, build_workload
from tests.benchmark_scripts import load
from tests.strategies.test_fsdp import SEQ_LEN, cpu_hardware, predicted_peaks, traced_fsdp_peaks

EXACT = 1e-3
ARCHITECTURES = load("_hf_architectures")


@pytest.fixture(scope="module")
def config_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("hf-configs")
    for name in ARCHITECTURES.ARCHITECTURES:
        ARCHITECTURES.config_path(name, root)
    return root


CHECKPOINTED = ("llama", "mixtral", "gpt2")
"""The models traced with checkpointing too (each traced session costs CI seconds)."""


@functools.cache
def _workload(path: str, checkpointing: bool) -> Workload:
    return build_workload(load_source(path), seq_len=SEQ_LEN, target="cpu",
                          checkpointing=(False, True) if checkpointing else (False,))


CASES = [
    *(pytest.param(m, "fsdp", 4, 2, False, id=f"{m}-fsdp-4ranks-b2") for m in ARCHITECTURES.ARCHITECTURES),
    *(pytest.param(m, "fsdp", 2, 2, True, id=f"{m}-fsdp-checkpointing-2ranks-b2") for m in CHECKPOINTED),
    *(pytest.param(m, "fsdp_shard_grad_op", 2, 1, False, id=f"{m}-shard_grad_op-2ranks-b1")
      for m in ("qwen2-tied", "opt")),
]


@pytest.mark.filterwarnings("ignore:FSDP2-wrapped module")
@pytest.mark.parametrize(("model", "name", "world_size", "micro_batch", "checkpointing"), CASES)
def test_fsdp_memory_matches_fsdp2_on_a_hugging_face_architecture(config_dir: Path, model: str, name: str,
                                                                  world_size: int, micro_batch: int,
                                                                  checkpointing: bool) -> None:
    path = str(config_dir / model / "config.json")
    measured = traced_fsdp_peaks(path, world_size, micro_batch=micro_batch, checkpointing=checkpointing,
                                 reshard_after_forward=name == "fsdp")
    predicted = predicted_peaks(name, path, cpu_hardware(world_size), traced=_workload(path, model in CHECKPOINTED),
                                micro_batch=micro_batch, checkpointing=checkpointing)
    for phase in ("forward", "backward", "optimizer", "step"):
        assert predicted[phase] == pytest.approx(measured[phase], rel=EXACT), (phase, predicted, measured)
