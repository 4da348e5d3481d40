"""How long `autoshard profile` takes, full trace against extrapolation, for catalog models.

Usage:
    python benchmarks/profile_speed.py [--models gpt2 llama-2-7b llama-2-70b] [--full-max-layers 40]

Writes docs/benchmarks/profile_speed.{md,json} with the date, machine, versions and this command. Target
(issue "Foundation"): llama-2-70b at micro-batch 1, sequence 4096, bf16-mixed in <= 30 s on a 2-core machine.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch

import autoshard
from autoshard.models import load_source
from autoshard.profiler.options import ProfileOptions
from autoshard.profiler.scaling import profile_source

DEFAULT_MODELS = ["gpt2", "gpt2-xl", "bert-large-uncased", "t5-3b", "llama-2-7b", "llama-3-8b", "llama-2-70b"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=DEFAULT_MODELS)
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--seq-len", type=int, default=None, help="default: 4096 for llama, the model's own else")
    parser.add_argument("--full-max-layers", type=int, default=40, help="also time a full trace up to this depth")
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks"))
    args = parser.parse_args()
    rows = []
    for name in args.models:
        source = load_source(name)
        seq = args.seq_len or (4096 if name.startswith(("llama", "mistral")) else None)
        opts = ProfileOptions(batch_size=args.batch_size, seq_len=seq, precision="bf16-mixed")
        t0 = time.perf_counter()
        fast = profile_source(source, opts, extrapolate=None)
        fast_s = time.perf_counter() - t0
        row = {"model": name, "seq_len": fast.seq_len, "layers": source.num_layers,
               "extrapolated": fast.extrapolated_from_layers is not None, "seconds": round(fast_s, 2),
               "peak_bytes": fast.peak_bytes}
        if fast.extrapolated_from_layers and (source.num_layers or 0) <= args.full_max_layers:
            t0 = time.perf_counter()
            full = profile_source(source, opts, extrapolate=False)
            row["full_trace_seconds"] = round(time.perf_counter() - t0, 2)
            row["full_trace_peak_bytes"] = full.peak_bytes
            row["identical"] = full.peak_bytes == fast.peak_bytes and full.peak_breakdown == fast.peak_breakdown
        rows.append(row)
        print(json.dumps(row), flush=True)
    meta = {
        "date": datetime.date.today().isoformat(),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "python": platform.python_version(),
        "torch": torch.__version__,
        "autoshard": autoshard.__version__,
        "command": "python " + " ".join(sys.argv),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "profile_speed.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    lines = [
        "# Profiling speed",
        "",
        f"{meta['date']}, {meta['machine']}, Python {meta['python']}, torch {meta['torch']}, "
        f"autoshard {meta['autoshard']}. Micro-batch {args.batch_size}, bf16-mixed, AdamW, target CUDA.",
        "",
        f"Command: `{meta['command']}`",
        "",
        "| model | blocks | seq | profile (s) | extrapolated | full trace (s) | identical |",
        "|---|---:|---:|---:|---|---:|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['layers']} | {r['seq_len']} | {r['seconds']} | {r['extrapolated']} | "
            f"{r.get('full_trace_seconds', '—')} | {r.get('identical', '—')} |"
        )
    (args.out / "profile_speed.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
