"""Runs that wait on several replicas of one PostgreSQL: the answer may reach any of them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from behest._proto.agent.v1 import common_pb2 as c
from behest._proto.agent.v1 import run_pb2 as pb
from tests.e2e.test_waiting import CALC, ECHO_RESULTS, allow, approved_calculator, rest_of, until
from tests.support import Server, fast_settings, kind, start_server, stop_server


@pytest.fixture
async def replicas(tmp_path: Path, postgres_url: str) -> AsyncIterator[tuple[Server, Server]]:
    started = []
    try:
        for node in ("replica-a", "replica-b"):
            settings = fast_settings(tmp_path / node, database_url=postgres_url, node_id=node)
            started.append(await start_server(settings))
        yield started[0], started[1]
    finally:
        for server in started:
            await stop_server(server)


async def test_an_answer_through_another_replica_takes_the_run_up_there(
    replicas: tuple[Server, Server],
) -> None:
    a, b = replicas
    stream = a.runs.CreateRunStream(approved_calculator({"tool_calls": [CALC]}, ECHO_RESULTS))
    request = (await until(stream, "approval_requested"))[-1]
    run_id = request.run_id
    pending = await b.runs.ListPendingCalls(pb.ListPendingCallsRequest(run_id=run_id))
    assert [p.call.id for p in pending.calls] == [request.approval_requested.call.id]
    await b.runs.SubmitApprovals(allow(run_id, request.approval_requested.call.id))
    through_b = await rest_of(b.runs, run_id, request.sequence)
    assert kind(through_b[-1]) == "run_completed"
    assert [kind(e) for e in through_b].count("tool_execution_started") == 1
    async with asyncio.timeout(10):  # the creating replica's stream follows it there too
        through_a = [e async for e in stream]
    assert through_a == through_b
    everything = await rest_of(a.runs, run_id, 0)
    assert [e.sequence for e in everything] == list(range(1, len(everything) + 1))


async def test_a_waiting_run_is_cancelled_through_any_replica(
    replicas: tuple[Server, Server],
) -> None:
    a, b = replicas
    stream = a.runs.CreateRunStream(approved_calculator({"tool_calls": [CALC]}))
    request = (await until(stream, "approval_requested"))[-1]
    reply = await b.runs.CancelRun(pb.CancelRunRequest(run_id=request.run_id))
    assert reply.status == c.RUN_STATUS_CANCELLED
    async with asyncio.timeout(10):
        after = [e async for e in stream]
    assert [kind(e) for e in after] == ["tool_message_committed", "run_cancelled"]
