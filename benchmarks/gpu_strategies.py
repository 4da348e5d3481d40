"""Every strategy autoshard can run on this machine's GPUs, trained for real: throughput and peak memory next to
autoshard's predictions, and whether its recommendation is the measured fastest.

Usage:
    python benchmarks/gpu_strategies.py [--dry-run] [--out docs/benchmarks] [--runs DIR] [--models NAME ...]
                                        [--strategies NAME ...] [--warmup-steps N] [--timed-steps N]
                                        [--run-timeout-s S] [--budget-s S]

For each model (catalog ``gpt2`` and ``gpt2-xl``, and a 1.1B Llama with TinyLlama's shape built from the
catalog's ``LlamaConfig``), ``autoshard.recommend`` plans for the GPUs present at a fixed micro-batch and
sequence length. For each strategy whose best-ranked candidate fits, that candidate (its micro-batch,
checkpointing and knobs) is exported as ``plan.json`` and trained by ``autoshard.fit()``'s own workers — one
process per GPU, started by ``autoshard.runtime.supervisor.run_workers`` as ``fit()`` starts them; with one GPU
that is a world of one, so DDP, FSDP2 and ZeRO-1/2/3 (and their offload presets) all run, each in a fresh
process. The loop synchronizes CUDA at the end of every optimizer step and resets the peak-memory statistics at
its start (``autoshard/runtime/loop.py``); the first ``--warmup-steps`` steps are dropped, the table shows the
median step time of the rest and the highest ``torch.cuda.max_memory_allocated()`` among them.

The recommendation is judged by what was measured: *yes* when the recommended strategy is the fastest measured,
or within 5 % of its throughput.

``--dry-run`` checks the plumbing without a GPU: tiny models, one gloo process on the CPU, three strategies, one
warm-up and two timed steps (peak memory is not measured on CPU). Writes ``gpu_strategies.{md,json}`` under
``--out`` (rewritten after every run, so a run stopped by its time limit still leaves its table).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the helpers beside this script
from _common import package_version, positive
from memory_accuracy import machine

ROOT = Path(__file__).resolve().parents[1]
WITHIN_FRACTION = 0.05
"""The recommendation counts as right when its measured throughput is within this fraction of the fastest's."""


@dataclass(frozen=True, slots=True)
class ModelCase:
    """One model and the fixed shape every strategy trains it at."""

    label: str
    """Name in the table."""
    source: str
    """Catalog name, or ``llama:<LlamaConfig fields as JSON>`` for a Llama written out as a model file."""
    batch_size: int
    """Micro-batch per GPU."""
    seq_len: int
    precision: str


# TinyLlama-1.1B's shape: https://huggingface.co/TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T (config.json:
# hidden 2048, intermediate 5632, 22 layers, 32 heads, 4 KV heads, vocabulary 32000) — 1.10B parameters.
TINYLLAMA_1B = {"vocab_size": 32000, "hidden_size": 2048, "intermediate_size": 5632, "num_layers": 22,
                "num_heads": 32, "num_kv_heads": 4}
GPU_MODELS = (
    ModelCase("gpt2", "gpt2", 8, 1024, "bf16-mixed"),
    ModelCase("llama-1.1b", "llama:" + json.dumps(TINYLLAMA_1B), 4, 2048, "bf16-mixed"),
    ModelCase("gpt2-xl", "gpt2-xl", 4, 1024, "bf16-mixed"),
)
DRY_MODELS = (
    ModelCase("tiny-gpt2", "tiny-gpt2", 2, 64, "32-true"),
    ModelCase("llama-tiny", "llama:" + json.dumps({"vocab_size": 512, "hidden_size": 64,
                                                   "intermediate_size": 176, "num_layers": 2, "num_heads": 4,
                                                   "num_kv_heads": 2}), 2, 64, "32-true"),
)
DRY_STRATEGIES = ("ddp", "fsdp", "deepspeed_stage_2")

