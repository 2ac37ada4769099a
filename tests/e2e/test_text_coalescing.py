"""Text deltas that wait for the previous one's commit are joined into one event, same text."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from behest._proto.agent.v1 import run_pb2 as pb
from tests.support import (
    Server,
    collect,
    create_request,
    fast_settings,
    kind,
    script,
    start_server,
    stop_server,
)

DELTAS = 2_000
EXPECTED_TEXT = "".join(f"w{i} " for i in range(1, DELTAS + 1))


@pytest.fixture
async def per_delta_server(tmp_path: Path) -> AsyncIterator[Server]:
    running = await start_server(fast_settings(tmp_path, coalesce_text_deltas=False))
    try:
        yield running
    finally:
        await stop_server(running)


def texts(events: list[pb.AgentEvent]) -> list[str]:
    return [e.text_delta.delta for e in events if kind(e) == "text_delta"]


async def test_a_burst_of_deltas_is_joined_into_fewer_events_with_the_same_text(
    server: Server,
) -> None:
    request = create_request(script({"deltas": DELTAS}), model="script")
    events = await collect(server.runs.CreateRunStream(request))
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    assert kind(events[-1]) == "run_completed"
    assert "".join(texts(events)) == EXPECTED_TEXT
    assert len(texts(events)) < DELTAS / 10
    # A watcher replaying the log sees exactly the events the creator saw.
    replayed = await collect(
        server.runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=events[0].run_id))
    )
    assert replayed == events
    output = await server.runs.GetRunOutput(pb.GetRunOutputRequest(run_id=events[0].run_id))
    assert output.output.messages[-1].content[0].text.text == EXPECTED_TEXT


async def test_text_before_a_tool_call_stays_before_it(server: Server) -> None:
    steps = [
        {"deltas": 500, "tool_calls": [{"name": "calculator", "arguments": {"expression": "1+2"}}]},
        {"text": "three"},
    ]
    events = await collect(
        server.runs.CreateRunStream(create_request(script(*steps), model="script"))
    )
    kinds = [kind(e) for e in events]
    first_call = kinds.index("tool_call_started")
    assert "text_delta" not in kinds[first_call : kinds.index("model_started", first_call)]
    before = [e.text_delta.delta for e in events[:first_call] if kind(e) == "text_delta"]
    assert "".join(before) == "".join(f"w{i} " for i in range(1, 501))
    assert kinds[-1] == "run_completed"


async def test_deltas_slower_than_commits_each_keep_their_event(server: Server) -> None:
    request = create_request(script({"text": "one two three four", "delay_ms": 50}), model="script")
    events = await collect(server.runs.CreateRunStream(request))
    assert texts(events) == ["one ", "two ", "three ", "four"]


async def test_switched_off_every_model_delta_is_its_own_event(per_delta_server: Server) -> None:
    request = create_request(script({"deltas": DELTAS}), model="script")
    events = await collect(per_delta_server.runs.CreateRunStream(request))
    assert texts(events) == [f"w{i} " for i in range(1, DELTAS + 1)]
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
