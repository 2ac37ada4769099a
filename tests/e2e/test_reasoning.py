"""Reasoning streamed (issue 17, item 3): the model's reasoning comes as ReasoningDelta events,
apart from the answer's text, with its tokens in usage; through a real server with the
`script` model, on SQLite and PostgreSQL."""

from __future__ import annotations

import io

import grpc
import pytest

from behest._proto.agent.v1 import run_pb2 as pb
from behest._proto.agent.v1 import run_pb2_grpc as rpc
from behest.cli.render import EventPrinter
from behest.client._wire import event_of
from tests.support import (
    Server,
    collect,
    create_request,
    kind,
    script,
)


def _joined(events: list[pb.AgentEvent], name: str) -> str:
    return "".join(getattr(e, name).delta for e in events if kind(e) == name)


async def test_reasoning_streams_apart_from_the_answer_before_its_text(served: Server) -> None:
    steps = {"reasoning": "two and two make four", "text": "four"}
    events = await collect(
        served.runs.CreateRunStream(create_request(script(steps), model="script"))
    )
    kinds = [kind(e) for e in events]
    assert kinds[-1] == "run_completed"
    assert _joined(events, "reasoning_delta") == "two and two make four"
    assert _joined(events, "text_delta") == "four"
    assert max(i for i, k in enumerate(kinds) if k == "reasoning_delta") < kinds.index("text_delta")
    # Estimated usage: one reasoning token per reasoning chunk, part of the output tokens.
    [usage] = [e.usage_recorded.usage for e in events if kind(e) == "usage_recorded"]
    assert usage.reasoning_tokens == 5
    assert usage.output_tokens == 6
    output = (
        await served.runs.GetRunOutput(pb.GetRunOutputRequest(run_id=events[0].run_id))
    ).output
    assert [m.content[0].text.text for m in output.messages] == ["four"]
    # Replayed from the event log: the same events.
    replayed = await collect(
        served.runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=events[0].run_id))
    )
    assert _joined(replayed, "reasoning_delta") == "two and two make four"


async def test_a_scripted_usage_carries_reasoning_tokens_across_tool_calls(
    served: Server,
) -> None:
    steps = [
        {
            "reasoning": "I should add",
            "tool_calls": [{"name": "calculator", "arguments": {"expression": "2+2"}}],
            "usage": {"input": 10, "output": 7, "reasoning": 5},
        },
        {
            "reasoning": "it said 4",
            "text": "4",
            "usage": {"input": 20, "output": 3, "reasoning": 2},
        },
    ]
    request = create_request(script(*steps), model="script")
    request.tools.append("calculator")
    events = await collect(served.runs.CreateRunStream(request))
    assert kind(events[-1]) == "run_completed", events[-1]
    usages = [e.usage_recorded.usage for e in events if kind(e) == "usage_recorded"]
    assert [u.reasoning_tokens for u in usages] == [5, 2]
    assert [u.total_tokens for u in usages] == [17, 23]
    assert _joined(events, "reasoning_delta") == "I should addit said 4"
    assert _joined(events, "text_delta") == "4"
    # The run's totals and the usage RPC sum them too.
    run_id = events[0].run_id
    record = (await served.runs.GetRun(pb.GetRunRequest(run_id=run_id))).run
    output = (await served.runs.GetRunOutput(pb.GetRunOutputRequest(run_id=run_id))).output
    assert record.total_usage.reasoning_tokens == output.total_usage.reasoning_tokens == 7
    assert output.total_usage.output_tokens == 10
    usage = await rpc.UsageServiceStub(served.channel).GetUsage(
        pb.GetUsageRequest(session_id=events[0].run_started.session_id)
    )
    assert usage.total_usage.reasoning_tokens == usage.days[0].usage.reasoning_tokens == 7


def test_the_cli_shows_reasoning_apart_from_the_answer() -> None:
    out, err = io.StringIO(), io.StringIO()
    printer = EventPrinter(out, err)
    for event in (
        pb.AgentEvent(reasoning_delta=pb.ReasoningDeltaEvent(delta="hmm ")),
        pb.AgentEvent(reasoning_delta=pb.ReasoningDeltaEvent(delta="four")),
        pb.AgentEvent(text_delta=pb.TextDeltaEvent(delta="4")),
    ):
        printer.render(event_of(event))
    assert out.getvalue() == "4"
    assert err.getvalue() == "thinking: hmm four\n"


async def test_the_reasoning_setting_is_recorded_and_a_bad_one_is_invalid(served: Server) -> None:
    request = create_request(script({"text": "ok"}), model="script")
    request.reasoning.effort = "low"
    events = await collect(served.runs.CreateRunStream(request))
    record = (await served.runs.GetRun(pb.GetRunRequest(run_id=events[0].run_id))).run
    assert record.reasoning == pb.Reasoning(effort="low")
    bad = [
        (pb.Reasoning(effort="max"), "reasoning.effort must be one of low, medium, high"),
        (pb.Reasoning(budget_tokens=512), "reasoning.budget_tokens must be at least 1024"),
        (pb.Reasoning(), "reasoning needs effort or budget_tokens"),
    ]
    for reasoning, words in bad:
        request = create_request("hi", model="script", reasoning=reasoning)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await served.runs.CreateRun(request)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert words in (caught.value.details() or "")
