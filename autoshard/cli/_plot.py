"""``--plot``: per-strategy stacked memory bars against the device's memory line (needs matplotlib)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from autoshard.errors import UsageError

if TYPE_CHECKING:
    from autoshard.planner.plan import Plan


def plot_memory(plan: Plan, path: Path) -> None:
    """Write a PNG: one stacked bar per evaluated candidate, and the usable and total device memory as lines.

    Raises:
        UsageError: matplotlib is missing, or the file cannot be written.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise UsageError("--plot needs matplotlib.",
                         hint="pip install 'autoshard[plot]' (or pip install matplotlib).") from exc
    rows = [e for e in plan.candidates if e.memory is not None]
    memories = [e.memory for e in rows if e.memory is not None]
    kinds = ("parameters", "gradients", "optimizer", "activations", "buffers", "overhead")
    labels = [e.strategy + (" +ckpt" if e.candidate.activation_checkpointing else "") for e in rows]
    fig, ax = plt.subplots(figsize=(max(6, 0.6 * len(rows) + 2), 4.5))
    bottoms = [0.0] * len(rows)
    for kind in kinds:
        values = [getattr(m.gpu, kind) / 2**30 for m in memories]
        ax.bar(labels, values, bottom=bottoms, label=kind)
        bottoms = [b + v for b, v in zip(bottoms, values, strict=True)]
    capacity = (plan.hardware.device_memory_bytes or 0) / 2**30
    ax.axhline(capacity, color="black", linewidth=1, label=f"device memory ({capacity:.0f} GiB)")
    ax.axhline(capacity * (1 - plan.request.safety_margin), color="black", linestyle="--", linewidth=1,
               label="usable")
    ax.set_ylabel("GiB per device")
    ax.set_title(f"{plan.workload.model}: memory per device by strategy")
    ax.tick_params(axis="x", rotation=60)
    ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=120)
    except OSError as exc:
        raise UsageError(f"cannot write the plot to {path}: {exc.strerror}.") from exc
    finally:
        plt.close(fig)
