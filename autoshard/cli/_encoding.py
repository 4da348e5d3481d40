"""Output a terminal's encoding cannot hold, written in plain characters instead of failing.

The CLI's text uses a few characters outside ASCII (``—``, ``×``, ``≤``, ``→``, ``•``). Under a locale or
``PYTHONIOENCODING`` whose encoding lacks them (ASCII, Latin-1), printing one raised ``UnicodeEncodeError`` and
the command printed nothing but an internal error; Python's own ``C`` locale is UTF-8 since 3.7 (PEP 538), so
only such explicit encodings meet it.
"""

from __future__ import annotations

import codecs
import sys
import unicodedata

_HANDLER = "autoshard-plain"

_PLAIN = {"—": "-", "–": "-", "−": "-", "×": "x", "≤": "<=", "≥": ">=", "→": "->", "←": "<-", "•": "*",
          "…": "...", "≈": "~", "‘": "'", "’": "'", "“": '"', "”": '"', "±": "+/-", "·": ".", "µ": "u",
          "²": "^2", "³": "^3", "ᵀ": "^T"}


def _plain(error: UnicodeError) -> tuple[str, int]:
    """The unencodable characters as their plain spelling, an accented letter as its letter, else ``?``."""
    if not isinstance(error, UnicodeEncodeError):
        raise error
    text = error.object[error.start:error.end]
    spelled = "".join(_PLAIN.get(c) or unicodedata.normalize("NFKD", c).encode("ascii", "ignore").decode() or "?"
                      for c in text)
    return spelled, error.end


codecs.register_error(_HANDLER, _plain)


def plain_where_unencodable() -> None:
    """Have stdout and stderr spell out what their encoding cannot hold (a no-op for UTF-8 streams)."""
    for stream in (sys.stdout, sys.stderr):
        encoding = (getattr(stream, "encoding", None) or "").lower().replace("_", "-")
        if encoding.startswith("utf") or not hasattr(stream, "reconfigure"):
            continue
        try:
            stream.reconfigure(errors=_HANDLER)
        except (ValueError, OSError):  # a detached or closed stream: nothing will be printed to it
            continue
