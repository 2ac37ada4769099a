"""The offline `local` provider: echo, scripted steps, errors, delays."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime

import pytest

from behest.domain.messages import Message, Role, ToolCall
from behest.domain.runs import FinishReason
from behest.domain.spend import TokenUsage
from behest.errors import (
    ContextOverflowError,
    InvalidArgument,
    PermanentProviderError,
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
from behest.providers.local import KNOWN_MODELS, LocalProvider, split_words


def message(
    role: Role, text: str, position: int = 0, *, run_id: str = "r", **extra: object
) -> Message:
    return Message(
        id=f"m{position}",
        session_id="s",
        run_id=run_id,
        position=position,
        role=role,
        text=text,
        created_at=datetime.now(UTC),
        **extra,  # type: ignore[arg-type]
    )


def request(model: str, text: str, *, call_number: int = 1) -> ModelRequest:
    return ModelRequest(model=model, messages=[message(Role.USER, text)], call_number=call_number)


def script(*steps: dict[str, object]) -> str:
    return json.dumps({"steps": list(steps)})


async def collect(req: ModelRequest, provider: LocalProvider | None = None) -> list[Delta]:
    return [d async for d in (provider or LocalProvider()).stream(req)]


def text_of(deltas: list[Delta]) -> str:
    return "".join(d.text for d in deltas if isinstance(d, TextChunk))


async def test_echo_streams_one_word_per_chunk_that_join_to_the_input() -> None:
    deltas = await collect(request("echo", "hello big world"))
    chunks = [d.text for d in deltas if isinstance(d, TextChunk)]
    assert chunks == ["hello ", "big ", "world"]
    assert isinstance(deltas[-1], Finished) and deltas[-1].reason == FinishReason.STOP


@pytest.mark.parametrize("text", ["  lead and  double spaces \n", "one", "", "   ", "a\tb\nc"])
def test_split_words_joins_back_exactly(text: str) -> None:
    assert "".join(split_words(text)) == text


async def test_echo_answers_the_input_of_the_last_run() -> None:
    req = ModelRequest(
        model="echo",
        messages=[
            message(Role.USER, "first", 0, run_id="r0"),
            message(Role.ASSISTANT, "reply", 1, run_id="r0"),
            message(Role.USER, "second one", 2, run_id="r1"),
            message(Role.TOOL, "tool output", 3, run_id="r1", tool_call_id="c"),
        ],
    )
    assert text_of(await collect(req)) == "second one"


async def test_script_plays_its_run_input_also_after_a_repair_message() -> None:
    steps = script({"text": "not json"}, {"text": '{"ok": true}'})
    req = ModelRequest(
        model="script",
        messages=[
            message(Role.USER, steps, 0),
            message(Role.ASSISTANT, "not json", 1),
            message(Role.USER, "Your answer could not be used: …", 2),
        ],
        call_number=2,
    )
    assert text_of(await collect(req)) == '{"ok": true}'


async def test_usage_is_a_deterministic_estimate() -> None:
    req = ModelRequest(
        model="echo",
        messages=[
            message(Role.ASSISTANT, "", 0, tool_calls=(ToolCall("c", "t", '{"a": 1}'),)),
            message(Role.USER, "abcd efgh", 1),
        ],
    )
    finished = (await collect(req))[-1]
    assert isinstance(finished, Finished)
    assert finished.usage.input_tokens == (8 + 9) // 4 + 1
    assert finished.usage.output_tokens == 2


async def test_a_step_usage_replaces_the_estimate_exactly() -> None:
    usage = {"input": 1200, "output": 80, "cached_input": 4096, "cache_write": 512}
    deltas = await collect(request("script", script({"text": "a b c", "usage": usage})))
    assert deltas[-1] == Finished(
        FinishReason.STOP,
        TokenUsage(
            input_tokens=1200, output_tokens=80, cached_input_tokens=4096, cache_write_tokens=512
        ),
    )


async def test_a_step_usage_counts_the_fields_it_leaves_out_as_zero() -> None:
    steps = script({"text": "hi", "usage": {"cached_input": 7}}, {"text": "no usage"})
    first = await collect(request("script", steps, call_number=1))
    assert isinstance(first[-1], Finished)
    assert first[-1].usage == TokenUsage(cached_input_tokens=7)
    second = await collect(request("script", steps, call_number=2))
    assert isinstance(second[-1], Finished)
    # Steps without usage keep the estimate, with no cache tokens.
    assert second[-1].usage == TokenUsage(len(steps) // 4 + 1, 2)


async def test_unknown_model_is_invalid_argument_naming_known_models() -> None:
    with pytest.raises(InvalidArgument, match="echo, script"):
        await collect(request("gpt-9", "hi"))
    with pytest.raises(InvalidArgument, match="model"):
        LocalProvider().check_model("nope")
    for model in KNOWN_MODELS:
        LocalProvider().check_model(model)


async def test_script_plays_step_n_on_call_n_then_done() -> None:
    text = script({"text": "first answer"}, {"text": "second answer"})
    assert text_of(await collect(request("script", text, call_number=1))) == "first answer"
    assert text_of(await collect(request("script", text, call_number=2))) == "second answer"
    after = await collect(request("script", text, call_number=3))
    assert text_of(after) == "done"
    assert isinstance(after[-1], Finished) and after[-1].reason == FinishReason.STOP


async def test_script_text_streams_as_several_chunks() -> None:
    deltas = await collect(request("script", script({"text": "a b c d"})))
    assert [d.text for d in deltas if isinstance(d, TextChunk)] == ["a ", "b ", "c ", "d"]


async def test_script_deltas_field_streams_numbered_chunks() -> None:
    deltas = await collect(request("script", script({"deltas": 3})))
    assert [d.text for d in deltas if isinstance(d, TextChunk)] == ["w1 ", "w2 ", "w3 "]
    assert isinstance(deltas[-1], Finished) and deltas[-1].usage.output_tokens == 3


async def test_tool_call_fragments_join_to_the_arguments_json() -> None:
    args = {"expression": "1 + 2 * 3", "precision": 4}
    steps = script({"tool_calls": [{"name": "calculator", "arguments": args}, {"name": "clock"}]})
    deltas = await collect(request("script", steps, call_number=1))
    begins = [d for d in deltas if isinstance(d, ToolCallBegin)]
    assert begins == [ToolCallBegin("call_1_1", "calculator"), ToolCallBegin("call_1_2", "clock")]
    first = [
        d.fragment for d in deltas if isinstance(d, ToolCallArguments) and d.call_id == "call_1_1"
    ]
    assert len(first) > 1
    assert json.loads("".join(first)) == args
    second = [
        d.fragment for d in deltas if isinstance(d, ToolCallArguments) and d.call_id == "call_1_2"
    ]
    assert json.loads("".join(second)) == {}
    assert isinstance(deltas[-1], Finished) and deltas[-1].reason == FinishReason.TOOL_CALLS


async def test_tool_call_string_arguments_are_sent_verbatim() -> None:
    steps = script({"tool_calls": [{"name": "t", "arguments": '{"broken": '}]})
    deltas = await collect(request("script", steps))
    assert "".join(d.fragment for d in deltas if isinstance(d, ToolCallArguments)) == '{"broken": '


async def test_finish_field_sets_the_finish_reason() -> None:
    length = await collect(request("script", script({"text": "cut", "finish": "length"})))
    assert isinstance(length[-1], Finished) and length[-1].reason == FinishReason.LENGTH
    stop = script({"tool_calls": [{"name": "t", "arguments": {}}], "finish": "stop"})
    deltas = await collect(request("script", stop))
    assert isinstance(deltas[-1], Finished) and deltas[-1].reason == FinishReason.STOP


async def test_rate_limited_is_transient_with_retry_after() -> None:
    steps = script({"error": "rate_limited", "retry_after_s": 2.5}, {"text": "ok"})
    with pytest.raises(RateLimited, match="429") as info:
        await collect(request("script", steps, call_number=1))
    assert info.value.retry_after == 2.5
    assert info.value.provider == "local"
    # The retry is the next call and plays the next step.
    assert text_of(await collect(request("script", steps, call_number=2))) == "ok"


async def test_rate_limited_without_hint_has_no_retry_after() -> None:
    with pytest.raises(TransientProviderError) as info:
        await collect(request("script", script({"error": "rate_limited"})))
    assert info.value.retry_after is None


@pytest.mark.parametrize(
    ("kind", "exc", "text"),
    [
        ("unavailable", TransientProviderError, "503"),
        ("context_overflow", ContextOverflowError, "context"),
        ("bad_request", PermanentProviderError, "bad request"),
    ],
)
async def test_each_error_kind_raises_its_exception(
    kind: str, exc: type[Exception], text: str
) -> None:
    with pytest.raises(exc, match=text):
        await collect(request("script", script({"error": kind})))


async def test_error_is_raised_before_any_output_of_the_step() -> None:
    seen: list[Delta] = []
    with pytest.raises(TransientProviderError):
        async for delta in LocalProvider().stream(
            request("script", script({"error": "unavailable", "text": "never shown"}))
        ):
            seen.append(delta)
    assert seen == []


async def test_cancel_during_a_delay_stops_the_stream() -> None:
    steps = script({"text": "slow words here", "delay_ms": 60_000})
    seen: list[Delta] = []
    started = asyncio.Event()

    async def consume() -> None:
        started.set()
        async for delta in LocalProvider().stream(request("script", steps)):
            seen.append(delta)

    task = asyncio.create_task(consume())
    await started.wait()
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen == []


async def test_constructor_delay_applies_and_step_delay_overrides_it() -> None:
    slow = LocalProvider(chunk_delay_s=60.0)
    fast = script({"text": "quick", "delay_ms": 0})
    # delay_ms 0 overrides the provider's minute-long default, so this returns at once.
    assert text_of(await asyncio.wait_for(collect(request("script", fast), slow), 5)) == "quick"
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(collect(request("echo", "hi"), slow), 0.05)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("not json at all", "the input is not valid JSON"),
        ("[" * 1000 + "]" * 1000, "the input is nested 1000 levels deep; the limit is 64"),
        ('{"steps": [{"delay_ms": 1e309}]}', r"the input holds a number too large"),
        ('{"steps": [{"delay_ms": NaN}]}', r"NaN is not a JSON number"),
        ('{"steps": [{"delay_ms": 600001}]}', r"delay_ms must be a number from 0 to 600000"),
        ('{"steps": [{"retry_after_s": 86401}]}', r"retry_after_s must be a number from 0"),
        ('{"steps": [{"deltas": 1000001}]}', r"deltas must be an integer from 0 to 1000000"),
        ('["steps"]', 'no "steps" list'),
        ('{"steps": 3}', 'no "steps" list'),
        ('{"steps": [1]}', r"steps\[0\] is not an object"),
        ('{"steps": [{"txt": "typo"}]}', "unknown fields"),
        ('{"steps": [{"error": "boom"}]}', "error must be one of"),
        ('{"steps": [{"finish": "maybe"}]}', "finish must be one of"),
        ('{"steps": [{"deltas": -1}]}', "deltas"),
        ('{"steps": [{"tool_calls": [{"arguments": {}}]}]}', "tool_calls"),
        ('{"steps": [{"usage": 5}]}', r"steps\[0\]\.usage must be an object \{\"input\": N"),
        ('{"steps": [{"usage": {"inputs": 5}}]}', r"usage must be an object"),
        ('{"steps": [{"usage": {"input": -1}}]}', r"usage\.input must be an integer from 0 to"),
        ('{"steps": [{"usage": {"output": 1.5}}]}', r"usage\.output must be an integer"),
        ('{"steps": [{"usage": {"cached_input": true}}]}', r"usage\.cached_input must be"),
        ('{"steps": [{"usage": {"cache_write": "3"}}]}', r"usage\.cache_write must be"),
        ('{"steps": [{"usage": {"input": 1000000001}}]}', r"from 0 to 1000000000"),
    ],
)
async def test_invalid_script_fails_clearly(text: str, problem: str) -> None:
    with pytest.raises(PermanentProviderError, match=problem) as info:
        await collect(request("script", text))
    assert '{"steps": [' in str(info.value)
