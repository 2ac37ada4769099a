"""The OpenAI adapter through a real server and a fake Chat Completions API (SEMANTICS §2, §6)."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.json_format import MessageToDict

from behest._proto.agent.v1 import common_pb2 as c
from behest._proto.agent.v1 import run_pb2 as pb
from tests.fakes.openai_fake import FakeOpenAI, error, reasoning, text, tool_calls
from tests.fakes.sse_server import Event, Reply
from tests.support import Server, collect, create_request, fast_settings, start_server, stop_server

# These tests map each streamed chunk to its event, so deltas are never joined here.
ONE_EVENT_PER_CHUNK = False
PROVIDER = "fake-openai"
MODEL = "gpt-test"
KEY = "sk-fake-7d1c0b9e4a2f4c58b3e6a9d0f1c2b3a4"

Start = Callable[..., Awaitable[Server]]


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as running:
        yield running


@pytest.fixture
async def start(
    tmp_path: Path, fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Start]:
    """Starts a behest server with `fake-openai` configured; extra provider keys as keywords."""
    monkeypatch.setenv("FAKE_OPENAI_KEY", KEY)
    running: list[Server] = []

    async def start_one(**provider: object) -> Server:
        table = {
            "type": "openai",
            "base_url": f"{fake.url}/v1",
            "api_key_env": "FAKE_OPENAI_KEY",
            "models": {MODEL: {"context_window": 8000, "max_output_tokens": 256}},
            **provider,
        }
        settings = fast_settings(
            tmp_path / str(len(running)), coalesce_text_deltas=ONE_EVENT_PER_CHUNK
        ).with_tables({"providers": {PROVIDER: table}}, source="test")
        running.append(await start_server(settings))
        return running[-1]

    try:
        yield start_one
    finally:
        for server in running:
            await stop_server(server)


@pytest.fixture
async def server(start: Start) -> Server:
    return await start()


def request(input: str = "What is 1+2 and 2*3?", **fields: Any) -> pb.CreateRunRequest:
    return pb.CreateRunRequest(
        provider=c.ProviderId(value=PROVIDER), model=c.ModelName(value=MODEL), input=input, **fields
    )


async def run(server: Server, **fields: Any) -> list[pb.AgentEvent]:
    return await collect(server.runs.CreateRunStream(request(**fields)))


def kinds(events: list[pb.AgentEvent]) -> list[str]:
    return [e.WhichOneof("event") or "" for e in events]


def iterations_started(events: list[pb.AgentEvent]) -> list[int]:
    return [e.model_started.iteration for e in events if e.HasField("model_started")]


def last_answer(events: list[pb.AgentEvent]) -> str:
    """The text of the last model call (earlier attempts are dropped, as clients must)."""
    last = max(i for i, kind in enumerate(kinds(events)) if kind == "model_started")
    return "".join(e.text_delta.delta for e in events[last:] if e.HasField("text_delta"))


async def test_a_text_answer_streams_as_the_documented_events(
    server: Server, fake: FakeOpenAI
) -> None:
    fake.push(text("Three and six.", usage=(21, 4)))
    events = await run(server)
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
    assert [e.text_delta.delta for e in events if e.HasField("text_delta")] == [
        "Three ",
        "and ",
        "six.",
    ]
    started = events[2].model_started
    assert (started.provider, started.model, started.iteration) == (PROVIDER, MODEL, 1)
    assert events[7].usage_recorded.usage == c.TokenUsage(
        input_tokens=21, output_tokens=4, total_tokens=25
    )
    assert events[-1].run_completed.finish_reason == c.FINISH_REASON_STOP
    assert events[-1].run_completed.iterations == 1
    assert len(fake.requests) == 1


async def test_cached_prompt_tokens_are_reported_apart_from_input_tokens(
    server: Server, fake: FakeOpenAI
) -> None:
    # prompt_tokens (2006) includes the 1920 read from OpenAI's prompt cache.
    fake.push(text("Cached.", usage=(2006, 3), cached=1920))
    events = await run(server)
    assert [e.usage_recorded.usage for e in events if e.HasField("usage_recorded")] == [
        c.TokenUsage(input_tokens=86, output_tokens=3, cached_input_tokens=1920, total_tokens=2009)
    ]


async def test_two_parallel_tool_calls_run_and_their_results_go_back_as_tool_messages(
    server: Server, fake: FakeOpenAI
) -> None:
    first, second = '{"expression": "1+2"}', '{"expression": "2*3"}'
    fake.push(
        tool_calls(("call_a1", "calculator", first), ("call_b2", "calculator", second)),
        text("3 and 6."),
    )
    events = await run(server)
    names = kinds(events)
    deltas = {
        call: [e.tool_call_delta.delta for e in events if e.tool_call_delta.call_id == call]
        for call in ("call_a1", "call_b2")
    }
    assert all(len(fragments) > 1 for fragments in deltas.values())
    assert names[:3] == ["run_started", "context_built", "model_started"]
    turn = 3 + 2 * 2 + len(deltas["call_a1"]) + len(deltas["call_b2"])
    assert names[3:turn] == [
        "tool_call_started",
        *["tool_call_delta"] * len(deltas["call_a1"]),
        "tool_call_completed",
        "tool_call_started",
        *["tool_call_delta"] * len(deltas["call_b2"]),
        "tool_call_completed",
    ]
    assert names[turn : turn + 2] == ["assistant_message_committed", "usage_recorded"]
    completed = [e.tool_call_completed.call for e in events if e.HasField("tool_call_completed")]
    assert [(call.id, call.name, call.arguments) for call in completed] == [
        ("call_a1", "calculator", first),
        ("call_b2", "calculator", second),
    ]
    assert "".join(deltas["call_a1"]) == first and "".join(deltas["call_b2"]) == second
    for call in ("call_a1", "call_b2"):
        executed = [
            e.WhichOneof("event")
            for e in events
            if call in (e.tool_execution_started.call_id, e.tool_execution_finished.call_id)
        ]
        assert executed == ["tool_execution_started", "tool_execution_finished"]
    assert names.count("tool_message_committed") == 2
    assert iterations_started(events) == [1, 2]
    assert last_answer(events) == "3 and 6."
    assert events[-1].run_completed.iterations == 2

    follow_up = fake.bodies[1]["messages"]
    assert follow_up[0] == {"role": "user", "content": "What is 1+2 and 2*3?"}
    assert follow_up[1] == {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "call_a1",
                "type": "function",
                "function": {"name": "calculator", "arguments": first},
            },
            {
                "id": "call_b2",
                "type": "function",
                "function": {"name": "calculator", "arguments": second},
            },
        ],
    }
    results = {m["tool_call_id"]: m["content"] for m in follow_up[2:] if m["role"] == "tool"}
    assert results == {"call_a1": "3", "call_b2": "6"}
    assert len(follow_up) == 4


async def test_a_429_waits_for_retry_after_then_announces_the_call_again(
    server: Server, fake: FakeOpenAI
) -> None:
    fake.push(
        error(
            429,
            "Rate limit reached for gpt-test on requests per min (RPM): Limit 3.",
            type="requests",
            code="rate_limit_exceeded",
            headers={"retry-after": "1"},
        ),
        text("Worth the wait."),
    )
    events = await run(server)
    assert iterations_started(events) == [1, 1]
    assert fake.requests[1].at - fake.requests[0].at >= 1.0
    assert last_answer(events) == "Worth the wait."
    assert events[-1].HasField("run_completed")


async def test_a_500_every_time_fails_the_run_after_max_attempts(
    start: Start, fake: FakeOpenAI
) -> None:
    server = await start(max_attempts=3)
    message = "The server had an error while processing your request. Sorry about that!"
    fake.push(*[error(500, message, type="server_error")] * 3, text("never sent"))
    events = await run(server)
    assert iterations_started(events) == [1, 1, 1]
    assert len(fake.requests) == 3
    failure = events[-1].run_failed.error
    assert PROVIDER in failure
    assert "HTTP 500" in failure and message in failure
    assert "3 attempts" in failure
    assert events[-1].run_failed.code == pb.FAILURE_CODE_PROVIDER_UNAVAILABLE


async def test_a_401_fails_at_once_and_the_key_appears_nowhere(
    server: Server, fake: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    masked = f"{KEY[:8]}{'*' * 24}{KEY[-4:]}"
    fake.push(
        error(
            401,
            f"Incorrect API key provided: {masked}. You can find your API key at "
            "https://platform.openai.com/account/api-keys.",
            code="invalid_api_key",
        ),
        text("never sent"),
    )
    events = await run(server)
    assert caplog.records
    assert fake.requests[0].headers["authorization"] == f"Bearer {KEY}"
    assert len(fake.requests) == 1
    assert iterations_started(events) == [1]
    failure = events[-1].run_failed.error
    assert "authentication failed" in failure and "401" in failure and PROVIDER in failure
    assert events[-1].run_failed.code == pb.FAILURE_CODE_AUTHENTICATION
    run_record = await server.runs.GetRun(pb.GetRunRequest(run_id=events[0].run_id))
    for secret in (KEY, KEY[8:], masked):
        assert all(secret.encode() not in e.SerializeToString() for e in events)
        assert secret.encode() not in run_record.SerializeToString()
        assert secret not in caplog.text
        assert all(secret not in repr(r.args) for r in caplog.records)


async def test_a_stream_cut_mid_answer_is_retried_and_the_answer_completes(
    server: Server, fake: FakeOpenAI
) -> None:
    fake.push(
        text("This answer will be cut off midway through.", cut_after=4),
        text("This answer arrives whole."),
    )
    events = await run(server)
    assert iterations_started(events) == [1, 1]
    first_attempt = events[: kinds(events).index("model_started", 3)]
    assert "".join(e.text_delta.delta for e in first_attempt) == "This answer will "
    assert last_answer(events) == "This answer arrives whole."
    assert events[-1].HasField("run_completed")


async def test_cancel_during_a_slow_stream_closes_the_connection(
    server: Server, fake: FakeOpenAI
) -> None:
    fake.push(text(" ".join(f"w{i}" for i in range(200)), delay_s=0.05))
    stream = server.runs.CreateRunStream(request())
    seen = []
    async for event in stream:
        seen.append(event)
        if event.HasField("text_delta"):
            break
    began = time.monotonic()
    await server.runs.CancelRun(pb.CancelRunRequest(run_id=seen[0].run_id))
    rest = [event async for event in stream]
    assert rest[-1].HasField("run_cancelled")
    assert time.monotonic() - began < 1.0
    await asyncio.wait_for(fake.disconnected.wait(), timeout=2.0)
    assert fake.closed_early == 1


async def test_the_request_carries_instructions_tools_tool_choice_and_max_tokens(
    server: Server, fake: FakeOpenAI
) -> None:
    fake.push(text("Fine."))
    events = await run(
        server, instructions="Answer briefly.", tools=["calculator"], tool_choice="calculator"
    )
    assert events[-1].HasField("run_completed")
    (body,) = fake.bodies
    (calculator,) = server.app.tools.definitions(["calculator"])
    assert body == {
        "model": MODEL,
        "messages": [
            {"role": "system", "content": "Answer briefly."},
            {"role": "user", "content": "What is 1+2 and 2*3?"},
        ],
        "stream": True,
        "stream_options": {"include_usage": True},
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "calculator",
                    "description": calculator.description,
                    "parameters": calculator.parameters_schema,
                },
            }
        ],
        "tool_choice": {"type": "function", "function": {"name": "calculator"}},
        "max_tokens": 256,
    }


async def test_a_model_that_refuses_max_tokens_is_asked_again_with_max_completion_tokens(
    server: Server, fake: FakeOpenAI
) -> None:
    fake.push(
        error(
            400,
            "Unsupported parameter: 'max_tokens' is not supported with this model. "
            "Use 'max_completion_tokens' instead.",
            param="max_tokens",
            code="unsupported_parameter",
        ),
        text("First."),
        text("Second."),
    )
    first = await run(server)
    second = await run(server)
    assert last_answer(first) == "First." and last_answer(second) == "Second."
    assert iterations_started(first) == [1]
    limits = [(b.get("max_tokens"), b.get("max_completion_tokens")) for b in fake.bodies]
    assert limits == [(256, None), (None, 256), (None, 256)]


async def test_a_context_overflow_fails_the_run_naming_it(server: Server, fake: FakeOpenAI) -> None:
    fake.push(
        error(
            400,
            "This model's maximum context length is 8000 tokens. However, your messages "
            "resulted in 9120 tokens. Please reduce the length of the messages.",
            param="messages",
            code="context_length_exceeded",
        )
    )
    events = await run(server)
    assert iterations_started(events) == [1]
    failure = events[-1].run_failed.error
    assert "context window exceeded" in failure and "9120 tokens" in failure


async def test_an_unknown_model_is_invalid_argument_naming_the_known_ones(
    server: Server, fake: FakeOpenAI
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await server.runs.CreateRun(create_request("hi", provider=PROVIDER, model="gpt-nope"))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "gpt-nope" in (err.value.details() or "")
    assert MODEL in (err.value.details() or "")
    assert fake.requests == []


def garbled(*chunks: str) -> Reply:
    """A 200 stream whose `data:` lines are the given raw texts (not necessarily JSON)."""
    return Reply(events=tuple(Event(c) for c in chunks), headers={"x-request-id": "req_fake"})


@pytest.mark.parametrize(
    ("reply", "problem"),
    [
        (garbled("{not json"), "a stream chunk is not valid JSON"),
        (garbled("[" * 3000 + "]" * 3000), "sent a response"),
        (garbled('{"choices": 7}'), "sent a response of a shape behest does not understand"),
    ],
)
async def test_a_malformed_stream_is_retried_then_fails_naming_the_provider(
    start: Start, fake: FakeOpenAI, reply: Reply, problem: str
) -> None:
    server = await start(max_attempts=2)
    fake.push(reply, reply, text("never sent"))
    events = await run(server)
    assert iterations_started(events) == [1, 1]
    assert len(fake.requests) == 2
    failure = events[-1].run_failed.error
    assert failure.startswith(f"provider {PROVIDER!r}: ")
    assert problem in failure and "gave up after 2 attempts" in failure
    assert "internal error" not in failure


async def test_a_malformed_chunk_then_a_good_answer_completes(
    server: Server, fake: FakeOpenAI
) -> None:
    fake.push(garbled("{not json"), text("Second time lucky."))
    events = await run(server)
    assert iterations_started(events) == [1, 1]
    assert last_answer(events) == "Second time lucky."
    assert events[-1].HasField("run_completed")


async def test_tool_arguments_nested_3000_deep_give_an_error_result_and_the_run_goes_on(
    server: Server, fake: FakeOpenAI
) -> None:
    deep = "[" * 3000 + "]" * 3000
    fake.push(tool_calls(("call_deep", "calculator", deep), fragment_chars=500), text("Recovered."))
    events = await run(server)
    assert events[-1].HasField("run_completed")
    assert iterations_started(events) == [1, 2]
    tool_message = fake.bodies[1]["messages"][-1]
    assert tool_message["role"] == "tool"
    assert "nested 3000 levels deep; the limit is 64" in tool_message["content"]


# --- structured output (issue 17) -----------------------------------------------------------

SUM = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}


def structured(**fields: Any) -> dict[str, Any]:
    return {"response_format": pb.ResponseFormat(name="sum", json_schema=json.dumps(SUM)), **fields}


async def test_a_response_format_is_sent_as_json_schema_and_the_answer_comes_back_parsed(
    server: Server, fake: FakeOpenAI
) -> None:
    fake.push(text('{"answer": 3}'))
    events = await run(server, **structured())
    assert kinds(events)[-1] == "run_completed"
    body = json.loads(fake.requests[0].body)
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "sum", "schema": SUM},
    }
    output = await server.runs.GetRunOutput(pb.GetRunOutputRequest(run_id=events[0].run_id))
    assert MessageToDict(output.output.structured_output) == {"answer": 3}


async def test_the_repair_call_says_what_was_wrong_and_asks_for_the_format_again(
    server: Server, fake: FakeOpenAI
) -> None:
    fake.push(text("Three."), text('{"answer": 3}'))
    events = await run(server, **structured())
    assert kinds(events)[-1] == "run_completed"
    assert len(fake.requests) == 2
    second = json.loads(fake.requests[1].body)
    assert second["response_format"]["json_schema"]["name"] == "sum"
    assert [m["role"] for m in second["messages"]] == ["user", "assistant", "user"]
    assert second["messages"][1]["content"] == "Three."
    assert "not valid JSON" in second["messages"][2]["content"]
    output = await server.runs.GetRunOutput(pb.GetRunOutputRequest(run_id=events[0].run_id))
    assert MessageToDict(output.output.structured_output) == {"answer": 3}


# What llama-cpp-python's server answers to response_format {"type": "json_schema"}.
LLAMA_CPP_REFUSAL = (
    "1 validation error:\n  {'type': 'literal_error', 'loc': ('body', 'response_format', "
    "'type'), 'msg': \"Input should be 'text' or 'json_object'\", 'input': 'json_schema'}"
)


async def test_a_server_refusing_json_schema_is_asked_with_json_object_once_for_the_model(
    server: Server, fake: FakeOpenAI
) -> None:
    fake.push(
        error(500, LLAMA_CPP_REFUSAL, type="internal_server_error"),
        text('{"answer": 3}'),
        text('{"answer": 4}'),
    )
    first = await run(server, **structured())
    assert kinds(first)[-1] == "run_completed"
    assert iterations_started(first) == [1]  # asked again within the same attempt
    bodies = [json.loads(r.body) for r in fake.requests]
    assert bodies[0]["response_format"]["type"] == "json_schema"
    assert bodies[1]["response_format"] == {"type": "json_object", "schema": SUM}
    # The model's form is remembered: the next run asks that way at once.
    second = await run(server, **structured())
    assert kinds(second)[-1] == "run_completed"
    assert len(fake.requests) == 3
    assert json.loads(fake.requests[2].body)["response_format"]["type"] == "json_object"
    output = await server.runs.GetRunOutput(pb.GetRunOutputRequest(run_id=second[0].run_id))
    assert MessageToDict(output.output.structured_output) == {"answer": 4}


async def test_reasoning_effort_is_sent_and_reasoning_content_streams_apart(
    server: Server, fake: FakeOpenAI
) -> None:
    fake.push(reasoning("add them up", "Three.", usage=(12, 9), reasoning_tokens=6))
    events = await run(server, reasoning=pb.Reasoning(effort="high"))
    assert kinds(events)[-1] == "run_completed"
    assert json.loads(fake.requests[0].body)["reasoning_effort"] == "high"
    thoughts = [e.reasoning_delta.delta for e in events if e.HasField("reasoning_delta")]
    assert thoughts == ["add ", "them ", "up"]
    assert last_answer(events) == "Three."
    first_text = kinds(events).index("text_delta")
    assert max(i for i, k in enumerate(kinds(events)) if k == "reasoning_delta") < first_text
    [usage] = [e.usage_recorded.usage for e in events if e.HasField("usage_recorded")]
    assert (usage.output_tokens, usage.reasoning_tokens, usage.total_tokens) == (9, 6, 21)
    record = (await server.runs.GetRun(pb.GetRunRequest(run_id=events[0].run_id))).run
    assert record.reasoning == pb.Reasoning(effort="high")


async def test_no_reasoning_effort_is_sent_unless_asked(server: Server, fake: FakeOpenAI) -> None:
    fake.push(text("Three."))
    await run(server)
    assert "reasoning_effort" not in json.loads(fake.requests[0].body)
