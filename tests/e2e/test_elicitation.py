"""A running tool asks the user a question (MCP elicitation, through the real SDK over stdio):
the run waits, the question is listed, answered by RPC, checked against its schema, and the
answer reaches the MCP server, whose result reaches the model. On SQLite and PostgreSQL."""

from __future__ import annotations

import hashlib
import json
import secrets
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from behest._proto.agent.v1 import common_pb2 as c
from behest._proto.agent.v1 import execution_pb2 as x
from behest._proto.agent.v1 import execution_pb2_grpc as x_rpc
from behest._proto.agent.v1 import run_pb2 as pb
from behest._proto.agent.v1 import run_pb2_grpc as rpc
from tests.support import (
    ECHO_MCP_SERVER,
    Server,
    collect,
    create_request,
    echo_mcp,
    fast_settings,
    kind,
    script,
    served_with_echo_mcp,
    server_process,
    start_server,
    start_server_with_plugins,
    stop_server,
)

BOOK = script(
    {"tool_calls": [{"name": "echo__book", "arguments": {"city": "Lisbon"}}]},
    {"say": "tool_results"},
)


def echo_servers(timeout_s: float = 60) -> dict[str, object]:
    return echo_mcp(timeout_s=timeout_s)


@pytest.fixture
async def asking(database_url: str, tmp_path: Path) -> AsyncIterator[Server]:
    """A server with the echo MCP server (whose `book` tool asks), on both stores."""
    async with served_with_echo_mcp(tmp_path, database_url, timeout_s=60) as running:
        yield running


async def until(stream: AsyncIterator[pb.AgentEvent], wanted: str) -> pb.AgentEvent:
    async for event in stream:
        if kind(event) == wanted:
            return event
    raise AssertionError(f"the stream ended before {wanted}")


def answer(
    run_id: str, elicitation_id: str, action: int = pb.ELICITATION_ACTION_ACCEPT, **content: object
) -> pb.SubmitElicitationAnswersRequest:
    text = json.dumps(content) if action == pb.ELICITATION_ACTION_ACCEPT else ""
    item = pb.ElicitationAnswer(elicitation_id=elicitation_id, action=action, content=text)
    return pb.SubmitElicitationAnswersRequest(run_id=run_id, answers=[item])


def said(events: list[pb.AgentEvent]) -> str:
    last = max(i for i, e in enumerate(events) if kind(e) == "model_started")
    return "".join(e.text_delta.delta for e in events[last:] if kind(e) == "text_delta")


async def test_the_run_waits_for_the_answer_which_reaches_the_mcp_server(
    asking: Server,
) -> None:
    stream = asking.runs.CreateRunStream(create_request(BOOK, model="script"))
    requested = (await until(stream, "elicitation_requested")).elicitation_requested
    assert requested.tool_name == "echo__book"
    assert requested.message == "How many nights in Lisbon?"
    schema = json.loads(requested.requested_schema)
    assert schema["properties"]["nights"]["type"] == "integer"
    run_id = (await asking.runs.ListRuns(pb.ListRunsRequest())).runs[0].id

    got = await asking.runs.GetRun(pb.GetRunRequest(run_id=run_id))
    assert got.run.status == c.RUN_STATUS_WAITING_FOR_INPUT
    pending = (await asking.runs.ListPendingCalls(pb.ListPendingCallsRequest(run_id=run_id))).calls
    assert [p.kind for p in pending] == [pb.PENDING_CALL_KIND_ELICITATION]
    assert pending[0].elicitation.elicitation_id == requested.elicitation_id
    assert pending[0].elicitation.call_id == requested.call_id
    assert pending[0].elicitation.message == "How many nights in Lisbon?"

    reply = await asking.runs.SubmitElicitationAnswers(
        answer(run_id, requested.elicitation_id, nights=3, breakfast=True)
    )
    assert list(reply.waiting_call_ids) == []
    rest = [event async for event in stream]
    answered = next(e for e in rest if kind(e) == "elicitation_answered").elicitation_answered
    assert answered.action == pb.ELICITATION_ACTION_ACCEPT
    assert answered.elicitation_id == requested.elicitation_id
    assert not answered.timed_out and not answered.replayed
    assert kind(rest[-1]) == "run_completed"
    assert said(rest).startswith("echo__book: booked 3 night(s) in Lisbon with breakfast")
    again = answer(run_id, requested.elicitation_id, breakfast=True, nights=3)  # keys reordered
    assert list((await asking.runs.SubmitElicitationAnswers(again)).waiting_call_ids) == []


