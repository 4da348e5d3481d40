"""The step-time model's kernel assumptions, measured on this GPU: GEMM, fused-attention and memory-bound rates.

Usage:
    python benchmarks/gpu_kernels.py [--dry-run] [--out docs/benchmarks] [--repeats N] [--gpu PROFILE]

autoshard prices a training step kernel class by kernel class (:mod:`autoshard.strategies.step_time`): GEMMs at
the GPU profile's ``achievable.matmul`` fraction of its dense peak (or its memory roofline), fused attention at
``achievable.attention``, memory-bound kernels at ``achievable.memory`` of the memory bandwidth. Those fractions
come from published measurements (``profiles/gpus/*.yaml``). This script times the kernels themselves on the GPU
it runs on and sets each beside what the model predicts for it (``step_time.estimate`` on a one-kernel census):

* **GEMMs** in bf16 and fp16: a large square one (the "maximum achievable matmul" shape), a Llama-3-8B layer's
  projections at 8,192 tokens, a small-M GEMM below the ridge point, and GPT-2's LM head with its vocabulary of
  50,257 (not a multiple of 8) beside the same GEMM padded to 50,304: the model prices both alike, NVIDIA's
  guidance says the first cannot use the tensor cores at their best ("Tensor Core Requirements", NVIDIA Matrix
  Multiplication Background User's Guide); this measures by how much (5.4 x on an H200, 2026-11-28); and an
  alignment sweep in bf16 (the vocabulary's width odd, even, a multiple of 4 and of 8; K and M unaligned), to
  find which alignment that needs before the step-time model prices it; and the layer GEMMs of small models
  (GPT-2's at 8,192 tokens of width 768 in bf16, BERT-large's at 2,048 tokens of width 1,024 in fp16), whose
  whole steps the model predicts 10-25 % fast: do they reach large GEMMs' fraction of the peak?
* **fused attention** (``F.scaled_dot_product_attention``, the flash kernel), forward + backward, causal and not,
  its FLOPs counted as autoshard's profiler counts them (:func:`autoshard.profiler.flops.attention_flops`: the
  full score matrix, whatever the mask);
* **memory-bound** kernels: a copy, an add and an fp32 softmax, bytes read + written.

Each kernel is timed with CUDA events over ``--repeats`` runs after warm-up (the median). The table gives the
rate reached, that rate as a fraction of the profile's peak (the number to hold against ``achievable``), the
model's time and the signed error ``(predicted - measured) / measured``.

``--dry-run`` checks the plumbing on CPU with small sizes against the H100 SXM profile (the figures mean
nothing there). Writes ``gpu_kernels.{md,json}`` under ``--out`` (``--name`` changes the file name).
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the helpers beside this script
from _common import package_version, positive
from memory_accuracy import machine

import autoshard
from autoshard.hardware.specs import GPUSpec
from autoshard.profiler.flops import attention_backward_flops, attention_flops
from autoshard.profiler.op_census import MatmulClass, MemoryClass, OpCensus, size_class
from autoshard.strategies import step_time

DRY_RUN_GPU = "h100-sxm-80gb"
"""The profile the dry run predicts with (its figures only check the plumbing)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Kernel:
    """One timed kernel and the census autoshard's step-time model prices it from."""

    name: str
    kind: str
    """``gemm``, ``attention`` or ``memory``."""
    dtype: str
    shape: str
    flops: int
    bytes: int
    smallest_dim: int
    """The dimension the census classes a matmul by: a GEMM's smallest, attention's head dimension (0: memory)."""
    run: Callable[[], Any]

    def census(self) -> OpCensus:
        """The one-kernel census the profiler would have taken of this kernel."""
        if self.kind == "memory":
            return OpCensus(memory=(MemoryClass(size_bytes=size_class(self.bytes), bytes=self.bytes, kernels=1),))
        kernels = 1 if self.kind == "gemm" else 2  # attention: one forward and one backward kernel
        return OpCensus(matmuls=(MatmulClass(kind=self.kind, dtype=self.dtype, min_dim=size_class(self.smallest_dim),
                                             flops=self.flops, bytes=self.bytes, kernels=kernels),))


_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def gemm(name: str, m: int, n: int, k: int, dtype: str, device: torch.device) -> Kernel:
    """``(m × k) @ (k × n)``: ``2mnk`` FLOPs, operands read and the result written once."""
    a = torch.randn(m, k, device=device, dtype=_DTYPES[dtype])
    b = torch.randn(k, n, device=device, dtype=_DTYPES[dtype])
    size = a.element_size()
    return Kernel(name=name, kind="gemm", dtype=dtype, shape=f"{m}x{n}x{k}", flops=2 * m * n * k,
                  bytes=size * (m * k + k * n + m * n), smallest_dim=min(m, n, k), run=lambda: a @ b)


