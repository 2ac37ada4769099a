"""Workers and replicas on PostgreSQL (issue 25): a worker connected to one replica serves the
runs another executes, and when that one is SIGKILLed the run moves on with the worker's
result, taken exactly once; its task's question reaches the run's user, and the answer the
worker, across the two."""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path

import grpc
import pytest

from behest._proto.agent.v1 import run_pb2 as pb
from tests.e2e.test_elicitation import answer
from tests.e2e.test_replicas import (
    LEASE_S,
    read_rest,
    read_until,
    script_run,
    start_replicas,
)
from tests.stored import fresh_database
from tests.support import kind, script
from tests.workers.raw import BOOK, GUESTS, LOOKUP, RawWorker


@pytest.fixture
async def database(postgres_url: str) -> AsyncIterator[str]:
    """A fresh database for this test's replicas."""
    async with fresh_database(postgres_url, "behest_worker_replicas") as url:
        yield url


# Replicas look for other replicas' tasks only every 30 s: within this test, a task queued
# on A reaches the worker on B through NOTIFY alone.
FAST = {
    "BEHEST_RUN_LEASE_S": str(LEASE_S),
    "BEHEST_WORKER_HEARTBEAT_S": "1",
    "BEHEST_WORKER_POLL_S": "30",
}


async def test_a_worker_on_b_serves_a_run_on_a_and_its_result_outlives_a_kill_of_a(
    tmp_path: Path, database: str
) -> None:
    steps = script(
        {"tool_calls": [{"name": "lookup_order", "arguments": {"order_id": "A-1"}}]},
        {"say": "tool_results"},
    )
    async with AsyncExitStack() as stack:
        a, b = await start_replicas(
            stack, [tmp_path / "a", tmp_path / "b"], BEHEST_DATABASE_URL=database, **FAST
        )
        worker = RawWorker(b.channel, [LOOKUP], name="orders")
        await worker.welcome()
        created = await a.runs.CreateRun(script_run(steps))
        stream = b.runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=created.run_id))
        task = await worker.next()  # A's run, queued there, taken through B
        head = await read_until(
            stream, lambda seen: bool(seen) and kind(seen[-1]) == "tool_execution_started"
        )
        a.process.send_signal(signal.SIGKILL)
        await a.process.wait()
        ack = await worker.result(task, "in transit")
        async with asyncio.timeout(LEASE_S + 10):
            rest = await read_rest(stream)
        twice = await worker.result(task, "in transit")
        await worker.close()
    events = head + rest
    assert ack.accepted, ack.reason
    assert not twice.accepted
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    assert kind(events[-1]) == "run_completed"
    assert [kind(e) for e in events].count("tool_message_committed") == 1
    said = "".join(e.text_delta.delta for e in events if kind(e) == "text_delta")
    assert said == "lookup_order: in transit"


async def test_a_stopping_replica_sends_its_workers_elsewhere_and_their_results_count(
    tmp_path: Path, database: str
) -> None:
    steps = script(
        {"tool_calls": [{"name": "lookup_order", "arguments": {"order_id": "A-2"}}]},
        {"say": "tool_results"},
    )
    async with AsyncExitStack() as stack:
        a, b = await start_replicas(
            stack, [tmp_path / "a", tmp_path / "b"], BEHEST_DATABASE_URL=database, **FAST
        )
        on_b = RawWorker(b.channel, [LOOKUP], name="orders")
        await on_b.welcome()
        created = await a.runs.CreateRun(script_run(steps))
        task = await on_b.next()
        b.process.send_signal(signal.SIGTERM)  # B stops: its workers' streams end
        with pytest.raises(grpc.aio.AioRpcError) as ended:
            await on_b.next()
        await on_b.close()
        on_a = RawWorker(a.channel, [LOOKUP], name="orders")  # the worker, reconnected to A
        await on_a.welcome()
        ack = await on_a.result(task, "delivered")
        stream = a.runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=created.run_id))
        async with asyncio.timeout(20):
            events = await read_rest(stream)
        await on_a.close()
    assert ended.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "reconnect" in (ended.value.details() or "")
    assert ack.accepted, ack.reason
    assert kind(events[-1]) == "run_completed"
    assert "".join(e.text_delta.delta for e in events if kind(e) == "text_delta") == (
        "lookup_order: delivered"
    )


async def test_a_worker_on_b_asks_the_user_of_a_run_on_a_and_gets_the_answer_through_b(
    tmp_path: Path, database: str
) -> None:
    """Only A writes the run's events: B stores the question, A puts it to the user (told by
    NOTIFY: nobody polls within this test), the answer comes through B's RunService, A stores
    it against the question and B sends it to the worker."""
    steps = script(
        {"tool_calls": [{"name": "book_table", "arguments": {"city": "Lisbon"}}]},
        {"say": "tool_results"},
    )
    async with AsyncExitStack() as stack:
        a, b = await start_replicas(
            stack, [tmp_path / "a", tmp_path / "b"], BEHEST_DATABASE_URL=database, **FAST
        )
        worker = RawWorker(b.channel, [BOOK], name="booker")
        await worker.welcome()
        created = await a.runs.CreateRun(script_run(steps))
        stream = b.runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=created.run_id))
        task = await worker.next()  # A's run, taken through B
        await worker.ask(task, 1, "How many guests in Lisbon?", GUESTS)
        head = await read_until(
            stream, lambda seen: bool(seen) and kind(seen[-1]) == "elicitation_requested"
        )
        requested = head[-1].elicitation_requested
        await b.runs.SubmitElicitationAnswers(
            answer(created.run_id, requested.elicitation_id, guests=6)
        )
        async with asyncio.timeout(20):
            answered = await worker.next()
        ack = await worker.result(task, f"a table for {json.loads(answered.content)['guests']}")
        async with asyncio.timeout(20):
            rest = await read_rest(stream)
        await worker.close()
    events = head + rest
    assert (answered.action, answered.error) == (pb.ELICITATION_ACTION_ACCEPT, "")
    assert ack.accepted, ack.reason
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    assert kind(events[-1]) == "run_completed"
    assert [kind(e) for e in events].count("elicitation_answered") == 1
    said = "".join(e.text_delta.delta for e in events if kind(e) == "text_delta")
    assert said == "book_table: a table for 6"
