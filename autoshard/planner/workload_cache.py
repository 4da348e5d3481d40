"""The workload cache: a traced :class:`~autoshard.strategies.workload.Workload` kept on disk, so that planning the
same model again — on other hardware, another node count, another goal — skips the traces (nearly all of
``recommend``'s time).

An entry is one JSON file under ``<cache root>/workloads`` (:func:`autoshard.cache.workloads_dir`), named after
the model and a digest of its key. The key is everything the traces depend on:

* the model: its name and :attr:`~autoshard.models.source.ModelSource.fingerprint` (the file and the siblings it
  imports, the config's content, the catalog entry's definition). Sources made in code have none and are
  never cached;
* what :func:`~autoshard.strategies.workload.build_workload` is asked: precision, optimizer and its
  implementation, sequence length, checkpointing choices and recompute policy, target;
* the versions of torch, transformers, Python and autoshard — autoshard's as its version and a digest of its
  own source files, so that a changed checkout never reads what older code traced;
* the entry format (:data:`FORMAT_VERSION`) and a digest of the stored classes' fields
  (:func:`autoshard._jsonable.schema_digest`).

The workload is stored field by field (:mod:`autoshard._jsonable`), and read back only if every field has the
declared type. An entry that is truncated, corrupt, of another format or schema, or for another key is ignored
with a one-line note on stderr and written again after tracing; a cache that cannot be written is noted too,
and planning goes on.
"""

from __future__ import annotations

import glob
import hashlib
import json
import re
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from autoshard._jsonable import SchemaError, decode, encode, schema_digest
from autoshard.cache import code_version, installed_version, note, read_json, write_json
from autoshard.models.source import ModelSource
from autoshard.profiler.checkpointing import FULL, ActivationCheckpointing
from autoshard.profiler.options import OptimizerImpl, Precision, parse_optimizer, parse_precision
from autoshard.strategies.workload import Workload, build_workload

__all__ = ["FORMAT_VERSION", "WorkloadKey", "cached_workload", "entry_path", "load", "store", "workload_key"]

FORMAT_VERSION = 1
"""Bumped when the entry's layout changes; entries of other versions are ignored."""
KIND = "autoshard.workload"


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkloadKey:
    """Everything a traced workload depends on (see the module docstring)."""

    model: str
    fingerprint: str
    source_kind: str
    precision: str
    optimizer: str
    seq_len: int | None
    checkpointing: tuple[bool, ...]
    checkpoint_mode: str
    """The recompute policy of the checkpointed traces (``full``, ``every-N``, ``op``)."""
    optimizer_impl: str | None
    target: str
    torch: str
    transformers: str | None
    python: str
    autoshard: str
    """autoshard's version and a digest of its source files."""
    schema: str
    """The stored classes' fields (:func:`autoshard._jsonable.schema_digest` of :class:`Workload`)."""
    format: int = FORMAT_VERSION

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        d = asdict(self)
        d["checkpointing"] = list(self.checkpointing)
        return d

    @property
    def digest(self) -> str:
        """32 hex digits of a SHA-256 over the key."""
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()[:32]


def workload_key(source: ModelSource, *, precision: Precision | str, optimizer: str, seq_len: int | None,
                 checkpointing: tuple[bool, ...], target: str, checkpoint_mode: ActivationCheckpointing = FULL,
                 optimizer_impl: str | None = None) -> WorkloadKey | None:
    """The key of ``source``'s workload with these options; ``None`` when the source has no fingerprint.

    Raises:
        UsageError: an unknown precision or optimizer.
    """
    if source.fingerprint is None:
        return None
    import torch

    if source.accepts_seq_len and seq_len is not None and seq_len == source.default_seq_len:
        seq_len = None  # the source's own length, asked by name: the same trace (it was traced twice, 8x the time)

    return WorkloadKey(
        model=source.name, fingerprint=source.fingerprint, source_kind=source.kind,
        precision=parse_precision(precision).value, optimizer=parse_optimizer(optimizer), seq_len=seq_len,
        checkpointing=tuple(checkpointing), checkpoint_mode=str(checkpoint_mode), optimizer_impl=optimizer_impl,
        target=target, torch=str(torch.__version__),
        transformers=installed_version("transformers"), python=".".join(map(str, sys.version_info[:3])),
        autoshard=code_version(), schema=schema_digest(Workload),
    )


