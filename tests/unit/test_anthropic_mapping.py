"""The Anthropic adapter's pure parts: request mapping, stream decoding, error classes."""

from __future__ import annotations

import email.utils
import json
import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import pytest
from anthropic.types import (
    RawContentBlockDeltaEvent,
    RawContentBlockStartEvent,
    RawContentBlockStopEvent,
    RawMessageDeltaEvent,
    RawMessageStartEvent,
    RawMessageStopEvent,
)

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
from behest.providers import anthropic_errors
from behest.providers.anthropic import AnthropicProvider
from behest.providers.anthropic_request import (
    MISSING_RESULT,
    build_messages,
    build_params,
    safe_id,
    tool_choice,
    tool_input,
)
from behest.providers.anthropic_stream import StreamDecoder
from behest.providers.base import (
    Finished,
    ModelRequest,
    ReasoningBlock,
    ReasoningChunk,
    TextChunk,
    ToolCallArguments,
    ToolCallBegin,
)
from behest.providers.config import CACHE_BREAKPOINTS, ProviderConfig
from behest.providers.retry import retry_after_s
from tests.fakes.anthropic_fake import message_object

KEY = "sk-ant-unit-secret"


def msg(role: Role, text: str = "", **fields: Any) -> Message:
    return Message(
        id="m",
        session_id="s",
        run_id="r",
        position=0,
        role=role,
        text=text,
        created_at=datetime.now(UTC),
        **fields,
    )


def user(text: str) -> Message:
    return msg(Role.USER, text)


def assistant(text: str = "", *calls: tuple[str, str, str]) -> Message:
    return msg(Role.ASSISTANT, text, tool_calls=tuple(ToolCall(*c) for c in calls))


def tool(call_id: str, text: str, *, is_error: bool = False) -> Message:
    return msg(Role.TOOL, text, tool_call_id=call_id, tool_name="calculator", is_error=is_error)


def result(call_id: str, text: str, *, is_error: bool = False) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": call_id, "is_error": is_error, "content": text}


def use(call_id: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": "calculator", "input": arguments}


def text(value: str) -> dict[str, str]:
    return {"type": "text", "text": value}


# --- messages -----------------------------------------------------------------------------


def test_tool_results_of_one_turn_merge_into_one_user_message() -> None:
    messages = build_messages(
        [
            user("sum?"),
            assistant("", ("a", "calculator", '{"expression": "1+1"}'), ("b", "calculator", "{}")),
            tool("a", "2"),
            tool("b", "oops", is_error=True),
            user("thanks"),
            assistant("you are welcome"),
        ]
    )
    assert messages == [
        {"role": "user", "content": [text("sum?")]},
        {"role": "assistant", "content": [use("a", {"expression": "1+1"}), use("b", {})]},
        {
            "role": "user",
            "content": [result("a", "2"), result("b", "oops", is_error=True), text("thanks")],
        },
        {"role": "assistant", "content": [text("you are welcome")]},
    ]


def test_adjacent_user_messages_merge() -> None:
    assert build_messages([user("one"), user("two")]) == [
        {"role": "user", "content": [text("one"), text("two")]}
    ]


def test_empty_and_whitespace_messages_are_left_out() -> None:
    messages = build_messages([user("hi"), assistant("  "), user("again")])
    assert messages == [{"role": "user", "content": [text("hi"), text("again")]}]


def test_a_tool_call_without_its_result_gets_an_error_result_before_the_next_input() -> None:
    messages = build_messages(
        [user("go"), assistant("", ("a", "calculator", "{}")), user("still there?")]
    )
    assert messages[2] == {
        "role": "user",
        "content": [result("a", MISSING_RESULT, is_error=True), text("still there?")],
    }


def test_a_result_without_its_call_becomes_text() -> None:
    messages = build_messages([user("go"), tool("ghost", "42")])
    assert messages == [
        {"role": "user", "content": [text("go"), text("[result of tool calculator ghost]\n42")]}
    ]


def test_an_empty_tool_result_has_no_content_field() -> None:
    messages = build_messages([user("go"), assistant("", ("a", "calculator", "{}")), tool("a", "")])
    assert messages[2]["content"] == [
        {"type": "tool_result", "tool_use_id": "a", "is_error": False}
    ]


def test_tool_input_parses_objects_and_keeps_anything_else_raw() -> None:
    assert tool_input('{"x": 1}') == {"x": 1}
    assert tool_input("") == {}
    assert tool_input("[1, 2]") == {"_raw_arguments": "[1, 2]"}
    assert tool_input('{"x": ') == {"_raw_arguments": '{"x": '}


def test_ids_from_other_providers_are_made_safe_on_both_sides() -> None:
    assert safe_id("call:1.2") == "call_1_2"
    messages = build_messages(
        [user("go"), assistant("", ("call:1", "calculator", "{}")), tool("call:1", "ok")]
    )
    assert messages[1]["content"][0]["id"] == "call_1"
    assert messages[2]["content"][0]["tool_use_id"] == "call_1"


# --- params -------------------------------------------------------------------------------

CALCULATOR = ToolDefinition("calculator", "Exact arithmetic.", {"type": "object"})


def request(**fields: Any) -> ModelRequest:
    return ModelRequest(
        model="claude-test", messages=fields.pop("messages", [user("hi")]), **fields
    )


def test_system_comes_from_instructions_and_system_messages() -> None:
    params = build_params(
        request(instructions="Be brief.", messages=[msg(Role.SYSTEM, "Summary: x."), user("hi")])
    )
    assert params["system"] == "Be brief.\n\nSummary: x."
    assert params["messages"] == [{"role": "user", "content": [text("hi")]}]


def test_no_system_no_tools_and_the_default_max_tokens() -> None:
    params = build_params(request())
    assert params == {
        "model": "claude-test",
        "max_tokens": 4096,
        "messages": [{"role": "user", "content": [text("hi")]}],
    }


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ("auto", {"type": "auto"}),
        ("required", {"type": "any"}),
        ("none", {"type": "none"}),
        ("calculator", {"type": "tool", "name": "calculator"}),
    ],
)
def test_tool_choice(choice: str, expected: dict[str, str]) -> None:
    assert tool_choice(choice) == expected
    params = build_params(request(tools=[CALCULATOR], tool_choice=choice, max_output_tokens=99))
    assert params["tool_choice"] == expected
    assert params["tools"] == [
        {
            "name": "calculator",
            "description": "Exact arithmetic.",
            "input_schema": {"type": "object"},
        }
    ]
    assert params["max_tokens"] == 99


