"""The one parser of JSON text from outside: bounded in size and nesting, finite numbers only.

Python's json module recurses once per nesting level (a RecursionError near 1,000 levels, and
the same for json.dumps and any recursive walk afterwards) and accepts NaN, Infinity and
1e309 (as inf). Every JSON text behest takes from a client (metadata, a `script` input), a
model (tool-call arguments) or a tool server goes through `parse`, which refuses all of these
with `JsonRefused` before the parser recurses. A value parsed elsewhere (by a provider's or
MCP server's SDK) is measured with `check_depth` before behest walks it.

`JsonRefused` messages are verb phrases for the caller to put behind what it parsed:
f"metadata {exc}" → "metadata is nested 1000 levels deep; the limit is 64".
"""

from __future__ import annotations

import itertools
import json
import math
import re
from typing import Any

MAX_DEPTH = 64
MAX_BYTES = 4 * 1024 * 1024
# Longer integers are no quantity anyone means (and Python refuses over 4,300 digits).
MAX_INT_DIGITS = 100

# A JSON string token; possessive, so a long string costs linear time.
_STRING = re.compile(r'"(?:[^"\\]++|\\.)*+"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]++")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


class JsonRefused(ValueError):
    """JSON text that is invalid, too big, too deep, or holds a number that is not finite."""


def parse(text: str, *, max_bytes: int = MAX_BYTES, max_depth: int = MAX_DEPTH) -> Any:
    """The value of `text`, if it is JSON within the bounds."""
    size = len(text) if text.isascii() else len(text.encode())
    if size > max_bytes:
        raise JsonRefused(f"is {size} bytes; the limit is {max_bytes} bytes")
    # Cheap first: nesting cannot exceed the number of opening brackets.
    deepest = nesting(text) if text.count("[") + text.count("{") > max_depth else 0
    if deepest > max_depth:
        raise JsonRefused(f"is nested {deepest} levels deep; the limit is {max_depth}")
    try:
        return json.loads(
            text, parse_constant=_no_constant, parse_float=_finite_float, parse_int=_bounded_int
        )
    except JsonRefused:
        raise
    except json.JSONDecodeError as exc:
        raise JsonRefused(
            f"is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
        ) from None
    except (ValueError, RecursionError):
        raise JsonRefused("is not valid JSON") from None


def nesting(text: str) -> int:
    """How deep the arrays and objects of JSON text nest (an upper bound if it is invalid)."""
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    if not brackets:
        return 0
    return max(0, *itertools.accumulate(map(_STEP.__getitem__, brackets)))


def check_depth(value: Any, *, max_depth: int = MAX_DEPTH) -> None:
    """Raise JsonRefused if a parsed value nests lists and dicts deeper than `max_depth`."""
    level: list[Any] = [value]
    for depth in range(1, max_depth + 2):
        containers = [item for item in level if isinstance(item, dict | list)]
        if not containers:
            return
        if depth > max_depth:
            raise JsonRefused(f"is nested more than {max_depth} levels deep")
        level = [
            child
            for item in containers
            for child in (item.values() if isinstance(item, dict) else item)
        ]


def _no_constant(name: str) -> Any:
    raise JsonRefused(f"is not valid JSON ({name} is not a JSON number)")


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise JsonRefused(f"holds an integer of more than {MAX_INT_DIGITS} digits")
    return int(text)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise JsonRefused(f"holds a number too large to represent ({text[:40]})")
    return value
