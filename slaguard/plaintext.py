"""Data shown on a terminal as inert text: its control characters written out.

Request ids, prefix ids, subjects and reasons come from clients and operators. Printed
raw, an ESC sequence in one clears the screen or opens a hyperlink, and a CR/LF forges
a line; written out (`\\x1b`, `\\r`, `\\n`) they are only read. Names that are stored
(an actor) are refused unless they are plain text on one line.
"""

from __future__ import annotations

import re

from rich.text import Text

_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}
_CONTROL = [*range(0x00, 0x20), *range(0x7F, 0xA0)]
"""Unicode category Cc: C0 controls, DEL and the C1 controls (0x9B is a one-byte CSI)."""
_BIDI = [*range(0x202A, 0x202F), *range(0x2066, 0x206A)]
"""Bidirectional embeddings, overrides and isolates: they reorder what the eye reads."""
_WRITTEN_OUT = {
    **{code: f"\\x{code:02x}" for code in _CONTROL},
    **{code: f"\\u{code:04x}" for code in _BIDI},
    **{ord(char): shown for char, shown in _NAMED.items()},
}


_A_CONTROL = re.compile("[" + "".join(f"\\x{code:02x}" for code in _CONTROL) + "]")


def first_control(text: str) -> int | None:
    """Where `text`'s first control character (category Cc) is, or None: one regular
    expression search, cheap enough for a request's fields on the routing path."""
    found = _A_CONTROL.search(text)
    return None if found is None else found.start()


def visible(text: str) -> str:
    """`text` with every control character written out as its escape, nothing else changed."""
    return text.translate(_WRITTEN_OUT)


def inert(text: str) -> Text:
    """`text` for a rich table cell or title: control characters written out, and never
    parsed as markup (`[/x]` in an id would be a MarkupError)."""
    return Text(visible(text))


MAX_ACTOR = 120
"""`actor` columns hold 128 characters; the API prefixes its actors with `api:`."""


def actor_problem(name: str) -> str | None:
    """Why `name` cannot be stored as an actor (the CLI's `--actor`, the API's `actor`),
    or None: a name on one line, no control characters, short enough for its column."""
    if len(name) > MAX_ACTOR or not name.isprintable():
        return (
            f"{name[:40]!r} is not a name on one line of at most {MAX_ACTOR} characters; "
            "fix: give a user or team name"
        )
    return None
