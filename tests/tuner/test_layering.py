"""The tuner renders nothing: its progress bar, summary files and plots live in ``autoshard.report``, which
:func:`autoshard.tune` hands to the study as observers (docs/architecture.md). So no module of ``tuner/`` imports
rich, matplotlib, the report or the CLI, not even inside a function."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import autoshard.tuner

TUNER = Path(autoshard.tuner.__file__).parent
RENDERING = ("rich", "matplotlib", "autoshard.report", "autoshard.cli")


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports, at the top or deferred inside a function."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_no_tuner_module_imports_rich_matplotlib_the_report_or_the_cli() -> None:
    modules = sorted(TUNER.glob("*.py"))
    assert len(modules) > 5  # the folder was found
    offending = {p.name: sorted(n for n in _imports(p) if n == "rich" or n.startswith(RENDERING))
                 for p in modules}
    assert {name: found for name, found in offending.items() if found} == {}


def test_importing_every_tuner_module_loads_no_rendering_library() -> None:
    names = [f"autoshard.tuner.{p.stem}" for p in sorted(TUNER.glob("*.py")) if p.stem != "__init__"]
    script = ("import importlib, json, sys\n"
              f"for name in {names!r}:\n    importlib.import_module(name)\n"
              "print(json.dumps(sorted(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert [m for m in loaded if m.split(".")[0] in ("rich", "matplotlib")
            or m.startswith(("autoshard.report", "autoshard.cli"))] == []
