"""Tools and the full agent loop through a real server (issue 3; SEMANTICS §2, §6)."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc
import pytest

from behest._proto.agent.v1 import run_pb2 as pb
from behest.domain.callers import DEFAULT_TENANT
from behest.tools.context import idempotency_key
from tests.support import (
    Server,
    collect,
    create_request,
    fast_settings,
    kind,
    script,
    start_server_with_plugins,
    stop_server,
)


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    """A server with the test plugin package installed (found through its entry point)."""
    running = await start_server_with_plugins(fast_settings(tmp_path))
    try:
        yield running
    finally:
        await stop_server(running)


def call(name: str, **arguments: object) -> dict[str, object]:
    return {"name": name, "arguments": arguments}


async def run_script(
    server: Server, *steps: dict[str, object], **fields: object
) -> list[pb.AgentEvent]:
    request = create_request(script(*steps), model="script", **fields)  # type: ignore[arg-type]
    return await collect(server.runs.CreateRunStream(request))


def answer(events: list[pb.AgentEvent]) -> str:
    """The text of the run's last model turn."""
    last = max(i for i, e in enumerate(events) if kind(e) == "model_started")
    return "".join(e.text_delta.delta for e in events[last:] if kind(e) == "text_delta")


async def test_two_parallel_calls_then_an_answer_in_the_documented_order(server: Server) -> None:
    events = await run_script(
        server,
        {
            "tool_calls": [
                call("calculator", expression="1+2"),
                call("calculator", expression="2*3"),
            ]
        },
        {"say": "tool_results"},
    )
    kinds = [kind(e) for e in events]
    head = [
        "run_started",
        "context_built",
        "model_started",
        "tool_call_started",
        *["tool_call_delta"] * kinds.count("tool_call_delta"),
    ]
    # Deltas of both calls sit between their starts and completions; check the frame exactly.
    assert kinds[:3] == head[:3]
    calls = [k for k in kinds if k.startswith("tool_call_")]
    first_done = calls.index("tool_call_completed")
    assert calls[0] == "tool_call_started" and calls[first_done + 1] == "tool_call_started"
    assert calls.count("tool_call_completed") == 2
    after_calls = kinds[kinds.index("assistant_message_committed") :]
    assert after_calls[:2] == ["assistant_message_committed", "usage_recorded"]
    executions = after_calls[2:8]
    assert sorted(executions) == sorted(
        ["tool_execution_started"] * 2
        + ["tool_execution_finished"] * 2
        + ["tool_message_committed"] * 2
    )
    assert executions[:2] == ["tool_execution_started", "tool_execution_started"]
    assert after_calls[8:] == [
        "context_built",
        "model_started",
        *["text_delta"] * (len(after_calls) - 13),
        "assistant_message_committed",
        "usage_recorded",
        "run_completed",
    ]
    assert answer(events) == "calculator: 3\ncalculator: 6"
    assert events[-1].run_completed.iterations == 2


async def test_concurrency_safe_calls_overlap_in_time(server: Server) -> None:
    began = time.monotonic()
    events = await run_script(
        server, {"tool_calls": [call("slow_safe", seconds=s) for s in (0.4, 0.41, 0.42)]}
    )
    elapsed = time.monotonic() - began
    kinds = [kind(e) for e in events]
    starts = [i for i, k in enumerate(kinds) if k == "tool_execution_started"]
    finishes = [i for i, k in enumerate(kinds) if k == "tool_execution_finished"]
    assert max(starts) < min(finishes)  # all three were running at once
    assert elapsed < 1.0  # three 0.4 s calls, not 1.23 s
    assert kind(events[-1]) == "run_completed"


async def test_unsafe_calls_run_one_after_another(server: Server) -> None:
    began = time.monotonic()
    events = await run_script(
        server, {"tool_calls": [call("slow_unsafe", seconds=s) for s in (0.2, 0.21, 0.22)]}
    )
    elapsed = time.monotonic() - began
    kinds = [k for k in (kind(e) for e in events) if k.startswith("tool_execution")]
    assert kinds == ["tool_execution_started", "tool_execution_finished"] * 3
    durations = [
        e.tool_execution_finished.duration_ms
        for e in events
        if kind(e) == "tool_execution_finished"
    ]
    assert all(d >= 190 for d in durations)
    assert elapsed >= 0.6


