"""The command's text under an output encoding without its few non-ASCII characters (``—``, ``×``, ``≤``):
spelled plainly, where it printed nothing and exited with an internal error (a probe's PYTHONIOENCODING=ascii)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
def test_profile_prints_under_an_encoding_without_its_characters(encoding: str) -> None:
    env = dict(os.environ, PYTHONIOENCODING=encoding)
    proc = subprocess.run([sys.executable, "-m", "autoshard", "profile", "tiny-gpt2", "--seq-len", "16"],
                          env=env, capture_output=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr.decode(encoding, "replace")
    out = proc.stdout.decode(encoding)
    assert out.startswith("tiny-gpt2 (catalog) - 173.82K parameters")  # neither holds the em dash
    assert "peak allocated" in out and "internal error" not in proc.stderr.decode(encoding, "replace")


def test_characters_are_spelled_plainly() -> None:
    from autoshard.cli._encoding import _HANDLER

    assert "a — b × c ≤ d → é".encode("ascii", _HANDLER) == b"a - b x c <= d -> e"
    assert "α".encode("ascii", _HANDLER) == b"?"
    assert "a × b".encode("latin-1", _HANDLER) == "a × b".encode("latin-1")  # Latin-1 holds ×
