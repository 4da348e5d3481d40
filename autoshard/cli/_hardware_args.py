"""The hardware flags every planning subcommand shares: ``--hardware``, ``--gpus``, ``--nodes``, ...

``add_hardware_arguments(parser)`` adds them; ``hardware_from_args(args)`` turns the parsed flags into a
:class:`HardwareSpec`. This is the edge where the process environment is read for detection.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from autoshard.cli import _checks

if TYPE_CHECKING:
    from autoshard.hardware.selection import HardwareOverrides
    from autoshard.hardware.specs import HardwareSpec


class _Once(argparse.Action):
    """A flag that may be given once: argparse keeps the last of ``--hardware dgx-h100 --hardware dgx-a100``, and
    the plan was for dgx-a100 alone, without a word."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        before = getattr(namespace, self.dest, None)
        if before is not None:
            parser.error(f"{option_string} is given twice ({before} and {values}): autoshard plans for one machine "
                         "at a time; run the command once for each")
        setattr(namespace, self.dest, values)


def add_hardware_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the hardware-choosing flags to a subcommand's parser."""
    group = parser.add_argument_group("hardware (default: this machine, detected)")
    group.add_argument(
        "--hardware",
        action=_Once,
        metavar="NAME|FILE",
        help="plan for a profile instead of this machine: a shipped name (autoshard hardware --list) "
        "or a YAML file; NAME:G or NAME:GxN sizes it as --gpus G --nodes N do (compare's form)",
    )
    group.add_argument("--gpus", type=int, action=_Once, metavar="N", help="GPUs per node (with no GPU: CPU processes)")
    group.add_argument("--nodes", type=int, action=_Once, metavar="N", help="number of nodes")
    group.add_argument(
        "--gpu-memory", action=_Once, metavar="SIZE", help="memory per GPU, e.g. 80GB (10^9 bytes each) or 80GiB (2^30)"
    )
    group.add_argument("--cpu-memory", action=_Once, metavar="SIZE", help="host RAM per node, e.g. 512GiB")
    group.add_argument("--cpu-cores", type=int, action=_Once, metavar="N",
                       help="host CPU cores per node: what a CPU optimizer step under offload runs on")
    group.add_argument("--nvme", type=_checks.path_text, action=_Once, metavar="PATH",
                       help="directory on a fast local disk to offload to (with --hardware: an absolute path there)")


def sized_hardware(args: argparse.Namespace) -> argparse.Namespace:
    """``--hardware NAME:G[xN]`` (not a file of that name) as ``--hardware NAME --gpus G [--nodes N]``.

    Raises:
        UsageError: the size is given twice (with ``--gpus`` / ``--nodes`` too).
    """
    from autoshard.errors import UsageError
    from autoshard.hardware.selection import sized_machine

    if args.hardware is None or Path(args.hardware).exists():
        return args
    try:
        name, gpus, nodes = sized_machine(str(args.hardware))
    except UsageError as e:  # "dgx-h100:8x: '8x' is not a size", on the command line the flag's
        raise UsageError(f"--hardware {e.message}", hint=e.hint) from None
    if gpus is None:
        return args
    if args.gpus is not None or args.nodes is not None:
        raise UsageError(f"--hardware {args.hardware} sizes the machine, and --gpus or --nodes sizes it again.",
                         hint=f"Pass one: --hardware {name} --gpus G [--nodes N], or --hardware {args.hardware} "
                              "alone.")
    return argparse.Namespace(**{**vars(args), "hardware": name, "gpus": gpus, "nodes": nodes})


def overrides_from_args(args: argparse.Namespace) -> HardwareOverrides:
    """The :class:`HardwareOverrides` given on the command line.

    Raises:
        UsageError: a value is malformed, zero or negative.
    """
    from autoshard.hardware.selection import HardwareOverrides

    return HardwareOverrides.parse(
        gpus=args.gpus,
        nodes=args.nodes,
        gpu_memory=args.gpu_memory,
        cpu_memory=args.cpu_memory,
        cpu_cores=args.cpu_cores,
        nvme=args.nvme,
    )


def hardware_from_args(args: argparse.Namespace, *, environ: Mapping[str, str] | None = None) -> HardwareSpec:
    """The hardware the parsed flags choose: a profile with ``--hardware``, else this machine.

    Args:
        args: flags added by :func:`add_hardware_arguments`.
        environ: the environment for detection (default ``os.environ``).

    Raises:
        HardwareError: unknown or invalid profile, NVML failure.
        UsageError: malformed or contradictory flags.
    """
    from autoshard.errors import UsageError
    from autoshard.hardware.selection import select_hardware

    given = args.hardware
    args = sized_hardware(args)
    try:
        return select_hardware(
            args.hardware, overrides_from_args(args), environ=os.environ if environ is None else environ
        )
    except UsageError as e:  # a size in the name: the flags it stands for were not typed
        gpus = f"--gpus {args.gpus} contradicts "
        if given == args.hardware or not e.message.startswith(gpus):
            raise
        raise UsageError(f"--hardware {given}: {args.gpus} GPUs per node contradict "
                         f"{e.message.removeprefix(gpus)}", hint=e.hint) from None
