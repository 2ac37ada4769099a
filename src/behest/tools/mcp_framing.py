"""MCP messages read off a byte stream with a bound: lines cut while they are read, each line
checked (UTF-8, JSON-RPC), and what can be said of a line too long to keep.

A server's answer is one line of JSON. Of a line longer than MAX_MESSAGE_BYTES only its head
and tail are kept while the rest is read and dropped, so reading it costs about the bound in
memory whatever its size. A tool's answer cut that way still answers its call: an error result
that names its size and carries the start of its text (the model sees as much of it as of any
long result); anything else too long answers its request with an error.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pydantic_core
from mcp.shared.message import SessionMessage
from mcp.types import (
    INTERNAL_ERROR,
    ErrorData,
    JSONRPCError,
    JSONRPCResponse,
    jsonrpc_message_adapter,
)

from behest.errors import quote

# The most of one message behest keeps: the bound the SDK puts on one event over HTTP (SSE).
MAX_MESSAGE_BYTES = 1024 * 1024
# Kept of a long line's end, where a server that writes `result` first puts the `id`.
_TAIL_BYTES = 256
_ID_AT_END = re.compile(rb'"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*")\s*\}\s*$')


class ProtocolBroken(Exception):
    """The server wrote something that is not an MCP message; the words say what."""


class NotJsonRpc(ProtocolBroken):
    """A line of UTF-8 text that is not a JSON-RPC message (a stray print, say)."""


@dataclass(frozen=True, slots=True)
class LongLine:
    """A line longer than the bound: its size, its first bytes and its last."""

    size: int
    head: bytes
    tail: bytes


class Lines:
    """A byte stream split into lines, keeping at most `limit` bytes of each line."""

    def __init__(self, limit: int = MAX_MESSAGE_BYTES) -> None:
        self._limit = limit
        self._parts: list[bytes] = []
        self._kept = 0
        self._size = 0
        self._tail = b""

    def feed(self, chunk: bytes) -> Iterator[bytes | LongLine]:
        """The lines that `chunk` completes."""
        start = 0
        while (end := chunk.find(b"\n", start)) != -1:
            self._add(chunk[start:end])
            yield self._take()
            start = end + 1
        self._add(chunk[start:])

    def _add(self, piece: bytes) -> None:
        self._size += len(piece)
        room = self._limit - self._kept
        if room > 0:
            self._parts.append(piece[:room])
            self._kept += min(room, len(piece))
        if self._size > self._limit:
            self._tail = (self._tail + piece)[-_TAIL_BYTES:]

    def _take(self) -> bytes | LongLine:
        line = b"".join(self._parts)
        size, tail = self._size, self._tail
        self._parts, self._kept, self._size, self._tail = [], 0, 0, b""
        return line if size <= self._limit else LongLine(size, line, tail)


def message(line: bytes) -> SessionMessage | None:
    """One line as an MCP message; None for a blank line. Raises ProtocolBroken."""
    if not line.strip():
        return None
    try:
        text = line.decode()
    except UnicodeDecodeError as exc:
        raise ProtocolBroken(
            f"the server broke the protocol: its output is not UTF-8 (byte 0x{line[exc.start]:02x} "
            f"at offset {exc.start} of a line)"
        ) from None
    try:
        return SessionMessage(jsonrpc_message_adapter.validate_json(text, by_name=False))
    except ValueError:
        raise NotJsonRpc(
            f"the server broke the protocol: it wrote a line that is not a JSON-RPC message: "
            f"{quote(text.strip())}"
        ) from None


def long_message(line: LongLine) -> SessionMessage | None:
    """The answer behest gives for a message too long to keep, or None if it answers nothing
    (no request id in what was kept). Raises ProtocolBroken for a head that is not UTF-8."""
    try:
        # Strict, but a character cut in two at the end of the head is left out, not an error.
        text = codecs.getincrementaldecoder("utf-8")().decode(line.head)
    except UnicodeDecodeError:
        raise ProtocolBroken("the server broke the protocol: its output is not UTF-8") from None
    try:
        start = pydantic_core.from_json(text, allow_partial="trailing-strings")
    except ValueError:
        start = None
    start = start if isinstance(start, dict) else {}
    request_id = _request_id(start.get("id"))
    if request_id is None:
        request_id = _request_id(_id_at_end(line.tail))
    if request_id is None:
        return None
    what = f"the answer was {line.size:,} bytes, more than the {MAX_MESSAGE_BYTES:,} behest reads"
    texts = _texts(start.get("result"))
    if texts is None:
        error = ErrorData(code=INTERNAL_ERROR, message=f"{what} of one MCP message")
        return SessionMessage(JSONRPCError(jsonrpc="2.0", id=request_id, error=error))
    # An error result: the answer is not whole (and any structured content is lost).
    said = [f"{what}; it begins:" if texts else f"{what}; its start held no text"]
    content = [{"type": "text", "text": t} for t in said + texts]
    # `resultType` is required from the 2026 revision on; earlier ones drop it.
    result = {"content": content, "isError": True, "resultType": "complete"}
    return SessionMessage(JSONRPCResponse(jsonrpc="2.0", id=request_id, result=result))


def _texts(result: Any) -> list[str] | None:
    """The text parts of a tool's answer cut short, or None if it is not a tool's answer."""
    content = result.get("content") if isinstance(result, dict) else None
    if not isinstance(content, list):
        return None
    blocks = [block for block in content if isinstance(block, dict)]
    # A block cut short may have lost its "type" (servers that sort keys write "text" first).
    return [
        b["text"]
        for b in blocks
        if b.get("type", "text") == "text" and isinstance(b.get("text"), str)
    ]


def _id_at_end(tail: bytes) -> Any:
    found = _ID_AT_END.search(tail)
    return json.loads(found.group(1)) if found else None


def _request_id(value: Any) -> int | str | None:
    if isinstance(value, bool) or not isinstance(value, int | str):
        return None
    return value


def sendable(arguments: dict[str, Any]) -> bool:
    """Whether the arguments can go out as UTF-8: a lone surrogate (which JSON may escape)
    would fail the transport's writer and with it the connection and every call on it."""
    try:
        json.dumps(arguments, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return False
    return True
