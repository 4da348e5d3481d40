"""The result cache: measurements kept by what was measured — model, hardware, batch settings, trial length,
configuration and the software that measured it (torch, DeepSpeed, transformers, Python) — so that tuning the
same thing again (another study, another output directory, a duplicate proposal from the sampler) reuses them
instead of running the trial again.

One small JSON file per measurement under the cache directory (default ``~/.cache/autoshard/tune``), written
atomically. Only deterministic outcomes are kept: measurements and out-of-memory failures; timeouts and
crashes are run again.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from autoshard.cache import cache_root, note, write_json
from autoshard.tuner.result import TrialConfig

VERSION = 1


def default_dir(environ: Mapping[str, str]) -> Path:
    """``<cache root>/tune`` (:func:`autoshard.cache.cache_root`): ``$AUTOSHARD_CACHE_DIR/tune``, else
    ``$XDG_CACHE_HOME/autoshard/tune``, else ``~/.cache/autoshard/tune``."""
    return cache_root(environ) / "tune"


def software() -> dict[str, str | None]:
    """The versions a measurement depends on besides the job: torch, DeepSpeed, transformers and Python (``None``
    for a package not installed). A throughput measured under one torch was reused as current under another (a
    versions probe: torch 2.9.1's two trials replayed, untouched, by torch 2.13), where the workload cache treats
    another torch as stale."""
    import platform
    from importlib import metadata

    def version(name: str) -> str | None:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    return {"torch": version("torch"), "deepspeed": version("deepspeed"), "transformers": version("transformers"),
            "python": platform.python_version()}


class ResultCache:
    """Measurements by key; ``directory=None`` disables the cache."""

    def __init__(self, directory: Path | None, context: Mapping[str, Any]) -> None:
        """Args:
            directory: where the entries live (created on first write), or ``None`` for no cache.
            context: what every key shares: model, hardware and batch fingerprints and the trial length.
        """
        self.directory = directory
        self._unwritable = False
        self._context = json.dumps({"version": VERSION, "software": software(), **context}, sort_keys=True,
                                   default=str)

    def key(self, config: TrialConfig) -> str:
        """The entry's key: a digest of the context and the configuration."""
        return hashlib.sha256(f"{self._context}\n{config.key()}".encode()).hexdigest()[:32]

    def get(self, config: TrialConfig) -> dict[str, Any] | None:
        """The stored outcome of ``config``, if any."""
        if self.directory is None:
            return None
        path = self.directory / f"{self.key(config)}.json"
        try:
            entry = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            return None
        return entry.get("outcome") if entry.get("context") == self._context else None

    def job_fact(self, name: str) -> Any:
        """A fact about the job itself stored by :meth:`put_job_fact` (e.g. the CPU micro-batch cap its
        measurements were made with), or ``None``."""
        if self.directory is None:
            return None
        try:
            entry = json.loads(self._fact_path(name).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            return None
        return entry.get("value") if entry.get("context") == self._context else None

    def put_job_fact(self, name: str, value: Any) -> None:
        """Keep ``value`` (JSON-ready) under ``name`` for this job; a cache that cannot be written is skipped."""
        if self.directory is not None:
            self._write(self._fact_path(name), {"context": self._context, "name": name, "value": value})

    def _fact_path(self, name: str) -> Path:
        """Where the job's fact ``name`` lives (callers check that there is a cache directory)."""
        digest = hashlib.sha256(f"{self._context}\njob:{name}".encode()).hexdigest()[:32]
        return Path(self.directory or ".") / f"job-{digest}.json"

    def _write(self, path: Path, entry: Mapping[str, Any]) -> None:
        """Write ``entry`` to ``path`` atomically (its directory created). A cache that cannot be written loses
        reuse, not results (the study itself holds every measurement): said once on stderr, then skipped."""
        why = write_json(path, dict(entry))
        if why is not None and not self._unwritable:
            self._unwritable = True
            note(f"the tune result cache cannot be written ({why}): measurements are not kept for reuse; "
                 "--cache-dir (cache_dir=) names another directory.")

    def put(self, config: TrialConfig, outcome: Mapping[str, Any]) -> None:
        """Store ``outcome`` (a JSON-ready dict) for ``config``; a cache that cannot be written is skipped."""
        if self.directory is not None:
            self._write(self.directory / f"{self.key(config)}.json",
                        {"context": self._context, "config": config.to_dict(), "outcome": dict(outcome)})