@pytest.mark.parametrize(
    ("tool_call", "expected"),
    [
        (call("no_such_tool"), "not found"),
        (call("calculator", expr="1+1"), "do not match its schema"),
        (call("calculator", expression="1/0"), "division by zero"),
        (call("explode"), "kaboom"),
        (call("too_slow", seconds=5), "timed out"),
        (call("not_text"), "invalid output"),
        ({"name": "calculator", "arguments": "{not json"}, "not valid JSON"),
        # A model's arguments nested 3,000 deep: an error result, not a crashed run.
        (
            {"name": "calculator", "arguments": "[" * 3000 + "]" * 3000},
            "nested 3000 levels deep; the limit is 64",
        ),
        ({"name": "calculator", "arguments": '{"expression": 1e999}'}, "too large to represent"),
    ],
)
async def test_tool_errors_reach_the_model_and_the_run_goes_on(
    server: Server, tool_call: dict[str, object], expected: str
) -> None:
    events = await run_script(server, {"tool_calls": [tool_call]}, {"say": "tool_results"})
    assert kind(events[-1]) == "run_completed"
    said = answer(events)
    assert "error: " in said
    assert expected in said


async def test_nul_characters_in_tool_output_are_replaced(server: Server) -> None:
    events = await run_script(server, {"tool_calls": [call("binary")]}, {"say": "tool_results"})
    assert kind(events[-1]) == "run_completed"
    assert answer(events) == "binary: \x7fELF\ufffd\x01"


async def test_tool_choice_none_offers_no_tools(server: Server) -> None:
    events = await run_script(server, {"say": "tools"}, tool_choice="none")
    assert answer(events) == "tools: none (choice: none)"


async def test_per_run_tools_limit_what_is_offered(server: Server) -> None:
    events = await run_script(server, {"say": "tools"}, tools=["calculator"])
    assert answer(events) == "tools: calculator (choice: auto)"


async def test_a_tool_outside_the_runs_tools_is_not_run(server: Server) -> None:
    events = await run_script(
        server,
        {"tool_calls": [call("current_time")]},
        {"say": "tool_results"},
        tools=["calculator"],
    )
    assert answer(events) == "current_time: error: tool 'current_time' is not available in this run"


async def test_tool_choice_may_name_a_tool(server: Server) -> None:
    events = await run_script(server, {"say": "tools"}, tool_choice="calculator")
    assert answer(events).endswith("(choice: calculator)")


async def test_a_forced_tool_choice_binds_until_a_tool_has_run(server: Server) -> None:
    events = await run_script(
        server,
        {"tool_calls": [call("calculator", expression="12*7")]},
        {"say": "tools"},
        tool_choice="calculator",
    )
    assert answer(events).endswith("(choice: none)")  # the model answers from the result
    assert kind(events[-1]) == "run_completed"


