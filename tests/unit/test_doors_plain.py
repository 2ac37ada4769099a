"""What the plain-HTTP doors share (doors/plain.py) and the SSE door's framing (doors/sse.py):
heartbeats while a stream is quiet, a stream read in one task and closed with its reader, the
first item apart, events framed, and a refusal after the headers as a last `stream_error`."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from connectrpc.code import Code
from connectrpc.errors import ConnectError

from behest.doors.plain import SSE_HEARTBEAT, first_and_rest, sse_event, with_heartbeats
from behest.doors.sse import _frames


class Source:
    """An async generator the test releases one item at a time, recording where it ran."""

    def __init__(self, items: list[Any], error: Exception | None = None) -> None:
        self.items = items
        self.error = error
        self.release = asyncio.Event()
        self.tasks: set[asyncio.Task[Any] | None] = set()
        self.closed = False

    async def stream(self) -> AsyncIterator[Any]:
        try:
            for item in self.items:
                self.tasks.add(asyncio.current_task())
                await self.release.wait()
                self.release.clear()
                yield item
            if self.error is not None:
                raise self.error
        finally:
            self.closed = True


async def test_a_quiet_stream_gets_heartbeats_between_its_items_and_runs_in_one_task() -> None:
    source = Source(["a", "b"])
    paced = with_heartbeats(source.stream(), 0.01, first_s=0.01)
    seen = []
    async for item in paced:
        seen.append(item)
        if item is None and seen.count(None) in (2, 4):
            source.release.set()  # the next item, after two heartbeats each
    assert seen == [None, None, "a", None, None, "b"]
    assert len(source.tasks) == 1 and asyncio.current_task() not in source.tasks
    assert source.closed


async def test_the_streams_error_comes_after_its_items() -> None:
    source = Source(["a"], error=ConnectError(Code.NOT_FOUND, "gone"))
    source.release.set()
    paced = with_heartbeats(source.stream(), 60)
    assert await anext(paced) == "a"
    with pytest.raises(ConnectError, match="gone"):
        await anext(paced)


async def test_closing_the_reader_closes_the_stream_at_once() -> None:
    source = Source(["a", "b"])
    source.release.set()
    paced = with_heartbeats(source.stream(), 60)
    assert await anext(paced) == "a"
    await paced.aclose()  # the stream waits for its next release meanwhile
    assert source.closed


async def test_first_and_rest_put_the_first_item_back_and_an_empty_stream_raises() -> None:
    source = Source(["a", "b"])
    source.release.set()

    async def releasing() -> AsyncIterator[Any]:
        async for item in source.stream():
            source.release.set()
            yield item

    first, rest = await first_and_rest(releasing())
    assert first == "a" and [item async for item in rest] == ["a", "b"]
    with pytest.raises(StopAsyncIteration):
        await first_and_rest(Source([]).stream())


def test_an_event_with_lines_sends_each_as_data() -> None:
    framed = sse_event("one\ntwo", event_id=7, event="text_delta")
    assert framed == b"id: 7\nevent: text_delta\ndata: one\ndata: two\n\n"
    assert sse_event("{}") == b"data: {}\n\n"


async def test_a_refusal_after_the_headers_is_a_last_stream_error_event() -> None:
    async def items() -> AsyncIterator[Any]:
        yield None
        raise ConnectError(Code.UNAVAILABLE, "the database's disk is full")

    frames = [frame async for frame in _frames(items())]
    assert frames[0] == b"retry: 1000\n\n"
    assert frames[1] == SSE_HEARTBEAT
    lines = frames[2].decode().splitlines()
    assert lines[0] == "event: stream_error"
    assert json.loads(lines[1].removeprefix("data: ")) == {
        "code": "unavailable",
        "message": "the database's disk is full",
    }
    assert len(frames) == 3 and not any(line.startswith("id:") for line in lines)
