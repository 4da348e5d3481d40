"""What a model source was made from, as a digest: :attr:`autoshard.models.source.ModelSource.fingerprint`.

Two sources with the same fingerprint build the same module with the same batch, loss and optimizer, so what
is traced from one holds for the other (the workload cache, :mod:`autoshard.planner.workload_cache`, is keyed
by it). Each loader sets it from its input:

* a ``model.py``: the file's bytes and those of the files beside it that it imports, transitively — a sibling
  ``layers.py``, every ``.py`` file of a sibling package — found by reading the ``import`` statements (those
  inside functions too, as ``model()`` may import lazily). Data files the code reads are not followed;
* a Hugging Face ``config.json``: its parsed content (formatting and key order do not matter);
* a catalog name: the name and the text of the modules defining the entry.

The code of installed packages (torch, transformers) is not part of it: their versions are keyed separately.
"""

from __future__ import annotations

import ast
import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["config_fingerprint", "definition_fingerprint", "file_fingerprint"]

_MAX_FILES = 512
"""Sibling files followed from one model file; past this the fingerprint is ``None`` (not cached)."""


def file_fingerprint(path: str | Path) -> str | None:
    """The digest of a ``model.py`` and the sibling modules it imports (see the module docstring).

    Returns:
        ``None`` when a file cannot be read or parsed, or it imports more than :data:`_MAX_FILES` siblings:
        such a source is simply not cached.

    Example:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp())
        >>> _ = (d / "layers.py").write_text("X = 1\\n")
        >>> _ = (d / "model.py").write_text("from layers import X\\n")
        >>> before = file_fingerprint(d / "model.py")
        >>> _ = (d / "layers.py").write_text("X = 2\\n")
        >>> file_fingerprint(d / "model.py") != before
        True
    """
    root = Path(path).resolve()
    directory = root.parent
    digest = hashlib.sha256(b"model.py\0")
    todo, seen = [root], {root}
    while todo:
        file = todo.pop(0)
        try:
            data = file.read_bytes()
            tree = ast.parse(data, filename=str(file))
        except (OSError, SyntaxError, ValueError):
            return None
        digest.update(f"{file.relative_to(directory)}\0{len(data)}\0".encode())
        digest.update(data)
        for found in _sibling_files(tree, directory):
            if found not in seen:
                seen.add(found)
                todo.append(found)
        if len(seen) > _MAX_FILES:
            return None
    return digest.hexdigest()[:32]


def config_fingerprint(data: Mapping[str, Any]) -> str:
    """The digest of a parsed ``config.json`` (key order and formatting do not matter).

    Example:
        >>> config_fingerprint({"a": 1, "b": 2}) == config_fingerprint({"b": 2, "a": 1})
        True
    """
    text = json.dumps(data, sort_keys=True, default=repr)
    return hashlib.sha256(b"config.json\0" + text.encode()).hexdigest()[:32]


def definition_fingerprint(name: str, files: tuple[str | Path, ...]) -> str | None:
    """The digest of a catalog entry: its name and the text of the files defining it (``None`` when one cannot be
    read)."""
    digest = hashlib.sha256(f"catalog\0{name}\0".encode())
    for file in files:
        try:
            data = Path(file).read_bytes()
        except OSError:
            return None
        digest.update(f"{Path(file).name}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()[:32]


def _sibling_files(tree: ast.AST, directory: Path) -> list[Path]:
    """The files under ``directory`` that the ``import`` statements in ``tree`` name: ``name.py`` or every
    ``.py`` file of the package ``name/``, in a stable order."""
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name.partition(".")[0] for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module.partition(".")[0])
    found: list[Path] = []
    for name in dict.fromkeys(names):
        module, package = directory / f"{name}.py", directory / name
        if module.is_file():
            found.append(module.resolve())
        elif (package / "__init__.py").is_file() or (package.is_dir() and any(package.glob("*.py"))):
            found += sorted(p.resolve() for p in package.rglob("*.py"))
    return found
