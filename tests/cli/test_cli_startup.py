"""``autoshard --version``, ``--help``, ``hardware --list``, ``models`` and ``cache`` answer without importing torch
(or, for ``--version`` and ``--help``, the planner): importing torch alone takes seconds."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from autoshard.cli._format import OPTIMIZER_IMPLS, OPTIMIZERS, PRECISIONS

SCRIPT = """
import json, sys
from autoshard.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
sys.stdout.flush()
print("\\nMODULES=" + json.dumps(sorted(sys.modules)))
"""

HEAVY = ("torch", "autoshard.planner", "autoshard.profiler", "autoshard.strategies", "autoshard.models")


@pytest.mark.parametrize("argv", [
    ["--version"], ["--help"], [], ["recommend", "--help"], ["profile", "--help"], ["tune", "--help"],
    ["export", "--help"], ["models", "--help"],
])
def test_version_and_help_import_no_torch_nor_planner(argv):
    out = subprocess.run([sys.executable, "-c", SCRIPT, *argv], capture_output=True, text=True, check=True).stdout
    modules = set(json.loads(out.rsplit("MODULES=", 1)[1]))
    assert not {m for m in modules for heavy in HEAVY if m == heavy or m.startswith(heavy + ".")}


@pytest.mark.parametrize("argv", [
    ["--version"], ["--help"], ["hardware", "--list"], ["hardware", "--list", "--json"], ["models"],
    ["models", "--json"], ["cache", "info"], ["cache", "list"],
])
def test_listing_commands_answer_without_torch(argv):
    out = subprocess.run([sys.executable, "-c", SCRIPT, *argv], capture_output=True, text=True, check=True).stdout
    listed, modules = out.rsplit("MODULES=", 1)
    assert "torch" not in json.loads(modules)
    assert listed.strip()  # it answered


def test_import_autoshard_imports_no_torch_until_the_api_is_used():
    code = ("import sys, autoshard; before = 'torch' in sys.modules; autoshard.profile; "
            "print(before, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "True"]


def test_help_lists_the_profilers_precisions_and_optimizers():
    from autoshard.profiler.options import OPTIMIZER_IMPLS as PROFILER_IMPLS
    from autoshard.profiler.options import OPTIMIZERS as PROFILER_OPTIMIZERS
    from autoshard.profiler.options import Precision

    assert tuple(p.value for p in Precision) == PRECISIONS
    assert PROFILER_OPTIMIZERS == OPTIMIZERS
    assert PROFILER_IMPLS == OPTIMIZER_IMPLS