def entry_path(directory: Path, key: WorkloadKey) -> Path:
    """The entry's file: ``<directory>/<model>-<digest>.json`` (the model's name made safe for a file name).

    Example:
        >>> key = WorkloadKey(model="org/Llama 3", fingerprint="f", source_kind="hf-config", precision="bf16-mixed",
        ...                   optimizer="adamw", seq_len=None, checkpointing=(False,), checkpoint_mode="full",
        ...                   optimizer_impl=None, target="cuda", torch="2",
        ...                   transformers=None, python="3", autoshard="0", schema="s")
        >>> entry_path(Path("/c"), key).name.startswith("org_Llama_3-")
        True
    """
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", key.model).strip("._")[:64] or "model"
    return directory / f"{name}-{key.digest}.json"


def load(path: Path, key: WorkloadKey) -> Workload | None:
    """The workload stored at ``path`` for ``key``, or ``None``: missing (silently), or unusable (with a note
    saying why — the entry is not trusted and will be replaced)."""
    data, problem = read_json(path)
    if data is None and problem is None:
        return None
    if problem is None:
        problem = _problem(data, key)
    if problem is None:
        try:
            return decode(data["workload"], Workload)
        except SchemaError as exc:
            problem = f"wrong schema: {exc}"
        except Exception as exc:  # noqa: BLE001 — a class's own checks may raise anything on foreign values
            problem = f"unreadable: {type(exc).__name__}: {exc}"
    note(f"ignored the cached workload {path} ({_one_line(problem)}); tracing again.")
    return None


def store(path: Path, key: WorkloadKey, workload: Workload) -> bool:
    """Write ``workload`` for ``key`` at ``path`` atomically; ``False`` (with a note) when it cannot be written.

    Raises:
        SchemaError: the workload holds a field of a type :mod:`autoshard._jsonable` does not store (a bug the
            round-trip tests catch; :func:`cached_workload` notes it and plans on).
    """
    entry = {"kind": KIND, "format": FORMAT_VERSION, "key": key.to_dict(), "workload": encode(workload, Workload)}
    problem = write_json(path, entry)
    if problem is not None:
        note(f"could not write the workload cache: {problem}; the model will be traced again next time "
             "(AUTOSHARD_CACHE_DIR names another directory).")
        return False
    return True


def cached_workload(
    source: ModelSource,
    *,
    directory: Path | None,
    precision: Precision | str,
    optimizer: str,
    seq_len: int | None,
    target: str,
    checkpointing: tuple[bool, ...] = (False, True),
    checkpoint_mode: ActivationCheckpointing = FULL,
    optimizer_impl: OptimizerImpl | None = None,
    progress: Callable[[int, int], None] | None = None,
    jobs: int | None = None,
    on_miss: str | None = None,
) -> tuple[Workload, Path | None]:
    """:func:`~autoshard.strategies.workload.build_workload`, read from the cache in ``directory`` when an entry is
    there and written to it when not.

    Args:
        source: the model source.
        directory: the cache directory (:func:`autoshard.cache.workloads_dir`), or ``None`` to neither read nor
            write.
        precision: see :func:`~autoshard.strategies.workload.build_workload`.
        optimizer: see :func:`~autoshard.strategies.workload.build_workload`.
        seq_len: see :func:`~autoshard.strategies.workload.build_workload`.
        target: see :func:`~autoshard.strategies.workload.build_workload`.
        checkpointing: see :func:`~autoshard.strategies.workload.build_workload`.
        checkpoint_mode: see :func:`~autoshard.strategies.workload.build_workload`.
        optimizer_impl: see :func:`~autoshard.strategies.workload.build_workload`.
        progress: see :func:`~autoshard.strategies.workload.build_workload` (not called on a cache hit).
        jobs: see :func:`~autoshard.strategies.workload.build_workload` (not part of the key: the workload is the
            same).
        on_miss: a note said before tracing when the cache holds no usable entry (not when it is off).

    Returns:
        The workload, and the entry it was read from (``None`` when it was traced now).
    """
    key = None
    if directory is not None:
        try:
            key = workload_key(source, precision=precision, optimizer=optimizer, seq_len=seq_len,
                               checkpointing=checkpointing, target=target, checkpoint_mode=checkpoint_mode,
                               optimizer_impl=optimizer_impl)
        except SchemaError as exc:  # a stored class's field types cannot be resolved: plan without the cache
            note(f"the workload cache is off: {exc}.")
    path = None if directory is None or key is None else entry_path(directory, key)
    if path is not None and key is not None:
        found = load(path, key)
        changed = None if found is None else _changed(source, found)
        if found is not None and changed is None:
            return found, path
        if changed is not None:
            note(f"ignored the cached workload {path}: {changed}; tracing again.")
        elif (older := _stale_twin(path, key)) is not None:
            note(older)
        if on_miss is not None:
            note(on_miss)
    workload = build_workload(source, precision=precision, optimizer=optimizer, seq_len=seq_len,
                              checkpointing=checkpointing, target=target, progress=progress,
                              checkpoint_mode=checkpoint_mode, optimizer_impl=optimizer_impl, jobs=jobs)
    if path is not None and key is not None:
        try:
            store(path, key, workload)
        except SchemaError as exc:  # a field of a type the cache does not store: the plan goes on without it
            note(f"could not store the workload ({exc}); please report this.")
    return workload, None


