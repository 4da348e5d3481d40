"""fit() under FSDP2 wraps every repeated block of an encoder-decoder (tiny-t5's T5Blocks of both stacks), and
groups ``blocks_per_unit`` blocks within a stack, never across: 2 CPU processes under torchrun."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from autoshard.models import load_source
from autoshard.profiler.blocks import find_repeated_blocks

SCRIPT = Path(__file__).with_name("fsdp_units_script.py")
REPO = Path(__file__).resolve().parents[2]


def _run(blocks_per_unit: int) -> list[dict[str, Any]]:
    from autoshard.runtime.supervisor import free_port

    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p))
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        env.pop(key, None)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(free_port()),
           str(SCRIPT), str(blocks_per_unit)]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=240, check=False)
    out = [json.loads(line[len("RESULT "):]) for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if len(out) != 2:
        raise AssertionError(f"{cmd} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
    return sorted(out, key=lambda r: r["rank"])


def _expected_units(blocks_per_unit: int) -> list[list[str]]:
    with torch.device("meta"):
        found = find_repeated_blocks(load_source("tiny-t5").build())
    assert found is not None
    return [[""]] + [list(stack[i:i + blocks_per_unit]) for stack in found.stacks
                     for i in range(0, len(stack), blocks_per_unit)]


@pytest.mark.parametrize("blocks_per_unit", [pytest.param(1, marks=pytest.mark.slow), 3])
def test_fsdp2_fit_of_t5_wraps_t5blocks_within_each_stack(blocks_per_unit: int) -> None:
    ranks = _run(blocks_per_unit)
    for r in ranks:
        assert r["units"] == _expected_units(blocks_per_unit)
        assert r["classes"] == ["FSDPT5Block (full)", "FSDPT5ForConditionalGeneration"]
    assert ranks[0]["losses"] == ranks[1]["losses"]
