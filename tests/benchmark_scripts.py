"""Loading a script from ``benchmarks/`` as a module, for its tests (the scripts are not a package)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load(name: str) -> ModuleType:
    """Import ``benchmarks/<name>.py`` as module ``name`` (registered in ``sys.modules`` first: dataclasses look
    their module up while the file executes)."""
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {BENCHMARKS / name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
