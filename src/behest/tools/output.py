"""Bounding what a tool returns before the model sees it."""

from __future__ import annotations

MAX_LINES = 2000
MAX_BYTES = 50 * 1024


def truncate(text: str, *, max_lines: int = MAX_LINES, max_bytes: int = MAX_BYTES) -> str:
    """Keep at most `max_lines` lines and `max_bytes` bytes, and say what was cut."""
    lines = text.splitlines(keepends=True)
    cut_lines = len(lines) > max_lines
    kept = "".join(lines[:max_lines]) if cut_lines else text
    data = kept.encode()
    cut_bytes = len(data) > max_bytes
    if cut_bytes:
        kept = data[:max_bytes].decode(errors="ignore")
    if not (cut_lines or cut_bytes):
        return text
    total_lines, total_bytes = len(lines), len(text.encode())
    return (
        f"{kept}\n[output truncated: showing {len(kept.splitlines())} of {total_lines} lines, "
        f"{len(kept.encode())} of {total_bytes} bytes]"
    )
