"""A worker's tool asks the run's user a question (TaskContext.ask, WorkerAsk on the wire): the
run shows it as any tool's question (ElicitationRequested, a pending call of kind ELICITATION,
WAITING_FOR_INPUT), SubmitElicitationAnswers answers it, and the answer reaches the worker,
whose result reaches the model. With a real SDK worker process (tests/workers/orders.py
`book_table`) on SQLite and PostgreSQL, and a worker over the wire alone (tests/workers/raw.py)
for what the protocol promises: a question behest does not ask is answered with an error, and
one asked again after a reconnect is the same question, put to the user once."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from behest._proto.agent.v1 import common_pb2 as c
from behest._proto.agent.v1 import run_pb2 as pb
from behest._proto.agent.v1 import worker_pb2 as w
from tests.e2e.test_elicitation import answer, until
from tests.e2e.test_worker_processes import calling, said, serving, worker_process
from tests.support import (
    Server,
    collect,
    create_request,
    fast_settings,
    kind,
    start_server,
    stop_server,
)
from tests.workers.raw import BOOK, GUESTS, RawWorker


@pytest.fixture
async def server(database_url: str, tmp_path: Path) -> AsyncIterator[Server]:
    """A server with quick worker leases and looks, on both stores."""
    overrides: dict[str, object] = {"worker_heartbeat_s": 0.2, "worker_poll_s": 0.05}
    if database_url:
        overrides["database_url"] = database_url
    running = await start_server(fast_settings(tmp_path, **overrides))
    try:
        yield running
    finally:
        await stop_server(running)


async def pending(server: Server, run_id: str) -> list[pb.PendingCall]:
    listed = await server.runs.ListPendingCalls(pb.ListPendingCallsRequest(run_id=run_id))
    return list(listed.calls)


async def test_a_worker_tool_asks_and_the_answer_reaches_it(server: Server) -> None:
    async with worker_process(server.address, "asking") as worker:
        await serving(server, "book_table")
        stream = server.runs.CreateRunStream(
            create_request(calling("book_table", city="Lisbon"), model="script")
        )
        await worker.started()
        requested = (await until(stream, "elicitation_requested")).elicitation_requested
        run_id = (await server.runs.ListRuns(pb.ListRunsRequest())).runs[0].id
        got = await server.runs.GetRun(pb.GetRunRequest(run_id=run_id))
        [question] = await pending(server, run_id)

        await server.runs.SubmitElicitationAnswers(
            answer(run_id, requested.elicitation_id, guests=4)
        )
        rest = await collect(stream)
    assert (requested.tool_name, requested.message) == ("book_table", "How many guests in Lisbon?")
    assert json.loads(requested.requested_schema)["required"] == ["guests"]
    assert got.run.status == c.RUN_STATUS_WAITING_FOR_INPUT
    assert question.kind == pb.PENDING_CALL_KIND_ELICITATION
    assert question.elicitation.elicitation_id == requested.elicitation_id
    assert question.elicitation.call_id == requested.call_id
    answered = next(e for e in rest if kind(e) == "elicitation_answered").elicitation_answered
    assert answered.action == pb.ELICITATION_ACTION_ACCEPT and not answered.replayed
    assert kind(rest[-1]) == "run_completed"
    assert said(rest) == "book_table: booked a table for 4 in Lisbon"


async def test_a_declined_question_reaches_the_worker_as_decline(server: Server) -> None:
    async with worker_process(server.address, "declined") as worker:
        await serving(server, "book_table")
        stream = server.runs.CreateRunStream(
            create_request(calling("book_table", city="Porto"), model="script")
        )
        await worker.started()
        requested = (await until(stream, "elicitation_requested")).elicitation_requested
        run_id = (await server.runs.ListRuns(pb.ListRunsRequest())).runs[0].id
        await server.runs.SubmitElicitationAnswers(
            answer(run_id, requested.elicitation_id, pb.ELICITATION_ACTION_DECLINE)
        )
        rest = await collect(stream)
    answered = next(e for e in rest if kind(e) == "elicitation_answered").elicitation_answered
    assert answered.action == pb.ELICITATION_ACTION_DECLINE
    assert kind(rest[-1]) == "run_completed"
    assert said(rest) == "book_table: not booked: the user chose decline"


async def test_a_question_asked_again_after_a_reconnect_is_put_to_the_user_once(
    tmp_path: Path,
) -> None:
    server = await start_server(fast_settings(tmp_path, worker_heartbeat_s=0.5))
    first = RawWorker(server.channel, [BOOK], name="booker")
    again: RawWorker | None = None
    try:
        await first.welcome()
        stream = server.runs.CreateRunStream(
            create_request(calling("book_table", city="Faro"), model="script")
        )
        task = await first.next()
        await first.ask(task, 1, "How many guests in Faro?", GUESTS)
        requested = (await until(stream, "elicitation_requested")).elicitation_requested
        run_id = (await server.runs.ListRuns(pb.ListRunsRequest())).runs[0].id
        await first.close()  # the stream breaks; the same worker reconnects and asks again
        again = RawWorker(server.channel, [BOOK], name="booker")
        await again.welcome()
        await again.ask(task, 1, "How many guests in Faro?", GUESTS)
        await again.ask(task, 1, "Another question under the same number?", GUESTS)
        another = await again.next()
        questions = await pending(server, run_id)
        await server.runs.SubmitElicitationAnswers(
            answer(run_id, requested.elicitation_id, guests=2)
        )
        answered = await again.next()
        ack = await again.result(task, f"a table for {json.loads(answered.content)['guests']}")
        rest = await collect(stream)
        watched = server.runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=run_id))
        events = await collect(watched)
    finally:
        await first.close()
        if again is not None:
            await again.close()
        await stop_server(server)
    assert "another question under this number" in another.error and another.number == 1
    assert len(questions) == 1
    assert (answered.execution_id, answered.number, answered.error) == (task.execution_id, 1, "")
    assert answered.action == pb.ELICITATION_ACTION_ACCEPT
    assert ack.accepted, ack.reason
    assert [kind(e) for e in events].count("elicitation_requested") == 1
    assert [kind(e) for e in events].count("elicitation_answered") == 1
    assert kind(rest[-1]) == "run_completed"
    assert said(rest) == "book_table: a table for 2"


async def test_a_question_behest_does_not_ask_is_answered_with_an_error(tmp_path: Path) -> None:
    server = await start_server(fast_settings(tmp_path, worker_heartbeat_s=0.5))
    worker = RawWorker(server.channel, [BOOK], name="careless")
    try:
        await worker.welcome()
        created = await server.runs.CreateRun(
            create_request(calling("book_table", city="Braga"), model="script")
        )
        task = await worker.next()
        refused = []
        for number, message, schema in [
            (1, "How many?", {"type": "array"}),
            (2, "How many?", "{not json"),
            (3, "How many?", {"type": "object", "properties": {"n": {"type": 7}}}),
            (4, "  ", GUESTS),
            (5, "x" * 17_000, GUESTS),
        ]:
            await worker.ask(task, number, message, schema)
            refused.append(await worker.next())
        stranger = w.WorkerTask(execution_id="no-such-execution", attempt=1)
        await worker.ask(stranger, 1, "How many?", GUESTS)
        unknown = await worker.next()
        questions = await pending(server, created.run_id)
        ack = await worker.result(task, "gave up asking")
    finally:
        await worker.close()
        await stop_server(server)
    assert [r.number for r in refused] == [1, 2, 3, 4, 5]
    assert all(r.action == pb.ELICITATION_ACTION_UNSPECIFIED for r in refused)
    assert 'must be of "type": "object"' in refused[0].error
    assert "the question's schema is not valid JSON" in refused[1].error
    assert "not a valid JSON Schema" in refused[2].error
    assert "needs a message" in refused[3].error
    assert "over 16384 bytes" in refused[4].error
    assert all(r.error.startswith("not asked: ") for r in refused)
    assert unknown.error == "not asked: no such task"
    assert questions == []
    assert ack.accepted, ack.reason