LLAMA_FILE = '''"""A Llama of a given shape, written by benchmarks/gpu_strategies.py (a model file)."""
from autoshard.models.catalog._common import token_batch, token_loss
from autoshard.models.catalog.llama import LlamaConfig, LlamaForCausalLM

CONFIG = LlamaConfig(**{config})


def model():
    return LlamaForCausalLM(CONFIG)


def batch(batch_size, seq_len=2048):
    return token_batch(batch_size, seq_len, vocab_size=CONFIG.vocab_size)


def loss(output, batch):
    return token_loss(output, batch)
'''


def model_spec(case: ModelCase, where: Path) -> str:
    """What ``load_source`` / ``fit`` take for the case: the catalog name, or a model file written under ``where``."""
    if not case.source.startswith("llama:"):
        return case.source
    path = where / f"{case.label.replace('-', '_').replace('.', '_')}.py"
    path.write_text(LLAMA_FILE.format(config=case.source.removeprefix("llama:")), encoding="utf-8")
    return str(path)


def per_strategy(plan: Any, wanted: Sequence[str] | None) -> list[Any]:
    """The best-ranked fitting evaluation of each strategy (the plan's candidates are ranked best first), the
    recommended one first."""
    best: dict[str, Any] = {}
    for evaluation in plan.candidates:
        if evaluation.fits and evaluation.strategy not in best and (wanted is None or evaluation.strategy in wanted):
            best[evaluation.strategy] = evaluation
    rec = plan.recommended.strategy
    return sorted(best.values(), key=lambda e: e.strategy != rec)


def run_strategy(spec: str, plan: Any, evaluation: Any, run_dir: Path, *, steps: int, timeout_s: float) -> list[dict]:
    """Train ``evaluation``'s configuration with ``fit()``'s workers; rank 0's per-step metrics."""
    from autoshard.planner import plan_file
    from autoshard.runtime.supervisor import run_workers

    exported = plan_file.from_plan(dataclasses.replace(plan, recommended=evaluation))
    run_dir.mkdir(parents=True, exist_ok=True)
    plan_file.write(exported, run_dir / "plan.json")
    (run_dir / "notes.json").write_text("[]", encoding="utf-8")
    environ = dict(os.environ)
    environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), environ.get("PYTHONPATH", "")) if p)
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", spec, "--timed-steps", str(steps)]
    run_workers(command, world_size=exported.hardware.world_size, run_dir=run_dir, environ=environ,
                timeout_s=timeout_s, log_rank0=True)
    return json.loads((run_dir / "result.json").read_text(encoding="utf-8"))["steps"]


def summarize_steps(steps: list[dict], warmup: int) -> dict[str, Any]:
    """Median step time and throughput of the steps after ``warmup``, and their highest peak memory.

    Example:
        >>> s = [{"step_time_s": t, "samples_per_s": 8 / t, "tokens_per_s": None, "peak_memory_bytes": None}
        ...      for t in (5.0, 1.0, 3.0, 2.0)]
        >>> summarize_steps(s, 1)["step_time_s"], summarize_steps(s, 1)["samples_per_s"]
        (2.0, 4.0)
    """
    timed = steps[warmup:]
    if not timed:
        raise ValueError(f"no step after the {warmup} warm-up step(s): {len(steps)} ran.")
    median_s = statistics.median(s["step_time_s"] for s in timed)
    tokens = timed[0]["tokens_per_s"]
    peaks = [s["peak_memory_bytes"] for s in timed if s["peak_memory_bytes"] is not None]
    return {"step_time_s": median_s, "samples_per_s": timed[0]["samples_per_s"] * timed[0]["step_time_s"] / median_s,
            "tokens_per_s": None if tokens is None else tokens * timed[0]["step_time_s"] / median_s,
            "peak_bytes": max(peaks) if peaks else None, "timed_steps": len(timed),
            "loss_first": steps[0].get("loss"), "loss_last": steps[-1].get("loss")}