def test_tool_history_without_offered_tools_defines_them_and_forbids_calls() -> None:
    history = [user("go"), assistant("", ("a", "calculator", "{}")), tool("a", "1"), user("more")]
    params = build_params(request(messages=history, tool_choice="none"))
    assert [t["name"] for t in params["tools"]] == ["calculator"]
    assert params["tool_choice"] == {"type": "none"}


# --- stream decoding ----------------------------------------------------------------------


def feed(decoder: StreamDecoder, *events: Any) -> list[Any]:
    return [delta for event in events for delta in decoder.feed(event)]


def start(input_tokens: int = 10, **usage: int) -> RawMessageStartEvent:
    started = {"type": "message_start", "message": message_object(input_tokens, **usage)}
    return RawMessageStartEvent.model_validate(started)


def block(index: int, content: dict[str, Any]) -> RawContentBlockStartEvent:
    return RawContentBlockStartEvent.model_validate(
        {"type": "content_block_start", "index": index, "content_block": content}
    )


def delta(index: int, content: dict[str, Any]) -> RawContentBlockDeltaEvent:
    return RawContentBlockDeltaEvent.model_validate(
        {"type": "content_block_delta", "index": index, "delta": content}
    )


def end(
    stop_reason: str | None, output_tokens: int = 5, **usage: int | None
) -> RawMessageDeltaEvent:
    return RawMessageDeltaEvent.model_validate(
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": None},
            "usage": {**usage, "output_tokens": output_tokens},
        }
    )


STOP = RawMessageStopEvent(type="message_stop")


