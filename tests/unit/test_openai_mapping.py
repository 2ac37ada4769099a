"""The OpenAI adapter's mapping: requests, stream chunks, Retry-After, and HTTP errors."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from email.utils import format_datetime
from typing import Any

import pytest
from openai.types.chat import ChatCompletionChunk

from behest.domain.messages import Message, Role, ToolCall, ToolDefinition
from behest.domain.runs import FinishReason
from behest.domain.spend import TokenUsage
from behest.errors import (
    ContextOverflowError,
    PermanentProviderError,
    ProviderAuthError,
    ProviderError,
    QuotaExhausted,
    RateLimited,
    TransientProviderError,
)
from behest.providers.base import (
    Delta,
    Finished,
    ModelRequest,
    TextChunk,
    ToolCallArguments,
    ToolCallBegin,
)
from behest.providers.config import ProviderConfig
from behest.providers.openai import OpenAIProvider
from behest.providers.openai_request import chat_message, request_body, tool_choice
from behest.providers.openai_stream import ChunkReader
from behest.providers.retry import retry_after_s
from tests.fakes.openai_fake import (
    FakeOpenAI,
    chunk,
    error,
    stream_error,
    text,
    tool_chunk,
    usage_chunk,
)

KEY = "sk-unit-0123456789abcdef0123456789abcdef"
NOW = datetime(2025, 1, 1, tzinfo=UTC)


def message(role: Role, text: str = "", **fields: Any) -> Message:
    return Message(
        id="m",
        session_id="s",
        run_id="r",
        position=0,
        role=role,
        text=text,
        created_at=NOW,
        **fields,
    )


def model_request(**fields: Any) -> ModelRequest:
    values: dict[str, Any] = {"model": "gpt-test", "messages": [message(Role.USER, "hi")]}
    values.update(fields)
    return ModelRequest(**values)


def read(*chunks: dict[str, Any]) -> tuple[list[Delta], ChunkReader]:
    reader = ChunkReader()
    deltas = [d for c in chunks for d in reader.feed(ChatCompletionChunk.model_validate(c))]
    return deltas, reader


# --- requests ---------------------------------------------------------------------------


def test_instructions_lead_as_a_system_message() -> None:
    body = request_body(model_request(instructions="Be brief."))
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
    ]


def test_a_request_without_tools_sends_neither_tools_nor_tool_choice() -> None:
    body = request_body(model_request(tool_choice="required", max_output_tokens=None))
    assert body == {
        "model": "gpt-test",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def test_tools_become_functions_and_the_limit_max_tokens() -> None:
    tool = ToolDefinition("add", "Adds.", {"type": "object", "properties": {}})
    body = request_body(model_request(tools=[tool], max_output_tokens=99))
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "add",
                "description": "Adds.",
                "parameters": tool.parameters_schema,
            },
        }
    ]
    assert body["tool_choice"] == "auto"
    assert body["max_tokens"] == 99
    assert "max_completion_tokens" not in body


def test_the_limit_can_be_sent_as_max_completion_tokens() -> None:
    body = request_body(model_request(max_output_tokens=99), completion_tokens=True)
    assert body["max_completion_tokens"] == 99
    assert "max_tokens" not in body


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ("auto", "auto"),
        ("none", "none"),
        ("required", "required"),
        ("", "auto"),
        ("calculator", {"type": "function", "function": {"name": "calculator"}}),
    ],
)
def test_tool_choice(choice: str, expected: object) -> None:
    assert tool_choice(choice) == expected


def test_an_assistant_turn_with_tool_calls_has_empty_string_content() -> None:
    turn = message(
        Role.ASSISTANT, tool_calls=(ToolCall("c1", "add", '{"a": 1}'), ToolCall("c2", "now", ""))
    )
    assert chat_message(turn) == {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1}'}},
            {"id": "c2", "type": "function", "function": {"name": "now", "arguments": "{}"}},
        ],
    }


def test_an_assistant_turn_keeps_its_text_beside_tool_calls() -> None:
    turn = message(Role.ASSISTANT, "Let me add.", tool_calls=(ToolCall("c1", "add", "{}"),))
    assert chat_message(turn)["content"] == "Let me add."
    assert chat_message(message(Role.ASSISTANT, "Done.")) == {
        "role": "assistant",
        "content": "Done.",
    }


def test_tool_results_carry_their_call_id_and_errors_say_so() -> None:
    ok = message(Role.TOOL, "3", tool_call_id="c1", tool_name="add")
    failed = message(
        Role.TOOL, "division by zero", tool_call_id="c2", tool_name="add", is_error=True
    )
    assert chat_message(ok) == {"role": "tool", "tool_call_id": "c1", "content": "3"}
    assert chat_message(failed) == {
        "role": "tool",
        "tool_call_id": "c2",
        "content": "Error: division by zero",
    }


def test_system_messages_of_the_transcript_stay_system_messages() -> None:
    assert chat_message(message(Role.SYSTEM, "Summary.")) == {
        "role": "system",
        "content": "Summary.",
    }


# --- stream chunks ----------------------------------------------------------------------


def test_text_then_finish_then_usage() -> None:
    deltas, reader = read(
        chunk({"role": "assistant", "content": ""}),
        chunk({"content": "Hel"}),
        chunk({"content": "lo"}),
        chunk({}, finish="stop"),
        usage_chunk(9, 2),
    )
    assert deltas == [TextChunk("Hel"), TextChunk("lo")]
    assert reader.finished("p") == Finished(FinishReason.STOP, TokenUsage(9, 2))


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        ("stop", FinishReason.STOP),
        ("tool_calls", FinishReason.TOOL_CALLS),
        ("length", FinishReason.LENGTH),
        ("content_filter", FinishReason.CONTENT_FILTER),
        ("function_call", FinishReason.TOOL_CALLS),
    ],
)
def test_finish_reasons(reason: str, expected: FinishReason) -> None:
    _, reader = read(chunk({}, finish=reason))
    assert reader.finished("p") == Finished(expected, TokenUsage())


def test_an_unknown_finish_reason_is_unknown() -> None:
    reader = ChunkReader()
    raw = chunk({}, finish="stop")
    raw["choices"][0]["finish_reason"] = "eos"  # a compatible server's own word
    reader.feed(ChatCompletionChunk.construct(**raw))
    assert reader.finished("p").reason == FinishReason.UNKNOWN


def test_a_stream_without_finish_reason_ended_early() -> None:
    _, reader = read(chunk({"content": "half"}), usage_chunk(1, 1))
    with pytest.raises(TransientProviderError, match="stream ended early"):
        reader.finished("p")


def test_cached_prompt_tokens_are_counted_apart_from_input_tokens() -> None:
    # OpenAI counts the cached tokens in prompt_tokens too; behest keeps them apart.
    _, reader = read(chunk({}, finish="stop"), usage_chunk(2006, 300, cached=1920))
    usage = reader.finished("p").usage
    assert usage == TokenUsage(input_tokens=86, output_tokens=300, cached_input_tokens=1920)
    assert usage.total_tokens == 2006 + 300


def test_usage_without_prompt_details_has_no_cached_tokens() -> None:
    raw = usage_chunk(30, 4)
    raw["usage"]["prompt_tokens_details"] = None  # vLLM, llama.cpp and others
    _, reader = read(chunk({}, finish="stop"), raw)
    assert reader.finished("p").usage == TokenUsage(30, 4)


def test_more_cached_tokens_than_prompt_tokens_count_as_the_prompt() -> None:
    _, reader = read(chunk({}, finish="stop"), usage_chunk(10, 2, cached=25))
    assert reader.finished("p").usage == TokenUsage(0, 2, cached_input_tokens=10)


def test_usage_in_the_finish_chunk_counts_too() -> None:
    raw = chunk({}, finish="stop")
    raw["usage"] = usage_chunk(5, 6)["usage"]
    _, reader = read(raw)
    assert reader.finished("p").usage == TokenUsage(5, 6)


def test_parallel_tool_calls_begin_once_and_stream_their_arguments() -> None:
    deltas, _ = read(
        chunk({"role": "assistant", "content": None}),
        tool_chunk(
            {"index": 0, "id": "a", "type": "function", "function": {"name": "f", "arguments": ""}}
        ),
        tool_chunk({"index": 0, "function": {"arguments": '{"x"'}}),
        tool_chunk({"index": 0, "function": {"arguments": ": 1}"}}),
        tool_chunk(
            {
                "index": 1,
                "id": "b",
                "type": "function",
                "function": {"name": "g", "arguments": "{}"},
            }
        ),
        chunk({}, finish="tool_calls"),
    )
    assert deltas == [
        ToolCallBegin("a", "f"),
        ToolCallArguments("a", '{"x"'),
        ToolCallArguments("a", ": 1}"),
        ToolCallBegin("b", "g"),
        ToolCallArguments("b", "{}"),
    ]


def test_a_call_whose_name_comes_late_begins_once_it_is_known() -> None:
    deltas, _ = read(
        tool_chunk({"index": 0, "id": "a", "function": {"arguments": '{"x": '}}),
        tool_chunk({"index": 0, "function": {"name": "f", "arguments": "1}"}}),
        tool_chunk({"index": 0, "id": "a", "function": {"name": "f", "arguments": ""}}),
        chunk({}, finish="tool_calls"),
    )
    assert deltas == [
        ToolCallBegin("a", "f"),
        ToolCallArguments("a", '{"x": '),
        ToolCallArguments("a", "1}"),
    ]


def test_a_call_without_an_id_gets_one_when_the_turn_finishes() -> None:
    deltas, _ = read(
        tool_chunk({"index": 0, "function": {"name": "f", "arguments": '{"x": 1}'}}),
        chunk({}, finish="tool_calls"),
    )
    begin, arguments = deltas
    assert isinstance(begin, ToolCallBegin) and begin.name == "f"
    assert begin.call_id.startswith("call_")
    assert arguments == ToolCallArguments(begin.call_id, '{"x": 1}')


def test_other_choices_than_the_first_are_ignored() -> None:
    deltas, _ = read(chunk({"content": "yes"}), chunk({"content": "no"}, index=1))
    assert deltas == [TextChunk("yes")]


def test_a_refusal_is_shown_as_text() -> None:
    deltas, _ = read(chunk({"refusal": "I can't help with that."}))
    assert deltas == [TextChunk("I can't help with that.")]


# --- Retry-After ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after": "2"}, 2.0),
        ({"retry-after": "1.5"}, 1.5),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),
        ({"retry-after-ms": "soon", "retry-after": "3"}, 3.0),
        ({"retry-after": "-1"}, None),
        ({"retry-after": "whenever"}, None),
        ({}, None),
    ],
)
def test_retry_after(headers: dict[str, str], expected: float | None) -> None:
    assert retry_after_s(headers) == expected


def test_retry_after_as_an_http_date() -> None:
    now = NOW.timestamp()
    later = format_datetime(datetime.fromtimestamp(now + 30, UTC), usegmt=True)
    assert retry_after_s({"retry-after": later}, now=now) == pytest.approx(30.0)
    earlier = format_datetime(datetime.fromtimestamp(now - 30, UTC), usegmt=True)
    assert retry_after_s({"retry-after": earlier}, now=now) == 0.0


# --- HTTP errors, through the SDK against the fake --------------------------------------


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as running:
        yield running


@pytest.fixture
async def provider(fake: FakeOpenAI) -> AsyncIterator[OpenAIProvider]:
    config = ProviderConfig(
        name="oa", type="openai", base_url=f"{fake.url}/v1", api_key=KEY, timeout_s=0.5
    )
    adapter = OpenAIProvider(config)
    try:
        yield adapter
    finally:
        await adapter.aclose()


async def failure(provider: OpenAIProvider) -> ProviderError:
    with pytest.raises(ProviderError) as caught:
        async for _ in provider.stream(model_request(max_output_tokens=64)):
            pass
    assert KEY not in str(caught.value)
    return caught.value


@pytest.mark.parametrize(
    ("status", "code", "kind", "words"),
    [
        (400, None, PermanentProviderError, "request rejected (HTTP 400: nope)"),
        (404, "model_not_found", PermanentProviderError, "request rejected (HTTP 404: nope)"),
        (422, None, PermanentProviderError, "HTTP 422"),
        (403, None, ProviderAuthError, "permission denied (HTTP 403: nope)"),
        (408, None, TransientProviderError, "HTTP 408: nope"),
        (409, None, TransientProviderError, "HTTP 409: nope"),
        (502, None, TransientProviderError, "HTTP 502: nope"),
        (503, None, TransientProviderError, "HTTP 503: nope"),
        (429, "insufficient_quota", QuotaExhausted, "quota exhausted (HTTP 429"),
        (400, "context_length_exceeded", ContextOverflowError, "context window exceeded"),
    ],
)
async def test_http_errors(
    provider: OpenAIProvider,
    fake: FakeOpenAI,
    status: int,
    code: str | None,
    kind: type[ProviderError],
    words: str,
) -> None:
    fake.push(error(status, "nope", code=code))
    caught = await failure(provider)
    assert type(caught) is kind
    assert words in str(caught)
    assert str(caught).startswith("provider 'oa': ")


async def test_a_401_names_no_key_and_hides_its_cause(
    provider: OpenAIProvider, fake: FakeOpenAI
) -> None:
    fake.push(error(401, f"Incorrect API key provided: {KEY}.", code="invalid_api_key"))
    caught = await failure(provider)
    assert type(caught) is ProviderAuthError
    assert str(caught) == "provider 'oa': authentication failed (HTTP 401)"
    assert caught.__cause__ is None and caught.__suppress_context__


async def test_a_key_echoed_by_a_server_is_masked(
    provider: OpenAIProvider, fake: FakeOpenAI
) -> None:
    fake.push(error(400, f"bad header Bearer {KEY}"))
    assert "bad header Bearer [redacted]" in str(await failure(provider))


async def test_context_overflow_is_recognised_by_its_message(
    provider: OpenAIProvider, fake: FakeOpenAI
) -> None:
    # llama.cpp's wording and error type.
    fake.push(
        error(
            400,
            "the request exceeds the available context size, try increasing it",
            type="exceed_context_size_error",
        ),
        error(400, "This model's maximum context length is 4096 tokens."),
    )
    assert type(await failure(provider)) is ContextOverflowError
    assert type(await failure(provider)) is ContextOverflowError


async def test_a_429_carries_the_retry_after_hint(
    provider: OpenAIProvider, fake: FakeOpenAI
) -> None:
    fake.push(
        error(429, "slow down", code="rate_limit_exceeded", headers={"retry-after-ms": "1500"})
    )
    caught = await failure(provider)
    assert type(caught) is RateLimited
    assert caught.retry_after == 1.5
    assert "rate limited (HTTP 429: slow down)" in str(caught)


async def test_an_error_event_inside_the_stream_is_transient(
    provider: OpenAIProvider, fake: FakeOpenAI
) -> None:
    fake.push(stream_error("Partial", "The server had an error processing your request."))
    caught = await failure(provider)
    assert type(caught) is TransientProviderError
    assert "error in the stream: The server had an error" in str(caught)


async def test_a_stream_without_finish_reason_is_transient(
    provider: OpenAIProvider, fake: FakeOpenAI
) -> None:
    fake.push(text("no ending", finish=None))
    caught = await failure(provider)
    assert type(caught) is TransientProviderError
    assert "stream ended early" in str(caught)


async def test_a_cut_stream_is_transient(provider: OpenAIProvider, fake: FakeOpenAI) -> None:
    fake.push(text("one two three four", cut_after=2))
    caught = await failure(provider)
    assert type(caught) is TransientProviderError
    assert "stream cut off" in str(caught)


async def test_a_silent_server_times_out(provider: OpenAIProvider, fake: FakeOpenAI) -> None:
    fake.push(text("too slow", delay_s=2.0))
    caught = await failure(provider)
    assert type(caught) is TransientProviderError
    assert "timed out after 0.5 s" in str(caught)


async def test_a_refused_connection_is_transient() -> None:
    closed = FakeOpenAI()
    await closed.start()
    await closed.stop()
    config = ProviderConfig(name="oa", type="openai", base_url=f"{closed.url}/v1")
    adapter = OpenAIProvider(config)
    try:
        caught = await failure(adapter)
    finally:
        await adapter.aclose()
    assert type(caught) is TransientProviderError
    # Plain words, never a Python class name ("ConnectError: …").
    assert str(caught) == "provider 'oa': connection failed: All connection attempts failed"


async def test_a_local_server_gets_a_placeholder_key(fake: FakeOpenAI) -> None:
    adapter = OpenAIProvider(ProviderConfig(name="oa", type="openai", base_url=f"{fake.url}/v1"))
    fake.push(text("hi"))
    try:
        deltas = [d async for d in adapter.stream(model_request())]
    finally:
        await adapter.aclose()
    assert deltas[-1] == Finished(FinishReason.STOP, TokenUsage(12, 5))
    assert fake.requests[0].headers["authorization"] == "Bearer not-needed"


async def test_cached_tokens_from_the_wire_are_split_out(
    provider: OpenAIProvider, fake: FakeOpenAI
) -> None:
    fake.push(text("hi there", usage=(1500, 7), cached=1280))
    deltas = [d async for d in provider.stream(model_request())]
    assert deltas[-1] == Finished(
        FinishReason.STOP, TokenUsage(input_tokens=220, output_tokens=7, cached_input_tokens=1280)
    )
