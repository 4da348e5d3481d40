"""``autoshard compare MODEL --hardware A B ...``: the machines to rent, side by side: each one's plan, its
predicted throughput, and the hours (and, given prices, the cost) of a training budget."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from autoshard.cli._format import gib, print_json

if TYPE_CHECKING:
    from autoshard.planner.compare import MachineOption

NAME = "compare"
HELP = "Compare machines (hardware profiles or files) for training a model: plan, throughput, time and cost."


def _amount(text: str) -> float:
    """A positive number of tokens or samples, as ``2e10`` or ``20000000000``."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number such as 2e10, not {text!r}") from None
    if not value > 0 or value == float("inf"):
        finite = " finite" if value == float("inf") else ""
        raise argparse.ArgumentTypeError(f"must be a{finite} positive number, not {text!r}")
    return value


def _price(text: str) -> tuple[str, float]:
    """``MACHINE=USD``: a machine's price per GPU-hour."""
    machine, sep, usd = text.rpartition("=")
    try:
        value = float(usd) if sep and machine else float("nan")
    except ValueError:
        value = float("nan")
    if value != value or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be MACHINE=USD per GPU-hour (e.g. dgx-h100=2.99), not {text!r}")
    if not value > 0:
        raise argparse.ArgumentTypeError(f"a price must be positive USD per GPU-hour, not {usd} ({text!r})")
    return machine, value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``compare`` flags: ``recommend``'s request, the machines, the budget and the prices."""
    from autoshard.cli.recommend import add_request_arguments

    add_request_arguments(parser)
    group = parser.add_argument_group("machines and budget")
    group.add_argument("--hardware", nargs="+", required=True, metavar="NAME|FILE[:G[xN]]",
                       help="the machines: shipped profiles (autoshard hardware --list) or YAML files, each sized as "
                            "NAME:G for G GPUs per node or NAME:GxN for N such nodes (e.g. dgx-h100 l40s:8 "
                            "h100-sxm-80gb:8x2)")
    budget = group.add_mutually_exclusive_group()
    budget.add_argument("--tokens", type=_amount, metavar="N", help="the training budget in tokens (e.g. 2e10): "
                        "hours and cost to train it")
    budget.add_argument("--samples", type=_amount, metavar="N", help="the training budget in samples")
    group.add_argument("--price", type=_price, action="append", default=[], metavar="MACHINE=USD",
                       help="a machine's price per GPU-hour, named as in --hardware (repeat for each)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


COMPARE_TERMS = (
    (r"--gpus/--nodes for (\d+)", r"a machine of \1 GPUs (NAME:GxN)"), (r"--nvme PATH", "nvme: in a hardware file"),
    (r"\(--nodes\)", "(NAME:GxN with more nodes)"), (r"\(--cpu-memory\)", "(cpu: memory: in a hardware file)"),
    (r"--cpu-memory SIZE", "cpu: memory: in a hardware file"), (r"--cpu-cores N", "cpu: cores: in a hardware file"),
    (r"--(cpu|gpu)-memory\b", r"\1: memory: in a hardware file"), (r"--cpu-cores\b", "cpu: cores: in a hardware file"),
    (r"--gpus\b", "NAME:G"), (r"--nodes\b", "NAME:GxN"),
)
"""What compare's machines are sized and described with, for the recommend flags the plans' notes name and compare
does not take (it names machines: NAME:G, NAME:GxN, or a hardware file, docs/hardware.md)."""


def in_compare_terms(text: str) -> str:
    """``text`` with the flags compare lacks said as compare takes them (:data:`COMPARE_TERMS`).

    Example:
        >>> in_compare_terms("the host's RAM is unknown (--cpu-memory SIZE has the plan check it)")
        "the host's RAM is unknown (cpu: memory: in a hardware file has the plan check it)"
    """
    from autoshard.errors import reworded

    return reworded(text, COMPARE_TERMS)


def run(args: argparse.Namespace) -> int:
    """Run ``autoshard compare``."""
    from autoshard._progress import tracing_progress
    from autoshard.cli.recommend import request_options
    from autoshard.errors import UsageError
    from autoshard.planner.compare import compare

    prices = dict(args.price)
    if len(prices) < len(args.price):
        raise UsageError("--price names a machine twice.")
    with tracing_progress(enabled=not args.json) as progress:
        options = compare(args.model, args.hardware, prices=prices, progress=progress, **request_options(args))
    budget = {"tokens": args.tokens, "samples": args.samples}
    fitting = [o for o in options if o.plan is not None]
    if args.tokens is not None and fitting and all(o.tokens_per_s is None for o in fitting):
        raise UsageError(f"--tokens prices the budget in tokens, and {args.model}'s batches have no sequence: its "
                         "throughput is in samples only.", hint="Give the budget with --samples N instead.")
    if args.json:
        machines = [o.to_dict(**budget) for o in options]
        for m in machines:
            m["notes"] = [in_compare_terms(n) for n in m["notes"]]
            m["refused"] = None if m["refused"] is None else in_compare_terms(m["refused"])
        print_json({"model": args.model, "budget": budget, "machines": machines})
        return _exit_code(options)
    _print(args.model, options, tokens=args.tokens, samples=args.samples)
    return _exit_code(options)


def _exit_code(options: tuple[MachineOption, ...]) -> int:
    """3 when nothing fits on any machine, as ``recommend`` exits when nothing fits; else 0."""
    return 3 if options and all(o.plan is None for o in options) else 0


def _print(model: str, options: tuple[MachineOption, ...], *, tokens: float | None, samples: float | None) -> None:
    from rich.markup import escape
    from rich.table import Table

    from autoshard._console import stdout_console
    from autoshard.hardware.units import format_throughput

    console = stdout_console()
    budget = tokens if tokens is not None else samples
    unit = "tokens" if tokens is not None else "samples"
    machines = f"{len(options)} machine{'s' if len(options) != 1 else ''}"
    title = f"{escape(model)} on {machines}" + (f": {budget:.3g} {unit}" if budget else "")
    table = Table(title=title, title_justify="left")
    for column in ("machine", "GPUs", "plan", "GPU/device", "samples/s", "tokens/s", "tokens/s/GPU"):
        table.add_column(column, justify="left" if column in ("machine", "plan") else "right")
    if budget:
        for column in ("hours", "$/GPU-h", "cost $"):
            table.add_column(column, justify="right")
    for o in options:
        rec = None if o.plan is None else o.plan.recommended
        if rec is None:
            row = [escape(o.machine), str(o.gpus), "nothing fits", "", "", "", ""]
        else:
            c = rec.candidate
            plan = (f"{c.strategy}, micro-batch {c.micro_batch_size}"
                    + (f" x {rec.gradient_accumulation} accumulated" if rec.gradient_accumulation > 1 else "")
                    + (f", ckpt ({o.checkpointing})" if o.checkpointing else ""))
            tps = o.tokens_per_s
            row = [escape(o.machine), str(o.gpus), plan, gib(rec.memory.gpu.total) if rec.memory else "—",
                   format_throughput(o.samples_per_s or 0.0), "—" if tps is None else format_throughput(tps),
                   "—" if tps is None else format_throughput(tps / o.gpus)]
        if budget:
            hours, cost = o.hours(tokens=tokens, samples=samples), o.cost_usd(tokens=tokens, samples=samples)
            row += ["—" if hours is None else f"{hours:,.1f}" if hours < 1e7 else f"{hours:.3g}",
                    "—" if o.gpu_hour_usd is None else f"{o.gpu_hour_usd:.2f}",
                    "—" if cost is None else f"{cost:,.0f}" if cost < 1e12 else f"{cost:.3g}"]
        table.add_row(*row)
    console.print(table)
    for o in options:
        if o.refused is not None:
            console.print(f"{escape(o.machine)}: {escape(in_compare_terms(o.refused))}")
        for note in o.notes:  # what its figures rest on that the hardware did not say
            console.print(f"{escape(o.machine)}: {escape(in_compare_terms(note))}")
    priced = [o for o in options if o.cost_usd(tokens=tokens, samples=samples) is not None]
    if len(priced) > 1:
        cheapest = min(priced, key=lambda o: o.cost_usd(tokens=tokens, samples=samples) or 0.0)
        console.print(f"Cheapest of those priced: {escape(cheapest.machine)}.")
    if options and options[0].plan is not None:
        console.print(f"Fastest: {escape(options[0].machine)}. Each machine's plan and reasons: autoshard recommend "
                      f"{escape(model)} --hardware NAME [--gpus G --nodes N].")
    console.print("Predicted by autoshard's step-time model (docs/strategies/step-time.md): a GPU without "
                  "measurements of its own is priced at generic efficiencies, which its machine's notes say.")
