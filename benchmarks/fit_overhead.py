"""fit()'s per-step overhead against a hand-written training loop of the same backend, model, data and plan.

Usage:
    python benchmarks/fit_overhead.py [--backends ddp fsdp deepspeed_stage_2] [--processes 2] [--model tiny-gpt2]
                                      [--batch-size 4] [--seq-len 64] [--steps 30] [--warmup 5] [--repeats 3]
                                      [--out docs/benchmarks/fit_overhead.json]

For each backend the plan is made once (``autoshard.recommend(..., strategies=[backend])`` for this machine,
exported with ``plan_file.from_plan``) and both sides train with it, on CPU with gloo, ``--processes`` ranks:

* **fit()**: ``autoshard.runtime.fit(module, batches, plan=that plan, max_steps=warmup + steps)``; its workers
  are this script started again (``fit()`` re-runs the calling script once per rank), and the step times are
  ``FitResult.steps[warmup:].step_time_s`` (rank 0's wall time from fetching the batch to ``zero_grad``).
* **hand-written**: this script started once per rank with ``--hand-worker`` (``supervisor.run_workers``): what a
  user writes by hand for that backend — ``init_process_group("gloo")``, ``DistributedDataParallel`` /
  ``fully_shard`` on every repeated block then the root / ``deepspeed.initialize`` with the plan's
  ``ds_config`` — and a loop timed with ``time.perf_counter`` around the same span: next batch, forward, loss,
  backward, optimizer step, ``zero_grad``.

Same module (seed 0), batches (seed 1, rank ``r`` takes batches ``r, r + n, ...`` as ``fit()`` deals a list),
loss, optimizer (AdamW, lr 1e-3) and one intra-op thread per rank on both sides. The two sides alternate,
and the order flips every repeat (A B, B A, A B, ...) to cancel drift. Overhead = (fit - hand) / hand of the
median step times pooled over the repeats; the spread is the overhead of each repeat's two medians, and the
median of those is robust to one repeat disturbed by other work on the machine. Each run also records how
many cores other processes kept busy meanwhile (``/proc/stat`` less this process tree's ``getrusage``), so a
disturbed run can be told from a slow one.

Writes ``--out`` (JSON: environment, settings, per-backend summary, every step time) and prints a markdown
table to stdout. A backend that fails is recorded in its row; the exit status is non-zero only on a crash.
Target (issue "fit() overhead"): fit()'s step time within 2 % of the hand-written loop.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from autoshard.planner.plan_file import ExportedPlan
from autoshard.runtime.result import FitResult

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the shared module beside this script, however it is loaded
from _common import cpu_model, cpu_seconds, foreign_cores, package_version, positive

SCRIPT = Path(__file__).resolve()
BACKENDS = ("ddp", "fsdp", "deepspeed_stage_1", "deepspeed_stage_2", "deepspeed_stage_3")
"""Strategies the hand-written loop implements (no offload, no hybrid sharding)."""
DEFAULT_BACKENDS = ("ddp", "fsdp", "deepspeed_stage_2")
THREADS = 1
"""Intra-op threads per rank, on both sides (``OMP_NUM_THREADS`` for the workers, ``torch.set_num_threads``)."""
LEARNING_RATE = 1e-3
MODEL_SEED, DATA_SEED = 0, 1
PRECISION = "32-true"
"""fit()'s default on CPU; the only precision the hand-written loop implements."""
JOB_FILE, HAND_RESULT_FILE = "hand-job.json", "hand-result.json"


@dataclass(frozen=True, kw_only=True, slots=True)
class Setup:
    """What both sides train: the same for every backend."""

    model: str
    """Catalog name or model file."""
    processes: int
    batch_size: int
    """Micro-batch per rank."""
    seq_len: int | None
    """Sequence length (``None`` for a model whose batches take none)."""
    warmup: int
    """Steps run first and not measured."""
    steps: int
    """Steps measured after the warm-up."""

    @property
    def total_steps(self) -> int:
        """Steps each side runs."""
        return self.warmup + self.steps

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return asdict(self)


