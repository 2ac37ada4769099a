"""The Retry-After hint of an HTTP response, as both provider APIs send it."""

from __future__ import annotations

import email.utils
import math
import time
from collections.abc import Mapping


def retry_after_s(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """The server's wait hint: `retry-after-ms`, else `retry-after` in seconds or a date."""
    milliseconds = _number(headers.get("retry-after-ms"))
    if milliseconds is not None:
        return milliseconds / 1000
    value = headers.get("retry-after")
    if value is None:
        return None
    seconds = _number(value)
    if seconds is not None:
        return seconds
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def _number(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return number if math.isfinite(number) and number >= 0 else None