def test_text_and_tool_use_blocks_become_deltas() -> None:
    decoder = StreamDecoder()
    deltas = feed(
        decoder,
        start(10, cache_read_input_tokens=5),
        block(0, {"type": "text", "text": ""}),
        delta(0, {"type": "text_delta", "text": "Let me "}),
        delta(0, {"type": "text_delta", "text": "see."}),
        block(1, {"type": "tool_use", "id": "toolu_1", "name": "calculator", "input": {}}),
        delta(1, {"type": "input_json_delta", "partial_json": ""}),
        delta(1, {"type": "input_json_delta", "partial_json": '{"expression":'}),
        block(2, {"type": "tool_use", "id": "toolu_2", "name": "current_time", "input": {}}),
        delta(1, {"type": "input_json_delta", "partial_json": ' "1+1"}'}),
        end("tool_use", 7),
        STOP,
    )
    assert deltas == [
        TextChunk("Let me "),
        TextChunk("see."),
        ToolCallBegin("toolu_1", "calculator"),
        ToolCallArguments("toolu_1", '{"expression":'),
        ToolCallBegin("toolu_2", "current_time"),
        ToolCallArguments("toolu_1", ' "1+1"}'),
        Finished(FinishReason.TOOL_CALLS, TokenUsage(10, 7, cached_input_tokens=5)),
    ]
    assert decoder.finished


def test_cache_reads_and_writes_are_counted_apart_from_input_tokens() -> None:
    started = start(12, cache_read_input_tokens=2048, cache_creation_input_tokens=300)
    deltas = feed(StreamDecoder(), started, end("end_turn", 9), STOP)
    usage = TokenUsage(
        input_tokens=12, output_tokens=9, cached_input_tokens=2048, cache_write_tokens=300
    )
    assert deltas == [Finished(FinishReason.STOP, usage)]
    assert usage.total_tokens == 12 + 9 + 2048 + 300


def test_message_delta_usage_is_cumulative_and_replaces_message_start_field_by_field() -> None:
    started = start(10, cache_read_input_tokens=100, cache_creation_input_tokens=50)
    # The final counts (e.g. after server tools); a null count keeps message_start's.
    ended = end(
        "end_turn",
        20,
        input_tokens=14,
        cache_read_input_tokens=160,
        cache_creation_input_tokens=None,
    )
    deltas = feed(StreamDecoder(), started, ended, STOP)
    assert deltas == [Finished(FinishReason.STOP, TokenUsage(14, 20, 160, 50))]


@pytest.mark.parametrize(
    ("stop_reason", "reason"),
    [
        ("end_turn", FinishReason.STOP),
        ("stop_sequence", FinishReason.STOP),
        ("max_tokens", FinishReason.LENGTH),
        ("model_context_window_exceeded", FinishReason.LENGTH),
        ("refusal", FinishReason.CONTENT_FILTER),
        ("pause_turn", FinishReason.UNKNOWN),
        (None, FinishReason.UNKNOWN),
    ],
)
def test_stop_reasons(stop_reason: str | None, reason: FinishReason) -> None:
    deltas = feed(StreamDecoder(), start(), end(stop_reason), STOP)
    assert deltas == [Finished(reason, TokenUsage(10, 5))]


def test_no_finished_without_message_stop_and_nothing_after_it() -> None:
    decoder = StreamDecoder()
    assert feed(decoder, start(), end("end_turn")) == []
    assert not decoder.finished
    feed(decoder, STOP)
    assert feed(decoder, block(0, {"type": "text", "text": "late"}), STOP) == []


def test_thinking_streams_as_reasoning_and_the_block_is_kept_with_its_signature() -> None:
    deltas = feed(
        StreamDecoder(),
        block(0, {"type": "thinking", "thinking": "", "signature": ""}),
        delta(0, {"type": "thinking_delta", "thinking": "hmm"}),
        delta(0, {"type": "thinking_delta", "thinking": ", yes"}),
        delta(0, {"type": "signature_delta", "signature": "sig"}),
        RawContentBlockStopEvent.model_validate({"type": "content_block_stop", "index": 0}),
        block(1, {"type": "redacted_thinking", "data": "opaque"}),
    )
    assert deltas == [
        ReasoningChunk("hmm"),
        ReasoningChunk(", yes"),
        ReasoningBlock({"type": "thinking", "thinking": "hmm, yes", "signature": "sig"}),
        ReasoningBlock({"type": "redacted_thinking", "data": "opaque"}),
    ]


# --- errors -------------------------------------------------------------------------------


def classified(exc: anthropic.APIStatusError) -> ProviderError:
    """The error a provider named 'claude', keyed KEY, makes of `exc`."""
    return anthropic_errors.status_error("claude", exc, api_key=KEY)


def status_error(
    status: int, error_type: str, message: str, headers: dict[str, str] | None = None, **extra: Any
) -> anthropic.APIStatusError:
    body = {"type": "error", "error": {"type": error_type, "message": message, **extra}}
    response = httpx2.Response(
        status, headers=headers or {}, request=httpx2.Request("POST", "http://x/v1/messages")
    )
    return anthropic.APIStatusError(f"Error code: {status}", response=response, body=body)


