"""The one compact JSON encoder for records, explanations and evidence.

Its own module so the database engine (and every CLI command that opens one) gets it
without importing the journal's codecs, the fleet and numpy.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec


def _encode_hook(value: object) -> object:
    """JSON for any Mapping (msgspec itself takes dicts only)."""
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"cannot encode {type(value).__name__} as JSON")


json_encoder = msgspec.json.Encoder(enc_hook=_encode_hook)
"""Compact JSON for records, explanations and evidence."""
