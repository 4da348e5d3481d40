"""A matplotlib that is installed but cannot be imported (3.7 under the numpy 2 DeepSpeed brings: "numpy.core.
multiarray failed to import") failed ``--plot`` as an internal error, and ``tune`` said it was not installed
(a packaging probe). A stand-in package that fails as that one did is put first on the path."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BROKEN = 'raise ImportError("numpy.core.multiarray failed to import")\n'


def _broken_matplotlib(tmp_path: Path) -> dict[str, str]:
    package = tmp_path / "site" / "matplotlib"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(BROKEN, encoding="utf-8")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(package.parent), str(REPO)])}


def test_plot_names_the_import_error_in_one_line_before_tracing(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "autoshard", "recommend", "no-such-model-either", "--hardware", "l40s",
                           "--plot", str(tmp_path / "m.png")], env=_broken_matplotlib(tmp_path), cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        "autoshard: error: --plot needs matplotlib, and matplotlib is installed but cannot be imported "
        "(ImportError: numpy.core.multiarray failed to import).",
        "  Install it: pip install 'matplotlib>=3.9' (in autoshard's checkout: pip install -e '.[plot]')."]


def test_tune_plots_say_why_they_were_not_drawn(tmp_path: Path) -> None:
    script = ("from autoshard.report.plots import write_plots\n"
              "import sys\n"
              "print(write_plots(None, sys.argv[1])[1][0])\n")
    proc = subprocess.run([sys.executable, "-c", script, str(tmp_path / "plots")], env=_broken_matplotlib(tmp_path),
                          cwd=tmp_path, capture_output=True, text=True, timeout=120, check=True)
    assert proc.stdout.strip() == (
        "No plots drawn: matplotlib is installed but cannot be imported (ImportError: numpy.core.multiarray failed "
        "to import) (pip install 'matplotlib>=3.9'; in autoshard's checkout: pip install -e '.[plot]').")