def verdict(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """For one model's rows: the recommended and the measured-fastest strategy, and whether the recommendation is
    the fastest or within :data:`WITHIN_FRACTION` of it.

    Example:
        >>> verdict([{"strategy": "ddp", "recommended": True, "measured": {"samples_per_s": 97.0}},
        ...          {"strategy": "fsdp", "recommended": False, "measured": {"samples_per_s": 100.0}}])["ok"]
        True
    """
    measured = [r for r in rows if r.get("measured")]
    rec = next((r for r in rows if r["recommended"]), None)
    if not measured:
        return {"recommended": None if rec is None else rec["strategy"], "fastest": None, "ratio": None, "ok": None}
    fastest = max(measured, key=lambda r: r["measured"]["samples_per_s"])
    if rec is None or not rec.get("measured"):
        return {"recommended": None if rec is None else rec["strategy"], "fastest": fastest["strategy"],
                "ratio": None, "ok": None}
    ratio = rec["measured"]["samples_per_s"] / fastest["measured"]["samples_per_s"]
    return {"recommended": rec["strategy"], "fastest": fastest["strategy"], "ratio": ratio,
            "ok": ratio >= 1.0 - WITHIN_FRACTION}


def run_model(case: ModelCase, hardware: Any, args: argparse.Namespace, runs: Path, deadline: float,
              out: Path, report: dict[str, Any]) -> None:
    """Plan ``case`` and train each strategy, adding rows to ``report`` (and rewriting it) as they finish."""
    import autoshard

    entry: dict[str, Any] = {"model": case.label, "source": case.source, **{k: getattr(case, k) for k in
                                                                             ("batch_size", "seq_len", "precision")},
                             "rows": [], "error": None}
    report["models"].append(entry)
    spec = model_spec(case, runs)
    try:
        plan = autoshard.recommend(spec, hardware=hardware, batch_size=case.batch_size, seq_len=case.seq_len,
                                   precision=case.precision)
    except Exception as exc:  # noqa: BLE001 - a benchmark records a model it cannot plan and goes on
        entry["error"] = f"{type(exc).__name__}: {exc}"
        write_report(out, report)
        return
    entry["parameters"] = plan.workload.parameter_count
    for evaluation in per_strategy(plan, args.strategies):
        row: dict[str, Any] = {
            "strategy": evaluation.strategy, "recommended": evaluation.strategy == plan.recommended.strategy,
            "micro_batch_size": evaluation.candidate.micro_batch_size,
            "activation_checkpointing": evaluation.candidate.activation_checkpointing,
            "checkpointing": str(plan.workload.checkpoint_mode) if evaluation.candidate.activation_checkpointing
            else None,
            "gradient_accumulation": evaluation.gradient_accumulation, "settings": dict(evaluation.candidate.settings),
            "predicted": {"step_time_s": evaluation.cost.step_time_s, "samples_per_s": evaluation.cost.samples_per_s,
                          "tokens_per_s": evaluation.cost.tokens_per_s, "peak_bytes": evaluation.memory.gpu.total},
            "measured": None, "error": None, "seconds": None}
        entry["rows"].append(row)
        left = deadline - time.monotonic()
        if left < 10:
            row["error"] = "skipped: this model's share of --budget-s ran out"
            continue
        started = time.monotonic()
        try:
            steps = run_strategy(spec, plan, evaluation, runs / f"{case.label}-{evaluation.strategy}",
                                 steps=args.warmup_steps + args.timed_steps,
                                 timeout_s=min(args.run_timeout_s, left))
            row["measured"] = summarize_steps(steps, args.warmup_steps)
        except Exception as exc:  # noqa: BLE001 - a failed run is a row, not the end of the benchmark
            row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        row["seconds"] = round(time.monotonic() - started, 1)
        print(f"{case.label} {evaluation.strategy}: {row['measured'] or row['error']} ({row['seconds']} s)",
              flush=True)
        entry["verdict"] = verdict(entry["rows"])
        write_report(out, report)


def _fmt(x: float | None, spec: str) -> str:
    return "—" if x is None else format(x, spec)


def _gib(n: int | None) -> str:
    return "—" if n is None else f"{n / 2**30:.2f}"


def write_report(out: Path, report: dict[str, Any]) -> None:
    """Write ``gpu_strategies.json`` and ``gpu_strategies.md`` into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_strategies.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    meta, m = report["meta"], report["meta"]["machine"]
    where = (f"{m['gpu']} × {m['gpu_count']} (CUDA {m['cuda']}, driver {m.get('driver', '?')}), host {m['cpu']}"
             if m["device"] == "cuda" else f"CPU only ({m['cpu']}) — a dry run of the plumbing, not a measurement")
    lines = [
        "# Strategies on real hardware: measured against predicted", "",
        f"{meta['date']}, {where}, Python {meta['python']}, torch {meta['torch']}, deepspeed {meta['deepspeed']}, "
        f"autoshard {meta['autoshard']}. {meta['warmup_steps']} warm-up step(s), then the median of "
        f"{meta['timed_steps']} timed steps (CUDA synchronized at each step's end); peak = highest "
        "`torch.cuda.max_memory_allocated()` of a timed step. Each strategy trained by `autoshard.fit()`'s "
        "workers in fresh processes, at the configuration autoshard ranks best for it.", "",
        f"Command: `{meta['command']}`" + (f" — took {meta['seconds']:.0f} s." if meta.get("seconds") else ""), "",
    ]
    for entry in report["models"]:
        params = f"{entry['parameters'] / 1e6:,.1f}M parameters, " if entry.get("parameters") else ""
        lines.append(f"## {entry['model']} — {params}micro-batch {entry['batch_size']}, sequence {entry['seq_len']}, "
                     f"{entry['precision']}")
        lines.append("")
        if entry["error"]:
            lines += [f"Not planned: {entry['error']}", ""]
            continue
        v = entry.get("verdict") or {}
        if v.get("ok") is not None:
            lines += [f"Recommended **{v['recommended']}**; measured fastest **{v['fastest']}**; the recommendation "
                      f"reaches {v['ratio']:.1%} of the fastest's throughput: **"
                      + ("yes" if v["ok"] else "no") + f"** (within {WITHIN_FRACTION:.0%}).", ""]
        lines += ["| strategy | rec. | micro-batch × accum. | ckpt | predicted step (s) | measured step (s) | "
                  "measured / predicted | measured tokens/s | predicted peak (GiB) | measured peak (GiB) | "
                  "peak error | note |",
                  "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
        for r in entry["rows"]:
            p, mm = r["predicted"], r["measured"] or {}
            err = None
            if mm.get("peak_bytes"):
                err = 100.0 * (p["peak_bytes"] - mm["peak_bytes"]) / mm["peak_bytes"]
            note = (r["error"] or "").replace("|", "\\|")
            ckpt = r.get("checkpointing") or ("full" if r["activation_checkpointing"] else "off")
            lines.append(
                f"| {r['strategy']} | {'✓' if r['recommended'] else ''} | {r['micro_batch_size']} × "
                f"{r['gradient_accumulation']} | {ckpt} | "
                f"{_fmt(p['step_time_s'], '.4f')} | {_fmt(mm.get('step_time_s'), '.4f')} | "
                f"{_fmt(mm['step_time_s'] / p['step_time_s'] if mm.get('step_time_s') else None, '.2f')} | "
                f"{_fmt(mm.get('tokens_per_s'), ',.0f')} | {_gib(p['peak_bytes'])} | {_gib(mm.get('peak_bytes'))} | "
                f"{_fmt(err, '+.1f')}{' %' if err is not None else ''} | {note} |")
        lines.append("")
    (out / "gpu_strategies.md").write_text("\n".join(lines), encoding="utf-8")


def _worker(spec: str, steps: int) -> None:
    """One rank: ``fit()`` finds ``AUTOSHARD_RUN_DIR`` and the launcher's variables, trains the run directory's
    ``plan.json``, has rank 0 write ``result.json``, and leaves the process."""
    import autoshard

    autoshard.fit(spec, max_steps=steps, log_every=steps, consolidate=False)
    raise SystemExit("gpu_strategies.py --worker is started by gpu_strategies.py (no AUTOSHARD_RUN_DIR set).")


def main(argv: Sequence[str] | None = None) -> int:
    """Plan and train every model and strategy; write the report. Returns the exit status (0 unless it crashed)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="tiny models on the CPU (gloo), to check the plumbing")
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks"))
    parser.add_argument("--runs", type=Path, default=None,
                        help="keep each run's plan.json and rank logs here (default: a temporary directory)")
    parser.add_argument("--models", nargs="+", default=None, help="only these models (their labels)")
    parser.add_argument("--strategies", nargs="+", default=None, help="only these strategies")
    parser.add_argument("--warmup-steps", type=positive, default=None, help="default 3 (dry run: 1)")
    parser.add_argument("--timed-steps", type=positive, default=None, help="default 5 (dry run: 2)")
    parser.add_argument("--run-timeout-s", type=float, default=None,
                        help="limit per strategy run (default 180 s, dry run 90 s)")
    parser.add_argument("--budget-s", type=float, default=None,
                        help="start no run after this many seconds, each model getting an equal share of what is "
                             "left (default: no limit); the rows not run say 'skipped'")
    parser.add_argument("--worker", metavar="MODEL", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker is not None:
        _worker(args.worker, args.timed_steps)
        return 0
    import torch

    if not args.dry_run and not torch.cuda.is_available():
        parser.error("no CUDA GPU here (torch.cuda.is_available() is False); --dry-run checks the plumbing on CPU.")
    models = DRY_MODELS if args.dry_run else GPU_MODELS
    if args.models is not None:
        unknown = sorted(set(args.models) - {m.label for m in models})
        if unknown:
            parser.error(f"--models {' '.join(unknown)}: not among {[m.label for m in models]}.")
        models = tuple(m for m in models if m.label in args.models)
    from autoshard.strategies import names

    if args.strategies is not None and set(args.strategies) - set(names()):
        parser.error(f"--strategies {' '.join(sorted(set(args.strategies) - set(names())))}: unknown; "
                     f"known: {', '.join(names())}.")
    if args.strategies is None and args.dry_run:
        args.strategies = list(DRY_STRATEGIES)
    args.warmup_steps = args.warmup_steps or (1 if args.dry_run else 3)
    args.timed_steps = args.timed_steps or (2 if args.dry_run else 5)
    args.run_timeout_s = args.run_timeout_s or (90.0 if args.dry_run else 180.0)
    from autoshard.hardware import detect_hardware

    hardware = (detect_hardware(gpus=1, environ={"CUDA_VISIBLE_DEVICES": ""}) if args.dry_run
                else detect_hardware())
    device = torch.device("cpu" if args.dry_run else "cuda")
    import autoshard

    argv_shown = list(sys.argv[1:] if argv is None else argv)
    report: dict[str, Any] = {"meta": {
        "date": datetime.date.today().isoformat(), "machine": machine(device), "python": platform.python_version(),
        "torch": torch.__version__, "deepspeed": package_version("deepspeed") or "not installed",
        "autoshard": autoshard.__version__,
        "world_size": hardware.world_size, "warmup_steps": args.warmup_steps, "timed_steps": args.timed_steps,
        "command": " ".join(["python", "benchmarks/gpu_strategies.py", *argv_shown]), "seconds": None,
    }, "models": []}
    started = time.monotonic()
    deadline = started + (args.budget_s if args.budget_s is not None else float("inf"))
    runs = args.runs or Path(tempfile.mkdtemp(prefix="autoshard-gpu-strategies-"))
    runs.mkdir(parents=True, exist_ok=True)
    try:
        for i, case in enumerate(models):
            # Each model may use an equal share of the time left, so a slow one cannot starve the next.
            share = (deadline - time.monotonic()) / (len(models) - i)
            run_model(case, hardware, args, runs, time.monotonic() + share, args.out, report)
    finally:
        report["meta"]["seconds"] = round(time.monotonic() - started, 1)
        write_report(args.out, report)
        if args.runs is None:
            shutil.rmtree(runs, ignore_errors=True)
    verdicts = {e["model"]: (e.get("verdict") or {}).get("ok") for e in report["models"]}
    print(json.dumps({"seconds": report["meta"]["seconds"], "recommendation_ok": verdicts}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