_SOFTWARE = ("torch", "transformers", "python", "autoshard", "schema", "format")
"""The fields of a key that name the software that traced the entry, not the model or the options."""


def _stale_twin(path: Path, key: WorkloadKey) -> str | None:
    """A note when the cache holds this model's step traced with these options by other software (an upgrade, an
    edited checkout): its key differs, so it is never read, and the trace that follows took minutes without a word
    (a probe's DeepSeek-V3, 6 min 39 s after the code it had been traced by changed)."""
    here = key.to_dict()
    prefix = path.name[: -len(f"-{key.digest}.json")]
    for file in sorted(path.parent.glob(f"{glob.escape(prefix)}-*.json")):
        data, _ = read_json(file)
        other = data.get("key") if isinstance(data, dict) else None
        if file == path or not isinstance(other, dict):
            continue
        if any(other.get(f) != here[f] for f in here if f not in _SOFTWARE):  # another model or options
            continue
        differ = [f"{f} {other.get(f)} (here {here[f]})" for f in _SOFTWARE if other.get(f) != here[f]]
        return (f"the cache holds {key.model}'s step for these options traced by {', '.join(differ)}, which this "
                "install does not read: tracing again (`autoshard cache clear --stale` removes such entries).")
    return None


def _changed(source: ModelSource, cached: Workload) -> str | None:
    """How a model file's build differs from its cached workload's parameters (``None`` when it does not).

    A ``model.py``'s fingerprint covers the file and the siblings it imports, not code it imports from elsewhere
    (a package of the user's on ``PYTHONPATH`` or installed editable) nor the environment it reads, so an entry is
    checked against the model the file builds now, on the meta device (nothing allocated; the build the trace
    reuses). Config and catalog sources are wholly in their fingerprints and are not built.
    """
    if source.kind != "file":
        return None
    from autoshard.profiler.depth_plan import meta_model
    from autoshard.strategies.workload import frozen_marked_numels, parameter_layout

    module = meta_model(source)
    numels = parameter_layout(module)[0]
    why = "code imported from outside its folder, or the environment, changed the model"
    if numels != cached.parameter_numels:
        return (f"{source.origin} now builds {sum(numels):,} trainable parameters in {len(numels):,} tensors, the "
                f"entry holds {sum(cached.parameter_numels):,} in {len(cached.parameter_numels):,} ({why})")
    # What does not train counts too: a frozen teacher or EMA copy, a lookup table kept as a buffer.
    frozen = sum(-n for n in frozen_marked_numels(module) if n < 0)
    held = sum(-n for n in cached.module_parameter_numels if n < 0)
    if frozen != held:
        return (f"{source.origin} now builds {frozen:,} frozen parameters, the entry holds {held:,} ({why})")
    buffers = _buffer_bytes(module, bf16=cached.precision is Precision.BF16_TRUE)
    if buffers != cached.buffer_bytes:
        return (f"{source.origin} now builds {buffers:,} bytes of buffers, the entry holds {cached.buffer_bytes:,} "
                f"({why})")
    return None


def _buffer_bytes(module: Any, *, bf16: bool) -> int:
    """Bytes of the module's buffers, each tensor once, as the trace holds them (``bf16-true`` casts the floating
    ones to bfloat16)."""
    seen: dict[int, Any] = {id(b): b for b in module.buffers()}
    return sum(b.numel() * (2 if bf16 and b.is_floating_point() else b.element_size()) for b in seen.values())


def _problem(data: Any, key: WorkloadKey) -> str | None:
    """Why ``data`` is not an entry for ``key`` (``None`` when it is one)."""
    if not isinstance(data, dict) or data.get("kind") != KIND or "workload" not in data:
        return "not an autoshard workload entry"
    if data.get("format") != FORMAT_VERSION:
        return f"format {data.get('format')!r}, this autoshard reads {FORMAT_VERSION}"
    stored = data.get("key")
    if stored != key.to_dict():
        if isinstance(stored, dict):
            differ = sorted(k for k in key.to_dict() if stored.get(k) != key.to_dict()[k])
            return f"made for another {', '.join(differ) or 'key'}"
        return "no key"
    return None


def _one_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= 200 else line[:197] + "..."
