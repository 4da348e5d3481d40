"""How long `autoshard recommend` takes, cold (a fresh process, nothing cached).

Usage:
    python benchmarks/recommend_speed.py [--model llama-2-70b] [--hardware dgx-h100] [--nodes 4] [--seq-len 4096]

Each run is a fresh `python -m autoshard recommend ... --json` process; the time includes Python start-up and
imports. Writes docs/benchmarks/recommend_speed.{md,json}. Target (issue "Decide"): llama-2-70b on 4 nodes ×
8 × H100 80 GB at sequence 4096 in <= 10 s on the 2-core machine.
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

import torch

import autoshard


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="llama-2-70b")
    parser.add_argument("--hardware", default="dgx-h100")
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=4096)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks"))
    args = parser.parse_args()
    cmd = [sys.executable, "-m", "autoshard", "recommend", args.model, "--hardware", args.hardware,
           "--nodes", str(args.nodes), "--seq-len", str(args.seq_len), "--json"]
    times, recommended = [], None
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        times.append(time.perf_counter() - t0)
        if done.returncode not in (0, 3):
            print(done.stderr, file=sys.stderr)
            return 1
        if done.returncode == 0:
            rec = json.loads(done.stdout)["recommended"]
            recommended = f"{rec['strategy']} micro-batch {rec['micro_batch_size']}"
        print(f"{times[-1]:.2f} s", flush=True)
    meta = {
        "date": datetime.date.today().isoformat(),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "torch": torch.__version__,
        "autoshard": autoshard.__version__,
        "command": " ".join(["python", "-m", "autoshard", *cmd[3:]]),
        "benchmark": "python " + " ".join(sys.argv),
    }
    result = {"meta": meta, "seconds": [round(t, 2) for t in times], "median_s": round(sorted(times)[len(times) // 2], 2),
              "recommended": recommended}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "recommend_speed.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out / "recommend_speed.md").write_text(
        "# Planning speed\n\n"
        f"{meta['date']}, {meta['machine']}, torch {meta['torch']}, autoshard {meta['autoshard']}.\n\n"
        f"Command (cold process each run): `{meta['command']}`\n\n"
        f"Benchmark: `{meta['benchmark']}`\n\n"
        f"| runs (s) | median (s) | recommended |\n|---|---:|---|\n"
        f"| {', '.join(f'{t:.2f}' for t in times)} | {result['median_s']} | {recommended} |\n"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