@dataclass(frozen=True, kw_only=True, slots=True)
class SideRun:
    """One side's run: rank 0's measured step times and the per-step loss averaged over the ranks."""

    step_time_s: tuple[float, ...]
    """After the warm-up."""
    losses: tuple[float, ...]
    """Every step, warm-up included."""
    foreign_cores: float | None = None
    """Cores kept busy by processes outside this benchmark during the run, on average (``None``: no
    ``/proc/stat``). Near 0 on a quiet machine; the ranks had to share their cores with it otherwise."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {"step_time_s": list(self.step_time_s), "losses": list(self.losses),
                "foreign_cores": self.foreign_cores}


# -- command line --------------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line; ``argparse`` exits with status 2 on a bad argument."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--backends", nargs="+", choices=BACKENDS, default=list(DEFAULT_BACKENDS))
    parser.add_argument("--processes", type=positive, default=2, help="gloo processes (ranks) per side")
    parser.add_argument("--model", default="tiny-gpt2", help="catalog name or model file")
    parser.add_argument("--batch-size", type=positive, default=4, help="micro-batch per rank")
    parser.add_argument("--seq-len", type=positive, default=64, help="ignored for models without sequences")
    parser.add_argument("--steps", type=positive, default=30, help="measured steps per run")
    parser.add_argument("--warmup", type=int, default=5, help="unmeasured steps before them")
    parser.add_argument("--repeats", type=positive, default=3, help="rounds of (hand-written, fit) runs")
    parser.add_argument("--timeout-s", type=float, default=900.0, help="stop one side's workers after this long")
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks/fit_overhead.json"))
    parser.add_argument("--hand-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.warmup < 0:
        parser.error(f"--warmup must be 0 or more, but got {args.warmup}")
    if not args.timeout_s > 0:
        parser.error(f"--timeout-s must be positive, but got {args.timeout_s}")
    if len(set(args.backends)) != len(args.backends):
        parser.error(f"--backends lists a backend twice: {' '.join(args.backends)}")
    return args


def setup_from(args: argparse.Namespace) -> Setup:
    """The :class:`Setup` of a parsed command line (the sequence length dropped for models without one)."""
    from autoshard.models import load_source

    source = load_source(args.model)
    return Setup(model=args.model, processes=args.processes, batch_size=args.batch_size,
                 seq_len=args.seq_len if source.accepts_seq_len else None, warmup=args.warmup, steps=args.steps)


# -- what both sides train -----------------------------------------------------------------------------------


def make_inputs(setup: Setup) -> tuple[nn.Module, list[Any], Callable[[Any, Any], torch.Tensor]]:
    """The module (seed 0), every rank's batches (seed 1; ``processes × total_steps``) and the loss."""
    from autoshard.models import load_source
    from autoshard.models.source import default_loss

    source = load_source(setup.model)
    torch.manual_seed(MODEL_SEED)
    module = source.build()
    torch.manual_seed(DATA_SEED)
    batches = [source.batch(setup.batch_size, seq_len=setup.seq_len)
               for _ in range(setup.processes * setup.total_steps)]
    return module, batches, source.loss_fn or default_loss


