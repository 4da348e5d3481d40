"""Host time FSDP2 spends per unit (its hooks) and per parameter tensor (the optimizer on DTensors) each step.

FSDP2 (``torch.distributed.fsdp.fully_shard``, torch 2.13.0, ``torch/distributed/fsdp/_fully_shard/``) runs
Python around every unit, once per pass, whatever the unit's size: before forward the unit's all-gather is issued
and its output copied out into the unsharded parameters (``FSDPParamGroup.pre_forward``: ``unshard``,
``wait_for_unshard``, ``foreach_all_gather``, ``foreach_all_gather_copy_out``); after forward it reshards
(``post_forward``; with ``reshard_after_forward=False`` it keeps them); before backward it unshards again (a
no-op when it kept them); after backward ``foreach_reduce`` reduce-scatters the unsharded gradients and builds the
sharded ones as DTensors. Much of it is a loop over the unit's parameters. Then the optimizer steps DTensor
parameters: each aten op goes through DTensor's Python dispatch (sharding propagation), which torch's for-loop
AdamW calls about ten times per parameter and its foreach AdamW about ten times per list.

Measured here as slopes over the number of units: one training step's forward + ``backward()`` of a stack of
units at micro-batch 1 (so the arithmetic is negligible), each unit ``fully_shard``-ed and then the root, as
autoshard's FSDP backend wraps blocks (``autoshard/strategies/fsdp/backend.py``), less the same stack in plain
torch in the same dtype; the optimizer step (``torch.optim.AdamW``, ``foreach=False`` and ``foreach=True``) over
the DTensor shards less the same optimizer over plain tensors, as a slope over the parameter tensors. Two unit
shapes, ``linear`` (one ``nn.Linear``: 2 parameter tensors) and ``block`` (six: 12, as many as a GPT-2 block),
split each unit's time into a part per unit and a part per parameter tensor. FSDP runs with autoshard's
mixed-precision policy (``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)``, the ``bf16`` kinds) and
without one (``fp32``), ``reshard_after_forward`` True and False; world size 1 on a real gloo group. Each
configuration runs in a fresh process, one intra-op thread, the configurations interleaved and repeated.

Usage::

    python benchmarks/fsdp_hooks.py [--units 4 16] [--width 64] [--steps 30] [--warmup 6] [--repeats 3]
                                    [--kinds KIND ...] [--accelerator cpu|cuda] [--name NAME]
                                    [--out docs/benchmarks]

Writes ``fsdp_hooks.{md,json}`` under ``--out`` (``gpu_fsdp_hooks`` with ``--accelerator cuda``: the stacks on
one GPU, a real NCCL group of one, the device synchronized before each clock reading, so that a step's time is
its wall time with real CUDA launches; the GPU campaign runs it so). ``--kinds`` measures a subset (each FSDP kind
with its plain baseline); the optimizer's plain baseline is ``torch-fp32``, or ``torch-bf16`` when only that is
measured (its parameters bf16: the same kernels launched, their arithmetic aside).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the shared module beside this script, however it is loaded
from _common import accelerator_device, one_rank_worker, positive, run_meta, slope, write_report

SCRIPT = Path(__file__).resolve()
KINDS = ("torch-fp32", "torch-bf16", "fsdp-raf-fp32", "fsdp-keep-fp32", "fsdp-raf-bf16", "fsdp-keep-bf16")
"""Plain torch (fp32, or the stack cast to bf16) and FSDP2 with ``reshard_after_forward`` True (``raf``) or False
(``keep``), without a mixed-precision policy (``fp32``) or with autoshard's (``bf16``)."""
SHAPES = {"linear": 1, "block": 6}
"""Unit shape: its ``nn.Linear`` layers (2 parameter tensors each: a weight and a bias)."""
TENSORS_PER_LINEAR = 2
IMPLS = ("for-loop", "foreach")


def baseline(kind: str) -> str:
    """The plain-torch kind an FSDP kind is compared with: the same compute dtype.

    Example:
        >>> baseline("fsdp-keep-bf16")
        'torch-bf16'
    """
    return "torch-" + kind.rsplit("-", 1)[1]