def test_a_429_is_transient_with_its_retry_after() -> None:
    error = classified(status_error(429, "rate_limit_error", "slow down", {"retry-after": "3"}))
    assert type(error) is RateLimited
    assert error.retry_after == 3.0
    assert str(error) == "provider 'claude': rate limited (HTTP 429 rate_limit_error): slow down"


def test_a_spend_limit_429_is_permanent() -> None:
    exc = status_error(
        429, "rate_limit_error", "limit", details={"error_code": "enforced_spend_limit_reached"}
    )
    assert type(classified(exc)) is QuotaExhausted


@pytest.mark.parametrize("status", [500, 502, 503, 529, 408])
def test_server_errors_and_timeouts_are_transient(status: int) -> None:
    error = classified(status_error(status, "api_error", "boom"))
    assert isinstance(error, TransientProviderError)
    assert f"HTTP {status}" in str(error)


def test_x_should_retry_is_obeyed() -> None:
    exc = status_error(500, "api_error", "boom", {"x-should-retry": "false"})
    assert isinstance(classified(exc), PermanentProviderError)


@pytest.mark.parametrize("status", [400, 404, 413, 422])
def test_bad_requests_are_permanent(status: int) -> None:
    error = classified(status_error(status, "invalid_request_error", "nope"))
    assert type(error) is PermanentProviderError


def test_a_prompt_too_long_is_a_context_overflow() -> None:
    exc = status_error(
        400, "invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum"
    )
    assert isinstance(classified(exc), ContextOverflowError)


def test_auth_errors_never_carry_the_key() -> None:
    exc = status_error(401, "authentication_error", f"invalid x-api-key {KEY}")
    error = classified(exc)
    assert type(error) is ProviderAuthError
    assert "authentication failed (HTTP 401" in str(error)
    forbidden = classified(status_error(403, "permission_error", "no access"))
    assert type(forbidden) is ProviderAuthError
    assert KEY not in str(error)


def test_an_error_event_in_a_stream_is_classified_by_its_type() -> None:
    overloaded = classified(status_error(200, "overloaded_error", "Overloaded"))
    assert type(overloaded) is TransientProviderError
    assert "stream error event overloaded_error" in str(overloaded)
    limited = classified(status_error(200, "rate_limit_error", "slow down"))
    assert type(limited) is RateLimited and limited.retry_after is None
    invalid = classified(status_error(200, "invalid_request_error", "bad"))
    assert isinstance(invalid, PermanentProviderError)


def test_long_provider_messages_are_shortened() -> None:
    error = classified(status_error(400, "invalid_request_error", "x " * 500))
    assert len(str(error)) < 300


def test_retry_after_forms() -> None:
    assert retry_after_s({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert retry_after_s({"retry-after": "2"}) == 2.0
    assert retry_after_s({}) is None
    assert retry_after_s({"retry-after": "soon"}) is None
    later = email.utils.formatdate(time.time() + 30, usegmt=True)
    value = retry_after_s({"retry-after": later})
    assert value is not None and 25 < value <= 30


def test_a_provider_without_any_key_fails_at_start(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in list(os.environ):
        if name.startswith("ANTHROPIC_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("ANTHROPIC_CONFIG_DIR", str(tmp_path))
    with pytest.raises(ValueError, match="no API key"):
        AnthropicProvider(ProviderConfig(name="claude", type="anthropic"))


def test_the_transcripts_breakpoint_skips_thinking_blocks_and_marks_the_last_other() -> None:
    thinking = {"type": "thinking", "thinking": "hmm", "signature": "sig"}
    history = [user("hi"), msg(Role.ASSISTANT, "Hello.", reasoning_blocks=json.dumps([thinking]))]
    params = build_params(request(messages=history), cache=CACHE_BREAKPOINTS)
    last = params["messages"][-1]["content"]
    assert last[0] == thinking  # sent back exactly as the API gave it
    assert last[1] == {**text("Hello."), "cache_control": {"type": "ephemeral"}}
    assert "cache_control" not in params["messages"][0]["content"][0]


def test_no_breakpoints_without_the_setting() -> None:
    params = build_params(request(instructions="Be brief.", tools=[CALCULATOR]))
    assert "cache_control" not in json.dumps(params)
    assert params["system"] == "Be brief."
