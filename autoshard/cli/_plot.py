"""``--plot``: each candidate's memory per device, stacked by kind, against the device's memory (needs matplotlib).

One horizontal bar per evaluated candidate, best first: the recommendation on top and marked, the others that fit
in rank order with their predicted throughput, then those that do not fit, faded. The axis stops a little past
the device's memory so that the candidates that fit stay readable; a bar cut there says its total.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from autoshard.errors import UsageError

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from autoshard.planner.plan import Evaluation, Plan

KINDS = ("parameters", "gradients", "optimizer", "activations", "buffers", "overhead")
COLOURS = ("#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860")  # seaborn "deep"
AXIS_PAST_DEVICE = 1.35
"""The axis ends at this multiple of the device memory (or past the largest fitting bar): over it, bars are cut."""
ZOOM_BELOW = 0.25
"""When every bar is under this share of the device memory, the axis fits the bars and the device line is left
out (the subtitle gives the share)."""


def _label(e: Evaluation) -> str:
    return e.strategy + (" + ckpt" if e.candidate.activation_checkpointing else "")


def _size(gib: float) -> str:
    return f"{gib / 1024:.1f} TiB" if gib >= 1024 else f"{gib:.0f} GiB" if gib >= 10 else f"{gib:.1f} GiB"


def plot_memory(plan: Plan, path: Path) -> None:
    """Write :func:`memory_figure` to ``path`` (its format from the suffix; PNG without one).

    Raises:
        UsageError: matplotlib is missing, or the file cannot be written.
    """
    fig = memory_figure(plan)
    import matplotlib.pyplot as plt

    try:
        fig.savefig(path, dpi=150, bbox_inches="tight")
    except OSError as exc:
        raise UsageError(f"cannot write the plot to {path}: {exc.strerror}.") from exc
    finally:
        plt.close(fig)


def memory_figure(plan: Plan) -> Figure:
    """The figure: one stacked bar per evaluated candidate, the device memory and its usable part as lines.

    Raises:
        UsageError: matplotlib is missing.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        from autoshard.report.matplotlib_use import INSTALL_HINT

        raise UsageError(f"--plot needs matplotlib, and it cannot be imported ({exc}).",
                         hint=INSTALL_HINT) from exc
    from matplotlib.patches import Patch

    from autoshard.hardware.units import format_throughput

    rows = [e for e in plan.candidates if e.memory is not None]  # ranked: fitting by score, then the rest
    capacity = (plan.hardware.device_memory_bytes or 0) / 2**30
    usable = capacity * (1 - plan.request.safety_margin)
    totals = [e.memory.gpu.total / 2**30 for e in rows if e.memory is not None]
    fitting_max = max((t for e, t in zip(rows, totals, strict=True) if e.fits), default=0.0)
    largest = max(totals, default=0.0)
    zoomed = 0 < largest < ZOOM_BELOW * capacity  # a small model: at the device's scale every bar is a sliver
    if zoomed:
        limit = largest * 1.15
    else:
        limit = max(capacity * AXIS_PAST_DEVICE, fitting_max * 1.1, 1e-9)
        if largest <= limit:
            limit = max(largest * 1.1, capacity * 1.1, 1e-9)

    height = 1.2 + 0.34 * len(rows)
    fig, ax = plt.subplots(figsize=(10, height))
    ys = list(range(len(rows)))[::-1]  # first row on top
    lefts = [0.0] * len(rows)
    for kind, colour in zip(KINDS, COLOURS, strict=True):
        values = [getattr(e.memory.gpu, kind) / 2**30 for e in rows if e.memory is not None]
        widths = [max(0.0, min(v, limit - left)) for v, left in zip(values, lefts, strict=True)]
        alphas = [1.0 if e.fits else 0.35 for e in rows]
        for y, left, width, alpha in zip(ys, lefts, widths, alphas, strict=True):
            ax.barh(y, width, left=left, height=0.7, color=colour, alpha=alpha, linewidth=0)
        lefts = [left + v for left, v in zip(lefts, values, strict=True)]

    best = plan.recommended
    right = ax.get_yaxis_transform()  # x in axes units, y in data units: a column right of the axis
    for y, e, total in zip(ys, rows, totals, strict=True):
        if total > limit:  # cut at the axis: say so at the cut
            ax.text(limit * 0.995, y, "▸", va="center", ha="right", fontsize=9, color="#555555")
        if e.fits and e.cost is not None:
            note = f"{_size(total)} · {format_throughput(e.cost.samples_per_s)} samples/s"
        else:
            note = f"{_size(total)} · does not fit"
        ax.text(1.01, y, note, transform=right, va="center", ha="left", fontsize=8,
                color="black" if e.fits else "#777777", fontweight="bold" if e is best else "normal")
        if e is best:
            ax.barh(y, min(total, limit), height=0.86, fill=False, edgecolor="black", linewidth=1.6)
    fitting = sum(e.fits for e in rows)
    if 0 < fitting < len(rows):  # a rule between the candidates that fit and those that do not
        ax.axhline(ys[fitting - 1] - 0.5, color="#999999", linewidth=0.8)

    if not zoomed:
        ax.axvline(capacity, color="black", linewidth=1.2)
        ax.axvline(usable, color="black", linewidth=1, linestyle="--")
        ax.text(capacity, 1.0, f" {capacity:.0f} GiB device", transform=ax.get_xaxis_transform(), va="bottom",
                ha="left", fontsize=8)
        ax.text(usable, 1.0, f"usable ({1 - plan.request.safety_margin:.0%}) ", transform=ax.get_xaxis_transform(),
                va="bottom", ha="right", fontsize=8)

    ax.set_yticks(ys)
    ax.set_yticklabels([("★ " if e is best else "") + _label(e) for e in rows], fontsize=9)
    for tick, e in zip(ax.get_yticklabels(), rows, strict=True):
        tick.set_fontweight("bold" if e is best else "normal")
        tick.set_color("black" if e.fits else "#777777")
    ax.set_ylim(-0.6, len(rows) - 0.4)
    ax.set_xlim(0, limit)
    ax.set_xlabel("GiB per device (predicted peak)")
    ax.spines[["top", "right"]].set_visible(False)
    ax.grid(axis="x", color="#dddddd", linewidth=0.6)
    ax.set_axisbelow(True)

    hw, w = plan.hardware, plan.workload
    device = hw.gpu.display_name if hw.gpu is not None else "CPU process"
    fig.suptitle(f"{w.model}: memory per device, {hw.world_size} × {device}", x=0.01, ha="left",
                 fontsize=12, fontweight="bold")
    ax.set_title(f"{w.precision.value}, {w.optimizer}" + (f", seq {w.seq_len}" if w.seq_len else "")
                 + f" — ★ recommended: {_label(best)}, micro-batch {best.candidate.micro_batch_size}"
                 + (f"\nEvery candidate uses at most {largest / capacity:.1%} of the {capacity:.0f} GiB of a device "
                    "(the axis is zoomed to the bars)" if zoomed else ""),
                 loc="left", fontsize=9, pad=14)
    handles = [Patch(color=colour, label=kind) for kind, colour in zip(KINDS, COLOURS, strict=True)]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.55 / height), ncols=len(KINDS),
              fontsize=8, frameon=False)
    fig.tight_layout()
    return fig
