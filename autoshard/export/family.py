"""What a strategy family contributes to the hand-off files: :class:`FamilyExporter`.

The exporters in this package write what every plan shares (batch sizes, precision, processes, launchers); each
family's ``export.py`` (e.g. :mod:`autoshard.strategies.fsdp.export`) writes its own part, found through the
registry (:func:`autoshard.strategies.exporter`), so no exporter tests a strategy or family name.
"""

from __future__ import annotations

from typing import Any, Protocol

from autoshard.planner.plan_file import ExportedPlan


class FamilyExporter(Protocol):
    """A family's part of each hand-off file."""

    def files(self, exported: ExportedPlan, *, validate: bool) -> dict[str, str]:
        """Files only this family writes, by name → text (e.g. ``ds_config.json``, ``fsdp_config.json``)."""
        ...

    def accelerate(self, exported: ExportedPlan, *, ds_config_file: str) -> dict[str, Any]:
        """The Accelerate config's ``distributed_type`` and the family's section."""
        ...

    def lightning(self, exported: ExportedPlan, *, ds_config_file: str) -> tuple[list[str], str]:
        """Import lines and the ``strategy=`` expression of a Lightning ``Trainer``."""
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
