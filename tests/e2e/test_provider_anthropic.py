"""The Anthropic adapter through a real behest server, against a fake Messages API."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.json_format import MessageToDict

from behest._proto.agent.v1 import common_pb2 as c
from behest._proto.agent.v1 import run_pb2 as pb
from tests.fakes.anthropic_fake import (
    FakeAnthropic,
    error_reply,
    message_end,
    message_start,
    redacted_thinking_block,
    sse_event,
    stream_error_reply,
    text_block,
    text_reply,
    thinking_block,
    tool_reply,
    tool_use_block,
)
from tests.fakes.sse_server import Reply
from tests.support import (
    Server,
    collect,
    create_request,
    fast_settings,
    kind,
    start_server,
    stop_server,
)

# These tests map each streamed chunk to its event, so deltas are never joined here.
ONE_EVENT_PER_CHUNK = False
PROVIDER = "fake-anthropic"
MODEL = "claude-test"
KEY = "sk-ant-test-3c5e8a1f9b2d4e7a8c6f0b1d2e3a4c5f"


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    async with FakeAnthropic() as running:
        yield running


@asynccontextmanager
async def anthropic_server(
    tmp_path: Path, fake: FakeAnthropic, monkeypatch: pytest.MonkeyPatch, **provider: Any
) -> AsyncIterator[Server]:
    """A server with `fake-anthropic` configured; `provider`: more keys of its table."""
    monkeypatch.setenv("FAKE_ANTHROPIC_KEY", KEY)
    table = {
        "type": "anthropic",
        "base_url": fake.url,
        "api_key_env": "FAKE_ANTHROPIC_KEY",
        "timeout_s": 5,
        **provider,
    }
    settings = fast_settings(tmp_path, coalesce_text_deltas=ONE_EVENT_PER_CHUNK).with_tables(
        {"providers": {PROVIDER: table}}, source="test"
    )
    running = await start_server(settings)
    try:
        yield running
    finally:
        await stop_server(running)


@pytest.fixture
async def server(
    tmp_path: Path, fake: FakeAnthropic, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Server]:
    async with anthropic_server(
        tmp_path,
        fake,
        monkeypatch,
        max_attempts=3,
        models={MODEL: {"context_window": 8000, "max_output_tokens": 256}},
        # These tests compare whole requests: without prompt-cache breakpoints, which
        # tests/e2e/test_prompt_caching.py covers.
        cache_breakpoints=[],
    ) as running:
        yield running


def request(text: str, **fields: str | list[str]) -> pb.CreateRunRequest:
    return create_request(text, provider=PROVIDER, model=MODEL, **fields)  # type: ignore[arg-type]


async def run(server: Server, text: str, **fields: str | list[str]) -> list[pb.AgentEvent]:
    return await collect(server.runs.CreateRunStream(request(text, **fields)))


def kinds(events: list[pb.AgentEvent]) -> list[str]:
    return [kind(e) for e in events]


def started_iterations(events: list[pb.AgentEvent]) -> list[int]:
    return [e.model_started.iteration for e in events if kind(e) == "model_started"]


def text_after_last_start(events: list[pb.AgentEvent]) -> str:
    last = max(i for i, e in enumerate(events) if kind(e) == "model_started")
    return "".join(e.text_delta.delta for e in events[last:] if kind(e) == "text_delta")


async def test_a_text_answer_streams_the_documented_events(
    server: Server, fake: FakeAnthropic
) -> None:
    fake.push(text_reply("Hello", ", ", "world", input_tokens=21, output_tokens=9))
    events = await run(server, "Say hello")
    assert kinds(events) == [
        "run_started",
        "context_built",
        "model_started",
        "text_delta",
        "text_delta",
        "text_delta",
        "assistant_message_committed",
        "usage_recorded",
        "run_completed",
    ]
    assert [e.text_delta.delta for e in events if kind(e) == "text_delta"] == [
        "Hello",
        ", ",
        "world",
    ]
    assert events[2].model_started == pb.ModelStartedEvent(
        provider=PROVIDER, model=MODEL, iteration=1
    )
    usage = events[7].usage_recorded.usage
    assert (usage.input_tokens, usage.output_tokens, usage.total_tokens) == (21, 9, 30)
    assert events[-1].run_completed.finish_reason == c.FINISH_REASON_STOP
    assert events[-1].run_completed.iterations == 1


async def test_cache_reads_and_writes_are_reported_apart_from_input_tokens(
    server: Server, fake: FakeAnthropic
) -> None:
    fake.push(
        text_reply("Cached", input_tokens=12, output_tokens=4, cache_read=2048, cache_write=300)
    )
    # message_delta's cumulative counts replace message_start's (here, after a server tool).
    final = {"input_tokens": 30, "cache_read_input_tokens": 2100}
    fake.push(
        Reply(
            events=(
                message_start(12, cache_read=2048, cache_write=300),
                *text_block(0, ["Again"]),
                *message_end("end_turn", 6, **final),
            )
        )
    )
    first = await run(server, "hello")
    second = await run(server, "hello again")
    usages = [e.usage_recorded.usage for e in first + second if kind(e) == "usage_recorded"]
    assert usages == [
        c.TokenUsage(
            input_tokens=12,
            output_tokens=4,
            cached_input_tokens=2048,
            cache_write_tokens=300,
            total_tokens=12 + 4 + 2048 + 300,
        ),
        c.TokenUsage(
            input_tokens=30,
            output_tokens=6,
            cached_input_tokens=2100,
            cache_write_tokens=300,
            total_tokens=30 + 6 + 2100 + 300,
        ),
    ]


async def test_two_tool_calls_with_fragmented_input_run_and_return_their_results(
    server: Server, fake: FakeAnthropic
) -> None:
    fake.push(
        tool_reply(
            ("toolu_01A", "calculator", ['{"expres', 'sion": "2', '*21"}']),
            ("toolu_01B", "calculator", ['{"expression"', ': "1+1"}']),
            text="Computing.",
        ),
        text_reply("42 and 2"),
    )
    events = await run(server, "What are 2*21 and 1+1?")
    first_answer = events[: kinds(events).index("assistant_message_committed")]
    assert kinds(first_answer)[3:] == [
        "text_delta",
        "tool_call_started",
        "tool_call_delta",
        "tool_call_delta",
        "tool_call_delta",
        "tool_call_completed",
        "tool_call_started",
        "tool_call_delta",
        "tool_call_delta",
        "tool_call_completed",
    ]
    started = [e.tool_call_started for e in events if kind(e) == "tool_call_started"]
    assert [(s.call_id, s.tool_name) for s in started] == [
        ("toolu_01A", "calculator"),
        ("toolu_01B", "calculator"),
    ]
    completed = [e.tool_call_completed.call for e in events if kind(e) == "tool_call_completed"]
    assert [(call.id, call.arguments) for call in completed] == [
        ("toolu_01A", '{"expression": "2*21"}'),
        ("toolu_01B", '{"expression": "1+1"}'),
    ]
    for call in completed:
        joined = "".join(
            e.tool_call_delta.delta
            for e in events
            if kind(e) == "tool_call_delta" and e.tool_call_delta.call_id == call.id
        )
        assert joined == call.arguments
    assert kinds(events).count("tool_message_committed") == 2
    assert kind(events[-1]) == "run_completed"
    assert events[-1].run_completed.iterations == 2

    second = fake.bodies[1]
    assert second["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "What are 2*21 and 1+1?"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Computing."},
                {
                    "type": "tool_use",
                    "id": "toolu_01A",
                    "name": "calculator",
                    "input": {"expression": "2*21"},
                },
                {
                    "type": "tool_use",
                    "id": "toolu_01B",
                    "name": "calculator",
                    "input": {"expression": "1+1"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_01A",
                    "is_error": False,
                    "content": "42",
                },
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_01B",
                    "is_error": False,
                    "content": "2",
                },
            ],
        },
    ]


async def test_a_429_waits_for_retry_after_and_announces_the_model_call_again(
    server: Server, fake: FakeAnthropic
) -> None:
    fake.push(
        error_reply(429, "rate_limit_error", "Number of requests exceeded", {"retry-after": "1"}),
        text_reply("after ", "the wait"),
    )
    events = await run(server, "hello")
    assert started_iterations(events) == [1, 1]
    assert fake.requests[1].at - fake.requests[0].at >= 1.0
    assert text_after_last_start(events) == "after the wait"
    assert kind(events[-1]) == "run_completed"


async def test_a_529_overloaded_is_retried(server: Server, fake: FakeAnthropic) -> None:
    fake.push(error_reply(529, "overloaded_error", "Overloaded"), text_reply("fine now"))
    events = await run(server, "hello")
    assert started_iterations(events) == [1, 1]
    assert kind(events[-1]) == "run_completed"


async def test_an_error_event_inside_the_stream_is_retried(
    server: Server, fake: FakeAnthropic
) -> None:
    fake.push(stream_error_reply("partial "), text_reply("whole answer"))
    events = await run(server, "hello")
    assert started_iterations(events) == [1, 1]
    assert text_after_last_start(events) == "whole answer"
    assert kind(events[-1]) == "run_completed"


async def test_a_500_on_every_attempt_fails_the_run_naming_provider_and_cause(
    server: Server, fake: FakeAnthropic
) -> None:
    fake.push(*[error_reply(500, "api_error", "Internal server error")] * 3, text_reply("no"))
    events = await run(server, "hello")
    assert started_iterations(events) == [1, 1, 1]
    assert len(fake.requests) == 3
    assert kind(events[-1]) == "run_failed"
    error = events[-1].run_failed.error
    assert PROVIDER in error
    assert "HTTP 500" in error
    assert "Internal server error" in error
    assert events[-1].run_failed.code == pb.FAILURE_CODE_PROVIDER_UNAVAILABLE
    assert "gave up after 3 attempts" in error


async def test_a_401_fails_at_once_and_the_key_is_in_no_event_and_no_log(
    server: Server, fake: FakeAnthropic, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    fake.push(
        error_reply(401, "authentication_error", "invalid x-api-key"), text_reply("never sent")
    )
    events = await run(server, "hello")
    assert started_iterations(events) == [1]
    assert len(fake.requests) == 1
    assert kind(events[-1]) == "run_failed"
    assert "authentication failed" in events[-1].run_failed.error
    assert "401" in events[-1].run_failed.error
    assert events[-1].run_failed.code == pb.FAILURE_CODE_AUTHENTICATION
    assert all(KEY.encode() not in e.SerializeToString() for e in events)
    assert caplog.records
    for record in caplog.records:
        assert KEY not in record.getMessage()
        assert KEY not in logging.Formatter().format(record)


async def test_a_stream_cut_mid_answer_is_retried_and_the_final_text_is_complete(
    server: Server, fake: FakeAnthropic
) -> None:
    answer = text_reply("The ", "answer ", "is ", "42")
    # message_start, ping, content_block_start, "The ", "answer ", then the connection closes.
    fake.push(Reply(events=answer.events, cut_after=5), answer)
    events = await run(server, "hello")
    assert started_iterations(events) == [1, 1]
    first = kinds(events).index("model_started")
    second = kinds(events).index("model_started", first + 1)
    assert [e.text_delta.delta for e in events[first:second] if kind(e) == "text_delta"] == [
        "The ",
        "answer ",
    ]
    assert text_after_last_start(events) == "The answer is 42"
    assert kind(events[-1]) == "run_completed"
    output = await server.runs.GetRunOutput(pb.GetRunOutputRequest(run_id=events[0].run_id))
    final = output.output.messages[-1]
    assert final.role == "assistant"
    assert "".join(part.text.text for part in final.content) == "The answer is 42"


async def test_cancel_during_a_slow_stream_closes_the_connection(
    server: Server, fake: FakeAnthropic
) -> None:
    fake.push(text_reply(*[f"w{i} " for i in range(50)], delay_s=0.2))
    stream = server.runs.CreateRunStream(request("go slowly"))
    seen = []
    async for event in stream:
        seen.append(event)
        if kind(event) == "text_delta":
            break
    began = time.monotonic()
    await server.runs.CancelRun(pb.CancelRunRequest(run_id=seen[0].run_id))
    rest = [event async for event in stream]
    assert time.monotonic() - began < 1.0
    assert kind(rest[-1]) == "run_cancelled"
    await asyncio.wait_for(fake.disconnected.wait(), timeout=2.0)
    assert fake.requests[0].closed_early


async def test_the_request_maps_instructions_tools_choice_and_limits(
    server: Server, fake: FakeAnthropic
) -> None:
    fake.push(text_reply("ok"))
    events = await run(
        server,
        "Add 1 and 2",
        instructions="Answer briefly.",
        tool_choice="calculator",
        tools=["calculator"],
    )
    assert kind(events[-1]) == "run_completed"
    sent = fake.requests[0]
    body = fake.bodies[0]
    assert body["model"] == MODEL
    assert body["stream"] is True
    assert body["max_tokens"] == 256
    assert body["system"] == "Answer briefly."
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Add 1 and 2"}]}
    ]
    assert [tool["name"] for tool in body["tools"]] == ["calculator"]
    tool = body["tools"][0]
    assert tool["description"].startswith("Exact arithmetic")
    assert tool["input_schema"]["required"] == ["expression"]
    assert body["tool_choice"] == {"type": "tool", "name": "calculator"}
    assert sent.headers["anthropic-version"]
    # SDK 2.x sends the key as a bearer token; 1.x and the older docs use x-api-key.
    assert KEY in (sent.headers.get("x-api-key"), sent.headers.get("authorization", "")[7:])
    assert json.dumps(body).find(KEY) == -1
    # The SDK's span continues the run's trace, and the request carries it.
    assert sent.headers["traceparent"].split("-")[1] == events[0].trace_id


async def test_a_stream_event_of_an_unexpected_shape_is_retried_then_fails_in_plain_words(
    server: Server, fake: FakeAnthropic
) -> None:
    # Usage that is not a number: the SDK passes it on as it is.
    usage = {"output_tokens": "many"}
    broken = Reply(
        events=(
            message_start(10),
            sse_event({"type": "message_delta", "delta": {}, "usage": usage}),
            sse_event({"type": "message_stop"}),
        )
    )
    fake.push(broken, broken, broken, text_reply("never"))
    events = await run(server, "hello")
    assert started_iterations(events) == [1, 1, 1]
    error = events[-1].run_failed.error
    assert error.startswith(f"provider {PROVIDER!r}: sent a response of a shape behest does not")
    assert "gave up after 3 attempts" in error


async def test_a_tool_use_with_input_nested_deep_is_an_error_result_and_the_run_goes_on(
    server: Server, fake: FakeAnthropic
) -> None:
    deep = "[" * 3000 + "]" * 3000
    fake.push(tool_reply(("toolu_deep", "calculator", [deep])), text_reply("Recovered."))
    events = await run(server, "hello")
    assert kind(events[-1]) == "run_completed"
    results = [
        block
        for message in fake.bodies[1]["messages"]
        for block in message["content"]
        if isinstance(block, dict) and block.get("type") == "tool_result"
    ]
    assert results[0]["is_error"] is True
    assert "nested 3000 levels deep" in json.dumps(results[0]["content"])


# --- structured output (issue 17): a forced tool carries the answer ---------------------------

SUM = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}
WORDS = {"type": "array", "items": {"type": "string"}}


async def run_structured(
    server: Server, schema: dict[str, object], name: str, **fields: str | list[str]
) -> list[pb.AgentEvent]:
    req = request("What is 1+2?", **fields)
    req.response_format.CopyFrom(pb.ResponseFormat(name=name, json_schema=json.dumps(schema)))
    return await collect(server.runs.CreateRunStream(req))


async def structured_output(server: Server, run_id: str) -> object:
    output = await server.runs.GetRunOutput(pb.GetRunOutputRequest(run_id=run_id))
    assert output.output.HasField("structured_output")
    return MessageToDict(output.output.structured_output)


async def test_a_response_format_is_a_forced_tool_whose_input_is_the_answer(
    server: Server, fake: FakeAnthropic
) -> None:
    fake.push(tool_reply(("toolu_1", "sum", ['{"ans', 'wer": 3}'])))
    events = await run_structured(server, SUM, "sum", tool_choice="none")
    assert kind(events[-1]) == "run_completed"
    assert events[-1].run_completed.finish_reason == c.FINISH_REASON_STOP
    # The answer tool is never a tool call: no tool events, nothing executed.
    assert not [e for e in events if kind(e).startswith("tool_")]
    body = json.loads(fake.requests[0].body)
    assert [t["name"] for t in body["tools"]] == ["sum"]
    assert body["tools"][0]["input_schema"] == SUM
    assert body["tool_choice"] == {"type": "tool", "name": "sum"}
    assert await structured_output(server, events[0].run_id) == {"answer": 3}


async def test_a_schema_that_is_not_an_objects_is_wrapped_and_unwrapped(
    server: Server, fake: FakeAnthropic
) -> None:
    fake.push(tool_reply(("toolu_1", "words", ['{"answer": ["sea", "salt"]}'])))
    events = await run_structured(server, WORDS, "words", tool_choice="none")
    assert kind(events[-1]) == "run_completed"
    schema = json.loads(fake.requests[0].body)["tools"][0]["input_schema"]
    assert schema == {"type": "object", "properties": {"answer": WORDS}, "required": ["answer"]}
    assert await structured_output(server, events[0].run_id) == ["sea", "salt"]


async def test_with_other_tools_the_answer_tool_is_offered_beside_them(
    server: Server, fake: FakeAnthropic
) -> None:
    fake.push(
        tool_reply(("toolu_1", "calculator", ['{"expression": "1+2"}'])),
        tool_reply(("toolu_2", "sum", ['{"answer": 3}']), text="Here it is:"),
    )
    events = await run_structured(server, SUM, "sum", tools=["calculator"])
    assert kind(events[-1]) == "run_completed"
    first = json.loads(fake.requests[0].body)
    assert [t["name"] for t in first["tools"]] == ["calculator", "sum"]
    assert first["tool_choice"] == {"type": "auto"}
    # Only the calculator ran; the text beside the answer tool's call is not the answer.
    started = [e.tool_execution_started for e in events if kind(e) == "tool_execution_started"]
    assert [s.tool_name for s in started] == ["calculator"]
    assert "Here it is:" not in "".join(e.text_delta.delta for e in events)
    assert await structured_output(server, events[0].run_id) == {"answer": 3}


async def test_an_answer_tool_input_that_does_not_fit_is_repaired_in_plain_turns(
    server: Server, fake: FakeAnthropic
) -> None:
    fake.push(
        tool_reply(("toolu_1", "sum", ['{"answer": "three"}'])),
        tool_reply(("toolu_2", "sum", ['{"answer": 3}'])),
    )
    events = await run_structured(server, SUM, "sum", tool_choice="none")
    assert kind(events[-1]) == "run_completed"
    second = json.loads(fake.requests[1].body)
    assert second["tool_choice"] == {"type": "tool", "name": "sum"}
    messages = second["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    # The first answer is the assistant's text (no tool_use to answer), then the repair.
    assert messages[1]["content"] == [{"type": "text", "text": '{"answer": "three"}'}]
    assert "is not of type 'integer'" in messages[2]["content"][0]["text"]
    assert await structured_output(server, events[0].run_id) == {"answer": 3}


THINKER = "claude-thinker"


@pytest.fixture
async def thinking_server(
    tmp_path: Path, fake: FakeAnthropic, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Server]:
    """A server whose model may think: max_output_tokens above the least thinking budget."""
    models = {THINKER: {"context_window": 200000, "max_output_tokens": 8192}}
    async with anthropic_server(tmp_path, fake, monkeypatch, models=models) as running:
        yield running


async def test_thinking_is_asked_streamed_apart_and_its_blocks_sent_back_exactly(
    thinking_server: Server, fake: FakeAnthropic
) -> None:
    signature = "EqQBCkgIARABGAIiQL2kZ3+signature/with+odd=chars=="
    first = [
        message_start(40),
        *thinking_block(0, ["Let me ", "use the calculator."], signature),
        *redacted_thinking_block(1, "EmwKAhgBEgy3va3pzix/redacted=="),
        *tool_use_block(2, "toolu_01", "calculator", ['{"expression": ', '"2+2"}']),
        *message_end("tool_use", 30),
    ]
    second = [
        message_start(60),
        *thinking_block(0, ["It is 4."], "sig2"),
        *text_block(1, ["Four."]),
        *message_end("end_turn", 12),
    ]
    fake.push(Reply(events=tuple(first)), Reply(events=tuple(second)))
    request = create_request(
        "What is 2+2?",
        provider=PROVIDER,
        model=THINKER,
        reasoning=pb.Reasoning(budget_tokens=2048),
    )
    request.tools.append("calculator")
    events = await collect(thinking_server.runs.CreateRunStream(request))
    assert kind(events[-1]) == "run_completed", events[-1]
    thoughts = [e.reasoning_delta.delta for e in events if kind(e) == "reasoning_delta"]
    assert thoughts == ["Let me ", "use the calculator.", "It is 4."]
    assert text_after_last_start(events) == "Four."
    sent = [json.loads(r.body) for r in fake.requests]
    assert sent[0]["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert sent[0]["max_tokens"] > 2048
    assistant = [m for m in sent[1]["messages"] if m["role"] == "assistant"]
    assert assistant[0]["content"][:2] == [
        {"type": "thinking", "thinking": "Let me use the calculator.", "signature": signature},
        {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/redacted=="},
    ]
    assert assistant[0]["content"][2]["type"] == "tool_use"
    # The answer's text holds no thinking.
    output = (
        await thinking_server.runs.GetRunOutput(pb.GetRunOutputRequest(run_id=events[0].run_id))
    ).output
    texts = [part.text.text for m in output.messages for part in m.content]
    assert "Let me" not in " ".join(texts)
    assert texts[-1] == "Four."
    record = (await thinking_server.runs.GetRun(pb.GetRunRequest(run_id=events[0].run_id))).run
    assert record.reasoning.budget_tokens == 2048


async def test_a_thinking_budget_at_or_above_max_output_is_invalid(
    thinking_server: Server,
) -> None:
    for budget, words in ((8192, "below the model's max_output_tokens"), (1000, "at least 1024")):
        request = create_request(
            "hi", provider=PROVIDER, model=THINKER, reasoning=pb.Reasoning(budget_tokens=budget)
        )
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await thinking_server.runs.CreateRun(request)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "reasoning.budget_tokens" in (caught.value.details() or "")
        assert words in (caught.value.details() or "")
