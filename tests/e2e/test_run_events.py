"""Event numbering, order, trace context and replay from any cursor (SEMANTICS §2, §3)."""

from __future__ import annotations

import asyncio
import re

import grpc
import pytest

from behest._proto.agent.v1 import run_pb2 as pb
from tests.support import Server, collect, create_request, kind, script

TERMINAL = {"run_completed", "run_failed", "run_cancelled"}


async def finished_run(server: Server, text: str) -> list[pb.AgentEvent]:
    return await collect(server.runs.CreateRunStream(create_request(text)))


async def test_events_are_numbered_from_one_without_gaps(server: Server) -> None:
    events = await finished_run(server, "one two three four")
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))


def joined_text_deltas(kinds: list[str]) -> list[str]:
    """The kinds with each run of text_delta as one (deltas may be joined; SEMANTICS §2)."""
    return [k for i, k in enumerate(kinds) if k != "text_delta" or kinds[i - 1] != "text_delta"]


async def test_echo_run_has_the_documented_order(server: Server) -> None:
    events = await finished_run(server, "alpha beta gamma")
    kinds = [kind(e) for e in events]
    assert 1 <= kinds.count("text_delta") <= 3
    assert joined_text_deltas(kinds) == [
        "run_started",
        "context_built",
        "model_started",
        "text_delta",
        "assistant_message_committed",
        "usage_recorded",
        "run_completed",
    ]
    assert "".join(e.text_delta.delta for e in events) == "alpha beta gamma"
    assert events[-1].run_completed.iterations == 1


async def test_exactly_one_terminal_event_and_it_is_last(server: Server) -> None:
    events = await finished_run(server, "just one end")
    assert [kind(e) in TERMINAL for e in events].count(True) == 1
    assert kind(events[-1]) in TERMINAL


async def test_every_event_carries_the_run_id_and_one_trace_id(server: Server) -> None:
    events = await finished_run(server, "trace me please")
    run_id = events[0].run_id
    assert all(e.run_id == run_id for e in events)
    assert len({e.trace_id for e in events}) == 1
    assert re.fullmatch(r"[0-9a-f]{32}", events[0].trace_id)
    assert all(re.fullmatch(r"[0-9a-f]{16}", e.span_id) for e in events)
    model_spans = {e.span_id for e in events if kind(e) in ("text_delta", "model_started")}
    delta_spans = {e.span_id for e in events if kind(e) == "text_delta"}
    assert delta_spans
    assert events[0].span_id not in delta_spans
    assert model_spans


async def test_incoming_traceparent_is_continued(server: Server) -> None:
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    metadata = (("traceparent", f"00-{trace_id}-00f067aa0ba902b7-01"),)
    events = await collect(
        server.runs.CreateRunStream(create_request("continue my trace"), metadata=metadata)
    )
    assert {e.trace_id for e in events} == {trace_id}


async def test_watch_from_every_cursor_returns_exactly_the_rest(server: Server) -> None:
    events = await finished_run(server, "a b c d e f")
    run_id, last = events[0].run_id, events[-1].sequence
    for cursor in range(last):
        watched = await collect(
            server.runs.WatchRunEvents(
                pb.WatchRunEventsRequest(run_id=run_id, last_event_id=cursor)
            )
        )
        assert [e.sequence for e in watched] == list(range(cursor + 1, last + 1))
        assert watched == events[cursor:]


async def test_watch_at_the_end_of_a_finished_run_ends_at_once(server: Server) -> None:
    events = await finished_run(server, "nothing left")
    request = pb.WatchRunEventsRequest(run_id=events[0].run_id, last_event_id=events[-1].sequence)
    assert await collect(server.runs.WatchRunEvents(request)) == []


async def test_watch_past_the_end_of_a_finished_run_is_out_of_range(server: Server) -> None:
    events = await finished_run(server, "too far")
    request = pb.WatchRunEventsRequest(
        run_id=events[0].run_id, last_event_id=events[-1].sequence + 5
    )
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await collect(server.runs.WatchRunEvents(request))
    assert err.value.code() == grpc.StatusCode.OUT_OF_RANGE


