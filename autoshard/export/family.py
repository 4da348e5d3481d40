"""What a strategy family contributes to the hand-off files: :class:`FamilyExporter`.

The exporters in this package write what every plan shares (batch sizes, precision, processes, launchers); each
family's ``export.py`` (e.g. :mod:`autoshard.strategies.fsdp.export`) writes its own part, found through the
registry (:func:`autoshard.strategies.exporter`), so no exporter tests a strategy or family name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from autoshard.planner.plan_file import ExportedPlan


def gradient_clipping_norm(exported: ExportedPlan) -> float:
    """The gradient-norm clip the shared files write: the plan's ``grad_clip_norm``, else 0.0 (off), as the plan
    trains (the HF Trainer's ``--max_grad_norm`` and DeepSpeed's ``gradient_clipping`` would clip at 1.0 by
    default). ``ds_config.json``'s ``gradient_clipping`` says the same (:mod:`autoshard.strategies.deepspeed.config`,
    which the runtime imports too, so it does not import this package); ``tests/planner/test_grad_clip_norm.py`` holds
    the two equal."""
    return exported.grad_clip_norm or 0.0


@dataclass(frozen=True, kw_only=True, slots=True)
class LightningPart:
    """A family's part of the Lightning snippet (:mod:`autoshard.export.lightning`)."""

    imports: list[str]
    """Import lines."""
    strategy: str
    """The ``Trainer(strategy=...)`` expression; it may use names the imports and :attr:`definitions` bind."""
    definitions: list[str] = field(default_factory=list)
    """Statements run after the imports (a config dict, a sharding function), before the ``Trainer``."""
    precision: str | None = None
    """The ``Trainer(precision=...)`` when it is not the plan's precision name (e.g. FSDP2's mixed precision lives
    in ``fully_shard``'s policy, so the Trainer runs ``32-true``)."""


class FamilyExporter(Protocol):
    """A family's part of each hand-off file."""

    def files(self, exported: ExportedPlan, *, validate: bool) -> dict[str, str]:
        """Files only this family writes, by name → text (e.g. ``ds_config.json``, ``fsdp_config.json``)."""
        ...

    def accelerate(self, exported: ExportedPlan, *, ds_config_file: str) -> dict[str, Any]:
        """The Accelerate config's ``distributed_type`` and the family's section; a key mapped to ``None`` removes
        the shared key of that name (DeepSpeed's precision lives in its own config file)."""
        ...

    def accelerate_handlers(self, exported: ExportedPlan) -> dict[str, dict[str, Any]]:
        """Settings the Accelerate config file has no key for, as ``accelerate.utils`` kwargs-handler class name →
        its keyword arguments (``Accelerator(kwargs_handlers=[...])``); empty when the file says everything."""
        ...

    def lightning(self, exported: ExportedPlan, *, ds_config_file: str) -> LightningPart:
        """The family's part of a Lightning ``Trainer`` snippet.

        Raises:
            UsageError: Lightning cannot run this plan (no Lightning file is written then).
        """
        ...

    def hf_trainer(self, exported: ExportedPlan, *, ds_config_file: str, fsdp_config_file: str) -> list[str]:
        """The HF Trainer's flags for the family.

        Raises:
            UsageError: the Trainer cannot run this plan (no HF Trainer files are written then).
        """
        ...

    def launchers(self, exported: ExportedPlan, *, script: str) -> list[str]:
        """Extra ``launch.sh`` lines (commented out) for the family's own launcher."""
        ...

    def notes(self, exported: ExportedPlan) -> list[str]:
        """What the files leave to the user or cannot express for this family's plans."""
        ...
