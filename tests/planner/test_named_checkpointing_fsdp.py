"""A named checkpointing choice plans FSDP2 as the default run plans the same candidate (probe M, finding 1).

FSDP2's memory under checkpointing counts a block's activations while it is recomputed in backward from the trace
without checkpointing. ``--checkpointing full`` used to trace only the checkpointed step, and the recomputed
block's activations dropped out: llama-2-7b on 8 H100s at 4096 tokens planned plain FSDP at micro-batch 38 in
71.3 GiB where the default run said 75.2 GiB, more than the 72 GiB usable.

The Llama here (8 blocks 256 wide, a 128-token vocabulary, 512 tokens, 2 GiB GPUs) peaks in a recomputed block's
backward; before the fix ``--checkpointing full`` planned FSDP at micro-batch 389 against the default's 235.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from transformers import LlamaConfig

from autoshard.hardware import load_hardware
from autoshard.planner.machine import plan_for
from autoshard.planner.plan import Evaluation, Plan
from autoshard.strategies.fsdp.strategy import UNCHECKED_MISSING

STRATEGIES = ["fsdp", "fsdp_shard_grad_op", "ddp"]


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("llama")
    LlamaConfig(hidden_size=256, intermediate_size=688, num_hidden_layers=8, num_attention_heads=4,
                num_key_value_heads=4, vocab_size=128, max_position_embeddings=512).save_pretrained(directory)
    return directory / "config.json"


def _plan(config: Path, checkpointing: str | None, strategies: list[str] = STRATEGIES,
          batch_size: int | None = None) -> Plan:
    return plan_for(config, load_hardware("h100-sxm-80gb", gpus=4, gpu_memory="2GiB"), seq_len=512,
                    strategies=strategies, checkpointing=checkpointing, batch_size=batch_size)


def _checkpointed(plan: Plan) -> dict[str, Evaluation]:
    return {e.strategy: e for e in plan.candidates if e.candidate.activation_checkpointing}


def test_checkpointing_full_gives_the_default_runs_figures_for_the_checkpointed_candidates(llama: Path) -> None:
    default, full = _plan(llama, None), _plan(llama, "full")
    weighed, asked = _checkpointed(default), _checkpointed(full)
    assert weighed.keys() == asked.keys() == set(STRATEGIES)
    for name, e in asked.items():
        d = weighed[name]
        assert e.memory is not None and d.memory is not None and e.memory.peak_phase == "backward"
        assert (e.candidate, e.max_micro_batch_size, e.memory, e.cost) == \
            (d.candidate, d.max_micro_batch_size, d.memory, d.cost), name
        assert UNCHECKED_MISSING not in e.memory.notes
    assert all(e.candidate.activation_checkpointing for e in full.candidates)  # only the choice asked for
    assert full.cached_workload is not None  # the default run's workload: nothing traced again
    # The default run says checkpointing is what makes the micro-batch fit; asked for, it is not a finding.
    rule = "[checkpoint-when-activations-dominate]"
    assert any(r.startswith(rule) for r in weighed["fsdp"].reasons)
    assert not any(r.startswith(rule) for e in asked.values() for r in e.reasons)
    assert full.request.to_dict()["checkpointing"] == [True] and default.request.to_dict()["checkpointing"] is None


def test_checkpointing_op_traces_the_step_without_it_for_fsdp(llama: Path) -> None:
    op = _plan(llama, "op", ["fsdp"], batch_size=8)
    assert op.workload.checkpointing_choices == (False, True)
    assert [e.candidate.activation_checkpointing for e in op.candidates] == [True]
    memory = op.recommended.memory
    assert memory is not None and UNCHECKED_MISSING not in memory.notes


def test_checkpointing_without_an_fsdp_candidate_traces_the_checkpointed_step_alone(llama: Path) -> None:
    assert _plan(llama, "full", ["ddp"], batch_size=8).workload.checkpointing_choices == (True,)
