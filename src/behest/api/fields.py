"""Checks every request's fields share: ids, sizes, page limits (messages name the field)."""

from __future__ import annotations

import uuid

from behest.errors import InvalidArgument, quote

# A page of runs or sessions: its default and largest size.
LIST_LIMIT_DEFAULT = 100
LIST_LIMIT_MAX = 100


def uuid_field(value: str, field: str) -> str:
    """The value if it is a UUID (any case, canonical lowercase form returned)."""
    if not value:
        raise InvalidArgument(f"{field} is required")
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise InvalidArgument(f"{field} must be a UUID, got {quote(value)}") from None


def bounded(value: str, field: str, limit: int) -> None:
    """Text of at most `limit` bytes of UTF-8, without NUL."""
    size = len(value.encode())
    if size > limit:
        raise InvalidArgument(f"{field} is {size} bytes; the limit is {limit} bytes")
    if "\x00" in value:
        # Text is stored as text (PostgreSQL cannot hold NUL), and no model wants one.
        raise InvalidArgument(f"{field} contains a NUL character (\\u0000)")


def page_limit(value: int, field: str, default: int, maximum: int) -> int:
    """A page's size: `default` when unset, at most `maximum`."""
    if value > maximum:
        raise InvalidArgument(f"{field} must be at most {maximum}, got {value}")
    return value or default