def optimizer_baseline(kinds: Sequence[str]) -> str:
    """The plain kind the optimizer's FSDP steps are compared with: ``torch-fp32`` (FSDP's sharded parameters are
    fp32 in every kind), else ``torch-bf16``.

    Example:
        >>> optimizer_baseline(["torch-bf16", "fsdp-raf-bf16"])
        'torch-bf16'
    """
    return "torch-fp32" if "torch-fp32" in kinds else "torch-bf16"


def worker(kind: str, shape: str, units: int, width: int, steps: int, warmup: int,
           accelerator: str = "cpu") -> dict[str, Any]:
    """One configuration in this process: the median forward + backward seconds of ``steps`` timed steps and the
    median optimizer step seconds of each implementation (the two alternate, each over its own state); on CUDA
    the device synchronized before each clock reading."""
    import torch
    from torch import nn

    torch.set_num_threads(1)
    torch.manual_seed(0)
    device = torch.device(accelerator, 0) if accelerator == "cuda" else torch.device("cpu")
    sync: Callable[[], None] = torch.cuda.synchronize if accelerator == "cuda" else (lambda: None)
    if accelerator == "cuda":
        torch.cuda.set_device(device)

    def unit() -> nn.Module:
        layers = [nn.Linear(width, width) for _ in range(SHAPES[shape])]
        return layers[0] if len(layers) == 1 else nn.Sequential(*layers)

    model = nn.Sequential(*[unit() for _ in range(units)]).to(device)
    x = torch.randn(1, width, device=device)
    if kind.startswith("torch"):
        if kind.endswith("bf16"):
            model, x = model.to(torch.bfloat16), x.to(torch.bfloat16)
    else:
        import torch.distributed as dist
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        dist.init_process_group("nccl" if accelerator == "cuda" else "gloo")
        kwargs: dict[str, Any] = {"mesh": init_device_mesh(device.type, (1,))}
        if kind.endswith("bf16"):  # autoshard's policy for the mixed precisions (fsdp/backend.py _shard)
            kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for block in model:
            fully_shard(block, reshard_after_forward="-raf-" in kind, **kwargs)
        fully_shard(model, **kwargs)  # the root: reshard_after_forward=None, never resharded after forward
    optimizers = {impl: torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=impl == "foreach") for impl in IMPLS}
    fwd_bwd: list[float] = []
    opt: dict[str, list[float]] = {impl: [] for impl in IMPLS}
    for i in range(warmup + steps):
        sync()
        start = time.perf_counter()
        model(x).float().square().mean().backward()
        sync()
        middle = time.perf_counter()
        impl = IMPLS[i % 2]
        optimizers[impl].step()
        sync()
        end = time.perf_counter()
        optimizers[impl].zero_grad()
        if i >= warmup:
            fwd_bwd.append(middle - start)
            opt[impl].append(end - middle)
    tensors = sum(1 for _ in model.parameters())
    return {"kind": kind, "shape": shape, "units": units, "tensors": tensors, "width": width,
            "median_s": statistics.median(fwd_bwd),
            "optimizer_s": {impl: statistics.median(v) for impl, v in opt.items()}}


def run_worker(kind: str, shape: str, units: int, width: int, steps: int, warmup: int, port: int,
               accelerator: str = "cpu") -> dict[str, Any]:
    """:func:`worker` in a fresh interpreter (one rank of a world of one; gloo on CPU, NCCL on CUDA)."""
    args = [kind, shape, str(units), str(width), str(steps), str(warmup), accelerator]
    return one_rank_worker(SCRIPT, args, port, f"{kind} {shape} x {units}")