async def test_watch_of_an_unknown_run_is_not_found(server: Server) -> None:
    request = pb.WatchRunEventsRequest(run_id="00000000-0000-4000-8000-000000000000")
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await collect(server.runs.WatchRunEvents(request))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


async def test_watch_joining_a_live_run_gets_exactly_the_rest(server: Server) -> None:
    slow = script({"text": " ".join(f"w{i}" for i in range(30)), "delay_ms": 10})
    stream = server.runs.CreateRunStream(create_request(slow, model="script"))
    seen: list[pb.AgentEvent] = []
    async for event in stream:
        seen.append(event)
        if len(seen) == 6:
            break
    stream.cancel()
    run_id = seen[0].run_id
    joiners = [
        collect(
            server.runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=run_id, last_event_id=k))
        )
        for k in (0, 3, 6)
    ]
    full, from3, from6 = await asyncio.gather(*joiners)
    assert [e.sequence for e in full] == list(range(1, len(full) + 1))
    assert kind(full[-1]) == "run_completed"
    assert from3 == full[3:]
    assert from6 == full[6:]
    assert seen == full[:6]


async def test_disconnecting_does_not_cancel_the_run(server: Server) -> None:
    slow = script({"text": "keep going after the client leaves", "delay_ms": 20})
    stream = server.runs.CreateRunStream(create_request(slow, model="script"))
    first = [event async for event in _take(stream, 4)]
    stream.cancel()
    run_id = first[0].run_id
    rest = await collect(
        server.runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=run_id, last_event_id=4))
    )
    assert kind(rest[-1]) == "run_completed"
    assert [e.sequence for e in rest] == list(range(5, rest[-1].sequence + 1))


async def _take(stream, count: int):  # type: ignore[no-untyped-def]
    taken = 0
    async for event in stream:
        yield event
        taken += 1
        if taken == count:
            return


async def test_a_retried_model_call_is_announced_again_with_the_same_iteration(
    server: Server,
) -> None:
    steps = script({"error": "rate_limited"}, {"text": "after the retry"})
    events = await collect(server.runs.CreateRunStream(create_request(steps, model="script")))
    started = [e.model_started.iteration for e in events if kind(e) == "model_started"]
    assert started == [1, 1]
    assert "".join(e.text_delta.delta for e in events) == "after the retry"
    assert kind(events[-1]) == "run_completed"


async def test_provider_that_keeps_failing_ends_the_run_with_run_failed(server: Server) -> None:
    steps = script(*[{"error": "unavailable"}] * 6)
    events = await collect(server.runs.CreateRunStream(create_request(steps, model="script")))
    assert kind(events[-1]) == "run_failed"
    assert "local" in events[-1].run_failed.error
    assert "unavailable" in events[-1].run_failed.error


async def test_bad_request_from_the_provider_fails_at_once(server: Server) -> None:
    steps = script({"error": "bad_request"}, {"text": "never reached"})
    events = await collect(server.runs.CreateRunStream(create_request(steps, model="script")))
    assert [kind(e) for e in events].count("model_started") == 1
    assert kind(events[-1]) == "run_failed"


async def test_a_requested_tool_that_does_not_exist_is_reported_to_the_model(
    server: Server,
) -> None:
    steps = script({"tool_calls": [{"name": "missing_tool", "arguments": {}}]}, {"text": "ok"})
    events = await collect(server.runs.CreateRunStream(create_request(steps, model="script")))
    kinds = [kind(e) for e in events]
    assert kinds.index("tool_call_started") < kinds.index("tool_call_completed")
    assert kinds.index("tool_execution_started") < kinds.index("tool_execution_finished")
    assert kinds.index("tool_execution_finished") < kinds.index("tool_message_committed")
    assert kind(events[-1]) == "run_completed"
    assert events[-1].run_completed.iterations == 2
