"""The AG-UI translator (doors/agui_events.py): behest's events in, AG-UI 1.0's out, in the
order AG-UI wants them — and what a pause, a repeated model call and a run's end do."""

from __future__ import annotations

from typing import Any

from ag_ui.core import BaseEvent, EventType

from behest._proto.agent.v1 import common_pb2 as c
from behest._proto.agent.v1 import run_pb2 as pb
from behest.doors.agui_events import Translator
from behest.doors.agui_wire import encode

RUN, THREAD, AGUI_RUN = "run-1", "thread-1", "agui-1"
CALC = c.ToolCall(id="call_1", name="calculator", arguments='{"expression": "2+2"}')


def event(sequence: int, **payload: Any) -> pb.AgentEvent:
    return pb.AgentEvent(sequence=sequence, run_id=RUN, **payload)


def started() -> pb.AgentEvent:
    return event(1, run_started=pb.RunStartedEvent(session_id=THREAD, provider="p", model="m"))


def model(sequence: int, iteration: int = 1) -> pb.AgentEvent:
    return event(
        sequence, model_started=pb.ModelStartedEvent(provider="p", model="m", iteration=iteration)
    )


def text(sequence: int, delta: str) -> pb.AgentEvent:
    return event(sequence, text_delta=pb.TextDeltaEvent(delta=delta))


def committed(sequence: int) -> pb.AgentEvent:
    done = pb.AssistantMessageCommittedEvent(message_id="m")
    return event(sequence, assistant_message_committed=done)


def feed(translator: Translator, *events: pb.AgentEvent) -> list[BaseEvent]:
    return [out for e in events for out in translator.feed(e)]


def types(events: list[BaseEvent]) -> list[str]:
    return [e.type.value for e in events]


def translator() -> Translator:
    return Translator(thread_id=THREAD, run_id=AGUI_RUN)


def test_a_text_run_is_run_step_and_text_events_in_order() -> None:
    t = translator()
    usage = c.TokenUsage(input_tokens=10, output_tokens=2, cached_input_tokens=5)
    out = feed(
        t,
        started(),
        event(2, context_built=pb.ContextBuiltEvent(message_count=1)),
        model(3),
        text(4, "hel"),
        text(5, "lo"),
        committed(6),
        event(7, usage_recorded=pb.UsageRecordedEvent(usage=usage)),
        event(8, run_completed=pb.RunCompletedEvent(iterations=1)),
    )

    assert types(out) == [
        "RUN_STARTED",
        "STEP_STARTED",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "STEP_FINISHED",
        "RUN_FINISHED",
    ]
    first, last = out[0], out[-1]
    assert (first.thread_id, first.run_id, first.protocol_version) == (THREAD, AGUI_RUN, "1.0")
    assert first.metadata == {"behest": {"runId": RUN, "sessionId": THREAD}}
    assert {e.message_id for e in out[2:6]} == {f"{RUN}:3"}
    assert [e.delta for e in out[3:5]] == ["hel", "lo"]
    assert last.outcome.type == "success"
    [entry] = last.usage
    assert (entry.provider, entry.model) == ("p", "m")
    # AG-UI counts cached tokens inside inputTokens; a part behest counted none of is absent.
    assert (entry.input_tokens, entry.output_tokens, entry.total_tokens) == (15, 2, 17)
    assert (entry.cached_input_tokens, entry.reasoning_tokens) == (5, None)
    assert not t.open and not t.stale


def test_every_event_serialises_as_ag_ui_json() -> None:
    out = feed(translator(), started(), model(2), text(3, "hi"), committed(4))
    assert encode(out[2]) == (
        f'{{"type":"TEXT_MESSAGE_START","messageId":"{RUN}:2","role":"assistant"}}'
    )


def test_reasoning_is_a_span_closed_when_the_answer_starts() -> None:
    out = feed(
        translator(),
        started(),
        model(2),
        event(3, reasoning_delta=pb.ReasoningDeltaEvent(delta="think")),
        text(4, "answer"),
    )
    assert types(out)[2:] == [
        "REASONING_START",
        "REASONING_MESSAGE_START",
        "REASONING_MESSAGE_CONTENT",
        "REASONING_MESSAGE_END",
        "REASONING_END",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
    ]
    assert {e.message_id for e in out[2:7]} == {f"{RUN}:2:r1"}


def test_tool_calls_stream_under_their_message_and_get_whole_arguments_if_none_streamed() -> None:
    other = c.ToolCall(id="call_2", name="lookup", arguments='{"word": "x"}')
    out = feed(
        translator(),
        started(),
        model(2),
        event(
            3, tool_call_started=pb.ToolCallStartedEvent(call_id="call_1", tool_name="calculator")
        ),
        event(4, tool_call_delta=pb.ToolCallDeltaEvent(call_id="call_1", delta='{"expression": ')),
        event(5, tool_call_delta=pb.ToolCallDeltaEvent(call_id="call_1", delta='"2+2"}')),
        event(6, tool_call_completed=pb.ToolCallCompletedEvent(call=CALC)),
        event(7, tool_call_completed=pb.ToolCallCompletedEvent(call=other)),
        committed(8),
    )
    assert types(out)[2:] == [
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "STEP_FINISHED",
    ]
    assert out[2].parent_message_id == out[6].parent_message_id == f"{RUN}:2"
    assert (out[6].tool_call_name, out[7].delta) == ("lookup", '{"word": "x"}')


def stored_tool_message(call_id: str, text: str) -> c.Message:
    part = c.ContentPart(text=c.TextContent(text=text))
    return c.Message(id="tm-1", role="tool", content=[part], tool_call_id=call_id)


