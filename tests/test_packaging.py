"""The wheel's package list is explicit (pyproject.toml); every package in the tree must be on it."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_autoshard_package_is_listed_in_pyproject():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for init in (ROOT / "autoshard").rglob("__init__.py")
    }
    assert found <= listed, f"add {sorted(found - listed)} to [tool.setuptools] packages"
    assert "autoshard.profiles" in listed


def test_console_script_points_at_the_cli():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"autoshard": "autoshard.cli:main"}


def test_profiles_come_from_the_package_else_from_the_checkout_it_is_in(tmp_path):
    """A ``profiles`` folder beside an installed package (``site-packages/profiles``, another project's app beside
    a vendored copy) hid all 40 shipped profiles: it was taken for a source checkout's."""
    from autoshard.hardware.profiles import profiles_dir, profiles_dir_of

    assert profiles_dir() == ROOT / "profiles"  # this checkout, installed editable: no autoshard/profiles here
    checkout = tmp_path / "checkout"
    (checkout / "autoshard").mkdir(parents=True)
    (checkout / "profiles").mkdir()
    (checkout / "pyproject.toml").write_text("", encoding="utf-8")
    assert profiles_dir_of(checkout / "autoshard") == checkout / "profiles"
    site = tmp_path / "site-packages"
    (site / "autoshard" / "profiles").mkdir(parents=True)
    (site / "profiles").mkdir()
    assert profiles_dir_of(site / "autoshard") == site / "autoshard" / "profiles"
    (site / "pyproject.toml").write_text("", encoding="utf-8")  # even then: the package's own copy comes first
    assert profiles_dir_of(site / "autoshard") == site / "autoshard" / "profiles"


def test_the_license_the_metadata_declares_is_shipped():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
    assert (ROOT / "LICENSE").read_text(encoding="utf-8").split()[:4] == ["Apache", "License", "Version", "2.0,"]
    assert "include LICENSE" in (ROOT / "MANIFEST.in").read_text(encoding="utf-8")