def attention(name: str, b: int, h: int, s: int, d: int, dtype: str, device: torch.device, *,
              causal: bool) -> Kernel:
    """SDPA forward + backward on ``(b, h, s, d)`` query, key and value."""
    q, k, v = (torch.randn(b, h, s, d, device=device, dtype=_DTYPES[dtype], requires_grad=True) for _ in range(3))
    grad = torch.randn(b, h, s, d, device=device, dtype=_DTYPES[dtype])
    shape = torch.Size((b, h, s, d))
    flops = attention_flops(shape, shape, shape) + attention_backward_flops(shape, shape, shape, shape)
    size = q.element_size() * q.numel()

    def run() -> None:
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
        torch.autograd.grad(out, (q, k, v), grad)

    # Forward reads q, k, v and writes out; backward reads q, k, v, out, grad and writes three gradients.
    return Kernel(name=name, kind="attention", dtype=dtype, shape=f"{b}x{h}x{s}x{d}", flops=flops,
                  bytes=12 * size, smallest_dim=d, run=run)


def memory(name: str, numel: int, device: torch.device, op: str) -> Kernel:
    """A streaming kernel over ``numel`` elements: ``copy`` (bf16), ``add`` (bf16) or ``softmax`` (fp32 rows of
    4,096)."""
    if op == "softmax":
        x = torch.randn(numel // 4096, 4096, device=device)
        return Kernel(name=name, kind="memory", dtype="fp32", shape=f"{numel // 4096}x4096", flops=0,
                      bytes=2 * x.numel() * 4, smallest_dim=0, run=lambda: torch.softmax(x, dim=-1))
    x = torch.randn(numel, device=device, dtype=torch.bfloat16)
    y = torch.empty_like(x)
    if op == "copy":
        return Kernel(name=name, kind="memory", dtype="bf16", shape=str(numel), flops=0, bytes=4 * numel,
                      smallest_dim=0, run=lambda: y.copy_(x))
    return Kernel(name=name, kind="memory", dtype="bf16", shape=str(numel), flops=0, bytes=6 * numel,
                  smallest_dim=0, run=lambda: torch.add(x, y))


def kernels(device: torch.device, *, dry: bool) -> list[Kernel]:
    """The kernels timed, smaller on a dry run."""
    t = 256 if dry else 8192  # tokens in a step's GEMMs
    big = 256 if dry else 8192
    hidden, ffn = (64, 224) if dry else (4096, 14336)
    vocab, padded, width = (1001, 1008, 64) if dry else (50257, 50304, 768)
    out: list[Kernel] = []
    for dtype in ("bf16", "fp16"):
        out += [
            gemm(f"square {big}", big, big, big, dtype, device),
            gemm("Llama-3-8B q/o projection", t, hidden, hidden, dtype, device),
            gemm("Llama-3-8B MLP up", t, ffn, hidden, dtype, device),
            gemm("Llama-3-8B MLP down", t, hidden, ffn, dtype, device),
            gemm("small M (256 tokens)", 16 if dry else 256, hidden, hidden, dtype, device),
            gemm(f"GPT-2 LM head, vocabulary {vocab}", t, vocab, width, dtype, device),
            gemm(f"GPT-2 LM head, vocabulary padded to {padded}", t, padded, width, dtype, device),
        ]
    # Which alignment the 5x of the unaligned LM head (H200, 2026-11-28) needs: N odd, even, a multiple of 4 and of
    # 8 elements, then K unaligned (the input's gradient) and M unaligned (cuBLAS's leading dimensions are K and N).
    sweep = [gemm(f"alignment sweep: N {n}", t, n, width, "bf16", device)
             for n in (vocab, vocab + 1, vocab + 3, vocab + 7, padded)]
    sweep += [gemm(f"alignment sweep: K {vocab}", t, width, vocab, "bf16", device),
              gemm(f"alignment sweep: M {t - 1}", t - 1, padded, width, "bf16", device)]
    out += sweep
    # The GEMMs of small models, whose whole steps the model predicts 10-25 % fast (GPT-2 on an H200, the published
    # GPT-2 and BERT-large runs under autocast): does a hidden size of 768 or 1024 reach large GEMMs' fraction?
    gpt2, bert = (256, 64) if dry else (8192, 768), (128, 64) if dry else (2048, 1024)
    out += [gemm(f"GPT-2 {name}", gpt2[0], n * gpt2[1], k * gpt2[1], "bf16", device)
            for name, n, k in (("attention in-projection", 3, 1), ("attention out-projection", 1, 1),
                               ("MLP up", 4, 1), ("MLP down", 1, 4))]
    out += [gemm(f"BERT-large {name}", bert[0], n * bert[1], k * bert[1], "fp16", device)
            for name, n, k in (("projection", 1, 1), ("MLP up", 4, 1), ("MLP down", 1, 4))]
    b, h, s, d = (1, 2, 128, 32) if dry else (4, 32, 4096, 128)
    out += [attention("SDPA causal", b, h, s, d, "bf16", device, causal=True),
            attention("SDPA full", b, h, s, d, "bf16", device, causal=False)]
    n = 2**16 if dry else 2**28
    out += [memory("copy", n, device, "copy"), memory("add", n, device, "add"),
            memory("softmax fp32", n, device, "softmax")]
    return out


def time_kernel(kernel: Kernel, device: torch.device, *, repeats: int, warmup: int) -> float:
    """Median seconds of one run of ``kernel`` (CUDA events on a GPU, the wall clock on CPU)."""
    for _ in range(warmup):
        kernel.run()
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            kernel.run()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            kernel.run()
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def row(kernel: Kernel, seconds: float, gpu: GPUSpec | None) -> dict[str, Any]:
    """One kernel's measured rate, its fraction of the profile's peak, the model's time and the error."""
    out: dict[str, Any] = {"name": kernel.name, "kind": kernel.kind, "dtype": kernel.dtype, "shape": kernel.shape,
                           "flops": kernel.flops, "bytes": kernel.bytes, "measured_s": seconds,
                           "tflops": kernel.flops / seconds / 1e12 if kernel.flops else None,
                           "gb_per_s": kernel.bytes / seconds / 1e9, "fraction_of_peak": None,
                           "profile_fraction": None, "predicted_s": None, "error_percent": None}
    if gpu is None:
        return out
    fractions = gpu.achievable or step_time.GENERIC
    if kernel.kind == "memory":
        if gpu.memory_bandwidth_bytes_per_s:
            out["fraction_of_peak"] = kernel.bytes / seconds / gpu.memory_bandwidth_bytes_per_s
        out["profile_fraction"] = fractions.memory
    else:
        peak = gpu.peak_tflops.for_dtype(kernel.dtype)
        if peak:
            out["fraction_of_peak"] = kernel.flops / seconds / (peak * 1e12)
        out["profile_fraction"] = fractions.attention if kernel.kind == "attention" else fractions.matmul
    estimate = step_time.estimate(kernel.census(), 1, gpu, launch_s=0.0)
    if estimate is not None:
        out["predicted_s"] = estimate.seconds
        out["error_percent"] = (estimate.seconds - seconds) / seconds * 100
    return out


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Median |error| per kind, and the LM head's unaligned / padded time ratio per dtype."""
    out: dict[str, Any] = {}
    for kind in ("gemm", "attention", "memory"):
        errors = [abs(r["error_percent"]) for r in rows if r["kind"] == kind and r["error_percent"] is not None]
        out[kind] = {"n": len(errors), "median_abs_error_percent": statistics.median(errors) if errors else None}
    for dtype in ("bf16", "fp16"):
        heads = [r for r in rows if r["dtype"] == dtype and r["name"].startswith("GPT-2 LM head")]
        if len(heads) == 2:
            unaligned, padded = heads
            out[f"lm_head_unaligned_over_padded_{dtype}"] = {
                "unaligned": unaligned["shape"], "padded": padded["shape"],
                "measured": unaligned["measured_s"] / padded["measured_s"],
                "predicted": (None if unaligned["predicted_s"] is None or padded["predicted_s"] is None
                              else unaligned["predicted_s"] / padded["predicted_s"])}
    sweep = [r for r in rows if r["name"].startswith("alignment sweep")]
    widths = [r for r in sweep if r["name"].startswith("alignment sweep: N")]
    if widths:  # over the padded vocabulary's GEMM, the widest
        padded = max(widths, key=lambda r: int(r["name"].rsplit(" ", 1)[1]))
        out["alignment_sweep_over_padded"] = {f'{r["name"].removeprefix("alignment sweep: ")} ({r["shape"]})':
                                              r["measured_s"] / padded["measured_s"] for r in sweep}
    return out


def _fmt(x: float | None, spec: str) -> str:
    return "—" if x is None else format(x, spec)


def write_report(out: Path, report: dict[str, Any], name: str) -> None:
    """``NAME.json`` and ``NAME.md`` under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    meta, summary = report["meta"], report["summary"]
    where = ", ".join(f"{k} {v}" for k, v in meta["machine"].items())
    lines = [
        "# The step-time model's kernels, measured" + (" — DRY RUN (CPU, small sizes: no figure here means "
                                                      "anything)" if meta["dry_run"] else ""),
        "",
        f"{meta['date']}, {where}, profile `{meta['gpu_profile']}`, Python {meta['python']}, "
        f"torch {meta['torch']}, autoshard {meta['autoshard']}.",
        "",
        f"Command: `{meta['command']}` ({meta['seconds']} s)",
        "",
        "Measured: the median of the kernel's own time (CUDA events) over the repeats after warm-up. Predicted: "
        "`autoshard.strategies.step_time.estimate` on a census of that one kernel, with no launch time. "
        "Fraction: the measured rate over the profile's dense peak (GEMMs, attention) or memory bandwidth, to "
        "hold against the profile's `achievable` fraction. Error = (predicted − measured) / measured.",
        "",
        "| kernel | dtype | shape | measured (ms) | TFLOP/s | GB/s | fraction of peak | profile's fraction | "
        "predicted (ms) | error |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in report["rows"]:
        lines.append(
            f"| {r['name']} | {r['dtype']} | {r['shape']} | {r['measured_s'] * 1e3:.3f} | {_fmt(r['tflops'], '.1f')}"
            f" | {r['gb_per_s']:.0f} | {_fmt(r['fraction_of_peak'], '.3f')} | {_fmt(r['profile_fraction'], '.3f')}"
            f" | {_fmt(None if r['predicted_s'] is None else r['predicted_s'] * 1e3, '.3f')}"
            f" | {_fmt(r['error_percent'], '+.1f')}{'' if r['error_percent'] is None else ' %'} |")
    lines += ["", "| kind | kernels | median \\|error\\| |", "|---|---:|---:|"]
    for kind in ("gemm", "attention", "memory"):
        s = summary[kind]
        median = s["median_abs_error_percent"]
        lines.append(f"| {kind} | {s['n']} | {_fmt(median, '.1f')}{'' if median is None else ' %'} |")
    for dtype in ("bf16", "fp16"):
        ratio = summary.get(f"lm_head_unaligned_over_padded_{dtype}")
        if ratio is not None:
            lines.append(f"\nGPT-2's LM head in {dtype}, `{ratio['unaligned']}` over the same GEMM padded to "
                         f"`{ratio['padded']}`: {ratio['measured']:.2f} × the time (autoshard's model: "
                         f"{_fmt(ratio['predicted'], '.2f')} ×).")
    sweep = summary.get("alignment_sweep_over_padded")
    if sweep:
        lines.append("\nAlignment sweep (bf16), each GEMM's time over the padded vocabulary's: "
                     + "; ".join(f"{k} {v:.2f} ×" for k, v in sweep.items()) + ".")
    (out / f"{name}.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    """Time every kernel, write the report; the exit status is 0 unless it crashed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="small sizes on the CPU, to check the plumbing")
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks"))
    parser.add_argument("--name", default="gpu_kernels", help="the report's file name, without extension")
    parser.add_argument("--repeats", type=positive, default=None, help="timed runs per kernel (default 20; dry 3)")
    parser.add_argument("--gpu", default=None,
                        help="the GPU profile to predict with (default: this GPU's, found by its name)")
    args = parser.parse_args(argv)
    if not args.dry_run and not torch.cuda.is_available():
        parser.error("no CUDA GPU here (torch.cuda.is_available() is False); --dry-run checks the plumbing on CPU.")
    from autoshard.hardware.profiles import gpu_profile_for, load_profile

    device = torch.device("cpu" if args.dry_run else "cuda")
    profile_name = args.gpu or (DRY_RUN_GPU if args.dry_run else None)
    if profile_name:
        spec = load_profile(profile_name).spec
        if not isinstance(spec, GPUSpec):
            parser.error(f"--gpu {profile_name}: not a GPU profile (see `autoshard hardware --list`).")
        gpu: GPUSpec | None = spec
    else:
        gpu = gpu_profile_for(torch.cuda.get_device_name(device))
    repeats = args.repeats or (3 if args.dry_run else 20)
    started = time.monotonic()
    rows = []
    for kernel in kernels(device, dry=args.dry_run):
        seconds = time_kernel(kernel, device, repeats=repeats, warmup=1 if args.dry_run else 5)
        rows.append(row(kernel, seconds, gpu))
        print(f"{kernel.name} {kernel.dtype}: {seconds * 1e3:.3f} ms", flush=True)
    shown = list(sys.argv[1:] if argv is None else argv)
    report = {
        "meta": {"date": datetime.date.today().isoformat(), "machine": machine(device),
                 "gpu_profile": gpu.name if gpu is not None else "none (this GPU has no profile)",
                 "python": platform.python_version(), "torch": torch.__version__,
                 "deepspeed": package_version("deepspeed") or "not installed",
                 "autoshard": autoshard.__version__, "dry_run": args.dry_run, "repeats": repeats,
                 "command": " ".join(["python", "benchmarks/gpu_kernels.py", *shown]),
                 "seconds": round(time.monotonic() - started, 1)},
        "summary": summarize(rows),
        "rows": rows,
    }
    write_report(args.out, report, args.name)
    print(json.dumps(report["summary"]), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