def make_optimizer(params: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
    """The optimizer both sides build over the parameters they train."""
    return torch.optim.AdamW([p for p in params if p.requires_grad], lr=LEARNING_RATE)


def make_plan(setup: Setup, backend: str) -> ExportedPlan:
    """The :class:`ExportedPlan` for ``backend`` on this machine with ``setup.processes`` CPU ranks."""
    import autoshard
    from autoshard.planner.plan_file import from_plan

    plan = autoshard.recommend(setup.model, hardware=autoshard.detect_hardware(gpus=setup.processes),
                               batch_size=setup.batch_size, seq_len=setup.seq_len, precision=PRECISION,
                               optimizer="adamw", strategies=[backend])
    exported = from_plan(plan)
    check_plan(exported)
    return exported


def check_plan(plan: ExportedPlan) -> None:
    """Refuse a plan asking for something the hand-written loop does not implement (it would not compare like
    with like).

    Raises:
        ValueError: the plan's precision, accumulation, checkpointing, device or a knob is outside what
            :func:`hand_worker` implements.
    """
    s = plan.settings
    unsupported = []
    if plan.hardware.device_type != "cpu" or plan.hardware.nodes != 1:
        unsupported.append(f"{plan.hardware.nodes} node(s) of {plan.hardware.device_type} (only one CPU node)")
    if plan.precision != PRECISION:
        unsupported.append(f"precision {plan.precision} (only {PRECISION})")
    if plan.gradient_accumulation != 1:
        unsupported.append(f"gradient accumulation {plan.gradient_accumulation} (only 1)")
    if plan.activation_checkpointing:
        unsupported.append("activation checkpointing")
    if plan.strategy not in BACKENDS:
        unsupported.append(f"strategy {plan.strategy} (only {', '.join(BACKENDS)})")
    if plan.family == "ddp" and s.get("comm_hook", "none") != "none":
        unsupported.append(f"comm_hook={s['comm_hook']} (only none)")
    if plan.family == "fsdp" and (int(s.get("forward_prefetch", 0)) != 0 or int(s.get("backward_prefetch", 1)) > 1):
        unsupported.append(f"explicit prefetching (forward_prefetch={s.get('forward_prefetch')}, "
                           f"backward_prefetch={s.get('backward_prefetch')})")
    if unsupported:
        raise ValueError(f"the hand-written loop does not implement the {plan.strategy} plan's "
                         f"{'; '.join(unsupported)}.")


# -- the fit() side ------------------------------------------------------------------------------------------


def call_fit(setup: Setup, plan: ExportedPlan | Path, timeout_s: float | None) -> FitResult:
    """``fit()`` as the benchmark calls it — in the launching process and, identically, in every worker it
    starts by running this script again (where it trains rank ``RANK`` and exits)."""
    from autoshard.runtime import fit

    module, batches, loss_fn = make_inputs(setup)
    return fit(module, batches, loss_fn=loss_fn, optimizer=make_optimizer, plan=plan, processes=setup.processes,
               max_steps=setup.total_steps, log_every=setup.total_steps + 1, consolidate=False,
               timeout_s=timeout_s)


def run_fit(setup: Setup, plan: ExportedPlan, timeout_s: float | None) -> SideRun:
    """The fit() side: rank 0's step times after the warm-up."""
    result = call_fit(setup, plan, timeout_s)
    if len(result.steps) != setup.total_steps:
        raise RuntimeError(f"fit() ran {len(result.steps)} steps, not {setup.total_steps}")
    return SideRun(step_time_s=tuple(s.step_time_s for s in result.steps[setup.warmup:]),
                   losses=tuple(s.loss for s in result.steps))


# -- the hand-written side -----------------------------------------------------------------------------------


def run_hand(setup: Setup, plan: ExportedPlan, timeout_s: float | None) -> SideRun:
    """The hand-written side: one ``--hand-worker`` process per rank, rank 0's result read back as JSON."""
    import shutil

    from autoshard.planner import plan_file
    from autoshard.runtime import supervisor

    run_dir = Path(tempfile.mkdtemp(prefix="autoshard-fit-overhead-"))
    try:
        plan_file.write(plan, run_dir / "plan.json")
        (run_dir / JOB_FILE).write_text(json.dumps(setup.to_dict()), encoding="utf-8")
        supervisor.run_workers([sys.executable, str(SCRIPT), "--hand-worker"], world_size=setup.processes,
                               run_dir=run_dir, environ=os.environ, timeout_s=timeout_s)
        data = json.loads((run_dir / HAND_RESULT_FILE).read_text(encoding="utf-8"))
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    return SideRun(step_time_s=tuple(data["step_time_s"]), losses=tuple(data["losses"]))


def hand_worker(run_dir: Path, rank: int) -> int:
    """One rank of the hand-written side (run in a process of its own; leaves without interpreter teardown,
    as fit()'s workers do, since DeepSpeed's CPU communication threads can abort a normal exit)."""
    from autoshard.runtime import supervisor

    code = 0
    try:
        _hand_train(run_dir, rank)
    except BaseException as e:  # noqa: BLE001  # reported to the launching process, which raises it
        supervisor.write_error(run_dir, rank, e)
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _hand_train(run_dir: Path, rank: int) -> None:
    import torch.distributed as dist

    from autoshard.planner import plan_file

    torch.set_num_threads(THREADS)
    setup = Setup(**json.loads((run_dir / JOB_FILE).read_text(encoding="utf-8")))
    plan = plan_file.read(run_dir / "plan.json")
    check_plan(plan)
    dist.init_process_group("gloo")  # MASTER_ADDR / MASTER_PORT / RANK / WORLD_SIZE from the environment
    world = dist.get_world_size()
    module, batches, loss_fn = make_inputs(setup)
    torch.manual_seed(0)  # as fit() seeds every rank before building the backend
    mine = batches[rank::world][:setup.total_steps]
    if plan.family == "deepspeed":
        times, losses = _deepspeed_loop(module, mine, loss_fn, plan, world)
    else:
        model = _ddp(module, plan) if plan.family == "ddp" else _fsdp(module, plan, world)
        times, losses = _torch_loop(model, make_optimizer(model.parameters()), mine, loss_fn)
    mean = torch.stack(losses).double()
    dist.all_reduce(mean)
    mean /= world
    if rank == 0:
        out = {"step_time_s": times[setup.warmup:], "losses": mean.tolist(), "threads": torch.get_num_threads()}
        tmp = run_dir / (HAND_RESULT_FILE + ".partial")
        tmp.write_text(json.dumps(out), encoding="utf-8")
        tmp.replace(run_dir / HAND_RESULT_FILE)
    dist.barrier()
    dist.destroy_process_group()


def _ddp(module: nn.Module, plan: ExportedPlan) -> nn.Module:
    from torch.nn.parallel import DistributedDataParallel

    s = plan.settings
    return DistributedDataParallel(module, bucket_cap_mb=s.get("bucket_cap_mb"),
                                   gradient_as_bucket_view=bool(s.get("gradient_as_bucket_view", False)),
                                   static_graph=bool(s.get("static_graph", False)),
                                   find_unused_parameters=bool(s.get("find_unused_parameters", False)))


def _fsdp(module: nn.Module, plan: ExportedPlan, world: int) -> nn.Module:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from autoshard.profiler.blocks import find_repeated_blocks

    s = plan.settings
    mesh = init_device_mesh("cpu", (world,))
    found = find_repeated_blocks(module)
    blocks = [] if found is None else [module.get_submodule(name) for name in found.names]
    per_unit = int(s.get("blocks_per_unit", 1))
    for i in range(0, len(blocks), per_unit):
        group = blocks[i:i + per_unit]
        fully_shard(group if len(group) > 1 else group[0], mesh=mesh,
                    reshard_after_forward=s.get("reshard_after_forward", True))
    fully_shard(module, mesh=mesh)
    return module


def _torch_loop(model: nn.Module, optimizer: torch.optim.Optimizer, batches: list[Any],
                loss_fn: Callable[[Any, Any], torch.Tensor]) -> tuple[list[float], list[torch.Tensor]]:
    from autoshard.models.source import call_model

    times, losses = [], []
    it = iter(batches)
    for _ in range(len(batches)):
        started = time.perf_counter()
        batch = next(it)
        loss = loss_fn(call_model(model, batch), batch)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - started)
        losses.append(loss.detach())
    return times, losses