async def test_an_answer_that_breaks_the_schema_is_refused_and_the_question_still_waits(
    asking: Server,
) -> None:
    stream = asking.runs.CreateRunStream(create_request(BOOK, model="script"))
    requested = (await until(stream, "elicitation_requested")).elicitation_requested
    run_id = (await asking.runs.ListRuns(pb.ListRunsRequest())).runs[0].id
    for bad in ({"nights": "three"}, {"breakfast": True}, {"nights": 99}):
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await asking.runs.SubmitElicitationAnswers(
                answer(run_id, requested.elicitation_id, **bad)
            )
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "answers[0].content does not match the question's schema" in str(
            refused.value.details()
        )
    with pytest.raises(grpc.aio.AioRpcError) as unknown:
        await asking.runs.SubmitElicitationAnswers(answer(run_id, "no-such-question", nights=1))
    assert unknown.value.code() == grpc.StatusCode.NOT_FOUND
    pending = (await asking.runs.ListPendingCalls(pb.ListPendingCallsRequest(run_id=run_id))).calls
    assert len(pending) == 1  # nothing was stored: it still waits

    await asking.runs.SubmitElicitationAnswers(
        answer(run_id, requested.elicitation_id, pb.ELICITATION_ACTION_DECLINE)
    )
    rest = [event async for event in stream]
    assert kind(rest[-1]) == "run_completed"
    assert said(rest) == "echo__book: not booked: the user chose decline"
    with pytest.raises(grpc.aio.AioRpcError) as late:
        await asking.runs.SubmitElicitationAnswers(
            answer(run_id, requested.elicitation_id, nights=2)
        )
    assert late.value.code() == grpc.StatusCode.FAILED_PRECONDITION


async def test_an_unanswered_question_times_out_as_cancel(tmp_path: Path) -> None:
    server = await start_server(
        fast_settings(tmp_path, mcp=echo_servers(), elicitation_timeout_s=0.5)
    )
    try:
        stream = server.runs.CreateRunStream(create_request(BOOK, model="script"))
        events = [event async for event in stream]
    finally:
        await stop_server(server)
    answered = next(e for e in events if kind(e) == "elicitation_answered").elicitation_answered
    assert answered.timed_out and answered.action == pb.ELICITATION_ACTION_CANCEL
    assert answered.answered_by == ""
    assert kind(events[-1]) == "run_completed"
    assert said(events) == "echo__book: not booked: the user chose cancel"


async def test_a_question_outlives_neither_its_run_nor_a_cancel(asking: Server) -> None:
    stream = asking.runs.CreateRunStream(create_request(BOOK, model="script"))
    await until(stream, "elicitation_requested")
    run_id = (await asking.runs.ListRuns(pb.ListRunsRequest())).runs[0].id
    await asking.runs.CancelRun(pb.CancelRunRequest(run_id=run_id, reason="changed my mind"))
    rest = [event async for event in stream]
    assert kind(rest[-1]) == "run_cancelled"
    pending = await asking.runs.ListPendingCalls(pb.ListPendingCallsRequest(run_id=run_id))
    assert list(pending.calls) == []


def settings_file(tmp_path: Path, database_url: str) -> Path:
    path = tmp_path / "behest.toml"
    url = f'database_url = "{database_url}"\n' if database_url else ""
    path.write_text(
        url
        + f'[mcp.servers.echo]\ncommand = "{sys.executable}"\nargs = ["{ECHO_MCP_SERVER}"]\n'
        + "timeout_s = 120\n"
    )
    return path


async def watch_until(stub: rpc.RunServiceStub, run_id: str, wanted: str) -> pb.AgentEvent:
    watch = stub.WatchRunEvents(pb.WatchRunEventsRequest(run_id=run_id))
    event = await until(watch, wanted)
    watch.cancel()
    return event