def test_a_server_tools_result_is_tool_call_result_a_client_tools_is_not() -> None:
    t = translator()
    feed(t, started())
    committed_tool = event(
        9, tool_message_committed=pb.ToolMessageCommittedEvent(message_id="tm-1")
    )
    assert t.wants_message(committed_tool) == "tm-1"

    [result] = t.feed(committed_tool, stored_tool_message("call_1", "4"))
    assert result.type == EventType.TOOL_CALL_RESULT
    assert (result.message_id, result.tool_call_id, result.content) == ("tm-1", "call_1", "4")

    asked = pb.ClientToolRequestedEvent(call=c.ToolCall(id="call_2", name="lookup"))
    feed(t, event(10, client_tool_requested=asked))
    assert t.feed(committed_tool, stored_tool_message("call_2", "client's")) == []


def test_a_pause_on_approvals_is_an_interrupt_outcome() -> None:
    t = translator()
    asked = pb.ApprovalRequestedEvent(call=CALC)
    asked.expires_at.FromSeconds(1_800_000_000)
    feed(t, started(), model(2), committed(3), event(4, approval_requested=asked))

    [finished] = t.pause({"call_1"})

    assert finished.type == EventType.RUN_FINISHED and finished.run_id == AGUI_RUN
    [interrupt] = finished.outcome.interrupts
    assert (interrupt.id, interrupt.tool_call_id, interrupt.reason) == (
        "call_1",
        "call_1",
        "tool_approval",
    )
    assert interrupt.expires_at == "2027-01-15T08:00:00Z"
    assert interrupt.response_schema["required"] == ["decision"]
    assert not t.open


def test_a_pause_on_client_tools_names_the_calls_left_pending() -> None:
    t = translator()
    asked = [c.ToolCall(id=f"call_{i}", name="lookup") for i in (1, 2)]
    requests = [
        event(3 + i, client_tool_requested=pb.ClientToolRequestedEvent(call=call))
        for i, call in enumerate(asked)
    ]
    feed(t, started(), model(2), *requests)

    [step_end, finished] = t.pause({"call_1", "call_2"})

    assert step_end.type == EventType.STEP_FINISHED
    assert finished.outcome.type == "success"
    assert finished.outcome.pending_tool_call_ids == ["call_1", "call_2"]


def test_the_run_after_a_pause_starts_with_its_own_id_and_usage() -> None:
    t = translator()
    feed(
        t,
        started(),
        event(2, usage_recorded=pb.UsageRecordedEvent(usage=c.TokenUsage(output_tokens=3))),
    )
    t.pause(set())

    [opened] = t.start("agui-2")
    out = feed(t, event(9, run_completed=pb.RunCompletedEvent()))

    assert opened.type == EventType.RUN_STARTED and opened.run_id == "agui-2"
    assert opened.metadata == {"behest": {"runId": RUN, "sessionId": THREAD}}
    assert out[-1].run_id == "agui-2" and out[-1].usage is None


def test_a_failed_run_is_run_error_with_behests_code_and_cut_text_makes_a_snapshot_due() -> None:
    t = translator()
    code = pb.FailureCode.FAILURE_CODE_PROVIDER_ERROR
    failed = pb.RunFailedEvent(error="the provider refused", code=code)
    out = feed(t, started(), model(2), text(3, "partial"), event(4, run_failed=failed))

    assert types(out)[-3:] == ["TEXT_MESSAGE_END", "STEP_FINISHED", "RUN_ERROR"]
    assert (out[-1].code, out[-1].message) == (
        "FAILURE_CODE_PROVIDER_ERROR",
        "the provider refused",
    )
    assert t.stale


def test_a_cancelled_run_closes_what_is_open_and_finishes_cancelled() -> None:
    started_call = pb.ToolCallStartedEvent(call_id="call_1", tool_name="calculator")
    out = feed(
        translator(),
        started(),
        model(2),
        event(3, tool_call_started=started_call),
        event(4, run_cancelled=pb.RunCancelledEvent(reason="stop")),
    )
    assert types(out)[-3:] == ["TOOL_CALL_END", "STEP_FINISHED", "RUN_FINISHED"]
    assert out[-1].outcome.type == "cancelled"


def test_a_repeated_model_call_ends_the_attempt_and_makes_a_snapshot_due() -> None:
    t = translator()
    out = feed(t, started(), model(2), text(3, "cut sh"), model(4), text(5, "whole"))

    assert types(out)[1:] == [
        "STEP_STARTED",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "STEP_FINISHED",
        "STEP_STARTED",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
    ]
    assert out[2].message_id != out[7].message_id
    assert t.stale


def test_a_repeated_model_call_that_streamed_nothing_needs_no_snapshot() -> None:
    t = translator()
    feed(t, started(), model(2), model(3), text(4, "fine"))
    assert not t.stale


def test_what_ag_ui_has_no_event_for_is_a_custom_event() -> None:
    compacted = pb.CompactionStartedEvent(messages_before=40, reason="threshold")
    [custom] = feed(translator(), event(2, compaction_started=compacted))
    assert custom.type == EventType.CUSTOM
    assert custom.name == "behest.compaction_started"
    assert custom.value == {"messagesBefore": 40, "reason": "threshold"}


def test_events_carry_their_behest_timestamp_in_milliseconds() -> None:
    begun = started()
    begun.timestamp.FromMilliseconds(1_700_000_000_123)
    [opened] = translator().feed(begun)
    assert opened.timestamp == 1_700_000_000_123