def _deepspeed_loop(module: nn.Module, batches: list[Any], loss_fn: Callable[[Any, Any], torch.Tensor],
                    plan: ExportedPlan, world: int) -> tuple[list[float], list[torch.Tensor]]:
    os.environ.setdefault("DS_ACCELERATOR", "cpu")  # before deepspeed is first imported (real_accelerator.py)
    import deepspeed

    from autoshard.models.source import call_model
    from autoshard.strategies.deepspeed.config import ds_config

    config = ds_config(plan)
    # The three adjustments autoshard/strategies/deepspeed/backend.py makes: the batch for this world size, a
    # client optimizer allowed with ZeRO, and no DeepSpeed step logging.
    config["train_batch_size"] = plan.micro_batch_size * plan.gradient_accumulation * world
    config["zero_allow_untested_optimizer"] = True
    config["steps_per_print"] = 2**31 - 1
    engine, _, _, _ = deepspeed.initialize(model=module, optimizer=make_optimizer(module.parameters()),
                                           config=config)
    times, losses = [], []
    it = iter(batches)
    for _ in range(len(batches)):
        started = time.perf_counter()
        batch = next(it)
        loss = loss_fn(call_model(engine, batch), batch)
        engine.backward(loss)
        engine.step()
        times.append(time.perf_counter() - started)
        losses.append(loss.detach())
    return times, losses