def _split(per_unit: dict[str, float]) -> dict[str, float]:
    """A unit's seconds as a part per unit and a part per parameter tensor, from the two shapes' slopes."""
    t = {s: SHAPES[s] * TENSORS_PER_LINEAR for s in SHAPES}
    per_tensor = (per_unit["block"] - per_unit["linear"]) / (t["block"] - t["linear"])
    return {"s_per_unit": per_unit["linear"] - t["linear"] * per_tensor, "s_per_tensor": per_tensor}


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Forward + backward: per kind measured and shape, the median seconds per unit count (over repeats), the slope
    per unit, the FSDP kinds' slope over their plain baseline's, and that split into a part per unit and one per
    parameter tensor; each repeat's slopes alone give the spread. Optimizer: per implementation, the slope over
    parameter tensors of the FSDP kinds' steps (pooled) and of the plain baseline's (:func:`optimizer_baseline`),
    and their difference."""
    kinds = [k for k in KINDS if any(r["kind"] == k for r in rows)]
    out: dict[str, Any] = {"kinds": kinds, "forward_backward": {}, "optimizer": {}}
    repeats = sorted({r["repeat"] for r in rows})

    def slopes(kind: str, shape: str, repeat: int | None) -> tuple[dict[int, float], float]:
        mine = [r for r in rows if r["kind"] == kind and r["shape"] == shape and repeat in (None, r["repeat"])]
        counts = sorted({r["units"] for r in mine})
        medians = {n: statistics.median(r["median_s"] for r in mine if r["units"] == n) for n in counts}
        return medians, slope(list(medians.items()))

    fb = out["forward_backward"]
    for kind in kinds:
        fb[kind] = {}
        for shape in SHAPES:
            medians, s = slopes(kind, shape, None)
            fb[kind][shape] = {"median_s_by_units": medians, "slope_s_per_unit": s}
    for kind in kinds:
        if kind.startswith("torch"):
            continue
        over = {}
        for shape in SHAPES:
            over[shape] = fb[kind][shape]["slope_s_per_unit"] - fb[baseline(kind)][shape]["slope_s_per_unit"]
            by_repeat = [slopes(kind, shape, r)[1] - slopes(baseline(kind), shape, r)[1] for r in repeats]
            fb[kind][shape]["over_torch_s_per_unit"] = over[shape]
            fb[kind][shape]["over_torch_by_repeat"] = by_repeat
        fb[kind]["split"] = _split(over)
        fb[kind]["split_by_repeat"] = [_split({s: fb[kind][s]["over_torch_by_repeat"][i] for s in SHAPES})
                                       for i in range(len(repeats))]
    fsdp = [r for r in rows if r["kind"].startswith("fsdp")]
    out["optimizer_baseline"] = optimizer_baseline(kinds)
    plain = [r for r in rows if r["kind"] == out["optimizer_baseline"]]
    for impl in IMPLS:
        out["optimizer"][impl] = {
            "fsdp_slope_s_per_tensor": _optimizer_slope(fsdp, impl),
            "torch_slope_s_per_tensor": _optimizer_slope(plain, impl),
            "over_torch_s_per_tensor": _optimizer_slope(fsdp, impl) - _optimizer_slope(plain, impl),
            "over_torch_by_repeat": [_optimizer_slope(fsdp, impl, r) - _optimizer_slope(plain, impl, r)
                                     for r in repeats]}
    return out


def _optimizer_slope(rows: list[dict[str, Any]], impl: str, repeat: int | None = None) -> float:
    """The slope of ``impl``'s step time over the parameter tensors (medians per tensor count) of ``rows`` (one
    repeat's, or all)."""
    chosen = [r for r in rows if repeat in (None, r["repeat"])]
    counts = sorted({r["tensors"] for r in chosen})
    return slope([(n, statistics.median(r["optimizer_s"][impl] for r in chosen if r["tensors"] == n))
                  for n in counts])


def _ms(x: float, digits: int = 3) -> str:
    return f"{x * 1e3:.{digits}f}"


def _spread(values: Sequence[float]) -> str:
    return f"{_ms(min(values))} … {_ms(max(values))}"


