"""MCP messages read with a bound: a line longer than the bound is kept only in part, yet still
answers its call; output that is not UTF-8 or not JSON-RPC breaks the protocol."""

from __future__ import annotations

import json

import pytest
from mcp.types import JSONRPCError, JSONRPCResponse

from behest.tools.mcp_framing import (
    MAX_MESSAGE_BYTES,
    Lines,
    LongLine,
    NotJsonRpc,
    ProtocolBroken,
    long_message,
    message,
)

MB = 1024 * 1024


def feed(lines: Lines, data: bytes, chunk: int = 65536) -> list[bytes | LongLine]:
    found: list[bytes | LongLine] = []
    for start in range(0, len(data), chunk):
        found.extend(lines.feed(data[start : start + chunk]))
    return found


def test_lines_keep_at_most_the_bound_of_a_long_line() -> None:
    (short, long, after) = feed(Lines(), b"first\n" + b"y" * (5 * MB) + b"\nlast\n")
    assert (short, after) == (b"first", b"last")
    assert isinstance(long, LongLine)
    assert (long.size, long.head) == (5 * MB, b"y" * MAX_MESSAGE_BYTES)


def a_tool_answer(text: str, *, id_last: bool) -> bytes:
    """As the Python SDK writes it (`id` first) or the TypeScript one (`result` first)."""
    result = {"content": [{"type": "text", "text": text}], "isError": False}
    if id_last:
        return json.dumps({"result": result, "jsonrpc": "2.0", "id": 7}).encode()
    return json.dumps({"jsonrpc": "2.0", "id": 7, "result": result}).encode()


@pytest.mark.parametrize("id_last", [False, True])
def test_a_tool_answer_too_long_to_keep_answers_its_call_with_its_start(id_last: bool) -> None:
    (line,) = feed(Lines(), a_tool_answer("z" * (3 * MB), id_last=id_last) + b"\n")
    assert isinstance(line, LongLine)
    answer = long_message(line)
    assert answer is not None and isinstance(answer.message, JSONRPCResponse)
    assert answer.message.id == 7
    result = answer.message.result
    assert result["isError"] is True
    said, start = (block["text"] for block in result["content"])
    assert said == (
        f"the answer was {line.size:,} bytes, more than the 1,048,576 behest reads; it begins:"
    )
    assert start == "z" * len(start) and len(start) > MAX_MESSAGE_BYTES - 100


def test_another_answer_too_long_to_keep_is_an_error_naming_its_size() -> None:
    line = LongLine(2 * MB, b'{"jsonrpc":"2.0","id":"a-1","result":{"tools":[{"name":"x', b"")
    answer = long_message(line)
    assert answer is not None and isinstance(answer.message, JSONRPCError)
    assert answer.message.id == "a-1"
    assert answer.message.error.message == (
        "the answer was 2,097,152 bytes, more than the 1,048,576 behest reads of one MCP message"
    )


def test_a_long_message_that_answers_no_request_is_dropped() -> None:
    line = LongLine(2 * MB, b'{"jsonrpc":"2.0","method":"notifications/message","params":', b"}}")
    assert long_message(line) is None


def test_output_that_is_not_utf8_breaks_the_protocol() -> None:
    with pytest.raises(ProtocolBroken, match=r"its output is not UTF-8 \(byte 0xff at offset 2"):
        message(b'{"\xff": 1}')


def test_a_line_that_is_not_json_rpc_breaks_the_protocol() -> None:
    with pytest.raises(NotJsonRpc, match="not a JSON-RPC message: 'Listening on 8080'"):
        message(b"Listening on 8080")


def test_blank_lines_are_no_messages() -> None:
    assert message(b"  \r") is None
