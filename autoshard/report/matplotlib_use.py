"""Whether matplotlib can draw here: installed, and importable with the numpy it finds.

An installed matplotlib built for another numpy (matplotlib 3.7 under numpy 2, which DeepSpeed brings) failed
inside ``--plot``'s check as an "internal error", and ``tune`` said matplotlib "is not installed" (a packaging
probe). Both now name the import error.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io

PLOT_HINT = "pip install 'matplotlib>=3.9'; in autoshard's checkout: pip install -e '.[plot]'"
"""How to install it, as a note's parenthesis: 3.9 is the first matplotlib built for numpy 2 as well as 1."""

INSTALL_HINT = "Install it: pip install 'matplotlib>=3.9' (in autoshard's checkout: pip install -e '.[plot]')."
"""The same as an error's hint."""


def matplotlib_unusable() -> str | None:
    """Why matplotlib cannot draw here, in a few words, or ``None`` when it can.

    Example:
        >>> matplotlib_unusable() in (None, "matplotlib is not installed") or matplotlib_unusable()
        True
    """
    if importlib.util.find_spec("matplotlib") is None:
        return "matplotlib is not installed"
    # numpy prints its own report of a module built for another numpy before raising: the one line said is enough.
    with contextlib.redirect_stderr(io.StringIO()):
        try:
            import matplotlib.backend_bases  # noqa: F401  # the compiled parts, and numpy under them
        except Exception as exc:  # noqa: BLE001  # an ImportError or what a broken build raises instead
            return f"matplotlib is installed but cannot be imported ({type(exc).__name__}: {_first_line(exc)})"
    return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else "no message"