# -- the report ----------------------------------------------------------------------------------------------


def overhead_pct(fit_s: float, hand_s: float) -> float:
    """``(fit - hand) / hand`` in percent.

    Example:
        >>> round(overhead_pct(0.0102, 0.0100), 6)
        2.0
    """
    return (fit_s - hand_s) / hand_s * 100.0


def summarise(backend: str, plan: ExportedPlan | None, rounds: list[dict[str, Any]],
              error: str | None) -> dict[str, Any]:
    """One backend's row: medians and means pooled over the repeats, the overhead of those medians, each
    repeat's overhead (fit and hand-written run back to back) and their median, the loss agreement.

    ``rounds`` holds ``{"order": ..., "hand": SideRun, "fit": SideRun}`` per completed repeat.
    """
    row: dict[str, Any] = {"backend": backend, "plan": None if plan is None else plan.to_dict(),
                           "repeats": len(rounds), "error": error}
    if not rounds:
        return row
    hand = [t for r in rounds for t in r["hand"].step_time_s]
    fit = [t for r in rounds for t in r["fit"].step_time_s]
    per_repeat = [overhead_pct(statistics.median(r["fit"].step_time_s), statistics.median(r["hand"].step_time_s))
                  for r in rounds]
    row.update(
        hand_median_s=statistics.median(hand), fit_median_s=statistics.median(fit),
        hand_mean_s=statistics.fmean(hand), fit_mean_s=statistics.fmean(fit),
        overhead_pct=overhead_pct(statistics.median(fit), statistics.median(hand)),
        overhead_mean_pct=overhead_pct(statistics.fmean(fit), statistics.fmean(hand)),
        overhead_pct_by_repeat=per_repeat,
        overhead_pct_spread=[min(per_repeat), max(per_repeat)],
        overhead_paired_pct=statistics.median(per_repeat),
        max_abs_loss_diff=max(abs(a - b) for r in rounds
                              for a, b in zip(r["fit"].losses, r["hand"].losses, strict=True)),
        max_foreign_cores=max((r[side].foreign_cores for r in rounds for side in ("hand", "fit")
                               if r[side].foreign_cores is not None), default=None),
        rounds=[{"order": r["order"], "hand": r["hand"].to_dict(), "fit": r["fit"].to_dict()} for r in rounds],
    )
    return row


def markdown(rows: list[dict[str, Any]]) -> str:
    """The summary table."""
    header = ("| backend | hand-written median (ms) | fit() median (ms) | overhead | overhead per repeat | "
              "median of repeats | hand / fit mean (ms) | max abs loss diff | max foreign cores |")
    lines = [header, "|---|---:|---:|---:|---|---:|---:|---:|---:|"]
    for r in rows:
        if "hand_median_s" not in r:
            lines.append(f"| {r['backend']} | — | — | — | failed: {r['error']} | — | — | — | — |")
            continue
        spread = ", ".join(f"{p:+.1f} %" for p in r["overhead_pct_by_repeat"])
        load = "—" if r["max_foreign_cores"] is None else f"{r['max_foreign_cores']:.2f}"
        lines.append(f"| {r['backend']} | {r['hand_median_s'] * 1e3:.2f} | {r['fit_median_s'] * 1e3:.2f} | "
                     f"{r['overhead_pct']:+.2f} % | {spread} | {r['overhead_paired_pct']:+.2f} % | "
                     f"{r['hand_mean_s'] * 1e3:.2f} / "
                     f"{r['fit_mean_s'] * 1e3:.2f} | {r['max_abs_loss_diff']:.1e} | {load} |")
    return "\n".join(lines)


