"""The host's time per launched kernel in PyTorch eager mode, measured, for the step-time model's launch cost.

Usage:
    python benchmarks/host_overhead.py [--steps 15] [--repeats 5] [--only ARCH ...] [--out docs/benchmarks]

autoshard's step-time model (``autoshard/strategies/step_time.py``) takes a step to last at least as long as the
host needs to launch its kernels: the traced op census's kernel count times a host cost per kernel (Python, the
module calls, the dispatcher, autograd, checkpointing's own work, the launch). At small micro-batches that floor is
the step time. This script measures that cost instead of assuming it: it builds *narrow copies* of real
architectures from transformers' config classes (every layer and block of the model at its real depth, so every
op and module call is there, but 64 wide, 2 heads, a vocabulary of 128, 16 tokens, one sample), so that each
kernel's own work is a few microseconds, and times on the CPU, one thread, what the host does per step:

* ``step``: one forward and backward (eager attention, fp32);
* ``checkpointed``: the same with every block checkpointed as ``fit()`` does it
  (``autoshard.runtime.activation_checkpointing.checkpoint_blocks``: non-reentrant ``torch.utils.checkpoint``, as
  transformers' own ``gradient_checkpointing_enable`` runs it too);
* ``op-checkpointed``: every block under torchtitan's op-selective policy (``checkpoint_blocks(..., "op")``: the
  policy, a Python function, sees every op of the block in forward and in the recomputation);
* ``optimizer``: one step of torch's for-loop AdamW (``foreach=False``; on CPU tensors torch's foreach falls back
  to a loop of its own, so it is not timed).

Each time is divided by the kernels autoshard's census counts for the same step on a CUDA GPU
(``autoshard.profile(..., target="cuda")`` with the same config): the host's time per counted kernel. On the CPU
each op's kernel runs inline on the launching thread (a few microseconds on these sizes); on a GPU it is replaced
by the launch call. What this cannot show: a faster or slower host CPU, and older or newer PyTorch versions.

Each case is timed ``--repeats`` times, the order rotated each round (the VM drifts), as the median of
``--steps`` steps after three warm-ups. Writes ``host_overhead.{md,json}`` under ``--out`` and prints the table.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the shared module beside this script, however it is loaded
from _common import cpu_seconds, foreign_cores, package_version, positive, run_meta, write_report

WIDTH = {"hidden": 64, "heads": 2, "ffn": 128, "vocab": 128}
"""The narrow copies' sizes: every kernel's own work is small next to the host's per-op time."""
SEQ_LEN = 16
MODES = ("step", "checkpointed", "op-checkpointed", "optimizer")
CHECKPOINTING = {"checkpointed": "full", "op-checkpointed": "op"}
"""The benchmark's checkpointed modes and autoshard's checkpointing choice each runs."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Arch:
    """A real architecture at its real depth, narrowed."""

    name: str
    config_class: str
    model_class: str
    config: dict[str, Any]
    labels: str
    """``"tokens"`` (a language model: the input ids) or ``"class"`` (a sequence classifier: one label)."""


def _w(**kwargs: Any) -> dict[str, Any]:
    return kwargs


ARCHS = (
    Arch(name="bert-large", config_class="BertConfig", model_class="BertForSequenceClassification", labels="class",
         config=_w(num_hidden_layers=24, hidden_size=WIDTH["hidden"], num_attention_heads=WIDTH["heads"],
                   intermediate_size=WIDTH["ffn"], vocab_size=WIDTH["vocab"], max_position_embeddings=64,
                   num_labels=2)),
    Arch(name="gpt2-medium", config_class="GPT2Config", model_class="GPT2LMHeadModel", labels="tokens",
         config=_w(n_layer=24, n_embd=WIDTH["hidden"], n_head=WIDTH["heads"], vocab_size=WIDTH["vocab"],
                   n_positions=64)),
    Arch(name="llama-3.2-1b", config_class="LlamaConfig", model_class="LlamaForCausalLM", labels="tokens",
         config=_w(num_hidden_layers=16, hidden_size=WIDTH["hidden"], num_attention_heads=WIDTH["heads"],
                   num_key_value_heads=WIDTH["heads"], intermediate_size=WIDTH["ffn"], vocab_size=WIDTH["vocab"],
                   max_position_embeddings=64)),
    Arch(name="t5-base", config_class="T5Config", model_class="T5ForConditionalGeneration", labels="tokens",
         config=_w(num_layers=12, num_decoder_layers=12, d_model=WIDTH["hidden"], num_heads=WIDTH["heads"],
                   d_kv=WIDTH["hidden"] // WIDTH["heads"], d_ff=WIDTH["ffn"], vocab_size=WIDTH["vocab"],
                   decoder_start_token_id=0, pad_token_id=0)),
)
"""Depths of BERT-large (24 layers), GPT-2 medium (24), Llama 3.2 1B (16), T5-base (12 + 12)."""


def write_config(arch: Arch, folder: Path) -> Path:
    """``config.json`` of the narrow copy (eager attention, as both the census and the timing run it)."""
    import transformers

    config = getattr(transformers, arch.config_class)(**arch.config, architectures=[arch.model_class])
    config.save_pretrained(folder)
    path = folder / "config.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    data["attn_implementation"] = "eager"  # save_pretrained leaves it out; autoshard reads it from the file
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")
    return path


def census_kernels(config: Path) -> dict[str, Any]:
    """Kernels of the traced step per mode, as autoshard counts them for a CUDA GPU; the blocks a checkpointed
    step wraps (``blocks``, the same for both policies) and their names (``block_names``)."""
    import autoshard

    def profile(checkpointing: str) -> Any:
        return autoshard.profile(config, batch_size=1, seq_len=SEQ_LEN, precision="32-true",
                                 activation_checkpointing=checkpointing, optimizer_impl="for-loop", target="cuda")

    plain = profile("none")
    traced = {mode: profile(choice) for mode, choice in CHECKPOINTING.items()}
    if plain.census is None or plain.optimizer_census is None or any(p.census is None for p in traced.values()):
        raise RuntimeError(f"{config}: the profile has no op census")
    full = traced["checkpointed"]
    return {"step": plain.census.kernels, **{mode: p.census.kernels for mode, p in traced.items()},
            "optimizer": plain.optimizer_census.kernels, "blocks": full.checkpointed_blocks,
            "block_names": [b.name for b in full.blocks]}


def timers(arch: Arch, config: Path, block_names: Sequence[str], device: str = "cpu") -> dict[str, Callable[[], None]]:
    """One callable per mode, each doing one step of the real narrow model on ``device`` (``cpu`` or ``cuda``), its
    ``block_names`` checkpointed in the checkpointed modes."""
    import transformers

    from autoshard.runtime.activation_checkpointing import checkpoint_blocks

    loaded = transformers.AutoConfig.from_pretrained(config.parent)
    loaded._attn_implementation = "eager"
    model_class = getattr(transformers, arch.model_class)
    ids = torch.randint(0, WIDTH["vocab"], (1, SEQ_LEN), device=device)
    labels = ids if arch.labels == "tokens" else torch.tensor([1], device=device)
    plain = model_class(loaded).to(device).train()
    checkpointed = {}
    for mode, choice in CHECKPOINTING.items():
        checkpointed[mode] = model_class(loaded).to(device).train()
        checkpoint_blocks(checkpointed[mode], tuple(block_names), choice)
    optimizer = torch.optim.AdamW(plain.parameters(), lr=1e-4, foreach=False)

    def step(model: torch.nn.Module) -> Callable[[], None]:
        def run() -> None:
            model(input_ids=ids, labels=labels).loss.backward()
            model.zero_grad(set_to_none=False)
        return run

    step(plain)()  # gradients for the optimizer to step
    return {"step": step(plain), **{mode: step(m) for mode, m in checkpointed.items()}, "optimizer": optimizer.step}


def median_seconds(fn: Callable[[], None], steps: int, sync: Callable[[], None] = lambda: None) -> float:
    """Median wall time of ``steps`` calls after three warm-ups, each from a ``sync`` to a ``sync`` (on a GPU:
    ``torch.cuda.synchronize``, so that a call's kernels are done within its own time)."""
    for _ in range(3):
        fn()
    times = []
    for _ in range(steps):
        sync()
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def summarise(rows: Sequence[dict[str, Any]], kernels: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Per architecture and mode: the median over the repeats, and microseconds per counted kernel; for a
    checkpointed step also what checkpointing costs the host per block beyond its kernels (the checkpointed time
    less its kernels at the plain step's cost per kernel, over the blocks it wraps).

    Example:
        >>> rows = [{"arch": "a", "mode": m, "seconds": s} for m, s in (("step", 0.02), ("step", 0.03),
        ...         ("step", 0.025), ("checkpointed", 0.055))]
        >>> plain, checkpointed = summarise(rows, {"a": {"step": 1000, "checkpointed": 1200, "blocks": 10}})
        >>> plain["us_per_kernel"], checkpointed["us_per_kernel"], checkpointed["ms_per_block"]
        (25.0, 45.8, 2.5)
    """
    medians = {(arch, mode): statistics.median(r["seconds"] for r in rows if (r["arch"], r["mode"]) == (arch, mode))
               for arch, mode in dict.fromkeys((r["arch"], r["mode"]) for r in rows)}
    out = []
    for (arch, mode), seconds in medians.items():
        count = kernels[arch][mode]
        row = {"arch": arch, "mode": mode, "median_s": seconds, "kernels": count,
               "us_per_kernel": round(seconds / count * 1e6, 1)}
        if mode in CHECKPOINTING and (arch, "step") in medians:
            per_kernel = medians[(arch, "step")] / kernels[arch]["step"]
            row["blocks"] = kernels[arch]["blocks"]
            row["ms_per_block"] = round((seconds - count * per_kernel) / max(1, row["blocks"]) * 1e3, 2)
        out.append(row)
    return out


def overall(summary: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The medians over the architectures, with their ranges: µs per kernel of a forward + backward
    (``step_us``), ms per block checkpointed whole (``checkpoint_block_ms``) and under the op-selective policy
    (``op_checkpoint_block_ms``), µs per kernel of the optimizer step.

    Example:
        >>> s = [{"mode": "step", "us_per_kernel": 20.0}, {"mode": "step", "us_per_kernel": 30.0},
        ...      {"mode": "checkpointed", "us_per_kernel": 40.0, "ms_per_block": 1.0},
        ...      {"mode": "op-checkpointed", "us_per_kernel": 90.0, "ms_per_block": 9.0},
        ...      {"mode": "optimizer", "us_per_kernel": 5.0}]
        >>> o = overall(s)
        >>> o["step_us"], o["checkpoint_block_ms"], o["op_checkpoint_block_ms"], o["optimizer_us"]
        (25.0, 1.0, 9.0, 5.0)
    """
    def median_range(values: list[float]) -> tuple[float, list[float]]:
        return statistics.median(values), [min(values), max(values)]

    def per_kernel(mode: str) -> list[float]:
        return [r["us_per_kernel"] for r in summary if r["mode"] == mode]

    def per_block(mode: str) -> list[float]:
        return [r["ms_per_block"] for r in summary if r["mode"] == mode and "ms_per_block" in r]

    step, step_range = median_range(per_kernel("step"))
    block, block_range = median_range(per_block("checkpointed"))
    op_block, op_block_range = median_range(per_block("op-checkpointed"))
    optimizer, optimizer_range = median_range(per_kernel("optimizer"))
    return {"step_us": step, "step_range_us": step_range, "checkpoint_block_ms": block,
            "checkpoint_block_range_ms": block_range, "op_checkpoint_block_ms": op_block,
            "op_checkpoint_block_range_ms": op_block_range, "optimizer_us": optimizer,
            "optimizer_range_us": optimizer_range}


def markdown(report: dict[str, Any]) -> str:
    """The table with its header."""
    meta, s, o = report["meta"], report["settings"], report["overall"]
    device = meta.get("device", "cpu")
    where = "on the CPU" if device == "cpu" else f"on the GPU ({device}, each step from a synchronize to a synchronize)"
    lines = ["# The host's time per kernel in PyTorch eager mode", "",
             f"{meta['date']}, {meta['machine']}, Python {meta['python']}, torch {meta['torch']}, transformers "
             f"{meta['transformers']}; one thread; other processes kept {meta['foreign_cores']} cores busy on "
             "average.", "",
             f"Benchmark: `{meta['command']}` (median of {s['steps']} steps after three warm-ups, {s['repeats']} "
             "rounds in rotated order; the median over the rounds).", "",
             "What is measured: the host's wall time of one training step of a narrow copy of each architecture "
             f"(its real depth, {WIDTH['hidden']} wide, {WIDTH['heads']} heads, a vocabulary of "
             f"{WIDTH['vocab']}, {SEQ_LEN} tokens, one sample, fp32, eager attention) {where}, divided by the "
             "kernels autoshard's op census counts for the same step on a CUDA GPU. A checkpointed step costs the "
             "host more than its kernels (recomputation's kernels are in the census): the checkpoint wrapper's own "
             "work per block (saved-tensor hooks, RNG state, the recomputation's Python), here the checkpointed "
             "time less its kernels at the plain step's cost per kernel, over the blocks wrapped. The step-time "
             "model takes the medians: per kernel of a forward + backward `step_time.LAUNCH_S`, per block "
             "checkpointed whole (`full`, `every-N`) `step_time.CHECKPOINT_BLOCK_S`, per block under the "
             "op-selective policy `step_time.OP_CHECKPOINT_BLOCK_S`, per kernel of an optimizer step "
             "`step_time.OPTIMIZER_LAUNCH_S`.", "",
             f"**Forward + backward: {o['step_us']:g} µs per kernel** (median; range {o['step_range_us'][0]:g}–"
             f"{o['step_range_us'][1]:g}). **Checkpointing: {o['checkpoint_block_ms']:g} ms per block** (range "
             f"{o['checkpoint_block_range_ms'][0]:g}–{o['checkpoint_block_range_ms'][1]:g}); **op-selective: "
             f"{o['op_checkpoint_block_ms']:g} ms per block** (range {o['op_checkpoint_block_range_ms'][0]:g}–"
             f"{o['op_checkpoint_block_range_ms'][1]:g}). **Optimizer step "
             f"(for-loop AdamW): {o['optimizer_us']:g} µs per kernel** (range {o['optimizer_range_us'][0]:g}–"
             f"{o['optimizer_range_us'][1]:g}).", "",
             "| architecture | mode | median host time | kernels (census) | µs per kernel | checkpointed blocks | "
             "ms per block beyond its kernels |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for r in report["summary"]:
        block = f"{r['blocks']} | {r['ms_per_block']:g}" if "ms_per_block" in r else "— | —"
        lines.append(f"| {r['arch']} | {r['mode']} | {r['median_s'] * 1e3:.1f} ms | {r['kernels']:,} | "
                     f"{r['us_per_kernel']:g} | {block} |")
    lines += ["", "On a GPU the kernels run asynchronously and the host's time per kernel bounds the step only "
              "when the kernels are short (small micro-batches, small models): the step takes `max(GPU time, "
              "kernels × cost per kernel + checkpointed blocks × cost per block)`. On the CPU each op's kernel "
              "runs inline; here it is a few microseconds, "
              "standing in for the CUDA launch call. A host CPU faster or slower than this one, or another "
              "PyTorch version, moves these figures."]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Measure, write, print; 2 on bad arguments."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=positive, default=15, help="timed steps per case (default 15)")
    parser.add_argument("--repeats", type=positive, default=5, help="rounds over the cases (default 5)")
    parser.add_argument("--only", nargs="+", choices=[a.name for a in ARCHS], metavar="ARCH",
                        help=f"measure only these architectures (of {', '.join(a.name for a in ARCHS)})")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="where the narrow copies run (default cpu; cuda: the real launches of this GPU's host, "
                             "written as gpu_host_overhead.{md,json})")
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks"), help="where to write the report")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("error: --device cuda: no CUDA device is available here; measure on the CPU (--device cpu).",
              file=sys.stderr)
        return 2
    archs = [a for a in ARCHS if not args.only or a.name in args.only]
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        configs = {a.name: write_config(a, Path(tmp) / a.name) for a in archs}
        kernels = {a.name: census_kernels(configs[a.name]) for a in archs}
        fns = {a.name: timers(a, configs[a.name], kernels[a.name]["block_names"], args.device) for a in archs}
        cases = [(a.name, mode) for a in archs for mode in MODES]
        before, start = cpu_seconds(), time.perf_counter()
        rows = []
        for r in range(args.repeats):
            shift = r * len(MODES) % len(cases)
            for arch, mode in cases[shift:] + cases[:shift]:
                rows.append({"arch": arch, "mode": mode, "repeat": r,
                             "seconds": median_seconds(fns[arch][mode], args.steps, sync)})
        busy = foreign_cores(before, cpu_seconds(), time.perf_counter() - start)
    summary = summarise(rows, kernels)
    device = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    report = {"meta": run_meta("host_overhead.py", argv, transformers=package_version("transformers"),
                               foreign_cores=busy, device=device),
              "settings": {"steps": args.steps, "repeats": args.repeats, "width": WIDTH, "seq_len": SEQ_LEN},
              "overall": overall(summary), "summary": summary, "rows": rows}
    write_report(args.out, "gpu_host_overhead" if args.device == "cuda" else "host_overhead", report,
                 markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