async def test_a_required_tool_choice_becomes_auto_once_a_tool_has_run(server: Server) -> None:
    events = await run_script(
        server,
        {"tool_calls": [call("calculator", expression="1+1")]},
        {"say": "tools"},
        tool_choice="required",
    )
    assert answer(events).endswith("(choice: auto)")


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"tool_choice": "no_such_tool"}, "tool_choice"),
        ({"tools": ["no_such_tool"]}, "tools"),
        ({"tools": ["calculator"], "tool_choice": "current_time"}, "tool_choice"),
        ({"max_iterations": 5000}, "max_iterations"),
    ],
)
async def test_bad_tool_options_are_invalid(
    server: Server, fields: dict[str, object], field: str
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await server.runs.CreateRun(create_request("x", **fields))  # type: ignore[arg-type]
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field in (err.value.details() or "")


async def test_instructions_reach_the_model_and_the_run_record(server: Server) -> None:
    events = await run_script(
        server, {"say": "instructions"}, instructions="Answer in French.", max_iterations=3
    )
    assert answer(events) == "Answer in French."
    record = (await server.runs.GetRun(pb.GetRunRequest(run_id=events[0].run_id))).run
    assert (record.instructions, record.max_iterations, record.tool_choice) == (
        "Answer in French.",
        3,
        "auto",
    )


async def test_three_identical_calls_are_a_doom_loop(server: Server) -> None:
    same = {"tool_calls": [call("calculator", expression="1+1")]}
    events = await run_script(server, same, same, same, {"text": "never"})
    kinds = [kind(e) for e in events]
    assert kinds[-3:] == ["doom_loop_detected", "tool_message_committed", "run_failed"]
    assert "calculator" in events[-3].doom_loop_detected.description
    assert "doom loop" in events[-1].run_failed.error
    assert kinds.count("tool_execution_started") == 2  # the third call never runs


async def test_a_repeated_two_cycle_is_a_doom_loop(server: Server) -> None:
    a = {"tool_calls": [call("calculator", expression="1+1")]}
    b = {"tool_calls": [call("current_time")]}
    events = await run_script(server, a, b, a, b, a, b, {"text": "never"})
    assert [kind(e) for e in events][-3:] == [
        "doom_loop_detected",
        "tool_message_committed",
        "run_failed",
    ]
    assert "cycle" in events[-3].doom_loop_detected.description


async def test_three_calls_with_different_arguments_are_not_a_doom_loop(server: Server) -> None:
    steps = [{"tool_calls": [call("calculator", expression=f"{i}+1")]} for i in range(3)]
    events = await run_script(server, *steps, {"text": "fine"})
    assert "doom_loop_detected" not in [kind(e) for e in events]
    assert kind(events[-1]) == "run_completed"


async def test_max_iterations_ends_the_run_saying_so(server: Server) -> None:
    steps = [{"tool_calls": [call("calculator", expression=f"{i}*2")]} for i in range(5)]
    events = await run_script(server, *steps, max_iterations=2)
    assert kind(events[-1]) == "run_failed"
    assert "max iterations" in events[-1].run_failed.error
    assert [e.model_started.iteration for e in events if kind(e) == "model_started"] == [1, 2]


async def test_cancel_stops_a_running_tool(server: Server) -> None:
    request = create_request(
        script({"tool_calls": [call("slow_unsafe", seconds=20)]}), model="script"
    )
    stream = server.runs.CreateRunStream(request)
    seen = []
    async for event in stream:
        seen.append(event)
        if kind(event) == "tool_execution_started":
            break
    began = time.monotonic()
    await server.runs.CancelRun(pb.CancelRunRequest(run_id=seen[0].run_id))
    rest = [event async for event in stream]
    assert time.monotonic() - began < 1.0
    # The unanswered call gets an error result, so the session's transcript stays well-formed.
    assert [kind(e) for e in rest] == [
        "tool_execution_finished",  # cancelled: cut, its outcome unknown
        "tool_message_committed",
        "run_cancelled",
    ]


async def test_a_later_run_sees_earlier_tool_calls_and_results(server: Server) -> None:
    first = await run_script(server, {"tool_calls": [call("calculator", expression="6*7")]})
    session_id = first[0].run_started.session_id
    second = await run_script(server, {"say": "history"}, session_id=session_id)
    assert answer(second) == "user assistant[calculator] tool[calculator] assistant user"


async def test_a_run_ended_by_a_doom_loop_leaves_no_call_unanswered(server: Server) -> None:
    same = {"tool_calls": [call("calculator", expression="1+1")]}
    failed = await run_script(server, same, same, same)
    assert kind(failed[-1]) == "run_failed"
    session_id = failed[0].run_started.session_id
    later = await run_script(server, {"say": "tool_results"}, session_id=session_id)
    history = await run_script(server, {"say": "history"}, session_id=session_id)
    assert kind(later[-1]) == "run_completed"
    assert answer(history).count("assistant[calculator] tool[calculator]") == 3


async def test_plugin_tools_are_listed_and_run(server: Server) -> None:
    assert {"slow_safe", "explode", "calculator", "current_time"} <= set(server.app.tools.names())
    events = await run_script(
        server, {"tool_calls": [call("slow_safe", seconds=0)]}, {"say": "tool_results"}
    )
    assert answer(events) == "slow_safe: slept 0"


def contexts(events: list[pb.AgentEvent]) -> list[dict[str, object]]:
    """What each `whoami` tool of the run's last turn said of its context."""
    return [json.loads(line.split(": ", 1)[1]) for line in answer(events).splitlines()]


async def test_a_tool_that_asks_for_its_context_gets_the_run_the_call_and_a_deadline(
    server: Server,
) -> None:
    began = datetime.now(UTC)
    first = await run_script(
        server, {"tool_calls": [call("whoami"), call("whoami_too")]}, {"say": "tool_results"}
    )
    run_id, session_id = first[0].run_id, first[0].run_started.session_id
    second = await run_script(
        server, {"tool_calls": [call("whoami")]}, {"say": "tool_results"}, session_id=session_id
    )
    ended = datetime.now(UTC)
    whoami, whoami_too = contexts(first)
    again = contexts(second)[0]
    for seen, tool, timeout_s in ((whoami, "whoami", 5), (whoami_too, "whoami_too", 7)):
        assert seen["tool_name"] == tool
        assert (seen["run_id"], seen["session_id"]) == (run_id, session_id)
        assert (seen["tenant"], seen["principal"], seen["attempt"]) == (DEFAULT_TENANT, "", 1)
        key = idempotency_key(DEFAULT_TENANT, run_id, str(seen["call_id"]))
        assert seen["idempotency_key"] == key
        deadline = datetime.fromisoformat(str(seen["deadline"]))
        ahead = timedelta(seconds=timeout_s)
        assert began + ahead <= deadline <= ended + ahead
        assert seen["current_agrees"] is True  # current_tool_context() says the same
    assert whoami["call_id"] != whoami_too["call_id"]
    assert whoami["idempotency_key"] != whoami_too["idempotency_key"]
    assert whoami["execution_id"] != whoami_too["execution_id"]
    # The next run's first call has the same call id, but it is another run's call.
    assert (again["run_id"], again["call_id"]) == (second[0].run_id, whoami["call_id"])
    assert again["idempotency_key"] != whoami["idempotency_key"]


async def test_a_tool_that_does_not_ask_for_a_context_runs_as_before(server: Server) -> None:
    events = await run_script(
        server, {"tool_calls": [call("slow_unsafe", seconds=0)]}, {"say": "tool_results"}
    )
    assert answer(events) == "slow_unsafe: slept 0"


async def test_a_retryable_error_runs_the_call_again_as_its_policy_allows(tmp_path: Path) -> None:
    policies = {"flaky": {"max_attempts": 3, "backoff_initial_s": 0.01, "backoff_max_s": 0.02}}
    server = await start_server_with_plugins(fast_settings(tmp_path, tool_policies=policies))
    try:
        calls = [
            {"name": "flaky", "arguments": {"key": key, "fail_times": fails}}
            for key, fails in (("twice", 2), ("always", 5))
        ]
        steps = script({"tool_calls": calls}, {"say": "tool_results"})
        events = await collect(server.runs.CreateRunStream(create_request(steps, model="script")))
    finally:
        await stop_server(server)
    assert kind(events[-1]) == "run_completed"
    starts = [e.tool_execution_started for e in events if kind(e) == "tool_execution_started"]
    assert [(s.call_id, s.attempt) for s in starts] == [
        ("call_1_1", 1), ("call_1_1", 2), ("call_1_1", 3),
        ("call_1_2", 1), ("call_1_2", 2), ("call_1_2", 3),
    ]  # fmt: skip
    retries = [e.tool_retry_scheduled for e in events if kind(e) == "tool_retry_scheduled"]
    assert [r.next_attempt for r in retries] == [2, 3, 2, 3]
    assert "the backend is busy" in retries[0].reason
    said = "".join(e.text_delta.delta for e in events if kind(e) == "text_delta")
    # The model sees one result per call: the last attempt's.
    assert said.count("flaky:") == 2
    assert "done at call 3" in said and "the backend is busy (call 3)" in said