def environment(argv: Sequence[str]) -> dict[str, Any]:
    """Date, machine, versions and the command line."""
    import autoshard

    return {
        "date": datetime.date.today().isoformat(),
        "machine": cpu_model(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "deepspeed": package_version("deepspeed"),
        "autoshard": autoshard.__version__,
        "threads_per_rank": THREADS,
        "command": " ".join(["python", *argv]),
    }


def write_report(path: Path, meta: dict[str, Any], setup: Setup, rows: list[dict[str, Any]]) -> None:
    """Write the JSON report (creating its directory)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    report = {"meta": meta, "setup": setup.to_dict(), "rows": rows}
    path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


# -- main ----------------------------------------------------------------------------------------------------


def benchmark(args: argparse.Namespace, setup: Setup) -> list[dict[str, Any]]:
    """Every backend, the two sides alternating, the order flipping each repeat."""
    from autoshard.errors import AutoshardError

    os.environ["OMP_NUM_THREADS"] = str(THREADS)  # inherited by both sides' workers
    plans: dict[str, ExportedPlan] = {}
    errors: dict[str, str] = {}
    rounds: dict[str, list[dict[str, Any]]] = {b: [] for b in args.backends}
    for backend in args.backends:
        try:
            plans[backend] = make_plan(setup, backend)
        except (AutoshardError, ValueError) as e:
            errors[backend] = str(e)
    sides = {"hand": run_hand, "fit": run_fit}
    for repeat in range(args.repeats):
        order = ("hand", "fit") if repeat % 2 == 0 else ("fit", "hand")
        for backend in args.backends:
            if backend in errors:
                continue
            done: dict[str, Any] = {"order": "-".join(order)}
            try:
                for side in order:
                    print(f"[fit_overhead] repeat {repeat + 1}/{args.repeats} {backend} {side}", file=sys.stderr,
                          flush=True)
                    before, started = cpu_seconds(), time.perf_counter()
                    run = sides[side](setup, plans[backend], args.timeout_s)
                    done[side] = replace(run, foreign_cores=foreign_cores(before, cpu_seconds(),
                                                                          time.perf_counter() - started))
            except (AutoshardError, RuntimeError, OSError, ValueError) as e:
                errors[backend] = f"{type(e).__name__}: {e}"
                continue
            rounds[backend].append(done)
    return [summarise(b, plans.get(b), rounds[b], errors.get(b)) for b in args.backends]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark, or one worker of it when this script was started again as one."""
    from autoshard.runtime import supervisor

    args = parse_args(argv)
    if args.hand_worker:  # the environment is read here, at the edge, only
        return hand_worker(Path(os.environ[supervisor.RUN_DIR_VAR]), int(os.environ["RANK"]))
    setup = setup_from(args)
    if supervisor.RUN_DIR_VAR in os.environ:  # a rank fit() started by running this script again
        torch.set_num_threads(THREADS)
        call_fit(setup, Path(os.environ[supervisor.RUN_DIR_VAR]) / "plan.json", args.timeout_s)  # exits
        raise RuntimeError("fit() returned in a worker process")
    if "RANK" in os.environ:
        print("fit_overhead.py starts its own processes: run it with python, not under a launcher.",
              file=sys.stderr)
        return 2
    meta = environment(sys.argv if argv is None else [str(Path(sys.argv[0])), *argv])
    rows = benchmark(args, setup)
    write_report(args.out, meta, setup, rows)
    print(f"\n{setup.processes} gloo processes, {setup.model}, micro-batch {setup.batch_size}, sequence "
          f"{setup.seq_len}, {setup.steps} steps after {setup.warmup} warm-up, {args.repeats} repeat(s).\n")
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