def markdown(report: dict[str, Any]) -> str:
    """The report as a page."""
    meta, summary = report["meta"], report["summary"]
    fb, opt = summary["forward_backward"], summary["optimizer"]
    kinds = summary.get("kinds", KINDS)
    fsdp_kinds = [k for k in kinds if k.startswith("fsdp")]
    cuda = meta.get("accelerator", "cpu") == "cuda"
    where = (f"a real NCCL group on one {meta['device']}, one intra-op thread, the device synchronized before "
             "each clock reading" if cuda else "a real gloo group, one intra-op thread")
    baseline_note = ("torch's fp32 stack" if summary.get("optimizer_baseline", "torch-fp32") == "torch-fp32"
                     else "torch's bf16 stack (no fp32 stack measured: the same kernels launched on bf16 "
                     "parameters)")
    lines = [
        "# FSDP2's host time per unit and per parameter tensor",
        "",
        f"{meta['date']}, {meta['machine']}, {meta['cores']} cores, {meta['device'] if cuda else 'CPU only'}, "
        f"Python {meta['python']}, torch {meta['torch']}.",
        "",
        f"Benchmark: `{meta['command']}`",
        "",
        "One training step's forward + `backward()` of a stack of units at micro-batch 1, each unit "
        f"`fully_shard`-ed and then the root (world size 1, {where}), units of "
        f"`nn.Linear({meta['width']}, {meta['width']})` layers: `linear` one layer (2 parameter tensors), `block` "
        "six (12, as a GPT-2 block); plain torch the same stack unwrapped in the same dtype. `raf`: "
        "`reshard_after_forward=True`, `keep`: `False`; `bf16`: `MixedPrecisionPolicy(param_dtype=bf16, "
        "reduce_dtype=fp32)` as autoshard's backend applies for the mixed precisions, `fp32`: no policy. The median "
        f"of {meta['steps']} steps after {meta['warmup']}, then the median over {meta['repeats']} interleaved "
        "repeats, each configuration in a fresh process. The optimizer steps alternate between "
        "`torch.optim.AdamW(foreach=False)` and `(foreach=True)`, each with its own state, over the same parameters.",
        "",
        "## Forward + backward",
        "",
        "| kind | shape | " + " | ".join(f"{n} units (ms)" for n in meta["units"]) + " | slope, ms per unit "
        "| over torch, ms per unit | per repeat |",
        "|---|---|" + "---:|" * (len(meta["units"]) + 3),
    ]
    for kind in kinds:
        for shape in SHAPES:
            row = fb[kind][shape]
            cells = [_ms(row["median_s_by_units"][n], 2) for n in meta["units"]]
            over = ("—", "—") if kind.startswith("torch") else (
                _ms(row["over_torch_s_per_unit"]), _spread(row["over_torch_by_repeat"]))
            lines.append(f"| {kind} | {shape} | " + " | ".join(cells) + f" | {_ms(row['slope_s_per_unit'])} | "
                         f"{over[0]} | {over[1]} |")
    lines += [
        "",
        "Each FSDP kind's time over plain torch per unit, split into a part per unit and a part per parameter "
        "tensor of the unit (from the two shapes: `block`'s 12 tensors less `linear`'s 2); the range is over the "
        "repeats' own slopes:",
        "",
        "| kind | ms per unit | range | ms per parameter tensor | range | a GPT-2 block (12 tensors), ms |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for kind in fsdp_kinds:
        split, by = fb[kind]["split"], fb[kind]["split_by_repeat"]
        lines.append(f"| {kind} | {_ms(split['s_per_unit'])} | {_spread([s['s_per_unit'] for s in by])} | "
                     f"{_ms(split['s_per_tensor'])} | {_spread([s['s_per_tensor'] for s in by])} | "
                     f"{_ms(split['s_per_unit'] + 12 * split['s_per_tensor'])} |")
    lines += [
        "",
        "## Optimizer step",
        "",
        "Slope of the step's time over the parameter tensors stepped (every configuration: the two shapes at "
        f"each unit count); FSDP's kinds pooled ({', '.join(fsdp_kinds)}: their sharded parameters are fp32 in "
        f"every kind), plain {baseline_note}:",
        "",
        "| AdamW | FSDP2, ms per tensor | plain torch, ms per tensor | over torch, ms per tensor | per repeat |",
        "|---|---:|---:|---:|---:|",
    ]
    for impl in IMPLS:
        o = opt[impl]
        lines.append(f"| {impl} | {_ms(o['fsdp_slope_s_per_tensor'])} | {_ms(o['torch_slope_s_per_tensor'])} | "
                     f"{_ms(o['over_torch_s_per_tensor'])} | {_spread(o['over_torch_by_repeat'])} |")
    lines += [
        "",
        "The FSDP kinds' figures over plain torch are the host time FSDP2 adds per step: its hooks per unit and "
        "per parameter tensor of the unit (forward and backward together), and DTensor's dispatch in the optimizer "
        "step per parameter tensor. `autoshard.strategies.fsdp.cost` (`HOOK_UNIT_S`, `HOOK_TENSOR_S`, "
        "`OPTIMIZER_TENSOR_S`) cites " + (
            "the CPU page, `fsdp_hooks.md`; these are the same hooks and optimizer on this GPU, with NCCL and "
            "real CUDA launches." if cuda else
            "this page. It is this CPU, with gloo; on a GPU host the same Python runs, plus CUDA stream and event "
            "calls, and the copies are kernels (measured with `--accelerator cuda`)."),
        "",
    ]
    return "\n".join(lines)


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--units", type=positive, nargs="+", default=[4, 16])
    parser.add_argument("--width", type=positive, default=64)
    parser.add_argument("--steps", type=positive, default=30)
    parser.add_argument("--warmup", type=positive, default=6)
    parser.add_argument("--repeats", type=positive, default=3)
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS), metavar="KIND",
                        help=f"measure only these kinds (of {', '.join(KINDS)}; default all)")
    parser.add_argument("--accelerator", choices=("cpu", "cuda"), default="cpu",
                        help="where the stacks run (cuda: one GPU, NCCL)")
    parser.add_argument("--name", help="report file name without suffix (default: fsdp_hooks on CPU, "
                        "gpu_fsdp_hooks on CUDA)")
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks"))
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Measure, print the tables, write the report."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--worker"]:
        kind, shape, (units, width, steps, warmup), accelerator = argv[1], argv[2], map(int, argv[3:7]), argv[7]
        print("RESULT " + json.dumps(worker(kind, shape, units, width, steps, warmup, accelerator)), flush=True)
        os._exit(0)  # no interpreter teardown of a gloo / NCCL group (pytorch#65231)
    args = parse_args(argv)
    if len(set(args.units)) < 2:
        print("error: --units needs at least two different counts (the figure is a slope).", file=sys.stderr)
        return 2
    kinds = [k for k in KINDS if k in args.kinds]
    unpaired = [k for k in kinds if k.startswith("fsdp") and baseline(k) not in kinds]
    if unpaired or not any(k.startswith("fsdp") for k in kinds):
        print(f"error: --kinds needs an FSDP kind and each FSDP kind's plain baseline, but got {args.kinds} "
              f"(missing: {', '.join(baseline(k) for k in unpaired) or 'an FSDP kind'}).", file=sys.stderr)
        return 2
    device = accelerator_device(args.accelerator)
    if device is None:
        return 2
    args.units = sorted(set(args.units))
    rows, port, started = [], 29500 + os.getpid() % 1000, time.monotonic()
    order = [(k, s, n) for n in args.units for s in SHAPES for k in kinds]
    for repeat in range(args.repeats):
        for kind, shape, units in order if repeat % 2 == 0 else order[::-1]:
            rows.append({**run_worker(kind, shape, units, args.width, args.steps, args.warmup, port,
                                      args.accelerator), "repeat": repeat})
            r = rows[-1]
            print(f"{kind} {shape} x {units}: {r['median_s'] * 1e3:.2f} ms; AdamW "
                  + ", ".join(f"{i} {v * 1e3:.2f} ms" for i, v in r["optimizer_s"].items()), flush=True)
    meta = run_meta("fsdp_hooks.py", argv, cores=os.cpu_count(), units=args.units, width=args.width,
                    steps=args.steps, warmup=args.warmup, repeats=args.repeats, accelerator=args.accelerator,
                    device=device, seconds=round(time.monotonic() - started))
    report = {"meta": meta, "summary": summarise(rows), "rows": rows}
    name = args.name or ("gpu_fsdp_hooks" if args.accelerator == "cuda" else "fsdp_hooks")
    write_report(args.out, name, report, markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
