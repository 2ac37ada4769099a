"""Bounding what a tool returns before the model sees it: the one truncation of tool output.

What is kept is what the model sees, byte for byte: NUL (which stored text cannot hold) and
lone surrogates (which UTF-8 cannot encode) become U+FFFD *before* the cut, so the bound holds
after every change. Only a prefix of a long text is ever copied or encoded; the totals in the
note are counted without copying the whole text.
"""

from __future__ import annotations

import re

MAX_LINES = 2000
MAX_BYTES = 50 * 1024

_REPLACED = re.compile("[\x00\ud800-\udfff]")
_COUNT_CHUNK = 1 << 20  # characters encoded at a time to count a long text's bytes


def truncate(text: str, *, max_lines: int = MAX_LINES, max_bytes: int = MAX_BYTES) -> str:
    """Keep at most `max_lines` lines and `max_bytes` UTF-8 bytes, and say what was cut."""
    # A character is at least one byte: the first max_bytes characters hold all that is kept.
    kept = clean(text[:max_bytes])
    cut = len(kept) < len(text)
    data = kept.encode()
    if len(data) > max_bytes:
        kept, cut = data[:max_bytes].decode(errors="ignore"), True
    line_end = _end_of_line(kept, max_lines)
    if line_end is not None:
        kept, cut = kept[:line_end], True
    if not cut:
        return kept
    return (
        f"{kept}\n[output truncated: showing {_lines(kept)} of {_lines(text)} lines, "
        f"{len(kept.encode())} of {_utf8_size(text)} bytes]"
    )


def clean(text: str) -> str:
    """The text with NUL and lone surrogates replaced by U+FFFD (each then 3 bytes)."""
    return _REPLACED.sub("\ufffd", text)


def _end_of_line(text: str, max_lines: int) -> int | None:
    """Where line number `max_lines` ends (after its newline), if more text follows it."""
    end = -1
    for _ in range(max_lines):
        end = text.find("\n", end + 1)
        if end == -1:
            return None
    return end + 1 if end + 1 < len(text) else None


def _lines(text: str) -> int:
    return text.count("\n") + (1 if text and not text.endswith("\n") else 0)


def _utf8_size(text: str) -> int:
    """The UTF-8 size of `clean(text)`, without making either whole."""
    if text.isascii():
        return len(text) + 2 * text.count("\x00")
    size = 2 * text.count("\x00")  # U+FFFD is 3 bytes where NUL was 1
    for start in range(0, len(text), _COUNT_CHUNK):
        # A lone surrogate "passed" is 3 bytes, like the U+FFFD it becomes.
        size += len(text[start : start + _COUNT_CHUNK].encode(errors="surrogatepass"))
    return size
