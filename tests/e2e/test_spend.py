"""Spend (issue 15): failure codes, exact costs, budgets and usage, through a real server with
the `script` model (which plays exact token counts with its `usage` step field)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import grpc
import pytest

from behest._proto.agent.v1 import run_pb2 as pb
from behest._proto.agent.v1 import run_pb2_grpc as rpc
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

CALC = {"name": "calculator", "arguments": {"expression": "1+1"}}
# Prices per million tokens: exact decimals, so costs are checked to the last digit.
PRICES = {
    "input_price": "1.25",
    "output_price": "10",
    "cached_input_price": "0.125",
    "cache_write_price": "1.5",
}
PRICED = {
    "providers": {
        "priced": {
            "type": "local",
            "currency": "EUR",
            "models": {"script": PRICES, "echo": PRICES},
        }
    }
}


def usage(input: int, output: int, cached: int = 0, write: int = 0) -> dict[str, int]:
    return {"input": input, "output": output, "cached_input": cached, "cache_write": write}


def priced(*steps: dict[str, object], **fields: Any) -> pb.CreateRunRequest:
    return create_request(script(*steps), model="script", provider="priced", **fields)


def cost_of(input: int, output: int, cached: int = 0, write: int = 0) -> Decimal:
    p = {k: Decimal(v) for k, v in PRICES.items()}
    return (
        input * p["input_price"]
        + output * p["output_price"]
        + cached * p["cached_input_price"]
        + write * p["cache_write_price"]
    ) / 1_000_000


@pytest.fixture
async def spend_server(tmp_path: Path) -> AsyncIterator[Server]:
    settings = fast_settings(tmp_path, provider_max_attempts=2).with_tables(PRICED, source="test")
    running = await start_server(settings)
    try:
        yield running
    finally:
        await stop_server(running)


async def ended(stub: rpc.RunServiceStub, request: pb.CreateRunRequest) -> list[pb.AgentEvent]:
    return await collect(stub.CreateRunStream(request))


# --- failure codes ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("steps", "fields", "code"),
    [
        ([{"tool_calls": [CALC]}, {"tool_calls": [CALC]}], {"max_iterations": 1}, "MAX_ITERATIONS"),
        ([{"tool_calls": [CALC]}] * 3, {}, "DOOM_LOOP"),
        ([{"error": "rate_limited"}] * 2, {}, "RATE_LIMITED"),
        ([{"error": "unavailable"}] * 2, {}, "PROVIDER_UNAVAILABLE"),
        ([{"error": "bad_request"}], {}, "PROVIDER_ERROR"),
        ([{"error": "context_overflow"}] * 3, {}, "CONTEXT_OVERFLOW"),
        ([{"error": "authentication"}], {}, "AUTHENTICATION"),
    ],
)
async def test_every_failure_says_why_with_a_code(
    spend_server: Server, steps: list[dict[str, object]], fields: dict[str, Any], code: str
) -> None:
    request = create_request(script(*steps), model="script", **fields)
    events = await ended(spend_server.runs, request)
    assert kind(events[-1]) == "run_failed", [kind(e) for e in events]
    assert pb.FailureCode.Name(events[-1].run_failed.code) == f"FAILURE_CODE_{code}"
    run = (await spend_server.runs.GetRun(pb.GetRunRequest(run_id=events[0].run_id))).run
    assert pb.FailureCode.Name(run.failure_code) == f"FAILURE_CODE_{code}"
    assert run.error == events[-1].run_failed.error


async def test_a_run_whose_provider_was_removed_fails_with_configuration(tmp_path: Path) -> None:
    # A run waits for an approval; the server comes back without the run's provider.
    extra = {"providers": {"extra": {"type": "local"}}}
    first = await start_server(fast_settings(tmp_path).with_tables(extra, source="test"))
    try:
        request = create_request(script({"tool_calls": [CALC]}), provider="extra", model="script")
        request.approval_required_tools.append("calculator")
        stream = first.runs.CreateRunStream(request)
        events = []
        async for event in stream:
            events.append(event)
            if kind(event) == "approval_requested":
                break
        stream.cancel()
    finally:
        await stop_server(first)
    second = await start_server(fast_settings(tmp_path))
    try:
        call = events[-1].approval_requested.call
        await second.runs.SubmitApprovals(
            pb.SubmitApprovalsRequest(
                run_id=events[0].run_id,
                approvals=[pb.ApprovalAnswer(call_id=call.id, decision=pb.APPROVAL_DECISION_ALLOW)],
            )
        )
        rest = await collect(
            second.runs.WatchRunEvents(
                pb.WatchRunEventsRequest(run_id=events[0].run_id, last_event_id=events[-1].sequence)
            )
        )
    finally:
        await stop_server(second)
    failed = rest[-1].run_failed
    assert pb.FailureCode.Name(failed.code) == "FAILURE_CODE_CONFIGURATION"
    assert "extra" in failed.error


async def test_a_cancel_says_who_and_why(spend_server: Server) -> None:
    stream = spend_server.runs.CreateRunStream(
        create_request(script({"text": "slow " * 50, "delay_ms": 50}), model="script")
    )
    first = await anext(aiter(stream))
    await spend_server.runs.CancelRun(pb.CancelRunRequest(run_id=first.run_id, reason="enough"))
    events = [e async for e in stream]
    cancelled = events[-1].run_cancelled
    assert (cancelled.cancelled_by, cancelled.reason, cancelled.source) == (
        "anonymous",
        "enough",
        pb.CANCEL_SOURCE_CALLER,
    )


async def test_tool_executions_say_whether_they_failed(spend_server: Server) -> None:
    bad = {"name": "calculator", "arguments": {"expression": "1/0"}}
    events = await ended(
        spend_server.runs, create_request(script({"tool_calls": [CALC, bad]}), model="script")
    )
    finished = [e.tool_execution_finished for e in events if kind(e) == "tool_execution_finished"]
    assert [f.is_error for f in finished] == [False, True]


# --- cost -------------------------------------------------------------------------------


async def test_costs_add_up_exactly_from_the_configured_prices(spend_server: Server) -> None:
    steps = [
        {"tool_calls": [CALC], "usage": usage(1000, 50, cached=4000, write=300)},
        {"text": "done", "usage": usage(777, 33, cached=5000)},
    ]
    events = await ended(spend_server.runs, priced(*steps))
    assert kind(events[-1]) == "run_completed"
    recorded = [e.usage_recorded for e in events if kind(e) == "usage_recorded"]
    assert [(u.usage.cached_input_tokens, u.usage.cache_write_tokens) for u in recorded] == [
        (4000, 300),
        (5000, 0),
    ]
    first, second = cost_of(1000, 50, 4000, 300), cost_of(777, 33, 5000)
    assert [Decimal(u.cost.amount) for u in recorded] == [first, second]
    assert {u.cost.currency for u in recorded} == {"EUR"}
    assert recorded[0].usage.total_tokens == 1000 + 50 + 4000 + 300
    run_id = events[0].run_id
    output = await spend_server.runs.GetRunOutput(pb.GetRunOutputRequest(run_id=run_id))
    assert Decimal(output.output.total_cost.amount) == first + second
    assert output.output.total_cost.currency == "EUR"
    assert output.output.total_usage.cached_input_tokens == 9000
    record = (await spend_server.runs.GetRun(pb.GetRunRequest(run_id=run_id))).run
    assert Decimal(record.total_cost.amount) == first + second


async def test_runs_of_models_without_prices_have_no_cost(spend_server: Server) -> None:
    events = await ended(
        spend_server.runs, create_request(script({"text": "free"}), model="script")
    )
    recorded = next(e.usage_recorded for e in events if kind(e) == "usage_recorded")
    assert not recorded.HasField("cost")
    output = await spend_server.runs.GetRunOutput(pb.GetRunOutputRequest(run_id=events[0].run_id))
    assert not output.output.HasField("total_cost")


async def test_usage_totals_tokens_and_cost_per_day_and_session(spend_server: Server) -> None:
    first = await ended(spend_server.runs, priced({"text": "a", "usage": usage(100, 10)}))
    session_id = first[0].run_started.session_id
    await ended(
        spend_server.runs,
        priced({"text": "b", "usage": usage(200, 20, cached=1000)}, session_id=session_id),
    )
    await ended(spend_server.runs, priced({"text": "c", "usage": usage(400, 40)}))
    usage_stub = rpc.UsageServiceStub(spend_server.channel)
    today = datetime.now(UTC).date().isoformat()
    session = await usage_stub.GetUsage(pb.GetUsageRequest(session_id=session_id))
    assert [(d.day, d.runs) for d in session.days] == [(today, 2)]
    assert Decimal(session.total_cost.amount) == cost_of(100, 10) + cost_of(200, 20, 1000)
    assert session.total_usage.total_tokens == 100 + 10 + 200 + 20 + 1000
    everything = await usage_stub.GetUsage(pb.GetUsageRequest(from_day=today, to_day=today))
    assert everything.days[0].runs == 3
    assert Decimal(everything.total_cost.amount) == (
        cost_of(100, 10) + cost_of(200, 20, 1000) + cost_of(400, 40)
    )
    for bad in (
        pb.GetUsageRequest(from_day="yesterday"),
        pb.GetUsageRequest(from_day="2026-02-30"),
        pb.GetUsageRequest(from_day="2026-12-02", to_day="2026-12-01"),
        pb.GetUsageRequest(from_day="2020-01-01", to_day="2026-01-01"),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await usage_stub.GetUsage(bad)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT


# --- budgets ----------------------------------------------------------------------------


def exceeded(events: list[pb.AgentEvent]) -> pb.BudgetExceededEvent:
    assert kind(events[-1]) == "run_failed", [kind(e) for e in events]
    assert events[-1].run_failed.code == pb.FAILURE_CODE_BUDGET_EXCEEDED
    return next(e.budget_exceeded for e in events if kind(e) == "budget_exceeded")


def model_calls(events: list[pb.AgentEvent]) -> int:
    return [kind(e) for e in events].count("model_started")


async def test_a_token_budget_stops_a_run_within_one_model_call(spend_server: Server) -> None:
    steps = [
        {
            "tool_calls": [{"name": "calculator", "arguments": {"expression": f"{i}+1"}}],
            "usage": usage(300, 100),
        }
        for i in range(10)
    ]
    request = create_request(script(*steps), model="script", budget=pb.RunBudget(max_tokens=1000))
    events = await ended(spend_server.runs, request)
    over = exceeded(events)
    assert (over.budget, over.limit, over.used) == (pb.BUDGET_KIND_TOKENS, "1000", "1200")
    assert model_calls(events) == 3  # 400 tokens each: the third call crossed 1000
    assert [kind(e) for e in events].count("tool_execution_started") == 2


async def test_a_cost_budget_stops_a_run_within_one_model_call(spend_server: Server) -> None:
    steps = [{"tool_calls": [CALC], "usage": usage(10_000, 1000)}] + [
        {
            "tool_calls": [{"name": "calculator", "arguments": {"expression": f"{i}*2"}}],
            "usage": usage(10_000, 1000),
        }
        for i in range(10)
    ]
    one = cost_of(10_000, 1000)  # 0.0225
    request = priced(*steps, budget=pb.RunBudget(max_cost="0.05"))
    events = await ended(spend_server.runs, request)
    over = exceeded(events)
    assert over.budget == pb.BUDGET_KIND_COST
    assert (Decimal(over.limit), Decimal(over.used)) == (Decimal("0.05"), 3 * one)
    assert model_calls(events) == 3


async def test_a_tool_call_budget_ends_the_run_before_its_calls_run(spend_server: Server) -> None:
    three = [{"name": "calculator", "arguments": {"expression": f"{i}+2"}} for i in range(3)]
    request = create_request(
        script({"tool_calls": three[:1]}, {"tool_calls": three}),
        model="script",
        budget=pb.RunBudget(max_tool_calls=2),
    )
    events = await ended(spend_server.runs, request)
    over = exceeded(events)
    assert (over.budget, over.limit, over.used) == (pb.BUDGET_KIND_TOOL_CALLS, "2", "4")
    assert [kind(e) for e in events].count("tool_execution_started") == 1


async def test_a_wall_clock_budget_ends_a_slow_run(spend_server: Server) -> None:
    request = create_request(
        script({"tool_calls": [CALC], "delay_ms": 1200}, {"text": "too late"}),
        model="script",
        budget=pb.RunBudget(max_wall_seconds=1),
    )
    events = await ended(spend_server.runs, request)
    over = exceeded(events)
    assert (over.budget, over.limit) == (pb.BUDGET_KIND_WALL_TIME, "1")
    assert model_calls(events) == 1


async def test_a_cost_budget_needs_prices(spend_server: Server) -> None:
    request = create_request("hi", model="script", budget=pb.RunBudget(max_cost="1"))
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await spend_server.runs.CreateRun(request)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "input_price" in (refused.value.details() or "")
    for bad in ("-1", "1e3", "0.1.2", "NaN", "x"):
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await spend_server.runs.CreateRun(
                priced({"text": "x"}, budget=pb.RunBudget(max_cost=bad))
            )
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, bad


async def test_tenant_defaults_and_daily_caps_come_from_the_settings(tmp_path: Path) -> None:
    tables = {**PRICED, "run_max_tokens": 500, "daily_max_tokens": 900}
    running = await start_server(fast_settings(tmp_path).with_tables(tables, source="test"))
    try:
        steps = [{"tool_calls": [CALC], "usage": usage(300, 100)}, {"usage": usage(300, 0)}]
        first = await ended(running.runs, create_request(script(*steps), model="script"))
        assert exceeded(first).budget == pb.BUDGET_KIND_TOKENS  # the default: 500
        own = create_request(
            script({"text": "ok", "usage": usage(300, 0)}),
            model="script",
            budget=pb.RunBudget(max_tokens=10_000),
        )
        second = await ended(running.runs, own)
        assert kind(second[-1]) == "run_completed"  # its own budget: 800 + 300 > 900 later
        third = await ended(running.runs, create_request(script({"text": "no"}), model="script"))
        over = exceeded(third)
        assert (over.budget, over.limit) == (pb.BUDGET_KIND_DAILY_TOKENS, "900")
        assert model_calls(third) == 0
    finally:
        await stop_server(running)


async def test_a_budget_reads_back_on_the_run(spend_server: Server) -> None:
    budget = pb.RunBudget(max_tokens=5, max_tool_calls=2, max_wall_seconds=60, max_cost="0.25")
    created = await spend_server.runs.CreateRun(priced({"text": "x"}, budget=budget))
    run = (await spend_server.runs.GetRun(pb.GetRunRequest(run_id=created.run_id))).run
    assert run.budget == budget


async def test_a_token_budget_clamps_what_the_model_may_answer(spend_server: Server) -> None:
    steps = [{"tool_calls": [CALC], "usage": usage(700, 0)}, {"say": "limits"}]
    request = create_request(script(*steps), model="script", budget=pb.RunBudget(max_tokens=1000))
    events = await ended(spend_server.runs, request)
    said = "".join(e.text_delta.delta for e in events if kind(e) == "text_delta")
    assert "max_output_tokens: 300" in said  # 1,000 - 700 left
