"""A tuning trial of a plan whose optimizer steps on the host starts its workers with ``OMP_NUM_THREADS``: this
machine's cores shared by the trial's ranks (``autoshard.strategies.costs.host_threads_per_rank``), the threads the
plan's step time was priced with, as fit()'s workers and the exported launches get them. Without it each rank's
torch starts a thread per core, and a trial on a GPU node measures ranks oversubscribing the host's cores in the
optimizer step, a slower configuration than the one the plan describes and ``fit()`` runs. A value the caller's
environment sets (the tuner's one thread per CPU worker, or the user's) is kept."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import autoshard
from autoshard.forked import usable_cores
from autoshard.models import load_source
from autoshard.planner.plan_file import ExportedPlan, HardwareFingerprint
from autoshard.runtime.planning import model_fingerprint
from autoshard.strategies import get
from autoshard.strategies.costs import host_threads_per_rank
from autoshard.tuner.runner import TrialSpec, run_trial

MODEL = Path(__file__).parent / "threads_model.py"
REPO = Path(__file__).parents[2]


def _plan(strategy: str) -> ExportedPlan:
    """Two CPU ranks, built by hand: the planner plans no host offload without a GPU."""
    s = get(strategy)
    knobs = s.knobs(autoshard.detect_hardware(gpus=2))
    return ExportedPlan(
        strategy=strategy, family=s.family, micro_batch_size=2, gradient_accumulation=1,
        activation_checkpointing=False, settings={k.name: k.default for k in knobs},
        precision="32-true", optimizer="adamw", seq_len=None,
        model=model_fingerprint(load_source(str(MODEL)).build(), "threads_model"),
        hardware=HardwareFingerprint(gpu=None, gpu_memory_bytes=None, gpus_per_node=2, nodes=1, device_type="cpu",
                                     backend="gloo", nvme_path=None))


@pytest.mark.parametrize(("strategy", "environ", "expected"), [
    ("fsdp_cpu_offload", {}, "share"),
    ("fsdp_cpu_offload", {"OMP_NUM_THREADS": "1"}, "1"),  # the tuner's CPU workers' one thread, kept
])
def test_a_trial_starts_its_workers_with_the_host_threads_the_plan_was_priced_with(
        strategy: str, environ: dict[str, str], expected: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "RANK", "WORLD_SIZE")} | environ
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    spec = TrialSpec(model=str(MODEL), optimizer="adamw", steps=2, warmup_steps=1)
    measured = run_trial(_plan(strategy), spec, tmp_path / "trial", timeout_s=240, environ=env)
    assert measured.samples_per_s > 0
    ranks = [json.loads((tmp_path / "trial" / f"threads-rank{r}.json").read_text(encoding="utf-8")) for r in (0, 1)]
    threads = host_threads_per_rank(usable_cores(), 2) if expected == "share" else int(expected)
    assert ranks == [{"omp_num_threads": str(threads), "torch_threads": threads}] * 2