async def test_a_question_survives_kill_9_and_its_answer_reaches_the_restarted_tool(
    tmp_path: Path, database_url: str
) -> None:
    # PostgreSQL: another process may be alive, so the dead one's lease must lapse first.
    config = {
        "BEHEST_CONFIG": str(settings_file(tmp_path, database_url)),
        "BEHEST_RUN_LEASE_S": "3",
    }
    async with server_process(tmp_path / "data", **config) as (process, address):
        async with grpc.aio.insecure_channel(address) as channel:
            stub = rpc.RunServiceStub(channel)
            run_id = (await stub.CreateRun(create_request(BOOK, model="script"))).run_id
            asked = (await watch_until(stub, run_id, "elicitation_requested")).elicitation_requested
        process.send_signal(signal.SIGKILL)
        await process.wait()
    async with server_process(tmp_path / "data", **config) as (_, address):
        async with grpc.aio.insecure_channel(address) as channel:
            stub = rpc.RunServiceStub(channel)
            got = await stub.GetRun(pb.GetRunRequest(run_id=run_id))
            assert got.run.status == c.RUN_STATUS_WAITING_FOR_INPUT
            pending = await stub.ListPendingCalls(pb.ListPendingCallsRequest(run_id=run_id))
            assert [p.elicitation.elicitation_id for p in pending.calls] == [asked.elicitation_id]
            await stub.SubmitElicitationAnswers(answer(run_id, asked.elicitation_id, nights=2))
            events = await collect(stub.WatchRunEvents(pb.WatchRunEventsRequest(run_id=run_id)))
    kinds = [kind(e) for e in events]
    assert kinds.count("elicitation_requested") == 1
    (answered,) = [e.elicitation_answered for e in events if kind(e) == "elicitation_answered"]
    assert answered.replayed and answered.action == pb.ELICITATION_ACTION_ACCEPT
    assert kinds.count("tool_execution_started") == 2  # idempotent: run again, asked again
    assert kinds[-1] == "run_completed"
    assert said(events).startswith("echo__book: booked 2 night(s) in Lisbon (server pid")


async def questions(server: Server, run_id: str, count: int) -> list[pb.PendingCall]:
    """The run's pending questions, once `count` of them wait (each follows its event)."""
    watch = server.runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=run_id))
    seen = 0
    async for event in watch:
        seen += kind(event) == "elicitation_requested"
        if seen == count:
            break
    watch.cancel()
    listed = await server.runs.ListPendingCalls(pb.ListPendingCallsRequest(run_id=run_id))
    return list(listed.calls)


async def test_a_plugin_tool_asks_through_its_context_and_concurrent_calls_get_their_own(
    tmp_path: Path,
) -> None:
    steps = script(
        {
            "tool_calls": [
                {"name": "greet", "arguments": {}},
                {"name": "greet", "arguments": {"twice": True}},
            ]
        },
        {"say": "tool_results"},
    )
    server = await start_server_with_plugins(fast_settings(tmp_path))
    try:
        run_id = (await server.runs.CreateRun(create_request(steps, model="script"))).run_id
        first = await questions(server, run_id, 2)  # both calls ask at once
        assert len({p.elicitation.call_id for p in first}) == 2
        assert {p.elicitation.message for p in first} == {"What should I call you?"}
        by_call = {p.elicitation.call_id: p.elicitation.elicitation_id for p in first}
        once, twice = sorted(by_call)  # call ids follow the model's order
        await server.runs.SubmitElicitationAnswers(answer(run_id, by_call[once], name="Ada"))
        await server.runs.SubmitElicitationAnswers(answer(run_id, by_call[twice], name="Bo"))
        (again,) = await questions(server, run_id, 3)  # the second call asks once more
        assert again.elicitation.call_id == twice
        assert again.elicitation.elicitation_id != by_call[twice]
        await server.runs.SubmitElicitationAnswers(
            answer(run_id, again.elicitation.elicitation_id, name="Cy")
        )
        events = await collect(server.runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=run_id)))
    finally:
        await stop_server(server)
    assert kind(events[-1]) == "run_completed"
    assert said(events) == "greet: hello Ada\ngreet: hello Bo and Cy"


async def test_runs_asking_through_one_mcp_server_at_once_each_get_their_own_answer(
    asking: Server,
) -> None:
    def book(city: str) -> pb.CreateRunRequest:
        steps = script(
            {"tool_calls": [{"name": "echo__book", "arguments": {"city": city}}]},
            {"say": "tool_results"},
        )
        return create_request(steps, model="script")

    lisbon = (await asking.runs.CreateRun(book("Lisbon"))).run_id
    oslo = (await asking.runs.CreateRun(book("Oslo"))).run_id
    (to_lisbon,) = await questions(asking, lisbon, 1)
    (to_oslo,) = await questions(asking, oslo, 1)  # both calls are in flight on the server
    assert to_lisbon.elicitation.message == "How many nights in Lisbon?"
    assert to_oslo.elicitation.message == "How many nights in Oslo?"
    await asking.runs.SubmitElicitationAnswers(
        answer(oslo, to_oslo.elicitation.elicitation_id, nights=5)
    )
    await asking.runs.SubmitElicitationAnswers(
        answer(lisbon, to_lisbon.elicitation.elicitation_id, nights=1)
    )
    for run_id, text in ((lisbon, "1 night(s) in Lisbon"), (oslo, "5 night(s) in Oslo")):
        events = await collect(asking.runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=run_id)))
        assert kind(events[-1]) == "run_completed"
        assert said(events).startswith(f"echo__book: booked {text}")


