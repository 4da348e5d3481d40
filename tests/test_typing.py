"""A user's script type-checks against autoshard's public API, the lazily loaded names included."""

from __future__ import annotations

import ast
import importlib
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("mypy.api", reason="mypy is not installed (pip install -e '.[dev]' installs it)")

REPO = Path(__file__).resolve().parents[1]

USER_SCRIPT = textwrap.dedent(
    """
    import torch

    import autoshard

    model = torch.nn.Linear(4, 4)
    if autoshard.is_worker():
        pass
    result = autoshard.fit(model, None, max_steps=10, strategy="fsdp")
    autoshard.fit(model, None, strategy="fsdp_typo")  # type: ignore[arg-type]
    autoshard.recommend("tiny-gpt2", strategies=["ddp", "zero3"])  # type: ignore[list-item]
    tuned = autoshard.tune("model.py", trials=2)
    plan = autoshard.recommend("tiny-gpt2", hardware="dgx-h100", seq_len=64)
    written = autoshard.export_plan(plan, "out/")
    reveal_type(autoshard.fit)
    reveal_type(autoshard.tune)
    reveal_type(autoshard.export_plan)
    reveal_type(result)
    reveal_type(tuned)
    reveal_type(plan)
    reveal_type(written)
    """
)


def test_user_script_calling_lazy_api_type_checks(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(USER_SCRIPT)
    config = tmp_path / "mypy.ini"
    config.write_text("[mypy]\n")  # the user's settings, not this project's [tool.mypy]
    # As a user sees the package: its own errors silenced, its types used; this checkout's source. In its own
    # process: mypy.api.run in this one left ~7.5 million objects alive (torch's parsed stubs), and every later
    # garbage collection of the test run visited them (9 s each).
    done = subprocess.run([
        sys.executable, "-m", "mypy", str(script), "--follow-imports=silent", "--config-file", str(config),
        "--cache-dir", str(tmp_path / ".mypy_cache"), "--python-version", "3.10",
        "--warn-unused-ignores",  # the ignores above are needed: a misspelt strategy is a type error
    ], cwd=tmp_path, env={**os.environ, "MYPYPATH": str(REPO)}, capture_output=True, text=True, timeout=600,
        check=False)
    stdout, stderr, status = done.stdout, done.stderr, done.returncode
    assert status == 0, stdout + stderr
    assert "error:" not in stdout
    revealed = re.findall(r'Revealed type is "(.*)"', stdout)
    assert len(revealed) == 7, stdout
    fit, tune, export_plan, result, tuned, plan, written = revealed
    for callable_type in (fit, tune, export_plan):
        assert callable_type.startswith("def ("), callable_type
    assert result == "autoshard.runtime.result.FitResult"
    assert tuned == "autoshard.tuner.result.TuneResult"
    assert plan == "autoshard.planner.plan.Plan"
    assert written.endswith("list[pathlib.Path]"), written  # "builtins.list[...]" before mypy 2


def test_the_public_fit_takes_every_argument_the_runtime_does_plus_tune() -> None:
    """``autoshard.fit`` (training composed with tuning) forwards to ``autoshard.runtime.fit.fit``: the two
    signatures must not drift apart."""
    import inspect

    import autoshard
    from autoshard.runtime.fit import fit as runtime_fit

    public = inspect.signature(autoshard.fit).parameters
    runtime = inspect.signature(runtime_fit).parameters
    assert [n for n in public if n != "tune"] == list(runtime)
    for name, p in runtime.items():
        assert (public[name].kind, public[name].default) == (p.kind, p.default), name


def test_the_public_tune_takes_every_argument_the_study_does_with_progress_for_observers() -> None:
    """``autoshard.tune`` (the study composed with its report) forwards to
    ``autoshard.tuner.study.run_study``: the two signatures must not drift apart."""
    import inspect

    import autoshard
    from autoshard.tuner.study import run_study

    public = inspect.signature(autoshard.tune).parameters
    study = inspect.signature(run_study).parameters
    assert [n for n in public if n != "progress"] == [n for n in study if n != "observers"]
    for name, p in study.items():
        if name != "observers":
            assert (public[name].kind, public[name].default, public[name].annotation) == (
                p.kind, p.default, p.annotation), name


def _type_checking_imports() -> dict[str, str]:
    """The names ``autoshard/__init__.py`` imports under ``if TYPE_CHECKING:``, each with its module."""
    tree = ast.parse((REPO / "autoshard" / "__init__.py").read_text(encoding="utf-8"))
    block = next(node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING")
    return {alias.name: node.module for node in block.body if isinstance(node, ast.ImportFrom) and node.module
            for alias in node.names}


def test_every_lazy_name_is_typed_from_the_module_it_loads_from() -> None:
    """What a user's type checker sees (the ``TYPE_CHECKING`` imports) is what runs (``_LAZY``), name for name:
    a lazy name missing there would reach the user's mypy as an unknown attribute. The slow test above runs mypy
    on a user's script; this one keeps the two lists in step in CI."""
    import autoshard

    typed = _type_checking_imports()
    assert typed == autoshard._LAZY
    assert set(typed) <= set(autoshard.__all__)
    for name, module in typed.items():
        assert getattr(autoshard, name) is getattr(importlib.import_module(module), name), name
