"""Peak memory of building a catalog model inside ``deepspeed.zero.Init`` (what ``fit()`` does for ZeRO-3),
against building it whole, measured by the CPU allocator.

Each rank of a gloo group builds the model under ``zero.Init`` (each submodule partitioned as its constructor
returns; ``init_weights()`` gathers one module at a time) inside a :class:`~_allocator.PeakProbe`; rank 0 then
builds it whole under a second probe. The sharded build should peak near one rank's partition plus the largest
module gathered, far below the whole model.

Usage::

    python benchmarks/zero_init_build.py                 # gpt2, gpt2-medium at 2 and 4 ranks; writes docs/
    python benchmarks/zero_init_build.py --models tiny-llama --ranks 2 --output /tmp/z
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # the probe beside this script, however it is loaded
from _common import cpu_model

REPO = HERE.parent
DEFAULT_MODELS = ("gpt2", "gpt2-medium")
DOCS = REPO / "docs" / "benchmarks"
MIB = 2**20


def rank_main(rank: int, world: int, port: int, model: str) -> dict[str, Any]:
    """One rank: the probed zero.Init build, and on rank 0 the probed whole build."""
    os.environ.update(DS_ACCELERATOR="cpu", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world), LOCAL_RANK=str(rank))
    import torch
    import torch.distributed as dist
    from _allocator import PeakProbe, released_on_caller

    dist.init_process_group("gloo")
    import deepspeed

    from autoshard.models import load_source

    deepspeed.init_distributed(dist_backend="gloo")
    source = load_source(model)
    cpu = torch.device("cpu")
    torch.manual_seed(0)
    start = time.perf_counter()
    config = {"train_batch_size": world, "zero_optimization": {"stage": 3}}
    # Gloo frees a collective's buffers on its own thread, which the profiler does not follow: see _allocator.
    with released_on_caller(), PeakProbe(cpu) as probe:
        probe.mark()
        with deepspeed.zero.Init(config_dict_or_path=config):
            sharded = source.build()
    record: dict[str, Any] = {"rank": rank, "sharded_peak_bytes": probe.result().peak_bytes,
                              "sharded_s": round(time.perf_counter() - start, 2),
                              "partition_bytes": sum(p.ds_tensor.numel() * p.ds_tensor.element_size()
                                                     for p in sharded.parameters())}
    del sharded
    dist.barrier()
    if rank == 0:
        torch.manual_seed(0)
        start = time.perf_counter()
        with PeakProbe(cpu) as probe:
            probe.mark()
            whole = source.build()
        params = {id(p): p for p in whole.parameters()}.values()
        record.update(whole_peak_bytes=probe.result().peak_bytes, whole_s=round(time.perf_counter() - start, 2),
                      model_bytes=sum(p.numel() * p.element_size() for p in params),
                      largest_module_bytes=max(sum(p.numel() * p.element_size() for p in m.parameters(recurse=False))
                                               for m in whole.modules()))
    dist.barrier()
    dist.destroy_process_group()
    return record


def measure(model: str, world: int) -> dict[str, Any]:
    """Run ``world`` ranks for ``model``; the combined record."""
    from autoshard.runtime.supervisor import free_port

    port = free_port()
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p))
    procs = [subprocess.Popen([sys.executable, __file__, "--rank", str(r), "--world", str(world), "--port", str(port),
                               "--models", model], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in range(world)]
    outs = [p.communicate(timeout=1800) for p in procs]
    ranks = []
    for proc, (out, err) in zip(procs, outs, strict=True):
        if proc.returncode != 0:
            raise RuntimeError(f"a rank of {model} failed ({proc.returncode}):\n{err[-3000:]}")
        ranks.append(json.loads(out.strip().splitlines()[-1]))
    zero = ranks[0]
    sharded_peak = max(r["sharded_peak_bytes"] for r in ranks)
    return {"model": model, "ranks": world, "model_bytes": zero["model_bytes"],
            "largest_module_bytes": zero["largest_module_bytes"], "partition_bytes": zero["partition_bytes"],
            "whole_peak_bytes": zero["whole_peak_bytes"], "sharded_peak_bytes": sharded_peak,
            "sharded_over_whole": round(sharded_peak / zero["whole_peak_bytes"], 3),
            "whole_s": zero["whole_s"], "sharded_s": max(r["sharded_s"] for r in ranks)}


def report(rows: list[dict[str, Any]], command: str) -> str:
    """The markdown table."""
    import torch

    lines = [
        "# Building a model inside `deepspeed.zero.Init`: peak memory", "",
        f"Measured {datetime.date.today().isoformat()} on {cpu_model()} ({os.cpu_count()} cores), "
        f"torch {torch.__version__}, Python {platform.python_version()}, CPU allocator (torch.profiler).", "",
        f"Command: `{command}`", "",
        "Per rank: the highest live bytes while the model is built (the zero.Init build's worst rank; the whole "
        "build on rank 0). fp32 parameters. *Extra* is (zero.Init peak − partition) / largest module: what the "
        "build holds beyond the rank's own partition, in units of the largest module (each module is whole while "
        "its constructor runs, and again while `init_weights()` gathers it).", "",
        "| model | ranks | parameters | largest module | partition per rank | whole build peak | zero.Init peak "
        "| ratio | extra | whole s | zero.Init s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(f"| {r['model']} | {r['ranks']} | {r['model_bytes'] / MIB:.1f} MiB | "
                     f"{r['largest_module_bytes'] / MIB:.1f} MiB | {r['partition_bytes'] / MIB:.1f} MiB | "
                     f"{r['whole_peak_bytes'] / MIB:.1f} MiB | {r['sharded_peak_bytes'] / MIB:.1f} MiB | "
                     f"{r['sharded_over_whole']:.2f} | "
                     f"{(r['sharded_peak_bytes'] - r['partition_bytes']) / r['largest_module_bytes']:.2f} | "
                     f"{r['whole_s']} | {r['sharded_s']} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(DEFAULT_MODELS))
    parser.add_argument("--ranks", default="2,4", help="comma-separated world sizes")
    parser.add_argument("--output", type=Path, default=DOCS)
    parser.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--world", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rank is not None:
        print(json.dumps(rank_main(args.rank, args.world, args.port, args.models)), flush=True)
        return 0
    rows = [measure(m, int(w)) for m in args.models.split(",") for w in args.ranks.split(",")]
    args.output.mkdir(parents=True, exist_ok=True)
    command = "python benchmarks/zero_init_build.py" + ("" if argv is None and len(sys.argv) == 1
                                                        else " " + " ".join(sys.argv[1:] if argv is None else argv))
    (args.output / "zero_init_build.json").write_text(json.dumps({"command": command, "rows": rows}, indent=2) + "\n",
                                                      encoding="utf-8")
    (args.output / "zero_init_build.md").write_text(report(rows, command), encoding="utf-8")
    print(report(rows, command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
