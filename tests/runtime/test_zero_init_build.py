"""ZeRO-3 builds a catalog model inside ``deepspeed.zero.Init``: each submodule is partitioned as its constructor
returns, and the root's ``init_weights()`` gathers one module at a time (``whole_parameters``). The result must be
the same weights as the same seed's whole build, bitwise, with each rank holding only its partition."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autoshard.models import catalog
from autoshard.runtime.supervisor import free_port

SCRIPT = Path(__file__).with_name("zero_init_build_script.py")
REPO = Path(__file__).resolve().parents[2]
WORLD = 2


@pytest.fixture(scope="module")
def built() -> dict[str, dict[str, object]]:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p))
    port = str(free_port())
    procs = [subprocess.Popen([sys.executable, str(SCRIPT), str(rank), str(WORLD), port], cwd=REPO, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for rank in range(WORLD)]
    outputs = [p.communicate(timeout=300) for p in procs]
    for proc, (out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, f"{out[-2000:]}\n{err[-4000:]}"
    records = [json.loads(line[len("RESULT "):]) for line in outputs[0][0].splitlines() if line.startswith("RESULT ")]
    return {r["model"]: r for r in records}


def test_every_tiny_catalog_model_was_built(built: dict[str, dict[str, object]]) -> None:
    assert sorted(built) == sorted(n for n in catalog.names() if n.startswith("tiny-"))


@pytest.mark.parametrize("model", sorted(n for n in catalog.names() if n.startswith("tiny-")))
def test_a_zero_init_build_equals_the_whole_build_bitwise(model: str, built: dict[str, dict[str, object]]) -> None:
    record = built[model]
    assert record["mismatched"] == []
    # Each rank holds about half of every parameter (DeepSpeed pads each to a multiple of the world size).
    whole, partition = int(record["whole_elements"]), int(record["partition_elements"])  # type: ignore[call-overload]
    assert whole / WORLD <= partition < whole / WORLD + 0.02 * whole