async def test_a_tool_that_is_not_idempotent_asks_again_only_once_reconciled(
    tmp_path: Path,
) -> None:
    steps = script(
        {"tool_calls": [{"name": "echo__reserve", "arguments": {"city": "Rome"}}]},
        {"say": "tool_results"},
    )
    config = {"BEHEST_CONFIG": str(settings_file(tmp_path, ""))}
    async with server_process(tmp_path / "data", **config) as (process, address):
        async with grpc.aio.insecure_channel(address) as channel:
            stub = rpc.RunServiceStub(channel)
            run_id = (await stub.CreateRun(create_request(steps, model="script"))).run_id
            asked = (await watch_until(stub, run_id, "elicitation_requested")).elicitation_requested
        process.send_signal(signal.SIGKILL)
        await process.wait()
    async with server_process(tmp_path / "data", **config) as (_, address):
        async with grpc.aio.insecure_channel(address) as channel:
            stub = rpc.RunServiceStub(channel)
            await stub.SubmitElicitationAnswers(answer(run_id, asked.elicitation_id, nights=4))
            # It may have acted before it asked: behest does not run it again unasked.
            unknown = (await watch_until(stub, run_id, "tool_outcome_unknown")).tool_outcome_unknown
            await x_rpc.ToolExecutionServiceStub(channel).ReconcileToolExecution(
                x.ReconcileToolExecutionRequest(
                    execution_id=unknown.execution_id, verdict=x.RECONCILE_VERDICT_DID_NOT_RUN
                )
            )
            events = await collect(stub.WatchRunEvents(pb.WatchRunEventsRequest(run_id=run_id)))
    assert kind(events[-1]) == "run_completed"
    (answered,) = [e.elicitation_answered for e in events if kind(e) == "elicitation_answered"]
    assert answered.replayed
    assert said(events).startswith("echo__reserve: booked 4 night(s) in Rome")


SECRETS = {name: secrets.token_urlsafe(24) for name in ("carol", "bob")}


def bearer(name: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {SECRETS[name]}"),)


async def test_only_the_runs_tenant_sees_and_answers_its_questions(tmp_path: Path) -> None:
    tokens = {
        name: {
            "sha256": hashlib.sha256(SECRETS[name].encode()).hexdigest(),
            "principal": name,
            "tenant": tenant,
            "roles": [],
        }
        for name, tenant in (("carol", "acme"), ("bob", "globex"))
    }
    # A question is not an approval: the approver role is not needed to answer it.
    tables = {"auth": {"mode": "bearer", "tokens": tokens, "approver_role": "approver"}}
    settings = fast_settings(tmp_path, mcp=echo_servers()).with_tables(tables, source="test")
    server = await start_server(settings)
    try:
        runs = server.runs
        stream = runs.CreateRunStream(
            create_request(BOOK, model="script"), metadata=bearer("carol")
        )
        asked = await until(stream, "elicitation_requested")
        run_id, elicitation_id = asked.run_id, asked.elicitation_requested.elicitation_id
        listing = pb.ListPendingCallsRequest(run_id=run_id)
        with pytest.raises(grpc.aio.AioRpcError) as hidden:
            await runs.ListPendingCalls(listing, metadata=bearer("bob"))
        assert hidden.value.code() == grpc.StatusCode.NOT_FOUND
        with pytest.raises(grpc.aio.AioRpcError) as foreign:
            await runs.SubmitElicitationAnswers(
                answer(run_id, elicitation_id, nights=2), metadata=bearer("bob")
            )
        assert foreign.value.code() == grpc.StatusCode.NOT_FOUND
        await runs.SubmitElicitationAnswers(
            answer(run_id, elicitation_id, nights=2), metadata=bearer("carol")
        )
        rest = [event async for event in stream]
    finally:
        await stop_server(server)
    answered = next(e for e in rest if kind(e) == "elicitation_answered").elicitation_answered
    assert answered.answered_by == "carol"
    assert kind(rest[-1]) == "run_completed"
